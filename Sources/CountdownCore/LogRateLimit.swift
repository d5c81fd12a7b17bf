/// Keeps a warning that can repeat at any rate (a refused connection, a client cut off) from
/// flooding the log, as journald's "Suppressed N messages" does: the first `burst` occurrences in
/// a window are logged in full, the others in the same window are only counted, and the count is
/// said once when the window ends.
public struct LogRateLimit: Sendable {
    /// The window's length, in nanoseconds.
    public let windowNanoseconds: Int64
    /// How many occurrences a window logs in full.
    public let burst: Int
    private var windowStart: Instant?
    private var logged = 0
    /// Occurrences counted but not logged in the current window.
    public private(set) var suppressed = 0

    /// A limit of `burst` lines per `windowNanoseconds` (one per 10 s by default).
    public init(windowNanoseconds: Int64 = 10_000_000_000, burst: Int = 1) {
        self.windowNanoseconds = windowNanoseconds
        self.burst = max(burst, 1)
    }

    /// What to do with one occurrence.
    public enum Verdict: Equatable, Sendable {
        /// Log it. `previouslySuppressed`: when it opens a window, what the last one counted and
        /// no summary has said yet (its `endWindow` had not run), to be said first.
        case log(previouslySuppressed: Int)
        /// Only counted. `firstInWindow`: the first one suppressed in this window, so the caller
        /// arranges for `endWindow(at: windowEnd)` to run then.
        case suppressed(firstInWindow: Bool, windowEnd: Instant)
    }

    /// Counts one occurrence at `now`.
    public mutating func occurrence(at now: Instant) -> Verdict {
        if let windowStart, now.nanoseconds(since: windowStart) < windowNanoseconds {
            if logged < burst {
                logged += 1
                return .log(previouslySuppressed: 0)
            }
            suppressed += 1
            return .suppressed(firstInWindow: suppressed == 1, windowEnd: windowStart.advanced(byNanoseconds: windowNanoseconds))
        }
        let previous = suppressed
        windowStart = now
        suppressed = 0
        logged = 1
        return .log(previouslySuppressed: previous)
    }

    /// Ends the window that ends at `windowEnd`: returns how many occurrences it suppressed, to
    /// be said in one line (0 when a later window has begun, which says its own).
    public mutating func endWindow(at windowEnd: Instant) -> Int {
        guard let windowStart, windowStart.advanced(byNanoseconds: windowNanoseconds) == windowEnd else { return 0 }
        let count = suppressed
        suppressed = 0
        return count
    }
}
