/// Relates the daemon's monotonic clock to the wall clock at one moment.
///
/// Countdowns live on the monotonic clock, so a wall-clock step (NTP, `date -s`) never moves them.
/// Wall-clock values such as `deadline_unix_ms` are derived from a mapping read at the moment they
/// are reported or stored.
public struct WallClockMapping: Sendable, Equatable {
    /// The monotonic reading.
    public var monotonic: Instant
    /// The wall-clock reading taken together with `monotonic`, in milliseconds since the Unix epoch.
    public var unixMilliseconds: Int64

    /// Pairs a monotonic instant with the wall-clock time read at (nearly) the same moment.
    public init(monotonic: Instant, unixMilliseconds: Int64) {
        self.monotonic = monotonic
        self.unixMilliseconds = unixMilliseconds
    }

    /// The wall-clock time, in Unix milliseconds, of a monotonic instant.
    public func unixMilliseconds(of instant: Instant) -> Int64 {
        let offset = instant.nanoseconds(since: monotonic)
        // Round to the nearest millisecond so a deadline reported twice does not wobble by one.
        let offsetMs = offset >= 0 ? (offset + 500_000) / 1_000_000 : -((-offset + 500_000) / 1_000_000)
        return unixMilliseconds + offsetMs
    }

    /// The farthest a wall-clock time is taken to be from the mapping's own, in milliseconds
    /// (100 years): further ones are taken as this far, so that no stored or sent value, however
    /// damaged, overflows the clock's arithmetic. (Storage refuses such values as damage before
    /// they get here: `StoredCountdown.implausibility`.)
    public static let farthestMilliseconds: Int64 = 36_525 * 86_400_000

    /// The monotonic instant of a wall-clock time given in Unix milliseconds; at most
    /// `farthestMilliseconds` away.
    public func instant(ofUnixMilliseconds unix: Int64) -> Instant {
        let (difference, overflowed) = unix.subtractingReportingOverflow(unixMilliseconds)
        let farthest = Self.farthestMilliseconds
        let milliseconds = overflowed ? (unix < unixMilliseconds ? -farthest : farthest) : min(max(difference, -farthest), farthest)
        return monotonic.advanced(byMilliseconds: milliseconds)
    }
}
