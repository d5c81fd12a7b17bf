import CountdownCore

/// Where a component of the daemon reads the time: `CLOCK_BOOTTIME` (`SystemClock`) in service,
/// a test's own instant in component tests, which then move time instead of sleeping.
struct DaemonClock: Sendable {
    /// The current instant.
    let now: @Sendable () -> Instant

    /// The system's boot clock, as `SystemClock.now()` reads it.
    static let system = DaemonClock(now: { SystemClock.now() })
}
