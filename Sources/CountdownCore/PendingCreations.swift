/// Countdowns a replica (cluster mode) has proposed to create and the shared store has not yet
/// decided: they count against `--max-countdowns` and the per-user quota as if held, so that
/// changes in flight together (pipelined, or on several connections) cannot pass a limit.
public struct PendingCreations: Sendable, Equatable {
    /// All of them.
    public private(set) var total = 0
    /// By owner.
    public private(set) var byOwner: [UInt32: Int] = [:]

    /// None.
    public init() {}

    /// One more of `owner`'s is in flight.
    public mutating func add(_ owner: UInt32) {
        total += 1
        byOwner[owner, default: 0] += 1
    }

    /// One of `owner`'s was decided (made, refused or failed).
    public mutating func remove(_ owner: UInt32) {
        guard let count = byOwner[owner], count > 0 else {
            preconditionFailure("no creation of uid \(owner)'s is in flight")
        }
        total -= 1
        byOwner[owner] = count == 1 ? nil : count - 1
    }
}
