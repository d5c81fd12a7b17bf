import Testing

/// The suites that read the process's boot clock closely (the wake-up timer's) or move it
/// (`SystemClock.simulatedSleep`, the sleep detector's): one test at a time, so that a simulated
/// sleep never begins or ends between another test's reading of the clock and its arming.
@Suite(.serialized) enum BootClockSuites {}
