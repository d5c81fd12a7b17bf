/// What one owner (uid) holds in the engine: every countdown, and how many run or are paused.
/// Kept as the engine changes, so a user's `STATS` costs O(1) however many countdowns exist.
public struct OwnerTally: Equatable, Sendable {
    /// Countdowns held, finished ones included until they are forgotten (the per-user quota).
    public var held = 0
    /// Countdowns running.
    public var running = 0
    /// Countdowns paused.
    public var paused = 0

    /// Finished countdowns still held for their retention.
    public var finished: Int { held - running - paused }

    /// Nothing held.
    public init() {}
}
