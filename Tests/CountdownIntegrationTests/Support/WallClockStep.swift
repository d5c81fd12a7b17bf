import CountdownClient
import Glibc
import Testing

/// A real step of this machine's wall clock (`CLOCK_REALTIME`), for the tests that check what
/// countdowns to a time of day do when it is set. Needs root; each test steps back in a `defer`.
enum WallClockStep {
    /// Steps the wall clock by whole seconds, forward or back.
    static func step(by seconds: Int) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)  // Cannot fail for CLOCK_REALTIME and a valid pointer.
        now.tv_sec += seconds
        #expect(clock_settime(CLOCK_REALTIME, &now) == 0, "clock_settime: errno \(errno)")
    }

    /// Whether `name` has `total` milliseconds less the time since `began` left, within a second.
    /// The time passed is bracketed by the test's monotonic clock just before and just after the
    /// `STATUS`, so a slow machine only widens the bracket, never fails it, while a step of the
    /// wall clock shows as the whole step.
    static func left(
        _ name: String, is total: Int64, since began: Double, on connection: CountdownConnection
    ) throws -> Bool {
        let before = (monotonicNow() - began) * 1000
        let left = Double(try #require(try connection.request("STATUS \(name)").countdowns.first?.remainingMilliseconds))
        let after = (monotonicNow() - began) * 1000
        return left >= Double(total) - after - 1000 && left <= Double(total) - before + 1000
    }
}
