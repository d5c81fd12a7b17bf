/// A 4-ary min-heap of wake-ups, ordered by due instant, with lazy deletion.
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

    private(set) var entries: [Entry] = []

    /// The number of entries, live or stale.
    var count: Int { entries.count }

    /// The entry due first. O(1).
    var minimum: Entry? { entries.first }

    /// Makes room for `count` entries.
    mutating func reserveCapacity(_ count: Int) {
        entries.reserveCapacity(count)
    }

    /// Adds an entry. O(log n).
    mutating func push(_ entry: Entry) {
        entries.append(entry)
        siftUp(from: entries.count - 1)
    }

    /// Replaces the entry due first with `entry`: a pop and a push for the price of one sift.
    /// O(log n). The heap must not be empty.
    mutating func replaceMinimum(with entry: Entry) {
        entries[0] = entry
        siftDown(from: 0)
    }

    /// Removes and returns the entry due first. O(log n).
    @discardableResult
    mutating func popMinimum() -> Entry? {
        guard let last = entries.popLast() else { return nil }
        guard !entries.isEmpty else { return last }
        let top = entries[0]
        entries[0] = last
        siftDown(from: 0)
        return top
    }

    /// Keeps only the entries for which `isLive` holds, then restores the heap order. O(n).
    mutating func compact(keeping isLive: (Entry) -> Bool) {
        entries.removeAll { !isLive($0) }
        if entries.count > 1 {
            for index in stride(from: (entries.count - 2) / Self.arity, through: 0, by: -1) {
                siftDown(from: index)
            }
        }
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
