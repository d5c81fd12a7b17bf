/// Countdowns read from storage, handed to the engine a batch at a time
/// (`CountdownEngine.restore(_:replacing:now:events:)`), each with its name and the name's
/// `NameIndex.hash`.
///
/// Kept as three arrays side by side, not one array of entries: the engine first reads every
/// hash's bucket in its name index in one tight loop, so that those cache misses overlap, and
/// read from an array of whole entries, each hash came with a copy of its countdown.
public struct RestoreBatch: Sendable {
    /// Each entry's name (its key: `owner/name`, or the bare name for root's).
    public private(set) var names: [String] = []
    /// Each name's `NameIndex.hash`.
    public private(set) var hashes: [UInt32] = []
    /// Each entry's countdown; `nil` for a name whose countdown a later record removed.
    public private(set) var countdowns: [PersistedCountdown?] = []

    /// An empty batch with room for `capacity` entries.
    public init(capacity: Int) {
        names.reserveCapacity(capacity)
        hashes.reserveCapacity(capacity)
        countdowns.reserveCapacity(capacity)
    }

    /// How many entries it holds.
    public var count: Int { hashes.count }
    public var isEmpty: Bool { hashes.isEmpty }

    /// Adds `countdown` (or, with `nil`, the removal of `name`), whose name hashes to `hash`.
    public mutating func append(name: String, hash: UInt32, countdown: PersistedCountdown?) {
        names.append(name)
        hashes.append(hash)
        countdowns.append(countdown)
    }

    /// Empties it, keeping its room.
    public mutating func removeAll() {
        names.removeAll(keepingCapacity: true)
        hashes.removeAll(keepingCapacity: true)
        countdowns.removeAll(keepingCapacity: true)
    }

    /// The same entries, with `nil` in place of each countdown `isKept` says no to: restored
    /// with `replacing`, such an entry still removes what was restored before under its name.
    public func keepingCountdowns(where isKept: (PersistedCountdown) -> Bool) -> RestoreBatch {
        var kept = self
        for index in countdowns.indices {
            if let countdown = countdowns[index], !isKept(countdown) {
                kept.countdowns[index] = nil
            }
        }
        return kept
    }
}
