/// The engine's wake-ups, ordered by due instant, with lazy deletion: a 4-ary min-heap, and
/// beside it a sorted lane for wake-ups that follow the one that just fired (`replaceMinimum`).
///
/// Four children per node: half the depth of a binary heap, and a node's children sit side by
/// side in memory, so sifting down touches fewer cache lines. At 100,000 countdowns the heap is
/// larger than the L2 cache and sift-down was the hottest function in the daemon's profile.
///
/// Entries are never removed from the middle: a countdown that is paused, cancelled or rescheduled
/// bumps its generation, and an entry whose generation no longer matches is skipped when it reaches
/// the top. Every running countdown's next entry is at most one second ahead, so stale entries do
/// not linger; `CountdownEngine` compacts the heap if they ever outnumber the live ones.
struct TimerHeap {
    /// One scheduled wake-up. 16 bytes, so 100,000 countdowns cost 1.6 MB here.
    struct Entry: Equatable {
        /// The due instant, in nanoseconds on the monotonic clock.
        var due: Int64
        /// The countdown's slot in the engine's table.
        var slot: Int32
        /// The countdown's generation when this entry was pushed.
        var generation: UInt32

        /// Due first; among equal instants, lower slot first, so the order is deterministic.
        @inline(__always)
        func precedes(_ other: Entry) -> Bool {
            due < other.due || (due == other.due && slot < other.slot)
        }
    }

    /// The heap proper.
    private(set) var entries: [Entry] = []
    /// The sorted lane: entries in (due, slot) order, taken from the front and added at the back.
    /// Holds `laneStorage[laneHead...]`.
    private var laneStorage: [Entry] = []
    private var laneHead = 0

    /// How far past the entry it replaces a replacement may be due and still go in the lane:
    /// a countdown's next tick is one second after the one that fired.
    static let laneHorizonNanoseconds: Int64 = 1_000_000_000

    /// The number of entries, live or stale.
    var count: Int { entries.count + laneStorage.count - laneHead }

    /// How many entries are in the sorted lane (for tests and statistics).
    var laneCount: Int { laneStorage.count - laneHead }

    /// How many entries the heap's and the lane's storage could hold (for tests).
    var storageCapacity: Int { entries.capacity + laneStorage.capacity }

    /// The entry due first. O(1).
    var minimum: Entry? {
        guard laneHead < laneStorage.count else { return entries.first }
        let laneFirst = laneStorage[laneHead]
        guard let heapFirst = entries.first else { return laneFirst }
        return heapFirst.precedes(laneFirst) ? heapFirst : laneFirst
    }

    /// Calls `body` with the lane's next entries due by `due`, at most `limit` of them, in
    /// order. Most wake-ups are ticks, and ticks live in the lane, so these are (nearly all) the
    /// entries the next pops return: their countdowns can be read ahead.
    func forEachLaneEntry(dueBy due: Int64, limit: Int, _ body: (Entry) -> Void) {
        let end = min(laneStorage.count, laneHead + limit)
        var index = laneHead
        while index < end && laneStorage[index].due <= due {
            body(laneStorage[index])
            index += 1
        }
    }

    /// Makes room for `count` entries.
    mutating func reserveCapacity(_ count: Int) {
        entries.reserveCapacity(count)
    }

    /// Adds an entry. O(log n).
    mutating func push(_ entry: Entry) {
        entries.append(entry)
        siftUp(from: entries.count - 1)
    }

    /// Replaces the entry due first with `entry`: the wake-up that follows the one that fired.
    ///
    /// Why a lane beside the heap: at 100,000 ticking countdowns every tick moved an entry from
    /// the top of the heap to its bottom (each is re-armed one second later, behind nearly all
    /// others), a sift through some eight levels of a heap larger than the cache, and the
    /// hottest function in the daemon's profile. Entries fire in (due, slot) order, so their
    /// successors, each one second later, come in that order too: appended to a sorted lane they
    /// keep it sorted, at O(1) and in sequential memory. A replacement that would break the
    /// lane's order, or is due further ahead than a tick (a purge after the retention period),
    /// goes into the heap as before. The heap must not be empty.
    mutating func replaceMinimum(with entry: Entry) {
        guard let removed = popMinimum() else { return }
        let fitsLane = entry.due - removed.due <= Self.laneHorizonNanoseconds
            && (laneHead == laneStorage.count || !entry.precedes(laneStorage[laneStorage.count - 1]))
        if fitsLane {
            laneStorage.append(entry)
        } else {
            push(entry)
        }
    }

    /// Removes and returns the entry due first. O(log n) from the heap, O(1) from the lane.
    @discardableResult
    mutating func popMinimum() -> Entry? {
        if laneHead < laneStorage.count {
            let laneFirst = laneStorage[laneHead]
            if entries.first.map({ !$0.precedes(laneFirst) }) ?? true {
                laneHead += 1
                compactLaneIfMostlyTaken()
                return laneFirst
            }
        }
        return popHeapMinimum()
    }

    private mutating func popHeapMinimum() -> Entry? {
        guard let last = entries.popLast() else { return nil }
        guard !entries.isEmpty else { return last }
        let top = entries[0]
        entries[0] = last
        siftDown(from: 0)
        Self.giveBackSpareRoomIfMostlyUnused(&entries)
        return top
    }

    /// Storage of up to this many entries (256 KiB) is kept however little of it is used;
    /// larger, it is cut to twice what it holds once three quarters of it are unused. 100,000
    /// countdowns that ticked for a while (their tick entries first pushed into the heap, then
    /// moved to the lane) left 5.3 MB of empty storage behind once nobody followed them.
    static let storageKeptAnyway = 16_384

    /// Past `storageKeptAnyway` and three quarters unused, moves `storage`'s entries into
    /// storage of twice their count. Amortized O(1): before it does so again, half of the
    /// entries it kept must leave (or, before the storage grows again, as many must arrive).
    private static func giveBackSpareRoomIfMostlyUnused(_ storage: inout [Entry]) {
        guard storage.count < storage.capacity / 4 && storage.capacity > storageKeptAnyway else { return }
        var smaller: [Entry] = []
        smaller.reserveCapacity(storage.count * 2)
        smaller.append(contentsOf: storage)
        storage = smaller
    }

    /// Drops the taken front of the lane once it is most of the storage (amortized O(1)).
    private mutating func compactLaneIfMostlyTaken() {
        if laneHead == laneStorage.count {
            // Empty: nothing ticks any more (while anything ticks, a tick's successor joins
            // the lane before it is taken).
            laneStorage.removeAll(keepingCapacity: laneStorage.capacity <= Self.storageKeptAnyway)
            laneHead = 0
        } else if laneHead >= 4096 && laneHead * 2 >= laneStorage.count {
            laneStorage.removeFirst(laneHead)
            laneHead = 0
            Self.giveBackSpareRoomIfMostlyUnused(&laneStorage)
        }
    }

    /// Keeps only the entries for which `isLive` holds, then restores the heap order. O(n).
    mutating func compact(keeping isLive: (Entry) -> Bool) {
        entries.removeAll { !isLive($0) }
        Self.giveBackSpareRoomIfMostlyUnused(&entries)
        if entries.count > 1 {
            for index in stride(from: (entries.count - 2) / Self.arity, through: 0, by: -1) {
                siftDown(from: index)
            }
        }
        // Filtering keeps the lane sorted.
        laneStorage = laneStorage[laneHead...].filter(isLive)
        laneHead = 0
    }

    private mutating func siftUp(from start: Int) {
        var child = start
        let moving = entries[child]
        while child > 0 {
            let parent = (child - 1) / Self.arity
            guard moving.precedes(entries[parent]) else { break }
            entries[child] = entries[parent]
            child = parent
        }
        entries[child] = moving
    }

    private mutating func siftDown(from start: Int) {
        var parent = start
        let moving = entries[parent]
        let count = entries.count
        while true {
            let first = Self.arity * parent + 1
            guard first < count else { break }
            var child = first
            let end = min(first + Self.arity, count)
            var candidate = first + 1
            while candidate < end {
                if entries[candidate].precedes(entries[child]) {
                    child = candidate
                }
                candidate += 1
            }
            guard entries[child].precedes(moving) else { break }
            entries[parent] = entries[child]
            parent = child
        }
        entries[parent] = moving
    }

    /// Children per node.
    private static let arity = 4
}
