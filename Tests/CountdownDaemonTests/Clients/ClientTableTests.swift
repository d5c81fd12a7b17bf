@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Foundation
import Glibc
import Testing

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
            #expect(piece.withCString { send(client, $0, strlen($0), 0) } == piece.utf8.count)
        }
        let connection = try #require(harness.newestConnection)
        #expect(harness.waitOnQueue { harness.lines[connection.id]?.count == 3 })
        #expect(harness.queue.sync { harness.lines[connection.id] } == ["PING", "STATS", "LIST PREFIX otp:"])
    }

    @Test("a line the server says must wait (past its user's share) goes back to the framer: served first in the next batch, then the lines after it, in order")
    func lineWaitsForTheNextBatch() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        harness.queue.sync { harness.waitOnce = ["SUBSCRIBE many names"] }
        let (client, connection) = try harness.greetedClient()
        defer { close(client) }
        let requests = "PING\nSUBSCRIBE many names\nSTATS\n"
        #expect(write(client, requests, requests.utf8.count) == requests.utf8.count)
        #expect(harness.waitOnQueue { harness.lines[connection.id]?.count == 3 })
        let served = harness.queue.sync { harness.servedIn }
        #expect(served.map(\.line) == ["PING", "SUBSCRIBE many names", "STATS"], "in order, each once")
        try #require(served.count == 3)
        #expect(served[1].batch > served[0].batch, "the line that waited came in a later batch than the one before it: \(served)")
        // The server is told the line was put back, so it serves it then whatever the user's
        // share (the daemon does): a user's other connection served first in every batch cannot
        // keep it waiting for ever.
        #expect(served.map(\.wasPutBack) == [false, true, false], "\(served)")
    }

    @Test("connections carried over batch after batch take turns at coming first, also when every one of them is served in each batch")
    func carriedOverTakeTurns() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let clients = try (0..<3).map { _ in try harness.greetedClient() }
        defer { for (client, _) in clients { close(client) } }
        let firsts: [Int] = harness.queue.sync {
            (0..<6).map { _ in
                for (_, connection) in clients { harness.clients.endTurn(connection, budgetUsed: true, skipped: false) }
                harness.clients.flushTouched()
                return harness.clients.takeCarriedOver(rotation: 64).first?.id ?? -1
            }
        }
        let ids = clients.map(\.1.id).sorted()
        // Served first in every batch, the lowest id left its user's other connections no share.
        #expect(firsts == ids + ids, "each comes first in turn: \(firsts)")
    }

    @Test("backpressure: past the read-pause threshold a connection is not read; once its output drains it is read again")
    func backpressure() throws {
        let harness = try TableHarness { $0.readPauseThreshold = 1024 }
        defer { harness.finish() }
        let (client, connection) = try harness.greetedClient()
        defer { close(client) }
        harness.queue.sync {
            harness.clients.touch(connection, batch: harness.batchNumber)
            connection.output.append(Array(repeating: UInt8(ascii: "x"), count: 2047) + [UInt8(ascii: "\n")])
            harness.clients.endTurn(connection, budgetUsed: false, skipped: false)
            #expect(connection.isReadingPaused, "2 KiB unsent, past 1 KiB")
            #expect(!connection.watchedFor.contains(.readable), "the poller no longer reports its input")
            harness.clients.flushTouched()  // The socket takes it: drained, carried to the next batch.
            #expect(harness.clients.takeCarriedOver(rotation: 64).map(\.id) == [connection.id])
            #expect(!connection.isReadingPaused && connection.watchedFor.contains(.readable), "reading again")
        }
        #expect(harness.readLines(client, count: 1).first?.count == 2047)
    }

    @Test("changes in flight in etcd: replies go out in request order, whichever the store answers first; the connection is not read until the last is answered")
    func repliesInRequestOrder() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let (client, connection) = try harness.greetedClient()
        defer { close(client) }
        harness.queue.sync {
            let batch = harness.batchNumber
            let first = harness.clients.hold(connection, changing: "a")
            #expect(connection.isChanging("a") && !connection.isChanging("b"))
            #expect(!connection.watchedFor.contains(.readable), "not read while a change is in flight")
            harness.clients.queueReply(Array("ERR busy 'x' is running\n".utf8), on: connection, batch: batch)
            let second = harness.clients.hold(connection, changing: "b")
            harness.clients.queueReply(Array("OK 2\n".utf8), on: connection, batch: batch)
            // The second change is decided first: nothing goes out, it waits for the first.
            harness.clients.answer(connection, ticket: second, with: Array("OK b\n".utf8), batch: batch)
            #expect(connection.output.byteCount == 0, "the first change's reply is still to come")
            // Lines left at the end of its turn: served in the next batch beside the change still in
            // etcd, but its socket is not read meanwhile.
            harness.clients.endTurn(connection, budgetUsed: true, skipped: false)
            #expect(harness.clients.takeCarriedOver(rotation: 64).map(\.id) == [connection.id])
            #expect(!connection.watchedFor.contains(.readable), "not read while a change is in flight")
            #expect(connection.isReplyInProgress && connection.isChanging("a") && !connection.isChanging("b"))
            harness.clients.answer(connection, ticket: first, with: Array("OK a\n".utf8), batch: batch)
            #expect(!connection.isReplyInProgress)
            harness.clients.flushTouched()
            #expect(harness.clients.takeCarriedOver(rotation: 64).map(\.id) == [connection.id], "served again in the next batch")
            #expect(connection.watchedFor.contains(.readable), "read again")
        }
        #expect(harness.readLines(client, count: 4) == ["OK a", "ERR busy 'x' is running", "OK b", "OK 2"])
    }

    @Test("draining (a stop that waits for etcd's answers): no connection is read, served or carried over, nor a new one accepted; the answers still go out, and the changes in flight are counted down to none")
    func draining() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let (held, heldConnection) = try harness.greetedClient()
        let (idle, idleConnection) = try harness.greetedClient()
        defer { close(held) }
        let ticket = harness.queue.sync {
            let ticket = harness.clients.hold(heldConnection, changing: "a")
            harness.clients.endTurn(idleConnection, budgetUsed: true, skipped: false)
            #expect(harness.clients.drain() == 1, "draining, one change waits for the store")
            #expect(!harness.clients.mayRead(idleConnection) && !harness.clients.mayServe(idleConnection) && !harness.clients.mayServe(heldConnection))
            #expect(!idleConnection.watchedFor.contains(.readable), "its input no longer wakes the daemon")
            #expect(!harness.clients.hasWorkLeft && harness.clients.takeCarriedOver(rotation: 64).isEmpty)
            return ticket
        }
        // A request sent now is not served, even when its connection's turn comes; a new client
        // is refused.
        #expect(write(idle, "PING\n", 5) == 5)
        let late = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(late) }
        #expect(NotifySocket.withAddress(harness.socketPath) { Glibc.connect(late, $0, $1) } != 0, "the listening socket is closed")
        harness.queue.sync {
            harness.clients.continueWork(rotation: 64)
            harness.clients.turn(idleConnection)
            harness.clients.answer(heldConnection, ticket: ticket, with: Array("OK a\n".utf8), batch: harness.batchNumber)
            #expect(harness.clients.drain() == 0)
            harness.clients.flushTouched()
            #expect(harness.lines[idleConnection.id] == nil, "the PING sent while draining was not served")
        }
        #expect(harness.readLines(held, count: 1) == ["OK a"])
        // A client that hangs up while draining is closed (its hang-up would wake every batch).
        close(idle)
        #expect(harness.waitOnQueue { idleConnection.isClosed }, "closed on its hang-up")
    }

    @Test("2,000 connections closed at once are all forgotten, and their sockets closed")
    func manyClosedAtOnce() throws {
        // Two descriptors a connection (the test's end and the table's) in this one process.
        var limit = rlimit()
        try #require(getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0)
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)  // Checked just below.
        }
        try #require(getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0)
        let count = min(2000, (Int(limit.rlim_cur) - 1000) / 2)
        try #require(count >= 200, "the descriptor limit (\(limit.rlim_cur)) leaves room for too few connections")
        let harness = try TableHarness()
        defer { harness.finish() }
        var clientSockets: [Int32] = []
        for _ in 0..<count {
            clientSockets.append(try harness.connect())
        }
        #expect(harness.waitOnQueue { harness.clients.figures.connections == count })
        // The table's sockets, by inode: unique while open, whatever else this process opens.
        let tableSockets: Set<UInt64> = harness.queue.sync {
            Set(harness.clients.connections.values.map { connection in
                var info = stat()
                return fstat(connection.descriptor, &info) == 0 ? UInt64(info.st_ino) : 0
            })
        }
        #expect(tableSockets.count == count && !tableSockets.contains(0))
        for fd in clientSockets { close(fd) }
        #expect(harness.waitOnQueue { harness.clients.figures.connections == 0 }, "\(harness.queue.sync { harness.clients.figures.connections }) still open")
        harness.clients.waitUntilDescriptorsClosed()  // Closed off the queue, by the closer's thread.
        var stillOpen = 0
        for entry in try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
            guard let fd = Int32(entry) else { continue }
            var info = stat()
            if fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFSOCK, tableSockets.contains(UInt64(info.st_ino)) { stillOpen += 1 }
        }
        #expect(stillOpen == 0, "\(stillOpen) of the table's sockets still open")
    }

    @Test("a client that stops sending: the poller is told at the flush, which closes it once its output is written; one whose output cannot drain stays, watched for room only")
    func stopReadingTellsThePollerAtTheFlush() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let (client, connection) = try harness.greetedClient()
        defer { close(client) }
        harness.queue.sync {
            harness.clients.touch(connection, batch: harness.batchNumber)
            connection.output.append(Array("OK bye\n".utf8))
            connection.stopReading()
            #expect(connection.watchedFor.contains(.readable), "the poller is told at the flush, not before")
            harness.clients.flushTouched()
            #expect(connection.isClosed, "its output was written, so the flush closed it")
        }
        #expect(harness.readLines(client, count: 2) == ["OK bye"], "the reply, then the end")

        let (stuck, held) = try harness.greetedClient()
        defer { close(stuck) }
        harness.queue.sync {
            harness.clients.touch(held, batch: harness.batchNumber)
            // More than a Unix socket's buffer takes, from a client that never reads.
            held.output.append(Array(repeating: UInt8(ascii: "x"), count: 8 << 20) + [UInt8(ascii: "\n")])
            held.stopReading()
            harness.clients.flushTouched()
            #expect(!held.isClosed, "output is still to be written")
            #expect(held.watchedFor == [.writable], "watched for room only: its input is no longer read")
        }
    }

    @Test("a socket found full is not written to again until the poller reports room; then all that was queued meanwhile arrives, in order")
    func writesWaitForRoom() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let (client, connection) = try harness.greetedClient()
        defer { close(client) }
        let padding = String(repeating: "x", count: 1000)
        let lines = (0..<6000).map { "EVENT \($0) tick n\($0) \(padding)" }
        harness.queue.sync {
            harness.clients.touch(connection, batch: harness.batchNumber)
            for line in lines[..<5000] { connection.output.append(Array((line + "\n").utf8)) }
            harness.clients.flushTouched()
            #expect(!connection.mayHaveRoom, "5 MB is more than the socket takes")
            let waiting = connection.output.byteCount
            harness.clients.touch(connection, batch: harness.batchNumber)
            for line in lines[5000...] { connection.output.append(Array((line + "\n").utf8)) }
            harness.clients.flushTouched()
            #expect(connection.output.byteCount == waiting + lines[5000...].reduce(0) { $0 + $1.utf8.count + 1 }, "no write until room is reported")
        }
        // The client reads: the poller reports room, and the rest follows.
        #expect(harness.readLines(client, count: lines.count) == lines)
    }

    @Test("at the connection limit a hung-up client's descriptor is closed at once, not handed to the closer: descriptors waiting there never take an accept's")
    func closesInlineAtTheLimit() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let (first, firstConnection) = try harness.greetedClient()
        defer { close(first) }
        let (second, secondConnection) = try harness.greetedClient()
        defer { close(second) }
        harness.queue.sync {
            // As a tight descriptor limit leaves it: room for these two clients and no more.
            harness.clients.connectionLimit = 1
            harness.clients.close(firstConnection)
            var byte: UInt8 = 0
            #expect(recv(first, &byte, 1, Int32(MSG_DONTWAIT)) == 0, "closed before close(_:) returned")
            harness.clients.connectionLimit = 10
            harness.clients.close(secondConnection)
        }
        harness.clients.waitUntilDescriptorsClosed()
        var byte: UInt8 = 0
        #expect(recv(second, &byte, 1, Int32(MSG_DONTWAIT)) == 0, "closed by the closer")
    }

    @Test("the closer closes every descriptor handed to it, bursts and single ones alike: each peer then reads the end")
    func closerClosesEverything() throws {
        let closer = DescriptorCloser()
        var peers: [Int32] = []
        for round in 0..<20 {
            // A burst of 50, then one alone.
            for _ in 0..<(round % 2 == 0 ? 50 : 1) {
                var pair: [Int32] = [0, 0]
                try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
                peers.append(pair[1])
                closer.close(pair[0])
            }
        }
        closer.waitUntilClosed()
        #expect(closer.outstanding == 0, "every descriptor handed over is counted until it is closed")
        var ended = 0
        for peer in peers {
            var byte: UInt8 = 0
            if recv(peer, &byte, 1, Int32(MSG_DONTWAIT)) == 0 { ended += 1 }
            close(peer)
        }
        #expect(ended == peers.count, "\(peers.count - ended) of \(peers.count) descriptors still open")
    }

    @Test("a closer with no room left closes what it is handed at once, on the caller's thread")
    func closerFullClosesInline() throws {
        let closer = DescriptorCloser(maximumWaiting: 0)
        var pair: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        defer { close(pair[1]) }
        closer.close(pair[0])
        var byte: UInt8 = 0
        #expect(recv(pair[1], &byte, 1, Int32(MSG_DONTWAIT)) == 0, "closed before close(_:) returned")
    }

    func event(_ sequence: UInt64, _ kind: EventKind, _ name: String, remaining: Int64 = 5000) -> CountdownEvent {
        CountdownEvent(sequence: sequence, kind: kind, name: name, remainingMilliseconds: remaining, totalMilliseconds: 5000)
    }

    @Test("a connection that followed 10,000 names leaves a slice of 4,096 a batch: it gets no event meanwhile, its ticks stop as its names go, and the same connection following one of them again keeps it")
    func manyNamesRetiredInSlices() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let (client, connection) = try harness.greetedClient()
        defer { close(client) }
        var ticking: [String: Int] = [:]
        let names = (0..<10_000).map { "n\($0)" }
        harness.queue.sync {
            harness.fanOut.tickInterest.key = { name, on in ticking[name, default: 0] += on ? 1 : -1 }
            #expect(throws: Never.self) { try harness.fanOut.subscribe(connection, to: names, kinds: .all) }
            #expect(ticking.count == 10_000 && ticking.values.allSatisfy { $0 == 1 })
            harness.fanOut.unsubscribe(connection)
            #expect(harness.fanOut.hasWorkLeft && harness.fanOut.subscriberCount == 0)
            // Follows one name again, as a new subscriber, before the old one's names are out.
            #expect(throws: Never.self) { try harness.fanOut.subscribe(connection, to: ["n9999"], kinds: .lifecycle) }
            let queued = connection.output.byteCount
            harness.fanOut.deliver([event(1, .started, "n5"), event(2, .started, "n9999")], batch: harness.batchNumber)
            #expect(connection.output.byteCount > queued, "the new subscription's event")
            let afterOne = connection.output.byteCount
            harness.fanOut.deliver([event(3, .started, "n5")], batch: harness.batchNumber)
            #expect(connection.output.byteCount == afterOne, "nothing for the names it left")
            var batches = 0
            while harness.fanOut.hasWorkLeft {
                harness.fanOut.continueWork()
                batches += 1
                if batches == 1 { #expect(ticking.values.filter { $0 == 0 }.count == 4_096, "one slice a batch") }
            }
            #expect(batches == 3)
            #expect(ticking.values.allSatisfy { $0 == 0 }, "every name's tick interest given back")
            harness.fanOut.deliver([event(4, .done, "n9999")], batch: harness.batchNumber)
            #expect(connection.output.byteCount > afterOne, "the name followed again is still followed")
        }
    }

    @Test("subscribers that follow everything share one stream per delivery: each gets every line in order; one held behind gets the lifecycle lines alone; one with some kinds is served event by event")
    func sharedStreams() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        var clients: [Int32] = []
        defer { for client in clients { close(client) } }
        for _ in 0..<4 {
            let client = try harness.connect()
            clients.append(client)
            _ = harness.readLines(client, count: 1)
        }
        #expect(harness.waitOnQueue { harness.clients.figures.connections == 4 })
        let events = [
            event(1, .started, "tea"), event(2, .tick, "tea", remaining: 4000), event(3, .done, "tea", remaining: 0),
        ] + (0..<30).map { event(UInt64(4 + $0), .tick, "n\($0)", remaining: 3000) }
        let lines = events.map { event in
            var line: [UInt8] = []
            WireEncoder.appendEvent(event, to: &line)
            return String(decoding: line.dropLast(), as: UTF8.self)
        }
        harness.queue.sync {
            let connections = harness.clients.connections.values.sorted { $0.id < $1.id }
            let (first, second, held, someKinds) = (connections[0], connections[1], connections[2], connections[3])
            let doneAndTicks = EventKindSet([EventKindSet(.done), EventKindSet(.tick)])
            for connection in [first, second, held] {
                #expect(throws: Never.self) { try harness.fanOut.subscribe(connection, to: [], kinds: .all) }
            }
            #expect(throws: Never.self) { try harness.fanOut.subscribe(someKinds, to: [], kinds: doneAndTicks) }
            #expect(harness.fanOut.tickGroupMemberCount == 4, "three on the stream and one event by event take ticks")
            harness.fanOut.holdTicks(of: held)  // As a delivery leaves one found behind.
            let queued = harness.fanOut.deliver(events, batch: harness.batchNumber)
            #expect(queued == 2 * events.count + 2 + (events.count - 1), "each line counted once per subscriber it went to")
            // A second, small delivery before anything is written: the first's shared lines stay as they were.
            harness.fanOut.deliver([event(40, .tick, "tea", remaining: 3000)], batch: harness.batchNumber)
            harness.clients.flushTouched()
        }
        var last: [UInt8] = []
        WireEncoder.appendEvent(event(40, .tick, "tea", remaining: 3000), to: &last)
        let lastLine = String(decoding: last.dropLast(), as: UTF8.self)
        #expect(harness.readLines(clients[0], count: lines.count + 1) == lines + [lastLine])
        #expect(harness.readLines(clients[1], count: lines.count + 1) == lines + [lastLine])
        #expect(harness.readLines(clients[2], count: 2) == [lines[0], lines[2]], "held: started and done, no tick")
        #expect(harness.readLines(clients[3], count: lines.count) == Array(lines.dropFirst()) + [lastLine], "ticks and done, event by event")
    }

    @Test("a subscriber that reads nothing holds about what its queue counts: after one large delivery, each later shared one is a buffer of its own size, not of the large one's capacity")
    func sharedStreamBuffersSizedToTheirDelivery() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let (client, connection) = try harness.greetedClient()
        defer { close(client) }
        let (queued, retained): (Int, Int) = harness.queue.sync {
            #expect(throws: Never.self) { try harness.fanOut.subscribe(connection, to: [], kinds: .all) }
            // About 200 KB in one delivery, then 50 deliveries of about 800 bytes (each shared,
            // being 512 bytes or more); nothing is written meanwhile.
            harness.fanOut.deliver((0..<5000).map { event(UInt64($0), .started, "large\($0)") }, batch: harness.batchNumber)
            for round in 0..<50 {
                let events = (0..<20).map { event(UInt64(10_000 + round * 20 + $0), .started, "small\($0)") }
                harness.fanOut.deliver(events, batch: harness.batchNumber)
            }
            return (connection.output.byteCount, connection.output.retainedBytes)
        }
        #expect(queued > 200_000)
        #expect(retained < 2 * queued + 64 * 1024, "\(retained) bytes held for \(queued) queued")
    }

    @Test("a delivery whose ticks would pass half the hard limit: a subscriber on the stream takes them up to there, as one served event by event does, then is held")
    func streamTicksUpToHalfTheLimit() throws {
        let harness = try TableHarness { $0.outputHardLimit = 64 * 1024 }
        defer { harness.finish() }
        let (plain, plainConnection) = try harness.greetedClient()
        defer { close(plain) }
        let (byKind, byKindConnection) = try harness.greetedClient()
        defer { close(byKind) }
        let ticks = (0..<2000).map { event(UInt64($0 + 1), .tick, "n\($0)", remaining: 3000) }  // About 80 KB.
        harness.queue.sync {
            #expect(throws: Never.self) { try harness.fanOut.subscribe(plainConnection, to: [], kinds: .all) }
            let allButSnapshots = EventKindSet(EventKind.allCases.filter { $0 != .snapshot }.map { EventKindSet($0) })
            #expect(throws: Never.self) { try harness.fanOut.subscribe(byKindConnection, to: [], kinds: allButSnapshots) }
            harness.fanOut.deliver(ticks, batch: harness.batchNumber)
            #expect(harness.fanOut.areTicksHeld(of: plainConnection) && harness.fanOut.areTicksHeld(of: byKindConnection), "both held once past half the limit")
            #expect(plainConnection.output.byteCount >= 32 * 1024 - 100, "ticks up to half the limit: \(plainConnection.output.byteCount) bytes")
            #expect(plainConnection.output.byteCount == byKindConnection.output.byteCount, "the same ticks as event by event")
        }
    }

    @Test("a subscriber on the stream found behind during a delivery is held there and takes that delivery's lifecycle lines alone")
    func streamHeldDuringDelivery() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let (client, connection) = try harness.greetedClient()
        defer { close(client) }
        let events = [event(1, .started, "tea"), event(2, .tick, "tea", remaining: 4000), event(3, .done, "tea", remaining: 0)]
        let lines = events.map { event in
            var line: [UInt8] = []
            WireEncoder.appendEvent(event, to: &line)
            return String(decoding: line.dropLast(), as: UTF8.self)
        }
        harness.queue.sync {
            #expect(throws: Never.self) { try harness.fanOut.subscribe(connection, to: [], kinds: .all) }
            connection.unsentAfterLastWrite = 1 << 20  // As its last write left it: far behind.
            #expect(harness.fanOut.deliver(events, batch: harness.batchNumber) == 2)
            #expect(harness.fanOut.areTicksHeld(of: connection) && harness.fanOut.heldCount == 1)
            connection.unsentAfterLastWrite = 0
            harness.clients.flushTouched()
        }
        #expect(harness.readLines(client, count: 2) == [lines[0], lines[2]])
    }

    @Test("the fan-out sends each subscriber the kinds and names it asked for, in order")
    func kindsAndNames() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let doneOnly = try harness.connect(), teaOnly = try harness.connect()
        defer { close(doneOnly); close(teaOnly) }
        _ = harness.readLines(doneOnly, count: 1)
        _ = harness.readLines(teaOnly, count: 1)
        #expect(harness.waitOnQueue { harness.clients.figures.connections == 2 })
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

    @Test("a prefix follows the keys that start with it, in its namespace, present and future; a connection takes one prefix, never names beside it")
    func prefixes() throws {
        let harness = try TableHarness()
        defer { harness.finish() }
        let otp = try harness.connect(), users = try harness.connect()
        defer { close(otp); close(users) }
        _ = harness.readLines(otp, count: 1)
        _ = harness.readLines(users, count: 1)
        #expect(harness.waitOnQueue { harness.clients.figures.connections == 2 })
        harness.queue.sync {
            let connections = harness.clients.connections.values.sorted { $0.id < $1.id }
            #expect(throws: Never.self) {
                try harness.fanOut.subscribe(connections[0], toPrefix: "otp:", kinds: .all)
                try harness.fanOut.subscribe(connections[1], toPrefix: "1000/otp:", kinds: .lifecycle)
                try harness.fanOut.subscribe(connections[0], toPrefix: "otp:", kinds: .all)  // The same again: no change.
            }
            #expect(throws: ProtocolError.self) { try harness.fanOut.subscribe(connections[0], toPrefix: "sms:", kinds: .all) }
            #expect(throws: ProtocolError.self) { try harness.fanOut.subscribe(connections[0], to: ["tea"], kinds: .all) }
            #expect(harness.fanOut.subscriberCount == 2 && harness.fanOut.subscriptionCount(connections[0]) == 1)
            func owned(_ sequence: UInt64, _ kind: EventKind, _ key: String) -> CountdownEvent {
                var made = event(sequence, kind, key)
                made.owner = CountdownAddress.split(key).owner
                return made
            }
            harness.fanOut.deliver(
                [owned(1, .started, "otp:+49"), owned(2, .started, "1000/otp:+49"), owned(3, .started, "otp"), owned(3, .tick, "otp:+49"), owned(3, .tick, "1000/otp:+49"), owned(4, .done, "1000/otp:+49")],
                batch: harness.batchNumber
            )
            harness.clients.flushTouched()
        }
        #expect(harness.readLines(otp, count: 2) == ["EVENT 1 started otp:+49 5000 5000", "EVENT 3 tick otp:+49 5000 5000"])
        #expect(harness.readLines(users, count: 2) == ["EVENT 2 started 1000/otp:+49 5000 5000", "EVENT 4 done 1000/otp:+49 5000 5000"])
    }

    @Test("a subscriber that never reads: past the tick threshold it is sent no ticks; past the hard limit on lifecycle events it gets ERR overflow and is closed")
    func neverReads() throws {
        let harness = try TableHarness {
            $0.tickHoldThreshold = 4096
            $0.outputHardLimit = 256 * 1024
            // Long enough that the client below reads its ERR overflow however slow it is; it
            // is closed as soon as that is read.
            $0.overflowGraceMilliseconds = 600_000
        }
        defer { harness.finish() }
        let stuck = try harness.connect()
        defer { close(stuck) }
        #expect(harness.waitOnQueue { harness.clients.figures.connections == 1 })
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
            #expect(connection.output.byteCount < 4096 + 100, "no tick is queued past the threshold: \(connection.output.byteCount) bytes wait")
            #expect(harness.fanOut.areTicksHeld(of: connection) && harness.fanOut.heldCount == 1, "held")
            #expect(harness.fanOut.tickGroupMemberCount == 0, "out of the group ticks are delivered to: it costs nothing per tick")
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
        #expect(harness.waitOnQueue { harness.clients.figures.connections == 0 }, "closed")
    }

    @Test("a burst of 10,000 ticks in one batch is no reason to hold a subscriber that reads: all of them reach it")
    func burstIsNotBehind() throws {
        let harness = try TableHarness { $0.tickHoldThreshold = 4096 }
        defer { harness.finish() }
        let reader = try harness.connect()
        defer { close(reader) }
        _ = harness.readLines(reader, count: 1)
        #expect(harness.waitOnQueue { harness.clients.figures.connections == 1 })
        let connection = try #require(harness.newestConnection)
        harness.queue.sync {
            #expect(throws: Never.self) { try harness.fanOut.subscribe(connection, to: [], kinds: .all) }
            harness.fanOut.deliver((0..<10_000).map { event(1, .tick, "c\($0)", remaining: 1000) }, batch: harness.batchNumber)
            harness.clients.flushTouched()
        }
        let lines = harness.readLines(reader, count: 10_000)
        #expect(lines.count == 10_000 && lines.last == "EVENT 1 tick c9999 1000 5000")
        #expect(harness.waitOnQueue { !harness.fanOut.areTicksHeld(of: connection) && connection.output.isEmpty })
    }

    @Test("ticks alone never get a subscriber disconnected: a burst past half the hard limit in one batch holds it instead")
    func burstPastHalfTheLimit() throws {
        let harness = try TableHarness {
            $0.tickHoldThreshold = 4096
            $0.outputHardLimit = 256 * 1024
        }
        defer { harness.finish() }
        let client = try harness.connect()
        defer { close(client) }
        #expect(harness.waitOnQueue { harness.clients.figures.connections == 1 })
        let connection = try #require(harness.newestConnection)
        harness.queue.sync {
            #expect(throws: Never.self) { try harness.fanOut.subscribe(connection, to: [], kinds: .all) }
            harness.fanOut.deliver((0..<20_000).map { event(1, .tick, "c\($0)", remaining: 1000) }, batch: harness.batchNumber)
            #expect(harness.fanOut.areTicksHeld(of: connection), "held once half the hard limit is queued")
            #expect(connection.output.byteCount <= 128 * 1024 + 100)
            #expect(harness.fanOut.subscriberCount == 1, "not disconnected")
            harness.clients.flushTouched()
        }
    }

    @Test("a held subscriber that reads again gets ticks again, and every lifecycle event it was sent meanwhile, in order")
    func heldSubscriberCatchesUp() throws {
        let harness = try TableHarness { $0.tickHoldThreshold = 4096 }
        defer { harness.finish() }
        let slow = try harness.connect()
        defer { close(slow) }
        #expect(harness.waitOnQueue { harness.clients.figures.connections == 1 })
        let connection = try #require(harness.newestConnection)
        var sequence: UInt64 = 1
        harness.queue.sync {
            #expect(throws: Never.self) { try harness.fanOut.subscribe(connection, to: [], kinds: .all) }
            // Ticks until it is held: the socket's buffer fills, then the threshold is passed.
            while !harness.fanOut.areTicksHeld(of: connection) && sequence < 1_000_000 {
                harness.fanOut.deliver([event(sequence, .tick, "tea", remaining: Int64(sequence))], batch: harness.batchNumber)
                harness.clients.flushTouched()
                sequence += 1
            }
            #expect(harness.fanOut.areTicksHeld(of: connection))
            harness.fanOut.deliver([event(sequence, .tick, "tea", remaining: 7), event(sequence + 1, .started, "egg")], batch: harness.batchNumber)
            harness.clients.flushTouched()
        }
        let held = sequence
        // Read everything: the flush on writability drains it and the fan-out takes it back.
        var text = ""
        var buffer = [UInt8](repeating: 0, count: 65536)
        #expect(harness.waitOnQueue {
            while true {
                let got = buffer.withUnsafeMutableBytes { recv(slow, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                guard got > 0 else { break }
                text += String(decoding: buffer[0..<got], as: UTF8.self)
            }
            return !harness.fanOut.areTicksHeld(of: connection)
        }, "ticks resume once its output drained")
        // All of it was sent, so the rest is in the socket's buffer now.
        while true {
            let got = buffer.withUnsafeMutableBytes { recv(slow, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            guard got > 0 else { break }
            text += String(decoding: buffer[0..<got], as: UTF8.self)
        }
        #expect(text.hasSuffix("\n"))
        harness.queue.sync {
            harness.fanOut.deliver([event(held + 2, .tick, "tea", remaining: 3)], batch: harness.batchNumber)
            harness.clients.flushTouched()
        }
        let lines = harness.readLines(slow, count: 1)
        let before = text.split(separator: "\n").map(String.init)
        #expect(!before.contains { $0.hasPrefix("EVENT \(held) tick") }, "the tick sent while held was not queued")
        #expect(before.last == "EVENT \(held + 1) started egg 5000 5000", "the lifecycle event sent while held came, last: \(before.suffix(2))")
        #expect(lines == ["EVENT \(held + 2) tick tea 3 5000"])
        #expect(harness.fanOut.heldCount == 0)
        harness.queue.sync { #expect(harness.fanOut.tickGroupMemberCount == 1, "back in the group") }
    }

    @Test("a client disconnected for overflow that never reads is closed when its grace ends, not before")
    func overflowGraceEnds() throws {
        let harness = try TableHarness {
            $0.tickHoldThreshold = 4096
            $0.outputHardLimit = 64 * 1024
            $0.overflowGraceMilliseconds = 5_000
        }
        defer { harness.finish() }
        let stuck = try harness.connect()
        defer { close(stuck) }
        #expect(harness.waitOnQueue { harness.clients.figures.connections == 1 })
        let connection = try #require(harness.newestConnection)
        let before = SystemClock.now()
        harness.queue.sync {
            #expect(throws: Never.self) { try harness.fanOut.subscribe(connection, to: [], kinds: .all) }
            var sequence: UInt64 = 1
            while harness.fanOut.subscriberCount == 1 && sequence < 100_000 {
                harness.fanOut.deliver([event(sequence, .started, "c\(sequence)")], batch: harness.batchNumber)
                harness.clients.flushTouched()
                sequence += 1
            }
            #expect(harness.fanOut.subscriberCount == 0, "past 64 KiB it is disconnected")
        }
        let after = SystemClock.now()
        let deadline = try #require(harness.queue.sync { harness.later.nextDeadline }, "the end of the grace is scheduled")
        #expect(deadline >= before.advanced(byNanoseconds: 5_000_000_000) && deadline <= after.advanced(byNanoseconds: 5_000_000_000))
        #expect(harness.queue.sync { harness.later.runDue(now: deadline.advanced(byNanoseconds: -1)) } == 0)
        #expect(harness.queue.sync { harness.clients.figures.connections } == 1, "still there during its grace, so that it can read why")
        #expect(harness.queue.sync { harness.later.runDue(now: deadline) } == 1)
        #expect(harness.queue.sync { harness.clients.figures.connections } == 0, "closed when the grace ends, though it never read")
    }
}

extension ClientTableTests {
    /// Two clients of uid nobody's: each prints the first `count` lines it receives, after its
    /// greeting, joined by `|`, once told to read. Everything was written before, so the read
    /// never waits on the daemon; the timeout only ends a failing run (lines missing) instead of
    /// hanging it.
    static let nobodyStreamClients = """
        import socket, sys
        path, count = sys.argv[1], int(sys.argv[2])
        conns = []
        for _ in range(2):
            s = socket.socket(socket.AF_UNIX); s.connect(path); conns.append(s)
        print("ready", flush=True)
        sys.stdin.readline()
        for s in conns:
            s.settimeout(60)
            data = b""
            while data.count(b"\\n") < count + 1:
                try:
                    chunk = s.recv(1 << 16)
                except socket.timeout:
                    break
                if not chunk: break
                data += chunk
            print("|".join(l.decode() for l in data.split(b"\\n")[1:count + 1]), flush=True)
        """

    @Test(
        "a user's subscribers that follow all of theirs share that user's stream, kept between deliveries: two deliveries before anything is written arrive whole and in order, named as the user writes them, and root's own events do not reach them",
        .enabled(if: getuid() == 0, "needs root to connect as another uid (setpriv --reuid=nobody)"),
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") && FileManager.default.isExecutableFile(atPath: "/usr/bin/python3"), "needs setpriv and python3")
    )
    func ownerStreamsKeptBetweenDeliveries() throws {
        let harness = try TableHarness(socketMode: 0o666)
        defer { harness.finish() }
        func owned(_ sequence: UInt64, _ kind: EventKind, _ name: String, owner: UInt32) -> CountdownEvent {
            var made = event(sequence, kind, CountdownAddress.key(owner: owner, name: name))
            made.owner = owner
            return made
        }
        let first = [owned(1, .started, "tea", owner: 65534), owned(2, .tick, "tea", owner: 65534), owned(3, .started, "root-only", owner: 0)]
            + (0..<20).map { owned(UInt64(4 + $0), .tick, "n\($0)", owner: 65534) }
        let second = [owned(30, .done, "tea", owner: 65534)]
        let expected = (first + second).filter { $0.owner == 65534 }.map { event in
            var line: [UInt8] = []
            WireEncoder.appendEvent(event, name: CountdownAddress.split(event.name).name, seenBy: event.owner, to: &line)
            return String(decoding: line.dropLast(), as: UTF8.self)
        }
        let script = try NobodyScript(Self.nobodyStreamClients, arguments: [harness.socketPath, "\(expected.count)"])
        try #require(script.readLine() == "ready")
        try #require(harness.waitOnQueue { harness.clients.figures.connections == 2 })
        harness.queue.sync {
            for connection in harness.clients.connections.values {
                #expect(throws: Never.self) { try harness.fanOut.subscribe(connection, to: [], kinds: .all) }
            }
            #expect(harness.fanOut.tickGroupMemberCount == 2, "both on their user's stream")
            let queued = harness.fanOut.deliver(first, batch: harness.batchNumber)
            #expect(queued == 2 * (first.count - 1), "root's own event goes to neither")
            harness.fanOut.deliver(second, batch: harness.batchNumber)
            harness.clients.flushTouched()
        }
        script.send("go")
        let joined = expected.joined(separator: "|")
        #expect(script.readLine() == joined)
        #expect(script.readLine() == joined)
        script.waitUntilExit()
    }

    /// Three connections of uid 65534 that read nothing until told to, from a python3 run under
    /// setpriv: it prints `ready`, waits for a line on its stdin, then reads each connection for
    /// a second and prints, per connection, the bytes it got and its last line's first 200 bytes.
    static let nobodyClients = """
        import socket, sys
        conns = []
        for _ in range(3):
            s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); conns.append(s)
        print("ready", flush=True)
        sys.stdin.readline()
        for s in conns:
            s.settimeout(1.0)
            data = b""
            try:
                while True:
                    chunk = s.recv(1 << 20)
                    if not chunk: break
                    data += chunk
            except socket.timeout:
                pass
            lines = data.rstrip(b"\\n").split(b"\\n")
            print(len(data), lines[-1][:200].decode(errors="replace"), flush=True)
        """

    @Test(
        "one user's clients together never hold more than --output-limit-per-user, even within a batch: the furthest behind gets ERR overflow naming the limit as the sum would pass it; the others, and root's, keep all their output",
        .enabled(if: getuid() == 0, "needs root to connect as another uid (setpriv --reuid=nobody)"),
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") && FileManager.default.isExecutableFile(atPath: "/usr/bin/python3"), "needs setpriv and python3")
    )
    func outputLimitPerUser() throws {
        let harness = try TableHarness(socketMode: 0o666) {
            $0.outputLimitPerUser = 2 << 20
        }
        defer { harness.finish() }
        let root = try harness.connect()
        defer { close(root) }
        let script = try NobodyScript(Self.nobodyClients, arguments: [harness.socketPath])
        #expect(script.readLine() == "ready")
        #expect(harness.waitOnQueue { harness.clients.figures.connections == 4 })
        let line = Array(repeating: UInt8(ascii: "x"), count: 1023) + [UInt8(ascii: "\n")]
        // Queued as the fan-out queues events, line by line within one batch: the user's sum is
        // checked at every line, never only at the flush.
        var mostQueued = 0
        func queue(_ kib: Int, on connection: Connection) {
            for _ in 0..<kib {
                harness.clients.send(.event(line), to: connection, batch: harness.batchNumber)
                mostQueued = max(mostQueued, harness.clients.queuedOutput(of: 65534))
            }
        }
        let (nobody, unsentAfter): ([Connection], Int) = harness.queue.sync {
            let nobody = harness.clients.connections.values.filter { $0.peerUID == 65534 }.sorted { $0.id < $1.id }
            let mine = harness.clients.connections.values.filter { $0.peerUID == 0 }
            // 1.5 MiB, 1 MiB and 0.25 MiB for nobody (beyond what their sockets take, 2.75 MiB
            // together, past 2 MiB); 3 MiB for root, who is not limited.
            for (connection, kib) in zip(nobody, [1536, 1024, 256]) { queue(kib, on: connection) }
            for connection in mine { queue(3072, on: connection) }
            harness.clients.flushTouched()
            return (nobody, harness.clients.queuedOutput(of: 65534))
        }
        try #require(nobody.count == 3)
        #expect(mostQueued > (2 << 20) - 64 * 1024, "the user came to its limit: \(mostQueued) bytes at most")
        #expect(mostQueued <= 2 << 20, "never past the limit, not even within the batch: \(mostQueued) bytes at most")
        #expect(unsentAfter <= 2 << 20, "back within the limit: \(unsentAfter) bytes")
        let peak = harness.queue.sync { harness.clients.figures.userOutputPeak }
        #expect(peak >= mostQueued && peak <= 2 << 20, "STATS' user_output_peak_bytes is the highest sum, within the limit: \(peak), where \(mostQueued) was seen")
        #expect(harness.queue.sync { nobody.map(\.isClosing) } == [true, false, false], "only the furthest behind is cut off")
        script.send("go")
        let results = (0..<3).map { _ in script.readLine() }
        #expect(results[0].contains("ERR overflow uid 65534's clients together had more than 2097152 bytes of output waiting (--output-limit-per-user)"), "\(results[0])")
        // Each got its greeting and every byte queued for it.
        let sizes = results.map { Int($0.split(separator: " ").first ?? "") ?? 0 }
        #expect(sizes[1] > 1024 * 1024 && sizes[1] < 1024 * 1024 + 100 && sizes[2] > 256 * 1024 && sizes[2] < 256 * 1024 + 100, "\(results)")
        #expect(results[1].hasSuffix("xxxx") && results[2].hasSuffix("xxxx"), "\(results)")
        // Root's 3 MiB arrive whole: the poller writes more as the socket is read.
        var received = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while received < 3 << 20 {
            let got = buffer.withUnsafeMutableBytes { recv(root, $0.baseAddress, $0.count, 0) }
            guard got > 0 else { break }
            received += got
        }
        #expect(received >= 3 << 20, "root got \(received) bytes")
        script.waitUntilExit()
    }
}
