import Glibc

/// The process's environment, read from `environ` (Foundation's `ProcessInfo` is not linked).
public enum ProcessEnvironment {
    /// Every `NAME=value` pair; for a name given twice, the first, as `getenv` returns.
    public static func current() -> [String: String] {
        var variables: [String: String] = [:]
        var entry = environ
        while let pointer = entry.pointee {
            let pair = String(cString: pointer)
            if let equals = pair.firstIndex(of: "="), variables[String(pair[..<equals])] == nil {
                variables[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
            }
            entry += 1
        }
        return variables
    }
}
