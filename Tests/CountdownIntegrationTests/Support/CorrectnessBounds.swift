/// The bounds integration tests hold the real daemon to. They are correctness bounds, not
/// performance figures: each fails only when something is really wrong, never because the
/// machine is busy (the suite must pass on a loaded two-core machine: `make test-loaded`).
/// The real punctuality figures, three runs with median and spread, are in BENCHMARKS.md.
enum CorrectnessBounds {
    /// How late a tick or a `done` may reach the test, in milliseconds. The daemon's own figure
    /// is well under a millisecond; a second late means a timer, a batch or a subscriber path is
    /// broken (a `done` waiting for the next tick, a stalled queue), not a slow machine.
    static let latenessMilliseconds = 1000.0

    /// How early an event may reach the test, in milliseconds: the daemon's deadline and the
    /// test's clock are both the wall clock, read a few microseconds apart, rounded to whole
    /// milliseconds. Never early is speed-independent: a busy machine only makes events later.
    static let earlinessMilliseconds = 2.0
}
