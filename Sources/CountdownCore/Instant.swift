/// A point in time on the daemon's monotonic clock, in nanoseconds.
///
/// In production the clock is `CLOCK_BOOTTIME`, which keeps running through suspend; in tests it is
/// whatever the test says it is. The core never reads a clock: every instant is handed to it.
public struct Instant: Comparable, Hashable, Sendable, CustomStringConvertible {
    /// Nanoseconds since the clock's (arbitrary) origin.
    public var nanoseconds: Int64

    /// Creates an instant `nanoseconds` after the clock's origin.
    public init(nanoseconds: Int64) {
        self.nanoseconds = nanoseconds
    }

    /// The clock's origin; a manual clock starts here.
    public static let zero = Instant(nanoseconds: 0)

    /// Creates an instant a whole number of milliseconds after the clock's origin.
    public static func milliseconds(_ milliseconds: Int64) -> Instant {
        Instant(nanoseconds: milliseconds * 1_000_000)
    }

    /// Creates an instant a whole number of seconds after the clock's origin.
    public static func seconds(_ seconds: Int64) -> Instant {
        Instant(nanoseconds: seconds * 1_000_000_000)
    }

    /// This instant moved by `nanoseconds` (negative moves it back).
    public func advanced(byNanoseconds nanoseconds: Int64) -> Instant {
        Instant(nanoseconds: self.nanoseconds + nanoseconds)
    }

    /// This instant moved by `milliseconds` (negative moves it back).
    public func advanced(byMilliseconds milliseconds: Int64) -> Instant {
        Instant(nanoseconds: nanoseconds + milliseconds * 1_000_000)
    }

    /// Nanoseconds from `other` to `self` (positive when `self` is later).
    public func nanoseconds(since other: Instant) -> Int64 {
        nanoseconds - other.nanoseconds
    }

    public static func < (lhs: Instant, rhs: Instant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    public var description: String {
        "\(nanoseconds)ns"
    }
}

extension Int64 {
    /// Whole milliseconds in a nanosecond span, rounded up, never negative.
    ///
    /// A running countdown with 0.2 ms left reports 1 ms, not 0: it has not finished yet.
    @inlinable
    var ceilingMillisecondsOfNanoseconds: Int64 {
        self <= 0 ? 0 : (self + 999_999) / 1_000_000
    }
}
