@testable import CountdownDaemon
import Glibc
import Testing

@Suite("Per-connection output queue")
struct OutputQueueTests {
    /// A connected socket pair; the test reads what the queue writes on the other end.
    final class SocketPair {
        let writer: Int32
        let reader: Int32
        init(sendBuffer: Int32? = nil) {
            var fds: [Int32] = [0, 0]
            precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
            writer = fds[0]
            reader = fds[1]
            _ = fcntl(writer, F_SETFL, fcntl(writer, F_GETFL) | O_NONBLOCK)
            _ = fcntl(reader, F_SETFL, fcntl(reader, F_GETFL) | O_NONBLOCK)
            if var size = sendBuffer {
                setsockopt(writer, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            }
        }
        deinit {
            close(writer)
            close(reader)
        }
        func readAll() -> String {
            var out: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(reader, $0.baseAddress, $0.count) }
                if count <= 0 { break }
                out += buffer[0..<count]
            }
            return String(decoding: out, as: UTF8.self)
        }
    }

    func line(_ text: String) -> [UInt8] { Array((text + "\n").utf8) }

    /// Writes `queue` out while the test reads the other end, until it is empty; what came.
    func drain(_ queue: inout OutputQueue, into pair: SocketPair, scratch: inout [UInt8]) -> String {
        var received = ""
        for _ in 0..<100_000 where !queue.isEmpty {
            received += pair.readAll()
            _ = queue.write(to: pair.writer, scratch: &scratch)
        }
        return received + pair.readAll()
    }

    @Test("replies and events go out in order")
    func order() {
        let pair = SocketPair()
        var queue = OutputQueue(coalesceThreshold: 1 << 20)
        var scratch: [UInt8] = []
        queue.appendReply(line("OK 1"))
        queue.appendEvent(line("EVENT 1 tick a 2000 3000"), tickName: "a")
        queue.appendReply(line("OK 2"))
        #expect(queue.write(to: pair.writer, scratch: &scratch) == .drained)
        #expect(queue.isEmpty)
        #expect(pair.readAll() == "OK 1\nEVENT 1 tick a 2000 3000\nOK 2\n")
    }

    @Test("a subscriber behind the threshold gets the newest tick per countdown, and every lifecycle event")
    func coalescing() {
        let pair = SocketPair()
        var queue = OutputQueue(coalesceThreshold: 0)
        var scratch: [UInt8] = []
        queue.appendEvent(line("EVENT 1 started a 3000 3000"), tickName: nil)
        queue.appendEvent(line("EVENT 2 tick a 2000 3000"), tickName: "a")
        queue.appendEvent(line("EVENT 3 tick b 5000 6000"), tickName: "b")
        queue.appendEvent(line("EVENT 4 tick a 1000 3000"), tickName: "a")
        queue.appendEvent(line("EVENT 5 done a 0 3000"), tickName: nil)
        queue.appendEvent(line("EVENT 6 tick b 4000 6000"), tickName: "b")
        #expect(queue.coalescedTickCount == 2)
        #expect(queue.write(to: pair.writer, scratch: &scratch) == .drained)
        #expect(pair.readAll() == "EVENT 1 started a 3000 3000\nEVENT 4 tick a 1000 3000\nEVENT 5 done a 0 3000\nEVENT 6 tick b 4000 6000\n")
    }

    @Test("100,000 ticks to a subscriber that never reads: the queue holds the newest per countdown, not a trace of each one replaced")
    func coalescingIsBounded() {
        let pair = SocketPair(sendBuffer: 4096)
        var queue = OutputQueue(coalesceThreshold: 0)
        var scratch: [UInt8] = []
        queue.appendReply(line("OK " + String(repeating: "x", count: 100_000)))
        #expect(queue.write(to: pair.writer, scratch: &scratch) == .wouldBlock)
        queue.appendEvent(line("EVENT 1 started a 3000 3000"), tickName: nil)
        for second in stride(from: 100_000, to: 0, by: -1) {
            for name in ["a", "b", "c"] {
                queue.appendEvent(line("EVENT 1 tick \(name) \(second) 3000"), tickName: name)
            }
            // A failed write attempt now and then, as the daemon's flush makes: it must not cost
            // a walk over every tick replaced so far.
            if second % 1000 == 0 { _ = queue.write(to: pair.writer, scratch: &scratch) }
        }
        queue.appendEvent(line("EVENT 2 done a 0 3000"), tickName: nil)
        #expect(queue.coalescedTickCount == 299_997)
        #expect(queue.chunkCount < 3000, "\(queue.chunkCount) chunks held for 3 ticks and 2 events")
        let received = drain(&queue, into: pair, scratch: &scratch)
        let lines = received.split(separator: "\n").dropFirst().map(String.init)
        #expect(lines == ["EVENT 1 started a 3000 3000", "EVENT 1 tick a 1 3000", "EVENT 1 tick b 1 3000", "EVENT 1 tick c 1 3000", "EVENT 2 done a 0 3000"])
    }

    @Test("a rollback after the emptied ticks were compacted away still leaves exactly what came before the batch")
    func rollbackAfterCompaction() {
        let pair = SocketPair(sendBuffer: 4096)
        var queue = OutputQueue(coalesceThreshold: 0)
        var scratch: [UInt8] = []
        queue.appendReply(line("OK " + String(repeating: "x", count: 100_000)))
        #expect(queue.write(to: pair.writer, scratch: &scratch) == .wouldBlock)
        queue.appendEvent(line("EVENT 1 started a 3000 3000"), tickName: nil)
        queue.appendEvent(line("EVENT 1 tick a 99999999 3000"), tickName: "a")
        // The last chunk when the batch begins is a tick that the batch's own ticks replace:
        // compaction removes it, and the rollback must not cut its (longer) predecessor instead.
        queue.appendEvent(line("EVENT 1 tick b 9 3000"), tickName: "b")
        queue.mark(batch: 3)
        for second in stride(from: 5000, to: 0, by: -1) {
            queue.appendEvent(line("EVENT 1 tick b \(second) 3000"), tickName: "b")
        }
        queue.appendReply(line("OK undone"))
        #expect(queue.chunkCount < 5000, "compacted during the batch: \(queue.chunkCount)")
        let rolledBack = queue.rollback(batch: 3)
        #expect(rolledBack)
        queue.appendReply(line("ERR unavailable"))
        let received = drain(&queue, into: pair, scratch: &scratch)
        let lines = received.split(separator: "\n").dropFirst().map(String.init)
        // (b's tick from before the batch was replaced by the batch's, which the rollback takes
        // back: a countdown's tick may go missing, never a line be cut.)
        #expect(lines == ["EVENT 1 started a 3000 3000", "EVENT 1 tick a 99999999 3000", "ERR unavailable"])
    }

    @Test("a full socket parks output; a partly written tick is never replaced; the rest follows intact")
    func partialWrites() {
        let pair = SocketPair(sendBuffer: 4096)
        var queue = OutputQueue(coalesceThreshold: 0)
        var scratch: [UInt8] = []
        let big = String(repeating: "x", count: 300_000)
        queue.appendEvent(line("EVENT 1 tick a \(big)"), tickName: "a")
        #expect(queue.write(to: pair.writer, scratch: &scratch) == .wouldBlock)
        #expect(queue.isMidLine)
        queue.appendEvent(line("EVENT 2 tick a 1"), tickName: "a")
        let received = drain(&queue, into: pair, scratch: &scratch)
        #expect(queue.isEmpty)
        #expect(received == "EVENT 1 tick a \(big)\nEVENT 2 tick a 1\n")
    }

    @Test("a closed peer is reported as a failure, not a crash (no SIGPIPE)")
    func closedPeer() {
        signal(SIGPIPE, SIG_IGN)
        let pair = SocketPair()
        shutdown(pair.reader, Int32(SHUT_RDWR))  // The peer goes away; the pair still owns the descriptor.
        var queue = OutputQueue(coalesceThreshold: 1 << 20)
        var scratch: [UInt8] = []
        queue.appendReply(line("OK 1"))
        if case .failed = queue.write(to: pair.writer, scratch: &scratch) {} else {
            Issue.record("writing to a closed peer did not fail")
        }
    }

    @Test("a rolled-back batch leaves exactly what was queued before it, even behind a half-written line and coalesced ticks")
    func rollback() {
        let pair = SocketPair(sendBuffer: 4096)
        var queue = OutputQueue(coalesceThreshold: 64)
        var scratch: [UInt8] = []
        // Earlier output, partly written: the peer has some of it.
        let big = String(repeating: "x", count: 100_000)
        queue.appendReply(line("OK before " + big))
        #expect(queue.write(to: pair.writer, scratch: &scratch) == .wouldBlock)
        queue.appendEvent(line("EVENT 1 tick a 2000 3000"), tickName: "a")
        let before = queue.byteCount
        queue.mark(batch: 7)
        queue.appendReply(line("OK undone"))
        queue.appendEvent(line("EVENT 1 tick a 1000 3000"), tickName: "a")  // Coalesces the earlier tick.
        queue.appendEvent(line("EVENT 2 started b 5000 5000"), tickName: nil)
        queue.mark(batch: 7)  // A second mark in the same batch moves nothing.
        let otherBatch = queue.rollback(batch: 6)
        #expect(!otherBatch, "another batch's mark is not this one")
        let rolledBack = queue.rollback(batch: 7)
        #expect(rolledBack)
        #expect(queue.byteCount <= before, "nothing of the batch is left")
        queue.appendReply(line("ERR unavailable"))
        var received = pair.readAll()
        while queue.write(to: pair.writer, scratch: &scratch) == .wouldBlock {
            received += pair.readAll()
        }
        received += pair.readAll()
        #expect(received.hasPrefix("OK before x"))
        #expect(!received.contains("undone") && !received.contains("started b"))
        #expect(received.hasSuffix("\nERR unavailable\n"), "\(received.suffix(60))")
    }
}
