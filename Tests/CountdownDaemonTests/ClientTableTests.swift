@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Foundation
import Glibc
import Testing

/// A client table and fan-out on a real listening socket and poller, with a minimal daemon-like
/// readable handler: frame what arrives, close at the end of input. Everything but the test's
/// client sockets is touched on `queue`. A poll thread runs for the life of the process, so the
/// harness is held by it (strongly) and `finish` closes everything it watches.
final class TableHarness: @unchecked Sendable {
    let queue = DispatchQueue(label: "client-table-test")
    let scratch = ScratchDirectory()
    let socketPath: String
    let poller: EventPoller
    let clients: ClientTable
    let fanOut: EventFanOut
    /// Complete request lines framed so far, by connection id (on the queue).
    var lines: [Int: [String]] = [:]
    var batchNumber = 1

    init(configure: (inout DaemonConfiguration) -> Void = { _ in }) throws {
        socketPath = scratch.path + "/d.sock"
        var configuration = DaemonConfiguration(socketPath: socketPath, stateDirectory: scratch.path + "/state")
        configure(&configuration)
        let logger = Logger(threshold: .error, environment: [:])
        poller = try EventPoller(queue: queue)
        clients = ClientTable(queue: queue, logger: logger, configuration: configuration)
        fanOut = EventFanOut(queue: queue, clients: clients, configuration: configuration)
        let listener = try ListeningSocket.bind(path: socketPath, mode: 0o600)
        let started: Bool = queue.sync {
            clients.listener = listener
            clients.onClose = { [fanOut] connection in fanOut.unsubscribe(connection) }
            return (try? listener.startAccepting(with: poller) { [self] in
                clients.acceptPending(poller: poller, batch: batchNumber) { [self] connection in readable(connection) }
            }) != nil
        }
        try #require(started)
        try poller.start { [self] batch in
            batchNumber += 1
            batch.deliverUrgent()
            batch.deliverOthers()
            clients.flushTouched()
            return false
        }
    }

    /// Closes the listener and every connection: the poll thread has nothing left to watch.
    func finish() {
        queue.sync { clients.closeAll(notice: []) }
    }

    private func readable(_ connection: Connection) {
        switch clients.read(connection) {
        case .read:
            while case .line(let bytes)? = connection.framer.nextFrame() {
                lines[connection.id, default: []].append(String(decoding: bytes, as: UTF8.self))
            }
            clients.endTurn(connection, linesLeft: false)
        case .endOfInput:
            clients.close(connection)
        case .wouldBlock, .failed:
            break
        }
    }

    /// A connected client socket (blocking, with a receive timeout), its greeting read.
    func connect() throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connected = NotifySocket.withAddress(socketPath) { Glibc.connect(fd, $0, $1) }
        try #require(connected == 0, "connect: \(String(cString: strerror(errno)))")
        return fd
    }

    /// Reads lines from a client socket until `count` have come (or the end).
    func readLines(_ fd: Int32, count: Int) -> [String] {
        var text = ""
        var buffer = [UInt8](repeating: 0, count: 65536)
        while text.split(separator: "\n", omittingEmptySubsequences: false).count - 1 < count {
            let got = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard got > 0 else { break }
            text += String(decoding: buffer[0..<got], as: UTF8.self)
        }
        return text.split(separator: "\n").map(String.init)
    }

    /// Polls a condition on the queue until it holds, up to `timeout` seconds.
    func waitOnQueue(timeout: Double = 30, _ condition: @escaping () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !queue.sync(execute: condition) {
            guard Date() < deadline else { return false }
            usleep(5000)
        }
        return true
    }

    /// The daemon-side connection of the only client, or of the newest one.
    var newestConnection: Connection? {
        queue.sync { clients.connections.values.max { $0.id < $1.id } }
    }
}

@Suite("The client table and the fan-out on real sockets")
struct ClientTableTests {
    @Test("a greeting first; lines are framed however the bytes are split")
    func framing() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let client = try harness.connect()
        defer { close(client) }
        #expect(harness.readLines(client, count: 1).first?.hasPrefix("HELLO ") == true)
        for piece in ["PI", "NG\nSTA", "TS\n", "LIST PREFIX otp:\n"] {
            _ = piece.withCString { send(client, $0, strlen($0), 0) }
        }
        let connection = try #require(harness.newestConnection)
        #expect(harness.waitOnQueue { harness.lines[connection.id]?.count == 3 })
        #expect(harness.queue.sync { harness.lines[connection.id] } == ["PING", "STATS", "LIST PREFIX otp:"])
    }

    @Test("backpressure: past the read-pause threshold a connection is not read; once its output drains it is read again")
    func backpressure() throws {
        let harness = try TableHarness { $0.readPauseThreshold = 1024 }
        defer { harness.finish() }
        let client = try harness.connect()
        defer { close(client) }
        _ = harness.readLines(client, count: 1)
        let connection = try #require(harness.newestConnection)
        harness.queue.sync {
            harness.clients.touch(connection, batch: harness.batchNumber)
            connection.output.appendReply(Array(repeating: UInt8(ascii: "x"), count: 2047) + [UInt8(ascii: "\n")])
            harness.clients.endTurn(connection, linesLeft: false)
            #expect(connection.isReadingPaused, "2 KiB unsent, past 1 KiB")
            harness.clients.flushTouched()  // The socket takes it: drained, carried to the next batch.
            #expect(harness.clients.takeCarriedOver().map(\.id) == [connection.id])
            #expect(!connection.isReadingPaused, "reading again")
        }
        #expect(harness.readLines(client, count: 1).first?.count == 2047)
    }

    @Test("2,000 connections closed at once are all forgotten, and their descriptors released")
    func manyClosedAtOnce() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let descriptorsBefore = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
        var clientSockets: [Int32] = []
        for _ in 0..<2000 {
            clientSockets.append(try harness.connect())
        }
        #expect(harness.waitOnQueue { harness.clients.count == 2000 })
        for fd in clientSockets { close(fd) }
        #expect(harness.waitOnQueue { harness.clients.count == 0 }, "\(harness.queue.sync { harness.clients.count }) still open")
        let descriptorsAfter = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
        // Other tests run in this process at the same time and open descriptors of their own.
        #expect(descriptorsAfter < descriptorsBefore + 200, "\(descriptorsBefore) before, \(descriptorsAfter) after")
    }

    func event(_ sequence: UInt64, _ kind: EventKind, _ name: String, remaining: Int64 = 5000) -> CountdownEvent {
        CountdownEvent(sequence: sequence, kind: kind, name: name, remainingMilliseconds: remaining, totalMilliseconds: 5000)
    }

    @Test("the fan-out sends each subscriber the kinds and names it asked for, in order")
    func kindsAndNames() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let doneOnly = try harness.connect(), teaOnly = try harness.connect()
        defer { close(doneOnly); close(teaOnly) }
        _ = harness.readLines(doneOnly, count: 1)
        _ = harness.readLines(teaOnly, count: 1)
        #expect(harness.waitOnQueue { harness.clients.count == 2 })
        harness.queue.sync {
            let connections = harness.clients.connections.values.sorted { $0.id < $1.id }
            #expect(throws: Never.self) {
                try harness.fanOut.subscribe(connections[0], to: [], kinds: EventKindSet(.done))
                try harness.fanOut.subscribe(connections[1], to: ["tea"], kinds: .all)
            }
            #expect(harness.fanOut.subscriberCount == 2)
            harness.fanOut.deliver(
                [event(1, .started, "tea"), event(1, .tick, "tea", remaining: 4000), event(2, .started, "egg"), event(3, .done, "tea", remaining: 0), event(4, .done, "egg", remaining: 0)],
                batch: harness.batchNumber
            )
            harness.clients.flushTouched()
        }
        #expect(harness.readLines(doneOnly, count: 2) == ["EVENT 3 done tea 0 5000", "EVENT 4 done egg 0 5000"])
        #expect(harness.readLines(teaOnly, count: 3) == ["EVENT 1 started tea 5000 5000", "EVENT 1 tick tea 4000 5000", "EVENT 3 done tea 0 5000"])
    }

    @Test("a subscriber that never reads: its ticks are coalesced to the newest per countdown; past the hard limit it gets ERR overflow and is closed")
    func neverReads() throws {
        let harness = try TableHarness {
            $0.outputCoalesceThreshold = 4096
            $0.outputHardLimit = 256 * 1024
        }
        defer { harness.finish() }
        let stuck = try harness.connect()
        defer { close(stuck) }
        #expect(harness.waitOnQueue { harness.clients.count == 1 })
        let connection = try #require(harness.newestConnection)
        harness.queue.sync {
            #expect(throws: Never.self) { try harness.fanOut.subscribe(connection, to: [], kinds: .all) }
            // The socket's buffer fills first; from then on output waits in the daemon.
            var second: Int64 = 100_000
            for _ in 0..<20_000 {
                harness.fanOut.deliver([event(1, .tick, "tea", remaining: second)], batch: harness.batchNumber)
                harness.clients.flushTouched()
                second -= 1
            }
            #expect(connection.output.byteCount < 64 * 1024, "ticks of one countdown are coalesced: \(connection.output.byteCount) bytes wait")
            #expect(harness.fanOut.subscriberCount == 1, "ticks alone never overflow")
            // Lifecycle events are kept, each one, until the hard limit.
            var sequence: UInt64 = 2
            while harness.fanOut.subscriberCount == 1 && sequence < 100_000 {
                harness.fanOut.deliver([event(sequence, .started, "c\(sequence)")], batch: harness.batchNumber)
                harness.clients.flushTouched()
                sequence += 1
            }
            #expect(harness.fanOut.subscriberCount == 0, "past 256 KiB it is disconnected")
        }
        // What the kernel held, then (once read) ERR overflow, then the end.
        var buffer = [UInt8](repeating: 0, count: 65536)
        var text: [UInt8] = []
        while true {
            let got = buffer.withUnsafeMutableBytes { recv(stuck, $0.baseAddress, $0.count, 0) }
            guard got > 0 else { break }
            text += buffer[0..<got]
        }
        let last = String(decoding: text, as: UTF8.self).split(separator: "\n").last.map(String.init) ?? ""
        #expect(last.hasPrefix("ERR overflow "), "last line: \(last)")
        #expect(harness.waitOnQueue { harness.clients.count == 0 }, "closed")
    }
}
