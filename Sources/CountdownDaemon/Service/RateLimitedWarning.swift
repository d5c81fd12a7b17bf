import CountdownCore

/// A log line that may come thousands of times a second (a refused connection, a client cut
/// off for overflow, a countdown's lifecycle), logged at most `burst` times per window with the
/// rest counted (`LogRateLimit`):
/// "… (and 4,600 more like it in the last 10 s)" comes when the window ends, through the
/// daemon's `DelayedWork`.
final class RateLimitedWarning {
    private var limit: LogRateLimit
    private let logger: Logger
    private let later: DelayedWork
    /// What the summary line calls the suppressed occurrences, e.g. "refused connections".
    private let summary: String

    private let level: LogLevel

    init(
        _ summary: String, level: LogLevel = .warning, burst: Int = 1, logger: Logger, later: DelayedWork,
        windowNanoseconds: Int64 = 10_000_000_000
    ) {
        self.summary = summary
        self.level = level
        self.logger = logger
        self.later = later
        limit = LogRateLimit(windowNanoseconds: windowNanoseconds, burst: burst)
    }

    /// Whether the logger writes lines of this level at all (else there is nothing to limit).
    var isEnabled: Bool { level <= logger.threshold }

    /// One occurrence at `now`: logged (with `fields`) while the window's burst lasts, else counted.
    func warn(_ message: @autoclosure () -> String, fields: @autoclosure () -> [(String, String)] = [], now: Instant) {
        guard isEnabled else { return }
        switch limit.occurrence(at: now) {
        case .log(let previouslySuppressed):
            sayCount(previouslySuppressed)
            logger.log(level, message(), fields: fields())
        case .suppressed(let firstInWindow, let windowEnd):
            guard firstInWindow else { return }
            later.schedule(at: windowEnd) { [self] _ in sayCount(limit.endWindow(at: windowEnd)) }
        }
    }

    private func sayCount(_ count: Int) {
        guard count > 0 else { return }
        let seconds = limit.windowNanoseconds / 1_000_000_000
        let kept = limit.burst == 1 ? "one line" : "\(limit.burst) lines"
        logger.log(level, "\(count) more \(summary) in the last \(seconds) s, not logged one by one (\(kept) per \(seconds) s are)")
    }
}
