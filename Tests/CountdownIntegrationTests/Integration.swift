import Testing

/// Every test that starts real processes lives under this suite, so they run one at a time: a
/// dozen daemons at once would only make every test slower. No test depends on that for its
/// outcome: waits are on events, bounds are correctness bounds (`CorrectnessBounds`), and the
/// suite passes with both cores busy (`make test-loaded`).
@Suite("Integration (real binaries)", .serialized)
struct Integration {}
