import Dispatch
import Synchronization

/// A bounded queue from one producing thread to one consuming thread: recovery's snapshot
/// decoder hands its batches of countdowns to the thread that fills the engine through it.
///
/// At most `capacity` elements wait; `send` blocks while it is full, `receive` while it is empty
/// and open. Elements should be large batches: each hand-over can cost a wake-up of the other
/// thread.
final class BatchChannel<Element: Sendable>: Sendable {
    /// The elements sent and not yet received, oldest first.
    private let waiting = Mutex<[Element]>([])
    /// Signalled once for each element sent, and once at the close.
    private let sent = DispatchSemaphore(value: 0)
    /// Counts the free places.
    private let room: DispatchSemaphore

    /// A channel for at most `capacity` waiting elements.
    init(capacity: Int) {
        // Made at 0 and raised: libdispatch stops a process that frees a semaphore whose count is
        // below the one it was made with, as `room`'s is while elements wait.
        room = DispatchSemaphore(value: 0)
        for _ in 0..<capacity {
            room.signal()
        }
    }

    /// Hands `element` over, waiting while `capacity` elements wait already. Not after `close`.
    func send(_ element: Element) {
        room.wait()
        waiting.withLock { $0.append(element) }
        sent.signal()
    }

    /// Hands `element` over if there is room now, and otherwise drops it: for giving back
    /// what may be reused.
    func offer(_ element: Element) {
        guard room.wait(timeout: .now()) == .success else { return }
        waiting.withLock { $0.append(element) }
        sent.signal()
    }

    /// Says that nothing more is sent: `receive` returns `nil` once the waiting ones are taken.
    /// Call it once, after the last `send`.
    func close() {
        sent.signal()  // With nothing waiting behind it, `receive` reads it as the end.
    }

    /// The oldest element sent and not yet received, waiting for one; `nil` once the channel is
    /// closed and empty.
    func receive() -> Element? {
        sent.wait()
        let element = waiting.withLock { waiting -> Element? in
            waiting.isEmpty ? nil : waiting.removeFirst()
        }
        if element != nil {
            room.signal()
        } else {
            sent.signal()  // The close's signal stays for any later `receive`, which also ends.
        }
        return element
    }

    /// The oldest element waiting, or `nil` at once when none waits.
    func tryReceive() -> Element? {
        guard sent.wait(timeout: .now()) == .success else { return nil }
        let element = waiting.withLock { waiting -> Element? in
            waiting.isEmpty ? nil : waiting.removeFirst()
        }
        if element != nil {
            room.signal()
        } else {
            sent.signal()
        }
        return element
    }
}
