import Testing

/// Every test that starts real processes lives under this suite, so they run one at a time:
/// punctuality bounds (20 ms) stay meaningful on a loaded two-core machine.
@Suite("Integration (real binaries)", .serialized)
struct Integration {}
