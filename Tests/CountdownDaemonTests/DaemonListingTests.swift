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
    /// A daemon on a manual clock and one connection on a socket pair, wired as `start` wires
    /// them. Everything on the daemon's queue but `received`.
    final class Rig {
        let scratch = ScratchDirectory()
        let time = ManualTime()
        let daemon: Daemon
        let poller: EventPoller
        let connection: Connection
        private var pair: [Int32] = [0, 0]

        init(peerUID: UInt32 = 0, configure: (inout DaemonConfiguration) -> Void = { _ in }) throws {
            var configuration = DaemonConfiguration(socketPath: scratch.path + "/d.sock", stateDirectory: scratch.path + "/state")
            configure(&configuration)
            daemon = Daemon(configuration: configuration, environment: [:], time: time.clock)
            poller = try EventPoller(queue: daemon.queue)
            try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
            // Room in the socket for everything written, so that one write takes it all.
            var size: Int32 = 4 << 20
            setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            // As the daemon's sockets are: a turn's read finds nothing rather than waiting.
            try #require(fcntl(pair[0], F_SETFL, O_NONBLOCK) == 0)
            connection = Connection(id: 1, descriptor: pair[0], peerUID: peerUID, poller: poller)
            let daemon = daemon
            daemon.queue.sync {
                #expect(throws: Never.self) { try daemon.recoverState() }
                daemon.connectComponents()
                daemon.clients.server = daemon  // As `open` sets it; there is no listening socket.
                daemon.beginBatch()
            }
        }

        deinit {
            close(pair[0])
            close(pair[1])
        }

        /// Serves one request line, as `serve` does, its reply queued on the connection: with the
        /// connection's phase as the table gives it, as a failed commit's replay does
        /// (`undoBatch`); within a turn that is always `.open`.
        func run(_ line: String) {
            daemon.replyBuffer.removeAll(keepingCapacity: true)
            let now = time.clock.now()
            guard let request = try? RequestParser.parse(Array(line.utf8)) else {
                Issue.record("cannot parse \(line)")
                return
            }
            let phase = daemon.clients.state(of: connection).phase
            #expect(throws: Never.self) { try daemon.execute(request, from: connection, phase: phase, now: now, clock: time.clock.mapping(at: now)) }
            daemon.appendReply(to: connection)
        }

        /// Starts `count` countdowns `c0`… and commits them; the next batch begins, with nothing
        /// left unread (on the queue).
        func startCommitted(_ count: Int) {
            for index in 0..<count { run("START c\(index) 1h") }
            daemon.endBatch()
            write()
            _ = received()
            daemon.beginBatch()
        }

        /// Loses the state directory (the journal's file goes with it, so the batch's commit
        /// fails), then serves `lines` in one turn of the connection, as the table does (on the
        /// queue).
        func serveBeforeFailedCommit(_ lines: [String], bounded: Bool) throws {
            try FileManager.default.removeItem(atPath: scratch.path + "/state")
            #expect(daemon.beginTurn(of: connection) > 0)
            for line in lines {
                #expect(daemon.serve(.line(Array(line.utf8)[...]), of: connection, bounded: bounded) == .next, "\(line)")
            }
        }

        /// A batch that only continues the listings (on the queue).
        func continueListings() {
            daemon.beginBatch()
            daemon.clients.continueWork(rotation: Daemon.minimumTurnsPerBatch)
            daemon.endBatch()
        }

        /// Writes what the connection has queued (on the queue).
        func write() {
            var scratchBuffer: [UInt8] = []
            _ = connection.output.write(to: pair[0], scratch: &scratchBuffer)
        }

        /// The lines the client's end received.
        func received() -> [Substring] {
            var text = Data()
            var chunk = [UInt8](repeating: 0, count: 1 << 16)
            _ = fcntl(pair[1], F_SETFL, O_NONBLOCK)
            while true {
                let got = read(pair[1], &chunk, chunk.count)
                if got <= 0 { break }
                text.append(contentsOf: chunk[0..<got])
            }
            return String(decoding: text, as: UTF8.self).split(separator: "\n")
        }
    }

    @Test("a subscriber cut off for overflow by the events that fall due as its next slice is made gets no slice after its ERR overflow, and its listing ends")
    func overflowWhileContinuingListing() throws {
        let rig = try Rig { $0.outputHardLimit = 64 * 1024 }
        let (daemon, connection, time) = (rig.daemon, rig.connection, rig.time)
        // Time moves when the test moves it: the `soon` countdowns fall due by an advance, not a sleep.
        let dueBy: Instant = daemon.queue.sync {
            for index in 0..<3000 { rig.run("START long\(index) 1h") }
            for index in 0..<3000 { rig.run("START soon\(index) 50ms") }
            connection.output.discardAllButCurrentLine()  // Only what follows SUBSCRIBE matters.
            rig.run("SUBSCRIBE")
            #expect(daemon.clients.state(of: connection).phase == .listing && daemon.clients.figures.listingsInProgress == 1, "snapshots in slices")
            return time.clock.now().advanced(byMilliseconds: 50)
        }
        // Until the `soon` countdowns are due: their 3,000 `done`s pass the 64 KiB limit.
        time.advance(byMilliseconds: 50)
        #expect(time.clock.now() >= dueBy)
        daemon.queue.sync {
            daemon.clients.continueWork(rotation: Daemon.minimumTurnsPerBatch)
            #expect(daemon.clients.state(of: connection).phase == .closing, "cut off for overflow")
            #expect(daemon.clients.state(of: connection).phase != .listing && daemon.clients.figures.listingsInProgress == 0, "its listing ended with it")
            #expect(!daemon.clients.hasWorkLeft, "no listing left to go on")
            rig.write()
        }
        let lines = rig.received()
        let error = try #require(lines.firstIndex { $0.hasPrefix("ERR overflow") }, "no ERR overflow among \(lines.count) lines")
        #expect(lines.count == error + 1, "\(lines.count - error - 1) lines follow ERR overflow, the first: \(lines.dropFirst(error + 1).first ?? "")")
    }

    @Test("a LIST served again after a failed commit, on a connection that stopped reading since (its QUIT came after it), is produced whole, with its final OK, and no listing is left behind")
    func listingOnClosingConnection() throws {
        let rig = try Rig()
        let (daemon, connection) = (rig.daemon, rig.connection)
        daemon.queue.sync {
            for index in 0..<3000 { rig.run("START c\(index) 1h") }
            connection.output.discardAllButCurrentLine()
            connection.stopReading()  // As its QUIT, served after the LIST the first time, left it.
            rig.run("LIST")
            #expect(daemon.clients.state(of: connection).phase == .closing, "still closing, never listing")
            #expect(daemon.clients.figures.listingsInProgress == 0 && !daemon.clients.hasWorkLeft, "no listing left to go on")
            rig.write()
            #expect(connection.output.isEmpty, "the socket took it all")
        }
        let lines = rig.received()
        #expect(lines.filter { $0.hasPrefix("COUNTDOWN ") }.count == 3000)
        #expect(lines.last == "OK 3000", "the LIST's final OK: \(lines.last ?? "nothing")")
    }

    @Test("a non-root user's LIST holds a place among its 8 for as long as it is in progress: refused with ERR limit at 8, counted while sliced, given back when it ends or fits one slice; root is counted, never refused")
    func listsInProgressPerUser() throws {
        let rig = try Rig(peerUID: 1000)
        let (daemon, connection) = (rig.daemon, rig.connection)
        try daemon.queue.sync {
            for index in 0..<3000 { rig.run("START c\(index) 1h") }
            connection.output.discardAllButCurrentLine()
            let quota = daemon.listingQuota
            // Seven LISTs of the same uid in progress on other connections.
            var others = (0..<7).compactMap { _ in quota.take(for: 1000) }
            #expect(others.count == 7 && quota.count(of: 1000) == 7)
            rig.run("LIST")
            #expect(daemon.clients.state(of: connection).phase == .listing, "the eighth is in progress, in slices")
            #expect(quota.count(of: 1000) == 8)
            #expect(quota.take(for: 1000) == nil, "a ninth has no place")
            #expect(quota.take(for: 2000) != nil, "another uid's count is its own")
            // The eighth ends: its place is given back.
            while daemon.clients.state(of: connection).phase == .listing {
                rig.write()
                _ = rig.received()
                daemon.clients.continueWork(rotation: Daemon.minimumTurnsPerBatch)
            }
            // Given back as it ended, though the batch's record of its slices (for a failed commit)
            // still holds copies of it until the next batch.
            #expect(daemon.batch.items.contains { if case .listingSlice = $0.1 { true } else { false } })
            #expect(quota.count(of: 1000) == 7, "given back when it ended")
            // At 8 (one more held elsewhere), the LIST is refused, and nothing is listed.
            others.append(try #require(quota.take(for: 1000)))
            let now = rig.time.clock.now()
            #expect {
                try daemon.execute(.list(states: [], prefix: ""), from: connection, phase: .open, now: now, clock: rig.time.clock.mapping(at: now))
            } throws: { error in
                guard let error = error as? ProtocolError else { return false }
                return error.code == .limit && error.message.hasPrefix("uid 1000 already has 8 LISTs in progress")
            }
            #expect(daemon.clients.state(of: connection).phase == .open && quota.count(of: 1000) == 8, "nothing listed")
            // One ends elsewhere: a LIST that fits one slice holds its place only while it is made.
            others.removeLast()
            rig.run("LIST PREFIX c29")
            #expect(daemon.clients.state(of: connection).phase == .open && quota.count(of: 1000) == 7, "whole in its first slice")
            rig.write()
            #expect(rig.received().last == "OK 111")
            let root = (0..<20).compactMap { _ in quota.take(for: 0) }
            #expect(root.count == 20 && quota.count(of: 0) == 20, "root is counted, never refused")
            // A LIST whose connection stops reading (QUIT, end of input, an overflow) or closes
            // gives its place back then.
            rig.run("LIST")
            #expect(daemon.clients.state(of: connection).phase == .listing && quota.count(of: 1000) == 8)
            connection.stopReading()
            #expect(quota.count(of: 1000) == 7, "given back when its connection stopped reading")
            withExtendedLifetime(others) {}
        }
    }

    @Test("a user's eighth LIST served again after a failed commit replaces the listing it began, in its place: the client gets the whole reply, never ERR limit, and the place is given back at its end")
    func listServedAgainAfterFailedCommit() throws {
        let rig = try Rig(peerUID: 1000)
        let (daemon, connection) = (rig.daemon, rig.connection)
        try daemon.queue.sync {
            rig.startCommitted(3000)
            let quota = daemon.listingQuota
            let others = (0..<7).compactMap { _ in quota.take(for: 1000) }
            try rig.serveBeforeFailedCommit(["START x 1h", "LIST"], bounded: true)
            #expect(daemon.clients.state(of: connection).phase == .listing && quota.count(of: 1000) == 8)
            daemon.endBatch()  // Fails, undoes the batch and serves it again.
            #expect(daemon.statistics.batchesUndone == 1, "the batch was undone")
            #expect(daemon.clients.state(of: connection).phase == .listing && quota.count(of: 1000) == 8, "the LIST served again is the eighth")
            var lines: [Substring] = []
            while daemon.clients.state(of: connection).phase == .listing {
                rig.write()
                lines += rig.received()
                rig.continueListings()
            }
            rig.write()
            lines += rig.received()
            #expect(lines.first?.hasPrefix("ERR unavailable") == true, "the START refused: \(lines.first ?? "")")
            #expect(!lines.contains { $0.hasPrefix("ERR limit") })
            #expect(lines.filter { $0.hasPrefix("COUNTDOWN ") }.count == 3000 && lines.last == "OK 3000", "\(lines.count) lines, the last \(lines.last ?? "")")
            #expect(quota.count(of: 1000) == 7, "given back at its end")
            withExtendedLifetime(others) {}
        }
    }

    @Test("a LIST served again after a failed commit that now fits one slice (the batch's undone STARTs had made it two) ends the listing it began: one whole reply, no slice of the old one after it")
    func listServedAgainWholeEndsTheOldListing() throws {
        let rig = try Rig(peerUID: 1000)
        let (daemon, connection) = (rig.daemon, rig.connection)
        try daemon.queue.sync {
            let count = Daemon.linesPerListingSlice - 24
            rig.startCommitted(count)
            try rig.serveBeforeFailedCommit((0..<48).map { "START x\($0) 1h" } + ["LIST"], bounded: false)
            #expect(daemon.clients.state(of: connection).phase == .listing, "two slices, with the x's")
            daemon.endBatch()  // Fails: the x's are refused, and the LIST served again fits one slice.
            #expect(daemon.statistics.batchesUndone == 1)
            #expect(daemon.clients.state(of: connection).phase != .listing, "the old listing ended")
            #expect(daemon.listingQuota.count(of: 1000) == 0)
            for _ in 0..<3 { rig.continueListings() }
            rig.write()
            let lines = rig.received()
            #expect(lines.prefix(48).allSatisfy { $0.hasPrefix("ERR unavailable") })
            #expect(lines.filter { $0.hasPrefix("COUNTDOWN ") }.count == count, "\(lines.count) lines")
            #expect(lines.filter { $0.hasPrefix("OK ") } == ["OK \(count)"], "one final line: \(lines.filter { $0.hasPrefix("OK ") })")
        }
    }
}
