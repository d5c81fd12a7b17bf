import CountdownCore
import Dispatch

/// Work the daemon does later, on its queue: the watchdog's pings, a `STATUS=` held back by the
/// rate limit, storage retries, the grace before an overflowing client is closed, accepting
/// again after running out of descriptors (`Daemon.later`, run at the end of every batch, once
/// it is flushed and idle); and the cluster replica's housekeeping, whose work makes replies
/// (`Daemon.laterInBatch`, run while a batch serves, right after the timer's due events).
///
/// It keeps no timer of its own. The daemon arms its one wake-up timer (`WakeupTimer`) for the
/// earliest of the engine's next event and each schedule's `nextDeadline`, and calls
/// `runDue(now:)` at its place in every batch.
///
/// Why not `asyncAfter` or a Dispatch timer source: either starts libdispatch's manager thread,
/// which sets itself to nice -4 and, in a service without `CAP_SYS_NICE`, logs "Failed to set
/// thread priority" into the journal at every start; and work run that way lands between
/// batches at moments the daemon does not choose.
final class DelayedWork {
    private struct Entry {
        let deadline: Instant
        /// Orders entries with the same deadline as they were scheduled.
        let order: UInt64
        let work: (Instant) -> Void

        func precedes(_ other: Entry) -> Bool {
            (deadline, order) < (other.deadline, other.order)
        }
    }

    private let queue: DispatchQueue
    /// A binary min-heap by deadline, then order.
    private var heap: [Entry] = []
    private var nextOrder: UInt64 = 0

    /// Runs when something is scheduled earlier than everything before it, so that the owner of
    /// the wake-up timer can arm it sooner.
    var onEarlierDeadline: (() -> Void)?

    /// Creates an empty schedule confined to `queue`.
    init(queue: DispatchQueue) {
        self.queue = queue
    }

    /// When the earliest scheduled work is due (`nil`: nothing is scheduled).
    var nextDeadline: Instant? { heap.first?.deadline }

    /// How many pieces of work wait.
    var count: Int { heap.count }

    /// Runs `work` on the queue in the first batch at or after `deadline` (at this schedule's
    /// place in it), with that moment as its `now`.
    func schedule(at deadline: Instant, _ work: @escaping (_ now: Instant) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        let isEarliest = nextDeadline.map { deadline < $0 } ?? true
        heap.append(Entry(deadline: deadline, order: nextOrder, work: work))
        nextOrder += 1
        siftUp(heap.count - 1)
        if isEarliest { onEarlierDeadline?() }
    }

    /// Runs, in deadline order, the work due at `now` that was scheduled before this call; work
    /// it schedules waits for the next call, even when already due, so a piece of work that
    /// schedules itself again can never keep this loop running.
    /// - Returns: how many pieces of work ran.
    @discardableResult
    func runDue(now: Instant) -> Int {
        dispatchPrecondition(condition: .onQueue(queue))
        let scheduledBefore = nextOrder
        var ran = 0
        var postponed: [Entry] = []
        while let first = heap.first, first.deadline <= now {
            let entry = removeFirst()
            if entry.order >= scheduledBefore {
                postponed.append(entry)
                continue
            }
            entry.work(now)
            ran += 1
        }
        for entry in postponed {
            heap.append(entry)
            siftUp(heap.count - 1)
        }
        return ran
    }

    private func removeFirst() -> Entry {
        let first = heap[0]
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            siftDown(0)
        }
        return first
    }

    private func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].precedes(heap[parent]) else { return }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            guard left < heap.count else { return }
            var smallest = left
            if left + 1 < heap.count && heap[left + 1].precedes(heap[left]) { smallest = left + 1 }
            guard heap[smallest].precedes(heap[parent]) else { return }
            heap.swapAt(smallest, parent)
            parent = smallest
        }
    }
}
