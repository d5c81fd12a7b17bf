@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Foundation
import Glibc
import Testing

/// The daemon's listings in slices, on a real socket pair, with the daemon's own request path
/// and components wired as `start` wires them (no poller loop, no listening socket).
@Suite("Listings in slices")
struct DaemonListingTests {
    @Test("a subscriber cut off for overflow by the events that fall due as its next slice is made gets no slice after its ERR overflow, and its listing ends")
    func overflowWhileContinuingListing() throws {
        let scratch = ScratchDirectory()
        var configuration = DaemonConfiguration(socketPath: scratch.path + "/d.sock", stateDirectory: scratch.path + "/state")
        configuration.outputHardLimit = 64 * 1024
        // Time moves when the test moves it: the `soon` countdowns fall due by an advance, not a sleep.
        let time = ManualTime()
        let daemon = Daemon(configuration: configuration, environment: [:], time: time.clock)
        let poller = try EventPoller(queue: daemon.queue)
        var pair: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        defer { close(pair[0]); close(pair[1]) }
        // Room in the socket for everything written below, so that one write takes it all.
        var size: Int32 = 4 << 20
        setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        let connection = Connection(id: 1, descriptor: pair[0], peerUID: 0, poller: poller)
        func run(_ line: String) {
            daemon.replyBuffer.removeAll(keepingCapacity: true)
            let now = time.clock.now()
            guard let request = try? RequestParser.parse(Array(line.utf8)) else {
                Issue.record("cannot parse \(line)")
                return
            }
            #expect(throws: Never.self) { try daemon.execute(request, from: connection, now: now, clock: time.clock.mapping(at: now)) }
            daemon.appendReply(to: connection)
        }
        let dueBy: Instant = daemon.queue.sync {
            #expect(throws: Never.self) { try daemon.recoverState() }
            daemon.connectComponents()
            daemon.beginBatch()
            for index in 0..<3000 { run("START long\(index) 1h") }
            for index in 0..<3000 { run("START soon\(index) 50ms") }
            connection.output.discardAllButCurrentLine()  // Only what follows SUBSCRIBE matters.
            run("SUBSCRIBE")
            #expect(daemon.listings[connection.id] != nil && daemon.clients.isListing(connection), "snapshots in slices")
            return time.clock.now().advanced(byMilliseconds: 50)
        }
        // Until the `soon` countdowns are due: their 3,000 `done`s pass the 64 KiB limit.
        time.advance(byMilliseconds: 50)
        #expect(time.clock.now() >= dueBy)
        daemon.queue.sync {
            daemon.continueListings(now: time.clock.now())
            #expect(daemon.clients.isClosing(connection), "cut off for overflow")
            #expect(!daemon.clients.isListing(connection) && daemon.listings[connection.id] == nil, "its listing ended with it")
            #expect(!daemon.hasListingWithRoom)
            var scratchBuffer: [UInt8] = []
            _ = connection.output.write(to: pair[0], scratch: &scratchBuffer)
        }
        var text = Data()
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        _ = fcntl(pair[1], F_SETFL, O_NONBLOCK)
        while true {
            let got = read(pair[1], &chunk, chunk.count)
            if got <= 0 { break }
            text.append(contentsOf: chunk[0..<got])
        }
        let lines = String(decoding: text, as: UTF8.self).split(separator: "\n")
        let error = try #require(lines.firstIndex { $0.hasPrefix("ERR overflow") }, "no ERR overflow among \(lines.count) lines")
        #expect(lines.count == error + 1, "\(lines.count - error - 1) lines follow ERR overflow, the first: \(lines.dropFirst(error + 1).first ?? "")")
    }
}
