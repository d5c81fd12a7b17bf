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

    @Test("a shared chunk goes out whole and in order, and is never written into: what is appended after it starts a chunk of its own")
    func sharedChunks() {
        let pair = SocketPair()
        var first = OutputQueue(), second = OutputQueue()
        var scratch: [UInt8] = []
        let stream = (0..<40).flatMap { line("EVENT \($0) tick tea \($0)000 60000") }
        let original = stream
        #expect(stream.count >= OutputQueue.sharedChunkMinimum)
        first.append(line("OK 1"))
        first.appendShared(stream)
        second.appendShared(stream)
        first.append(line("OK 2"))
        second.append(line("OK 3"))
        first.appendShared(line("EVENT 41 done tea 0 60000"))  // Small: copied.
        #expect(stream == original, "the shared bytes are unchanged")
        #expect(first.byteCount == line("OK 1").count + stream.count + line("OK 2").count + line("EVENT 41 done tea 0 60000").count)
        let expected = "OK 1\n" + String(decoding: stream, as: UTF8.self) + "OK 2\nEVENT 41 done tea 0 60000\n"
        #expect(drain(&first, into: pair, scratch: &scratch) == expected)
        #expect(drain(&second, into: pair, scratch: &scratch) == String(decoding: stream, as: UTF8.self) + "OK 3\n")
    }

    @Test("a rollback past a shared chunk leaves what came before it, and the next batch's output follows")
    func sharedChunkRollback() {
        let pair = SocketPair()
        var queue = OutputQueue()
        var scratch: [UInt8] = []
        let stream = (0..<40).flatMap { line("EVENT \($0) tick tea \($0)000 60000") }
        queue.append(line("OK kept"))
        queue.mark(batch: 7)
        queue.appendShared(stream)
        queue.append(line("OK undone"))
        let rolledBack = queue.rollback(batch: 7)
        #expect(rolledBack)
        queue.append(line("OK again"))
        #expect(drain(&queue, into: pair, scratch: &scratch) == "OK kept\nOK again\n")
    }

    @Test("a long queue of event lines appended one by one holds about what it counts: each full chunk is full but for less than a line, and at most one has room to spare", arguments: [23, 57, 61, 200, 300])
    func memoryIsWhatIsCounted(lineLength: Int) {
        var queue = OutputQueue()
        // A reused buffer with room to spare, as the fan-out's is: a chunk does not keep that room.
        var buffer: [UInt8] = []
        buffer.reserveCapacity(1 << 20)
        while queue.byteCount < 4 << 20 {
            buffer.removeAll(keepingCapacity: true)
            buffer += [UInt8](repeating: UInt8(ascii: "x"), count: lineLength - 1) + [10]
            queue.append(buffer)
        }
        // A line that does not fit starts the next chunk: under 2 % of a 16 KiB chunk for a line of
        // 300 bytes or less (names are at most 255). Before, full chunks held up to twice their bytes.
        #expect(Double(queue.retainedBytes) <= Double(queue.byteCount) * 1.02 + Double(OutputQueue.chunkSize), "\(queue.retainedBytes) bytes held for \(queue.byteCount) queued")
        var small = OutputQueue()
        small.append(buffer)
        #expect(small.retainedBytes < 2 * lineLength + 64, "one line holds about its own size: \(small.retainedBytes)")
    }

    @Test("replies and events go out in order")
    func order() {
        let pair = SocketPair()
        var queue = OutputQueue()
        var scratch: [UInt8] = []
        queue.append(line("OK 1"))
        queue.append(line("EVENT 1 tick a 2000 3000"))
        queue.append(line("OK 2"))
        #expect(queue.write(to: pair.writer, scratch: &scratch) == .drained)
        #expect(queue.isEmpty)
        #expect(pair.readAll() == "OK 1\nEVENT 1 tick a 2000 3000\nOK 2\n")
    }

    @Test("a full socket parks output; a partly written line is finished before the next")
    func partialWrites() {
        let pair = SocketPair(sendBuffer: 4096)
        var queue = OutputQueue()
        var scratch: [UInt8] = []
        let big = String(repeating: "x", count: 300_000)
        queue.append(line("EVENT 1 tick a \(big)"))
        #expect(queue.write(to: pair.writer, scratch: &scratch) == .wouldBlock)
        #expect(queue.isMidLine)
        queue.append(line("EVENT 2 tick a 1"))
        let received = drain(&queue, into: pair, scratch: &scratch)
        #expect(queue.isEmpty)
        #expect(received == "EVENT 1 tick a \(big)\nEVENT 2 tick a 1\n")
    }

    @Test("a closed peer is reported as a failure, not a crash (no SIGPIPE)")
    func closedPeer() {
        signal(SIGPIPE, SIG_IGN)
        let pair = SocketPair()
        shutdown(pair.reader, Int32(SHUT_RDWR))  // The peer goes away; the pair still owns the descriptor.
        var queue = OutputQueue()
        var scratch: [UInt8] = []
        queue.append(line("OK 1"))
        if case .failed = queue.write(to: pair.writer, scratch: &scratch) {} else {
            Issue.record("writing to a closed peer did not fail")
        }
    }

    @Test("a rolled-back batch leaves exactly what was queued before it, even behind a half-written line")
    func rollback() {
        let pair = SocketPair(sendBuffer: 4096)
        var queue = OutputQueue()
        var scratch: [UInt8] = []
        // Earlier output, partly written: the peer has some of it.
        let big = String(repeating: "x", count: 100_000)
        queue.append(line("OK before " + big))
        #expect(queue.write(to: pair.writer, scratch: &scratch) == .wouldBlock)
        queue.append(line("EVENT 1 tick a 2000 3000"))
        let before = queue.byteCount
        queue.mark(batch: 7)
        queue.append(line("OK undone"))
        queue.append(line("EVENT 1 tick a 1000 3000"))
        queue.append(line("EVENT 2 started b 5000 5000"))
        queue.mark(batch: 7)  // A second mark in the same batch moves nothing.
        let otherBatch = queue.rollback(batch: 6)
        #expect(!otherBatch, "another batch's mark is not this one")
        let rolledBack = queue.rollback(batch: 7)
        #expect(rolledBack)
        #expect(queue.byteCount <= before, "nothing of the batch is left")
        queue.append(line("ERR unavailable"))
        var received = pair.readAll()
        while queue.write(to: pair.writer, scratch: &scratch) == .wouldBlock {
            received += pair.readAll()
        }
        received += pair.readAll()
        #expect(received == "OK before \(big)\nEVENT 1 tick a 2000 3000\nERR unavailable\n", "\(received.suffix(60))")
    }

    @Test("a rollback cuts back to the mark across chunk boundaries, and a later batch's output follows")
    func rollbackAcrossChunks() {
        let pair = SocketPair(sendBuffer: 4096)
        var queue = OutputQueue()
        var scratch: [UInt8] = []
        queue.append(line("OK " + String(repeating: "x", count: 50_000)))
        #expect(queue.write(to: pair.writer, scratch: &scratch) == .wouldBlock)
        var expected = ""
        for index in 0..<500 {
            queue.append(line("EVENT \(index) started n\(index) 5000 5000"))
            expected += "EVENT \(index) started n\(index) 5000 5000\n"
        }
        queue.mark(batch: 9)
        for index in 0..<2_000 { queue.append(line("EVENT \(index) done gone\(index) 0 5000")) }
        let rolledBack = queue.rollback(batch: 9)
        #expect(rolledBack)
        queue.append(line("OK after"))
        let received = drain(&queue, into: pair, scratch: &scratch)
        #expect(received.split(separator: "\n").dropFirst().joined(separator: "\n") + "\n" == expected + "OK after\n")
    }

    @Test("a subscriber that is behind, sent shared streams and small lines in turn, holds about what it queued: a small line after a shared chunk is not given a 16 KiB chunk")
    func smallLinesBehindSharedChunks() {
        var queue = OutputQueue()
        var sharedCapacity = 0
        for _ in 0..<100 {
            let shared = Array(repeating: UInt8(ascii: "s"), count: 600) + [10]
            sharedCapacity += shared.capacity
            queue.appendShared(shared)
            queue.append(Array(repeating: UInt8(ascii: "e"), count: 17) + [10])
        }
        #expect(queue.byteCount == 100 * (601 + 18))
        // The shared chunks cost what their owner allocated (their capacity is the allocator's
        // choice: glibc's usable size, which differs between machines); each small line costs
        // its own small allocation, here at most 64 bytes. It was 16 KiB each, 28 times the bytes.
        let smallLines = queue.footprint - sharedCapacity
        #expect(smallLines > 0 && smallLines <= 100 * 64, "\(smallLines) bytes held for 100 lines of 18 bytes")
    }

    @Test("the footprint kept as the queue changes is always what its chunks hold, whatever mix of appends, shared chunks, partial writes, rollbacks and discards came before", arguments: [1, 2, 3, 4, 5])
    func footprintIsKeptExactly(seed: UInt64) {
        var random = SplitMix64(state: seed)  // The same as the core's tests (a link to their file).
        let pair = SocketPair(sendBuffer: 4096)
        var queue = OutputQueue()
        var scratch: [UInt8] = []
        var checks = 0
        var batch = 0
        for step in 0..<3_000 {
            switch random.next() % 100 {
            case 0..<55:
                queue.append(line("EVENT \(step) tick n\(step) " + String(repeating: "x", count: Int(random.next() % 200))))
            case 55..<65:
                queue.appendShared(Array(repeating: UInt8(ascii: "s"), count: Int(random.next() % 2_000)) + [10])
            case 65..<75:
                queue.mark(batch: batch)
            case 75..<80:
                queue.rollback(batch: batch)
            case 80..<95:
                // As the client table does: nothing is written during a batch, and a write ends it.
                _ = pair.readAll()
                _ = queue.write(to: pair.writer, scratch: &scratch)
                batch += 1
            case 95..<97:
                queue.discardAllButCurrentLine()
            default:
                queue.append(line("OK " + String(repeating: "r", count: Int(random.next() % 40_000))))
            }
            #expect(queue.footprint == queue.retainedBytes, "step \(step): kept \(queue.footprint), held \(queue.retainedBytes)")
            #expect(queue.footprint >= queue.byteCount, "step \(step): \(queue.byteCount) bytes queued in \(queue.footprint)")
            checks += 1
        }
        #expect(checks == 3_000)
        _ = drain(&queue, into: pair, scratch: &scratch)
        #expect(queue.footprint == 0 && queue.byteCount == 0)
    }
}
