@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Testing

/// The two pieces recovery uses to spread its work over threads: a bounded channel of batches
/// from one thread to another, and a result waited for once. Checked by order and content, on
/// real threads, never by time.
@Suite("Recovery's threads: the batch channel and the background result")
struct RecoveryThreadsTests {
    @Test("a producer on another thread sends 1,000 elements through a channel with room for 2: all arrive, in order, then nil, and nil again")
    func channelKeepsOrder() {
        let channel = BatchChannel<[Int]>(capacity: 2)
        let producer = BackgroundResult(thread: .snapshotDecoder) { () -> Int in
            for value in 0..<1_000 {
                channel.send([value, value * 2])
            }
            channel.close()
            return 1_000
        }
        var received: [[Int]] = []
        while let element = channel.receive() {
            received.append(element)
        }
        #expect(producer.wait() == 1_000)
        #expect(received == (0..<1_000).map { [$0, $0 * 2] })
        #expect(channel.receive() == nil, "a closed, empty channel answers nil every time")
    }

    @Test("offer drops what finds no room, tryReceive answers nil at once when nothing waits, and a channel freed with elements still in it is freed cleanly")
    func offerAndTryReceive() {
        let channel = BatchChannel<Int>(capacity: 2)
        #expect(channel.tryReceive() == nil)
        channel.offer(1)
        channel.offer(2)
        channel.offer(3)  // No room: dropped.
        #expect(channel.tryReceive() == 1)
        #expect(channel.receive() == 2)
        #expect(channel.tryReceive() == nil, "the third was dropped")
        let abandoned = BatchChannel<Int>(capacity: 4)
        abandoned.send(7)
        abandoned.send(8)
        // Freed here with two elements waiting (libdispatch stops a process that frees a
        // semaphore below its starting count: the channel must not make one so).
    }

    @Test("a background result hands back what its work returned, or what it threw")
    func backgroundResult() throws {
        let returned = BackgroundResult(thread: .journalReader) { () throws(StorageError) -> String in "read" }
        #expect(try returned.wait() == "read")
        let thrown = BackgroundResult(thread: .journalReader) { () throws(StorageError) -> String in
            throw .damaged(path: "/nowhere/journal.000000000001", reason: "frames are missing")
        }
        #expect(throws: StorageError.self) { try thrown.wait() }
    }
}
