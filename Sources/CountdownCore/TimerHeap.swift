/// A binary min-heap of wake-ups, ordered by due instant, with lazy deletion.
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

    /// Adds an entry. O(log n).
    mutating func push(_ entry: Entry) {
        entries.append(entry)
        siftUp(from: entries.count - 1)
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
            for index in stride(from: entries.count / 2 - 1, through: 0, by: -1) {
                siftDown(from: index)
            }
        }
    }

    private mutating func siftUp(from start: Int) {
        var child = start
        let moving = entries[child]
        while child > 0 {
            let parent = (child - 1) / 2
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
            var child = 2 * parent + 1
            guard child < count else { break }
            if child + 1 < count && entries[child + 1].precedes(entries[child]) {
                child += 1
            }
            guard entries[child].precedes(moving) else { break }
            entries[parent] = entries[child]
            parent = child
        }
        entries[parent] = moving
    }
}
