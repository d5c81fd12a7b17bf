import CountdownClient
import CountdownCore
import Foundation
import Testing

extension Integration {
    @Suite("Big replies in slices, filters, event kinds")
    struct ListingTests {
        /// Starts `count` countdowns `c0`… of `duration`, pipelined.
        private func startMany(_ count: Int, duration: String = "1h", on connection: CountdownConnection) throws {
            var offset = 0
            while offset < count {
                let end = min(count, offset + 2000)
                try connection.send((offset..<end).map { "START c\($0) \(duration)\n" }.joined())
                for _ in offset..<end {
                    #expect(try connection.readReply().countdown?.state == .running)
                }
                offset = end
            }
        }

        @Test("a LIST of 30,000 is produced in slices while its reader is slow; others are served meanwhile; it shows the state as of the LIST")
        func listInSlicesUnderMutation() throws {
            let daemon = try DaemonProcess()
            let control = try daemon.connect()
            try startMany(30_000, on: control)
            let reader = try daemon.connect()
            try reader.send("LIST\n")  // And not read for now: the daemon keeps the listing going slice by slice.
            try waitUntil(timeout: 60) { (try? statValue("listings_in_progress", on: control)) == 1 }
            // Meanwhile: other clients' changes and reads are answered.
            for index in [0, 1, 29_999] {
                #expect(try control.request("CANCEL c\(index)").countdown?.state == .cancelled)
            }
            #expect(try control.request("START new 1h").countdown?.state == .running)
            // The reader has not read: its LIST (2.4 MB) cannot be finished, yet a bystander's PING
            // is answered. Order, not time, shows that it waited for no listing.
            #expect(try control.request("PING").outcome == .ok("pong"))
            #expect(try statValue("listings_in_progress", on: control) == 1, "the LIST is still unfinished: it was not produced whole")
            // The reader reads now: every countdown as it was when its LIST was handled.
            let listed = try reader.readReply(timeout: 30)
            #expect(listed.outcome == .ok("30000"))
            #expect(listed.countdowns.count == 30_000)
            #expect(Set(listed.countdowns.map(\.name)).count == 30_000, "no countdown twice")
            #expect(!listed.countdowns.contains { $0.name == "new" }, "started after the LIST")
            #expect(listed.countdowns.allSatisfy { $0.state == .running }, "cancelled after the LIST")
            #expect(try statValue("listings_in_progress", on: control) == 0)
            // The reader's next request is answered after its LIST, and sees the changes.
            let again = try reader.request("LIST STATE cancelled")
            #expect(again.countdowns.map(\.name).sorted() == ["c0", "c1", "c29999"])
        }

        @Test("a LIST on a subscribed connection: events made while it is produced come between its slices as whole lines, in order; its COUNTDOWN lines and OK are all there, and the client library sets the events aside")
        func eventsBetweenSlices() throws {
            let daemon = try DaemonProcess()
            let control = try daemon.connect()
            try startMany(20_000, on: control)
            let reader = try daemon.connect()
            #expect(try reader.request("SUBSCRIBE EVENTS lifecycle").outcome == .ok("subscribed all seq 20000 events lifecycle"))
            try reader.send("LIST\nPING\n")  // Not read for now: the listing stalls unfinished.
            try waitUntil(timeout: 60) { (try? statValue("listings_in_progress", on: control)) == 1 }
            #expect(try control.request("START new 1h").countdown?.state == .running)
            #expect(try control.request("CANCEL c0").countdown?.state == .cancelled)
            var countdowns = 0
            var eventsWithin: [String] = []
            var final: String?
            while final == nil, let line = try reader.readLine(timeout: 30) {
                if line.hasPrefix("COUNTDOWN ") {
                    countdowns += 1
                } else if line.hasPrefix("EVENT ") {
                    #expect(countdowns > 0, "an event before the block's first line: \(line)")
                    eventsWithin.append(line)
                } else {
                    final = line
                }
            }
            #expect(final == "OK 20000" && countdowns == 20_000, "\(countdowns) lines, then \(final ?? "nothing")")
            #expect(eventsWithin.count == 2, "\(eventsWithin)")
            #expect(eventsWithin.first?.hasPrefix("EVENT 20001 started new ") == true && eventsWithin.last?.hasPrefix("EVENT 20002 cancelled c0 ") == true, "\(eventsWithin)")
            #expect(try reader.readReply().outcome == .ok("pong"), "the next request's reply follows the block")
            // Through the client library: the block whole, the events kept for nextEvent.
            try reader.send("LIST PREFIX c1\n")
            #expect(try control.request("CANCEL c1").countdown?.state == .cancelled)
            let listed = try reader.readReply()
            #expect(listed.outcome == .ok("11111") && listed.countdowns.count == 11_111)
            #expect(try reader.nextEvent(timeout: 30)?.name == "c1")
        }

        @Test("LIST STATE and PREFIX filter in the daemon; cdctl list --prefix sorts by name; bad filters are explained")
        func listFilters() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            for line in ["START otp:+49151 1h", "START otp:+49170 1h", "START tea 1h", "START egg 100ms", "PAUSE otp:+49170"] {
                _ = try c.request(line)
            }
            _ = try c.request("SUBSCRIBE egg")
            _ = try c.waitForEvent { $0.name == "egg" && $0.kind == .done }
            #expect(try c.request("LIST PREFIX otp:").countdowns.map(\.name).sorted() == ["otp:+49151", "otp:+49170"])
            #expect(try c.request("LIST STATE running,done").countdowns.map(\.name).sorted() == ["egg", "otp:+49151", "tea"])
            #expect(try c.request("list prefix otp: state paused").countdowns.map(\.name) == ["otp:+49170"])
            #expect(try c.request("LIST PREFIX zzz").outcome == .ok("0"))
            guard case .error(_, let code, let message) = try c.request("LIST STATE over").outcome else {
                Issue.record("an unknown state is refused")
                return
            }
            #expect(code == "bad-request" && message.contains("running paused done cancelled"), "\(message)")
            let cli = try cdctl(["list", "--prefix", "otp:", "--format", "{name}"], socket: daemon.socketPath)
            #expect(cli.status == 0 && cli.stdout == "otp:+49151\notp:+49170\n", "\(cli.stdout)\(cli.stderr)")
            let none = try cdctl(["list", "--prefix", "zzz", "--state", "paused"], socket: daemon.socketPath)
            #expect(none.stdout == "no paused 'zzz…' countdowns\n", "\(none.stdout)")
        }

        @Test("SUBSCRIBE … EVENTS: only the kinds asked for; a subscriber without ticks makes nothing tick (counted by STATS)")
        func eventKindFilters() throws {
            let daemon = try DaemonProcess()
            let control = try daemon.connect()
            try startMany(200, on: control)
            let server = try daemon.connect()
            #expect(try server.request("SUBSCRIBE EVENTS done,cancelled").outcome == .ok("subscribed all seq 200 events done,cancelled"))
            let lifecycle = try daemon.connect()
            #expect(try lifecycle.request("SUBSCRIBE EVENTS lifecycle").outcome == .ok("subscribed all seq 200 events lifecycle"))
            _ = try control.request("CANCEL c7")
            _ = try control.request("START short 1500ms")
            let cancelled = try server.waitForEvent { _ in true }
            #expect(cancelled.kind == .cancelled && cancelled.name == "c7")
            let done = try server.waitForEvent { _ in true }
            #expect(done.kind == .done && done.name == "short", "no started, no snapshot, no tick in between: \(done)")
            var kinds: [EventKind] = []
            while kinds.last != .done {
                kinds.append(try lifecycle.waitForEvent { _ in true }.kind)
            }
            #expect(kinds == [.cancelled, .started, .done])
            // 1.5 s passed with 200 running countdowns and subscribers to all of them, but none takes ticks.
            #expect(try statValue("events_tick", on: control) == 0, "no countdown ticked")
            // Asking again with ticks makes them tick: the interest follows the kinds.
            let bar = try daemon.connect()
            _ = try bar.request("SUBSCRIBE c3 EVENTS lifecycle")
            #expect(try bar.request("SUBSCRIBE c3").outcome == .ok("subscribed 1 seq \(done.sequence)"))
            // Leaving ticks again ends the only tick interest.
            let ticksSeen = try ticksUntilInterestEnds(on: bar, endingWith: "SUBSCRIBE c3 EVENTS lifecycle")
            let ticks = try #require(try statValue("events_tick", on: control))
            #expect(ticks == ticksSeen.count, "the daemon made \(ticks) ticks, bar got \(ticksSeen.count): only the followed countdown ticks")
            let refused = try bar.request("SUBSCRIBE EVENTS ticks")
            guard case .error(_, "bad-request", let message) = refused.outcome else {
                Issue.record("an unknown kind is refused: \(refused.outcome)")
                return
            }
            #expect(message.contains("lifecycle") && message.contains("cancelled"), "\(message)")
            let cli = try cdctl(["watch", "--events", "dun"], socket: daemon.socketPath)
            #expect(cli.status == 2 && cli.stderr.contains("lifecycle"), "\(cli.stderr)")
        }

        @Test("a new subscriber to 20,000 countdowns gets its snapshots in slices, with live events after each one's line")
        func subscribeSnapshotsInSlices() throws {
            let daemon = try DaemonProcess()
            let control = try daemon.connect()
            try startMany(20_000, on: control)
            let subscriber = try daemon.connect()
            // Lifecycle and snapshots only: ticks would overwrite snapshot states in the record
            // below whenever the read took longer than a second.
            try subscriber.send("SUBSCRIBE EVENTS lifecycle,snapshot\n")
            try waitUntil(timeout: 60) { (try? statValue("listings_in_progress", on: control)) == 1 }
            _ = try control.request("CANCEL c19999")  // Not yet sent as a snapshot: its slot is last.
            _ = try control.request("CANCEL c0")  // Sent already, in the first slice.
            #expect(try subscriber.readLine(timeout: 10) == "OK subscribed all seq 20000 events lifecycle,snapshot")
            // Apply every line in order, as a status bar would: the result is the daemon's state.
            var state: [String: EventKind] = [:]
            var snapshots = 0
            while state["c19999"] != .cancelled || state["c0"] != .cancelled || snapshots < 19_999 {
                let event = try subscriber.waitForEvent(timeout: 20) { _ in true }
                if event.kind == .snapshot { snapshots += 1 }
                state[event.name] = event.kind
            }
            // Anything still queued comes before the reply to a PING.
            _ = try subscriber.request("PING")
            while subscriber.hasBufferedInput, let event = try subscriber.nextEvent(timeout: 10) {
                if event.kind == .snapshot { snapshots += 1 }
                state[event.name] = event.kind
            }
            #expect(snapshots == 19_999, "every countdown still running when its slice was made, c19999 not")
            #expect(state.count == 20_000)
            #expect(state.values.filter { $0 == .snapshot }.count == 19_998)
            #expect(try statValue("listings_in_progress", on: control) == 0)
        }

        @Test("a subscriber cut off for overflow while its snapshots are still being listed gets nothing after its ERR overflow, and the listing ends with it")
        func overflowEndsSnapshots() throws {
            // A grace period longer than the test: the client is closed once it has read its ERR.
            let daemon = try DaemonProcess(arguments: ["--output-limit", "65536", "--overflow-grace", "600000"])
            let control = try daemon.connect()
            try startMany(20_000, on: control)
            let stuck = try daemon.connect()
            try stuck.send("SUBSCRIBE EVENTS lifecycle,snapshot\n")  // Not read for now.
            try waitUntil(timeout: 60) { (try? statValue("listings_in_progress", on: control)) == 1 }
            // Its snapshots pile up unsent (up to the listing's 256 KiB); a lifecycle event it
            // follows, queued past the 64 KiB limit, cuts it off. Until then each CANCEL queues.
            var cancelled = 0
            try waitUntil(timeout: 60) {
                _ = try control.request("CANCEL c\(cancelled)")
                cancelled += 1
                return try statValue("listings_in_progress", on: control) == 0
            }
            var lines: [String] = []
            while let line = try stuck.readLine(timeout: 30) { lines.append(line) }
            let cut = try #require(lines.firstIndex { $0.hasPrefix("ERR overflow ") }, "no ERR overflow among \(lines.count) lines")
            #expect(cut == lines.count - 1, "\(lines.count - 1 - cut) lines after ERR overflow, the first: \(lines[min(cut + 1, lines.count - 1)])")
            #expect(lines.first == "OK subscribed all seq 20000 events lifecycle,snapshot")
        }

        @Test(
            "a LIST read while commits fail (a full tmpfs): slices undone with their batch are produced again; the reply is whole and consistent",
            .enabled(if: StorageFaults.canMountTmpfs, "needs root and permission to mount a tmpfs")
        )
        func listThroughFailedCommits() throws {
            let directory = TemporaryDirectory()
            let mountPoint = directory.file("small")
            try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
            #expect(try runCommand("/bin/mount", ["-t", "tmpfs", "-o", "size=8m", "tmpfs", mountPoint]).status == 0)
            defer { _ = try? runCommand("/bin/umount", ["-l", mountPoint]) }
            let daemon = try DaemonProcess(arguments: ["--state-dir", mountPoint + "/state"], directory: directory)
            let control = try daemon.connect()
            try startMany(20_000, on: control)
            let filler = mountPoint + "/filler"
            /// Fills the rest of the tmpfs: the next commit of a change fails.
            func fillDisk() throws {
                var info = statvfs()
                #expect(statvfs(mountPoint, &info) == 0)
                let free = Int(info.f_bavail) * Int(info.f_frsize)
                #expect(FileManager.default.createFile(atPath: filler, contents: Data(repeating: 1, count: max(0, free - 4096))))
            }
            var refused = 0, acknowledged = 0, rounds = 0
            func changeRound() throws {
                for reply in try StorageFaults.pipeline((0..<50).map { "START late\(rounds)-\($0) 1h" }, on: control) {
                    switch reply.outcome {
                    case .error(.unavailable?, _, _): refused += 1
                    case .ok: acknowledged += 1
                    default: Issue.record("\(reply.outcome)")
                    }
                }
                rounds += 1
            }
            /// Only the reading thread touches its reader until `finished` is signalled.
            final class Collected: @unchecked Sendable {
                let reader: CountdownConnection
                var bytes: [UInt8] = []
                var failure: String?
                let finished = DispatchSemaphore(value: 0)
                /// Signalled once 256 KiB have come: the listing is being produced.
                let flowing = DispatchSemaphore(value: 0)
                init(reader: CountdownConnection) { self.reader = reader }

                /// Reads raw bytes as fast as the socket gives them, faster than the daemon makes
                /// slices, so that the listing has room in every batch while it goes on; the lines
                /// are parsed afterwards.
                func readAll() {
                    var chunk = [UInt8](repeating: 0, count: 1 << 20)
                    var signalled = false
                    while true {
                        let count = chunk.withUnsafeMutableBytes { read(reader.fileDescriptor, $0.baseAddress, $0.count) }
                        if count < 0 && errno == EINTR { continue }
                        guard count > 0 else {
                            failure = "the connection ended after \(bytes.count) bytes (\(count < 0 ? String(cString: strerror(errno)) : "closed"))"
                            return
                        }
                        bytes += chunk[0..<count]
                        if !signalled && bytes.count >= 256 * 1024 {
                            signalled = true
                            flowing.signal()
                        }
                        // The reply ends with its OK (or ERR) line.
                        if bytes.last == UInt8(ascii: "\n") {
                            let body = bytes.dropLast()
                            let last = bytes[(body.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? body.startIndex)...]
                            if last.starts(with: "OK ".utf8) || last.starts(with: "ERR ".utf8) { return }
                        }
                    }
                }

                /// The reply's lines: each countdown's name, and the final line.
                var lines: (names: [String], final: String?) {
                    let text = String(decoding: bytes, as: UTF8.self).split(separator: "\n")
                    let names = text.dropLast().map { $0.split(separator: " ").dropFirst().first.map(String.init) ?? "" }
                    return (names, text.last.map(String.init))
                }
            }
            // One LIST whose slices are produced while a commit fails, as often as it takes for
            // a failing batch to hold one of its slices: the daemon's own count says when.
            var redone = 0
            for attempt in 1...10 where redone == 0 {
                // Storage works (a full disk is noticed by its retry, once a second).
                if FileManager.default.fileExists(atPath: filler) { try FileManager.default.removeItem(atPath: filler) }
                try waitUntil(timeout: 30) { try control.request("STATS").stats.first { $0.key == "storage" }?.value == "ok" }
                let expected = 20_000 + acknowledged
                let reader = try daemon.connect()
                try reader.send("LIST\n")
                // Not read yet: the LIST stalls at the unsent-output threshold, unfinished.
                try waitUntil(timeout: 30) { (try? statValue("listings_in_progress", on: control)) == 1 }
                try fillDisk()
                let collected = Collected(reader: reader)
                let thread = Thread {
                    collected.readAll()
                    collected.finished.signal()
                }
                thread.start()
                // The first change to reach the disk fails and its batch is undone (later ones
                // are refused at once until the retry): it is sent while slices are being made.
                #expect(collected.flowing.wait(timeout: .now() + 60) == .success, "the LIST is being read")
                // Changes go on failing until the LIST is read whole, however long that takes.
                var listed = false
                while !listed && rounds < 5000 {
                    try changeRound()
                    listed = collected.finished.wait(timeout: .now()) == .success
                }
                #expect(listed || collected.finished.wait(timeout: .now() + 60) == .success)
                #expect(collected.failure == nil, "\(collected.failure ?? "")")
                // Whole and consistent, whatever was undone and produced again meanwhile.
                let (names, final) = collected.lines
                #expect(final == "OK \(expected)", "attempt \(attempt): \(final ?? "no end")")
                #expect(names.count == expected && Set(names).count == expected, "\(names.count) lines, \(Set(names).count) distinct")
                redone = try #require(try statValue("listing_slices_redone", on: control))
            }
            // Every change is answered, and the full disk refused some. How many fit first is not
            // compared with how many were refused: the 4 KiB left, plus the rest of the journal's
            // last page (tmpfs counts whole pages), took 51 of the first 100 in one run, and the
            // listing may be read whole after two rounds. The path under test is proven below.
            #expect(refused > 0 && refused + acknowledged == 50 * rounds, "\(refused) refused, \(acknowledged) acknowledged")
            // The daemon's own count: batches were undone, and slices of a LIST among them were
            // taken back and produced again (the path under test ran, not only failed changes).
            let undone = try #require(try statValue("batches_undone", on: control))
            #expect(undone > 0 && daemon.stderrText.contains("undid"), "\(undone) batches undone")
            #expect(redone > 0, "no slice of a LIST was undone and produced again in 10 LISTs: the test proves nothing")
        }
    }
}
