import CountdownCore

/// Where the daemon and its components read the time: `CLOCK_BOOTTIME` and the wall clock
/// (`SystemClock`) in service, a test's own readings in component tests, which then move time
/// instead of sleeping. Handed down from `Daemon` to each component that reads the time.
struct DaemonClock: Sendable {
    /// The current instant on the boot clock.
    let now: @Sendable () -> Instant
    /// The wall clock, in nanoseconds since the Unix epoch.
    let unixNanoseconds: @Sendable () -> Int64

    /// Both clocks read together, to derive wall-clock values of boot-clock instants.
    func mapping(at instant: Instant? = nil) -> WallClockMapping {
        WallClockMapping(monotonic: instant ?? now(), unixMilliseconds: unixNanoseconds() / 1_000_000)
    }

    /// The system's clocks, as `SystemClock` reads them.
    static let system = DaemonClock(now: { SystemClock.now() }, unixNanoseconds: { SystemClock.unixNanoseconds() })
}
