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

    /// The level's name, as `--log-level` takes it.
    public var name: String {
        switch self {
        case .error: "error"
        case .warning: "warning"
        case .notice: "notice"
        case .info: "info"
        case .debug: "debug"
        }
    }

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool {
        lhs.rawValue < rhs.rawValue
    }
}

/// Writes the daemon's log.
///
/// When stderr is connected to the journal (`JOURNAL_STREAM` names stderr's device and inode),
/// entries go through `sd_journal_sendv` with `MESSAGE=`, `PRIORITY=` and the daemon's own fields
/// (`COUNTDOWN_NAME=`, `COUNTDOWN_EVENT=`, …), so `journalctl COUNTDOWN_NAME=tea` works. If the
/// journal refuses an entry, the line goes to stderr with a `<N>` priority prefix instead, which
/// journald also understands. Otherwise: plain `countdownd: …` lines on stderr.
final class Logger {
    /// Entries above this level are dropped.
    let threshold: LogLevel
    /// Whether entries go to the journal as structured entries.
    let usesJournal: Bool

    /// Creates a logger, looking at `JOURNAL_STREAM` once.
    init(threshold: LogLevel, environment: [String: String]) {
        self.threshold = threshold
        self.usesJournal = Logger.stderrIsJournal(environment["JOURNAL_STREAM"])
    }

    /// Logs one entry, with optional structured fields (journal field names, upper case).
    func log(_ level: LogLevel, _ message: @autoclosure () -> String, fields: [(String, String)] = []) {
        guard level <= threshold else { return }
        let text = message()
        if usesJournal {
            var entry = SystemdJournalEntry(priority: level, message: text)
            for (name, value) in fields {
                entry.append(name, value)
            }
            if entry.send() >= 0 { return }
        }
        var line = usesJournal ? "<\(level.rawValue)>" : "countdownd: "
        line += text
        line += "\n"
        // stderr is the journal, a terminal or a file; one write(2) per line keeps lines whole.
        var bytes = Array(line.utf8)
        // Ignored on purpose: stderr is where a failure would be reported; a full pipe or a
        // closed journal loses this line only.
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
