import Glibc

/// Where `cdctl` writes: standard output and standard error, or a capture in tests.
public struct Console: Sendable {
    /// Writes to standard output.
    public var out: @Sendable (String) -> Void
    /// Writes to standard error.
    public var error: @Sendable (String) -> Void
    /// Whether standard output is a terminal (live display, colour).
    public var isTerminal: Bool

    /// Creates a console from two writers.
    public init(isTerminal: Bool, out: @escaping @Sendable (String) -> Void, error: @escaping @Sendable (String) -> Void) {
        self.isTerminal = isTerminal
        self.out = out
        self.error = error
    }

    /// The process's own standard output and error, unbuffered (each call is one write).
    public static var standard: Console {
        Console(
            isTerminal: isatty(STDOUT_FILENO) == 1,
            out: { writeAll(STDOUT_FILENO, $0) },
            error: { writeAll(STDERR_FILENO, $0) }
        )
    }

    private static func writeAll(_ descriptor: Int32, _ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            // `bytes` is not empty inside this loop, so its buffer has a base address.
            let written = bytes.withUnsafeMutableBytes { write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                return  // A closed pipe (cdctl watch | head): nothing more to say.
            }
            offset += written
        }
    }
}
