@testable import CountdownDaemon
import Dispatch
import Glibc
import Testing

@Suite("The epoll poller")
struct EventPollerTests {
    /// What the batch handler saw, touched only on the poller's queue.
    final class Observations: @unchecked Sendable {
        var readable: [String] = []
        var writable = 0
        var batches = 0
    }

    @Test("handlers run on the queue in batches, the urgent one first; interest changes and removal take effect")
    func batches() throws {
        let queue = DispatchQueue(label: "poller-test")
        let poller = try EventPoller(queue: queue)
        var first: [Int32] = [0, 0]
        var second: [Int32] = [0, 0]
        // Close-on-exec: a child spawned meanwhile by another test must not keep these open (an
        // epoll registration lives as long as its open file, and this poller outlives the test).
        let kind = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        #expect(socketpair(AF_UNIX, kind, 0, &first) == 0 && socketpair(AF_UNIX, kind, 0, &second) == 0)
        defer { [first[0], first[1], second[0], second[1]].forEach { close($0) } }
        let seen = Observations()
        let delivered = DispatchSemaphore(value: 0)
        // (Registration throws a typed error; a typed-throwing closure given to `queue.sync` crashes
        // this compiler, so each result comes back as an optional.)
        let ordinary = try #require(queue.sync {
            try? poller.register(first[0], interest: .readable) { readiness in
                dispatchPrecondition(condition: .onQueue(queue))
                if readiness.readable { seen.readable.append("ordinary") }
            }
        })
        let urgent = try #require(queue.sync {
            try? poller.register(second[0], interest: .readable, urgent: true) { readiness in
                if readiness.readable { seen.readable.append("urgent") }
            }
        })
        // A socket is writable while it has room; watched only when asked.
        let sink = try #require(queue.sync {
            try? poller.register(first[1], interest: []) { readiness in
                if readiness.writable { seen.writable += 1 }
            }
        })
        // Both readable before the poll thread starts, so its first wait sees both: one batch,
        // urgent first. (Written after `start`, the thread may wake for the first byte alone.)
        #expect(write(first[1], "a", 1) == 1 && write(second[1], "b", 1) == 1)
        try poller.start { batch in
            batch.deliverUrgent()
            batch.deliverOthers()
            seen.batches += 1
            delivered.signal()
            return false
        }
        #expect(delivered.wait(timeout: .now() + 10) == .success)
        queue.sync {
            #expect(seen.readable.first == "urgent")
            #expect(Set(seen.readable) == ["urgent", "ordinary"])
            // Level-triggered: unread input is reported again; stop watching both to quiet it.
            #expect(throws: Never.self) { try poller.setInterest([], for: ordinary) }
            poller.unregister(urgent)
            seen.readable.removeAll()
            #expect(throws: Never.self) { try poller.setInterest(.writable, for: sink) }
        }
        // The writable socket produces a batch; nothing else is reported.
        let deadline = DispatchTime.now() + 10
        while queue.sync(execute: { seen.writable }) == 0 {
            #expect(delivered.wait(timeout: deadline) == .success)
            if DispatchTime.now() >= deadline { break }
        }
        queue.sync {
            #expect(seen.writable > 0)
            #expect(seen.readable.isEmpty)
            poller.unregister(sink)
            poller.unregister(ordinary)  // Nothing stays registered: the poll thread sleeps for good.
            #expect(poller.interest(of: sink).isEmpty)
        }
    }
}
