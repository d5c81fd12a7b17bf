import Glibc

/// Severity of a log line, with syslog's numbering (lower is more severe).
public enum LogLevel: Int, Comparable, Sendable, CaseIterable {
    case error = 3
    case warning = 4
    case notice = 5
    case info = 6
    case debug = 7

    /// Parses `error`, `warning`, `notice`, `info` or `debug`.
    public init?(name: String) {
        switch name.lowercased() {
        case "error", "err": self = .error
        case "warning", "warn": self = .warning
        case "notice": self = .notice
        case "info": self = .info
        case "debug": self = .debug
        default: return nil
        }
    }

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool {
        lhs.rawValue < rhs.rawValue
    }
}

/// Writes the daemon's log to stderr, one line per entry.
///
/// When stderr is the journal (`JOURNAL_STREAM` names stderr's device and inode), each line starts
/// with `<N>`, the syslog priority, which journald turns into `PRIORITY=`.
final class Logger {
    /// Entries above this level are dropped.
    let threshold: LogLevel
    private let prefixPriority: Bool

    /// Creates a logger, looking at `JOURNAL_STREAM` once.
    init(threshold: LogLevel, environment: [String: String]) {
        self.threshold = threshold
        self.prefixPriority = Logger.stderrIsJournal(environment["JOURNAL_STREAM"])
    }

    /// Logs one line.
    func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        guard level <= threshold else { return }
        var line = prefixPriority ? "<\(level.rawValue)>" : "countdownd: "
        line += message()
        line += "\n"
        // stderr is the journal, a terminal or a file; one write(2) per line keeps lines whole.
        var bytes = Array(line.utf8)
        _ = bytes.withUnsafeMutableBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }

    /// Whether `JOURNAL_STREAM` (`<device>:<inode>`) describes the descriptor behind stderr.
    static func stderrIsJournal(_ journalStream: String?) -> Bool {
        guard let journalStream else { return false }
        let parts = journalStream.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var status = stat()
        guard fstat(STDERR_FILENO, &status) == 0 else { return false }
        return UInt64(status.st_dev) == device && UInt64(status.st_ino) == inode
    }
}
