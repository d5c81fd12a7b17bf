/// Countdowns read from storage, handed to the engine a batch at a time
/// (`CountdownEngine.restore(_:replacing:events:)`), each with the name's `NameIndex.hash`.
///
/// Each countdown is kept as the engine's own record, made when it is appended: recovery
/// appends on the threads that read storage, so the thread that fills the engine only places
/// records, which was a tenth of its work when it converted each `Countdown` itself.
/// Hashes and records are kept side by side, not as one array of entries: the engine first reads
/// every hash's bucket in its name index in one tight loop, so that those cache misses overlap.
public struct RestoreBatch: Sendable {
    /// The instant the batch is restored as of: a running countdown whose deadline is not after
    /// it is late (`takeLateCountdowns()`).
    public let now: Instant
    /// Each entry's `NameIndex.hash`.
    public private(set) var hashes: [UInt32] = []
    /// Each entry as a record of generation 0. A removal (`append` without a countdown) is a
    /// record of no duration, which the engine never restores, as it restores no such countdown.
    private(set) var records: [CountdownEngine.Record] = []
    /// The cycles among the entries, by index, in order: a plain countdown pays nothing for them.
    private(set) var cycles: [(index: Int, cycle: CountdownCycle)] = []
    /// The entries that are late, by index.
    private var lateIndices: [Int] = []

    /// An empty batch with room for `capacity` entries, to be restored as of `now`.
    public init(capacity: Int, now: Instant) {
        self.now = now
        hashes.reserveCapacity(capacity)
        records.reserveCapacity(capacity)
    }

    /// How many entries it holds.
    public var count: Int { hashes.count }
    public var isEmpty: Bool { hashes.isEmpty }

    /// The name of entry `index`.
    public func name(at index: Int) -> String { records[index].name }

    /// Adds `countdown` (or, with `nil`, the removal of `name`), whose name hashes to `hash`;
    /// a countdown's `name` is its own.
    public mutating func append(name: String, hash: UInt32, countdown: Countdown?) {
        assert(countdown == nil || countdown?.name == name, "a countdown is appended under its own name")
        hashes.append(hash)
        guard let countdown else {
            records.append(CountdownEngine.Record(
                name: name, state: .cancelled, totalMilliseconds: 0, deadline: now, remainingNanoseconds: 0, finishedAt: now,
                owner: 0, generation: 0, lateMilliseconds: nil
            ))
            return
        }
        var record = CountdownEngine.Record(countdown, generation: 0)
        if let cycle = countdown.cycle {
            record.isCycle = true
            cycles.append((records.count, cycle))
        }
        if record.isPastDeadline(at: now) && record.totalMilliseconds > 0 {
            lateIndices.append(records.count)
        }
        records.append(record)
    }

    /// Empties it, keeping its room.
    public mutating func removeAll() {
        hashes.removeAll(keepingCapacity: true)
        records.removeAll(keepingCapacity: true)
        cycles.removeAll(keepingCapacity: true)
        lateIndices.removeAll(keepingCapacity: true)
    }

    /// Its countdowns, in order, removals (and countdowns of no duration) left out, each as the
    /// engine would hold it.
    public var countdowns: [Countdown] {
        var countdowns: [Countdown] = []
        var nextCycle = cycles.startIndex
        for index in records.indices where records[index].totalMilliseconds > 0 {
            countdowns.append(records[index].persisted(cycle: cycle(at: index, cursor: &nextCycle)))
        }
        return countdowns
    }

    /// The cycle of entry `index`, if it is one. Entries are asked in rising order, each walk
    /// with its own `cursor` (starting at `cycles.startIndex`), which moves past the cycles of
    /// entries before it: a whole walk reads each cycle once.
    func cycle(at index: Int, cursor: inout Int) -> CountdownCycle? {
        while cursor < cycles.endIndex && cycles[cursor].index < index { cursor += 1 }
        return cursor < cycles.endIndex && cycles[cursor].index == index ? cycles[cursor].cycle : nil
    }

    /// Whether it holds running countdowns whose deadline is not after `now`.
    public var hasLateCountdowns: Bool { !lateIndices.isEmpty }

    /// Takes the running countdowns whose deadline is not after `now` out of the batch, in its
    /// order, each with its hash: each entry becomes the removal of its name, so that restored
    /// with `replacing` it still removes what was restored before under that name. Recovery
    /// restores late countdowns after all others, in deadline order, so their `done`s come out
    /// in the order they were due.
    public mutating func takeLateCountdowns() -> [(countdown: Countdown, hash: UInt32)] {
        var late: [(countdown: Countdown, hash: UInt32)] = []
        late.reserveCapacity(lateIndices.count)
        var nextCycle = cycles.startIndex
        for index in lateIndices {
            late.append((records[index].persisted(cycle: cycle(at: index, cursor: &nextCycle)), hashes[index]))
            records[index].totalMilliseconds = 0
        }
        lateIndices.removeAll(keepingCapacity: true)
        return late
    }
}
