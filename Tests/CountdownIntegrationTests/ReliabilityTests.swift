import CountdownClient
import CountdownCore
import Foundation
import Glibc
import Testing

extension Integration {
    @Suite("Reliability: persistence, slow clients, limits, ownership, hygiene")
    struct ReliabilityTests {
        @Test("SIGKILL with 1,000 countdowns: all come back on time; expired ones are done exactly once")
        func restartAfterKill() throws {
            let directory = TemporaryDirectory()
            // Names in the log (`--log-names`): each expired countdown's done is counted there.
            var daemon = try DaemonProcess(arguments: ["--log-lifecycle", "--log-names"], directory: directory)
            let c = try daemon.connect()
            var batch = ""
            for index in 0..<900 { batch += "START run\(index) \(60 + index % 60)s\n" }
            for index in 0..<50 { batch += "START hold\(index) 1h\nPAUSE hold\(index)\n" }
            for index in 0..<50 { batch += "START quick\(index) \(1000 + index * 10)ms\n" }
            try c.send(batch)
            var before: [String: CountdownInfo] = [:]
            for _ in 0..<1050 {
                if let info = try c.readReply().countdown { before[info.name] = info }
            }
            let quickDeadline = try #require(before["quick49"]?.deadlineUnixMilliseconds)
            daemon.crash()
            let crashedAt = monotonicNow()
            // Let every "quick" deadline pass while the daemon is down, and at least a second:
            // a deadline that stood still while the daemon was down would move by that much.
            try waitUntil(timeout: 60) { unixNowMilliseconds() > Double(quickDeadline) + 100 && monotonicNow() - crashedAt > 1 }

            daemon = try DaemonProcess(arguments: ["--log-lifecycle", "--log-names"], directory: directory)
            let listConnection = try daemon.connect()
            let askedAt = unixNowMilliseconds()
            let list = try listConnection.request("LIST", timeout: 30)
            let answeredAt = unixNowMilliseconds()
            let after = Dictionary(uniqueKeysWithValues: list.countdowns.map { ($0.name, $0) })
            #expect(after.count == 1000)
            for index in 0..<900 {
                let old = try #require(before["run\(index)"]), new = try #require(after["run\(index)"])
                #expect(new.state == .running)
                let oldDeadline = try #require(old.deadlineUnixMilliseconds), newDeadline = try #require(new.deadlineUnixMilliseconds)
                // The deadline is kept on the boot clock and shown on the wall clock: it moves by
                // no more than reading the two clocks apart takes (far below the second down).
                #expect(abs(newDeadline - oldDeadline) <= 250, "run\(index) deadline moved by \(newDeadline - oldDeadline) ms")
                // Time left is the deadline less the moment of the LIST, which lies between the
                // test's asking and its answer, however long that took.
                let remaining = Double(new.remainingMilliseconds)
                #expect(
                    remaining >= Double(newDeadline) - answeredAt - CorrectnessBounds.earlinessMilliseconds
                        && remaining <= Double(newDeadline) - askedAt + CorrectnessBounds.earlinessMilliseconds,
                    "run\(index): \(new.remainingMilliseconds) ms left, asked \(Double(newDeadline) - askedAt) and answered \(Double(newDeadline) - answeredAt) ms before its deadline"
                )
            }
            for index in 0..<50 {
                let old = try #require(before["hold\(index)"]), new = try #require(after["hold\(index)"])
                #expect(new.state == .paused && new.remainingMilliseconds == old.remainingMilliseconds)
                let quick = try #require(after["quick\(index)"])
                #expect(quick.state == .done)
                #expect((quick.lateMilliseconds ?? -1) >= 0, "a done restored late says how late")
            }
            // A second restart reports nothing again: each expired countdown was done exactly once.
            #expect(daemon.terminate() == 0)
            let third = try DaemonProcess(arguments: ["--log-lifecycle", "--log-names"], directory: directory)
            _ = try third.connect().request("PING")
            let logs = daemon.stderrText + third.stderrText
            for index in 0..<50 {
                #expect(logs.components(separatedBy: "quick\(index): done").count - 1 == 1, "quick\(index) reported done more than once")
            }
            #expect(try third.connect().request("STATUS quick0").countdowns.first?.state == .done)
        }

        @Test("a done delivered before a crash is not reported again, event numbers never repeat, and countdownd --dump-state shows it done")
        func doneBeforeCrash() throws {
            let directory = TemporaryDirectory()
            let first = try DaemonProcess(arguments: ["--log-lifecycle", "--log-names"], directory: directory)
            let c = try first.connect()
            _ = try c.request("SUBSCRIBE brew")
            _ = try c.request("START brew 1200ms")
            _ = try c.request("START later 1h")
            let done = try c.waitForEvent { $0.name == "brew" && $0.kind == .done }
            #expect(try c.request("PING").outcome == .ok("pong"))  // The batch with the done is committed.
            first.crash()
            let second = try DaemonProcess(arguments: ["--log-lifecycle", "--log-names"], directory: directory)
            let watcher = try second.connect()
            _ = try watcher.request("SUBSCRIBE again")
            _ = try watcher.request("START again 1h")
            let started = try watcher.waitForEvent { $0.name == "again" && $0.kind == .started }
            #expect(started.sequence > done.sequence, "seq \(started.sequence) after a restart, \(done.sequence) before it")
            let brew = try #require(try second.connect().request("STATUS brew").countdowns.first)
            #expect(brew.state == .done && brew.lateMilliseconds == nil, "done before the crash: not late, not again")
            #expect(!second.stderrText.contains("brew: done"), "not reported a second time")
            #expect(try second.connect().request("STATUS later").countdowns.first?.state == .running)
            // A clean stop writes a snapshot, which countdownd --dump-state shows as JSON lines.
            #expect(second.terminate() == 0)
            let dump = try runCommand(TestBinaries.countdownd, ["--dump-state", directory.file("state/countdownd")])
            let lines = try dump.stdout.split(separator: "\n").map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] ?? [:] }
            #expect(dump.status == 0 && lines.first?["type"] as? String == "state" && lines.first?["countdowns"] as? Int == 3, "\(dump.stdout)\(dump.stderr)")
            let states = lines.dropFirst().map { "\($0["name"] ?? "")|\($0["state"] ?? "")" }
            #expect(states == ["again|running", "brew|done", "later|running"], "\(dump.stdout)")
        }

        @Test("a finished countdown whose retention ended while the daemon was down is forgotten at the start, with a removed event that SINCE replays; it does not come back under a longer --retention")
        func retentionEndedWhileDown() throws {
            let directory = TemporaryDirectory()
            let first = try DaemonProcess(arguments: ["--retention", "600"], directory: directory)
            let c = try first.connect()
            _ = try c.request("SUBSCRIBE EVENTS done")
            _ = try c.request("START brew 100ms")
            _ = try c.request("START later 1h")
            let done = try c.waitForEvent { $0.name == "brew" && $0.kind == .done }
            let doneAt = unixNowMilliseconds()
            #expect(try c.request("PING").outcome == .ok("pong"))  // The batch with the done is committed.
            #expect(first.terminate() == 0)
            // Down past the end of the retention the next start is given (1 s).
            try waitUntil(timeout: 30) { unixNowMilliseconds() > doneAt + 1_500 }
            let second = try DaemonProcess(arguments: ["--retention", "1"], directory: directory)
            let replay = try second.connect()
            _ = try replay.request("SUBSCRIBE EVENTS removed SINCE \(done.sequence)")
            let removed = try replay.waitForEvent { $0.kind == .removed }
            #expect(removed.name == "brew" && removed.sequence > done.sequence, "\(removed)")
            guard case .error(let code, _, _) = try second.connect().request("STATUS brew").outcome else {
                Issue.record("brew is still there after its retention")
                return
            }
            #expect(code == .notFound)
            #expect(try second.connect().request("STATUS later").countdowns.first?.state == .running, "the running one kept")
            #expect(second.terminate() == 0)
            // Forgotten in storage too: a longer retention does not bring it back.
            let third = try DaemonProcess(arguments: ["--retention", "600"], directory: directory)
            guard case .error(let again, _, _) = try third.connect().request("STATUS brew").outcome else {
                Issue.record("brew came back under a longer retention")
                return
            }
            #expect(again == .notFound)
        }

        @Test("at a start, what the journal holds after the snapshot replaces the snapshot's rows: a pause, a cancel and a removal hold, and one past its deadline is done once, from the journal's deadline, not the snapshot's")
        func journalReplacesSnapshotRows() throws {
            func isOK(_ reply: Reply) -> Bool {
                if case .ok = reply.outcome { return true }
                return false
            }
            let directory = TemporaryDirectory()
            let first = try DaemonProcess(directory: directory)
            let c = try first.connect()
            for name in ["paused", "cancelled", "removed", "kept"] {
                #expect(try isOK(c.request("START \(name) 1h")))
            }
            let startedAt = unixNowMilliseconds()
            #expect(try isOK(c.request("START extended 2s")))
            #expect(first.terminate() == 0)  // A clean stop: all five in the snapshot, running.
            let second = try DaemonProcess(directory: directory)
            let d = try second.connect()
            for request in ["PAUSE paused", "CANCEL cancelled", "CANCEL removed", "REMOVE removed", "EXTEND extended 2s"] {
                #expect(try isOK(d.request(request)), "\(request)")
            }
            #expect(try d.request("PING").outcome == .ok("pong"))  // The batch is committed.
            second.crash()  // SIGKILL: the changes are in the journal only.
            // Down past both deadlines: the snapshot's (2 s) and the journal's (4 s).
            try waitUntil(timeout: 60) { unixNowMilliseconds() > startedAt + 4_500 }
            let third = try DaemonProcess(directory: directory)
            let readyAt = unixNowMilliseconds()
            let e = try third.connect()
            #expect(try e.request("STATUS paused").countdowns.first?.state == .paused)
            #expect(try e.request("STATUS cancelled").countdowns.first?.state == .cancelled)
            #expect(try e.request("STATUS kept").countdowns.first?.state == .running)
            guard case .error(let code, _, _) = try e.request("STATUS removed").outcome else {
                Issue.record("a countdown the journal removed came back from the snapshot")
                return
            }
            #expect(code == .notFound)
            let extended = try #require(try e.request("STATUS extended").countdowns.first)
            // Late from the journal's deadline (at most readyAt - startedAt - 4,000 ms), not the
            // snapshot's (2 s more).
            let late = try #require(extended.lateMilliseconds)
            #expect(extended.state == .done && Double(late) <= readyAt - startedAt - 4_000 + 1, "late \(late) ms, at most \(readyAt - startedAt - 4_000)")
            #expect(third.terminate() == 0)
        }

        @Test("by default nothing is logged per countdown (a busy OTP server would write two lines a cooldown); --log-lifecycle logs each event without its name (an OTP cooldown's is a phone number); --log-names and debug add it")
        func privateLogs() throws {
            func cooldown(_ daemon: DaemonProcess) throws {
                let c = try daemon.connect()
                _ = try c.request("SUBSCRIBE otp:+4915112345678 EVENTS done")
                _ = try c.request("START otp:+4915112345678 200ms")
                _ = try c.waitForEvent { $0.kind == .done }
                _ = try c.request("PING")  // The done's batch is released, and logged, before this reply.
            }
            let silent = try DaemonProcess()
            try cooldown(silent)
            #expect(!silent.stderrText.contains("seq 1") && !silent.stderrText.contains("started") && !silent.stderrText.contains("done"), "\(silent.stderrText)")
            let quiet = try DaemonProcess(arguments: ["--log-lifecycle"])
            try cooldown(quiet)
            #expect(quiet.stderrText.contains("seq 1 (uid \(getuid())): started, 200ms") && quiet.stderrText.contains("seq 2 (uid \(getuid())): done after"), "\(quiet.stderrText)")
            #expect(!quiet.stderrText.contains("4915112345678"), "\(quiet.stderrText)")
            for flags in [["--log-lifecycle", "--log-names"], ["--log-level", "debug"]] {
                let named = try DaemonProcess(arguments: flags)
                _ = try named.connect().request("START otp:+4915112345678 1h")
                _ = try named.connect().request("PING")
                #expect(named.stderrText.contains("otp:+4915112345678: started, 1h"), "\(flags): \(named.stderrText)")
            }
        }

        @Test("a relative --state-dir that does not exist yet works on the first start, and keeps what it was given")
        func relativeStateDirectory() throws {
            let directory = TemporaryDirectory()
            // Started from `directory`, as an operator's shell would: cd there, then the daemon.
            let fromThere = ["/bin/sh", "-c", "cd '\(directory.path)' && exec \"$0\" \"$@\""]
            let first = try DaemonProcess(arguments: ["--state-dir", "new/state"], directory: directory, launcher: fromThere)
            #expect(try first.connect().request("START kept 1h").countdown?.state == .running)
            #expect(first.terminate() == 0)
            #expect(FileManager.default.fileExists(atPath: directory.file("new/state/countdownd.snapshot")), "the snapshot is where the relative path points")
            let second = try DaemonProcess(arguments: ["--state-dir", "new/state"], directory: directory, launcher: fromThere)
            #expect(try second.connect().request("STATUS kept").countdowns.first?.state == .running)
        }

        @Test("a damaged snapshot stops the start with a clear message and is kept; moved aside, the daemon starts empty")
        func corruptDatabase() throws {
            let directory = TemporaryDirectory()
            let stateDirectory = directory.file("state/countdownd")
            try FileManager.default.createDirectory(atPath: stateDirectory, withIntermediateDirectories: true)
            let database = stateDirectory + "/countdownd.snapshot"
            let garbage = Data(repeating: 0x5A, count: 8192)
            try garbage.write(to: URL(fileURLWithPath: database))
            let refused = try DaemonProcess(directory: directory, waitForReady: false)
            #expect(refused.process.wait() == 1, "a damaged state is not an empty start")
            #expect(refused.stderrText.contains("\(database) is damaged"), "\(refused.stderrText)")
            #expect(refused.stderrText.contains("kept as it is"))
            #expect(FileManager.default.contents(atPath: database) == garbage, "the damaged file is left untouched")
            // The operator decides: moved aside, the daemon starts without it.
            #expect(rename(database, database + ".bad") == 0)
            let daemon = try DaemonProcess(directory: directory)
            let c = try daemon.connect()
            #expect(try c.request("LIST").countdowns.isEmpty)
            #expect(try c.request("START fresh 1h").countdown?.state == .running)
        }

        @Test("a subscriber that never reads, 20,000 countdowns: another subscriber's done comes on time; memory stays bounded")
        func stuckSubscriberWith20k() throws {
            let daemon = try DaemonProcess()
            let baseline = daemon.residentBytes()
            let stuck = try daemon.connect()
            _ = try stuck.request("SUBSCRIBE")  // ... and never reads again.
            let control = try daemon.connect()
            var batch = ""
            for index in 0..<20_000 {
                batch += "START flood\(index) \(2000 + index % 2000)ms\n"
            }
            try control.send(batch)
            for _ in 0..<20_000 { _ = try control.readReply(timeout: 30) }
            let probe = try daemon.connect()
            _ = try probe.request("SUBSCRIBE probe")
            let deadline = Double(try #require(try control.request("START probe 2500ms").countdown?.deadlineUnixMilliseconds))
            _ = try probe.waitForEvent { $0.name == "probe" && $0.kind == .done }
            let lateness = unixNowMilliseconds() - deadline
            #expect(
                lateness >= -CorrectnessBounds.earlinessMilliseconds && lateness <= CorrectnessBounds.latenessMilliseconds,
                "probe's done was \(lateness) ms late beside a stuck subscriber"
            )
            let growth = daemon.residentBytes() - baseline
            // The documented bound (README, Reliability): 64 MiB for this load.
            #expect(growth < 64 * 1024 * 1024, "RSS grew by \(growth / 1024) KiB")
            #expect(try control.request("PING").outcome == .ok("pong"))
        }

        @Test("past the output limit a stuck subscriber gets ERR overflow and is closed; others carry on")
        func overflowDisconnects() throws {
            // A grace period longer than the test: the stuck client reads its ERR overflow however
            // late it gets round to it (it is closed as soon as it has).
            let daemon = try DaemonProcess(arguments: ["--output-limit", "262144", "--overflow-grace", "600000"])
            let stuck = try daemon.connect()
            _ = try stuck.request("SUBSCRIBE")
            let control = try daemon.connect()
            var batch = ""
            for index in 0..<20_000 { batch += "START f\(index) 1h\n" }
            try control.send(batch)
            for _ in 0..<20_000 { _ = try control.readReply(timeout: 30) }
            #expect(try control.request("PING").outcome == .ok("pong"))
            // Now the stuck client reads: what the kernel held, then the error, then the end.
            var last: String?
            while let line = try stuck.readLine(timeout: 10) {
                last = line
            }
            #expect(last?.hasPrefix("ERR overflow ") == true, "last line: \(last ?? "none")")
            #expect(daemon.stderrText.contains("disconnecting it"))
        }

        @Test("limits: connections, subscriptions and countdowns answer ERR limit")
        func limits() throws {
            let daemon = try DaemonProcess(arguments: ["--max-connections", "2", "--max-subscriptions", "2", "--max-countdowns", "2"])
            let first = try daemon.connect()
            let second = try daemon.connect()
            #expect(throws: ClientError.self) { try daemon.connect() }
            do {
                _ = try daemon.connect()
            } catch let error as ClientError {
                #expect("\(error)".contains("too many connections"))
            }
            #expect(try first.request("START a 1h").countdown != nil)
            #expect(try first.request("START b 1h").countdown != nil)
            guard case .error(.limit?, _, let message) = try first.request("START c 1h").outcome else {
                Issue.record("third countdown accepted")
                return
            }
            #expect(message.contains("--max-countdowns"))
            guard case .error(.limit?, _, _) = try second.request("SUBSCRIBE a b c").outcome else {
                Issue.record("three names accepted")
                return
            }
            #expect(try second.request("SUBSCRIBE a b").outcome == .ok("subscribed 2 seq 2"))
        }

        @Test(
            "names are per user: another uid neither sees, follows, changes nor squats root's countdowns; root sees and addresses all as uid/name",
            .enabled(if: getuid() == 0, "needs root to run cdctl as another user (setpriv --reuid=nobody)"),
            .enabled(if: toolExists("/usr/bin/setpriv"), "setpriv is not installed")
        )
        func namespaces() throws {
            let directory = TemporaryDirectory()
            chmod(directory.path, 0o755)
            let daemon = try DaemonProcess(arguments: ["--socket-mode", "0666"], directory: directory)
            _ = try daemon.connect().request("START mine 1h")
            _ = try daemon.connect().request("START otp:+4915112345678 1h")
            let nobody = CdctlAsNobody(socket: daemon.socketPath)
            // nobody follows everything it may see, from before anything of its own exists.
            let watchOutput = directory.file("watch.out")
            let file = open(watchOutput, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            let watcher = try nobody.spawn(["watch"], stdout: file)
            close(file)
            defer {
                watcher.signal(SIGKILL)
                watcher.wait()
            }
            #expect(try nobody.run(["list"]).stdout == "no countdowns\n", "root's countdowns are invisible to nobody")
            #expect(try nobody.run(["status", "mine"]).status == 3)
            #expect(try nobody.run(["cancel", "mine"]).status == 3)
            let crossing = try nobody.run(["cancel", "0/mine"])
            #expect(crossing.status == 1 && crossing.stderr.contains("only root may address another user's countdowns"), "\(crossing.stderr)")
            // Its own names, even the same ones: nothing to squat.
            #expect(try nobody.run(["start", "mine", "5m"]).status == 0)
            #expect(try nobody.run(["start", "otp:+4915199999999", "366d"]).status == 0)
            #expect(try daemon.connect().request("START otp:+4915199999999 1m").countdown?.state == .running, "root's name is its own")
            // A user's busy names its own countdown plainly, and keeps the fields for programs.
            let script = """
                import socket, sys
                s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rw")
                f.readline(); f.write("START mine 5m\\n"); f.flush(); print(f.readline().strip())
                """
            let busy = try runCommand("/usr/bin/setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3", "-c", script, daemon.socketPath])
            #expect(busy.stdout.hasPrefix("ERR busy 'mine' is running with ") && busy.stdout.contains(" remaining_ms=") && busy.stdout.hasSuffix(" state=running advice=wait-cancel-or-replace\n"), "\(busy.stdout)\(busy.stderr)")
            let mine = try nobody.run(["status", "mine", "--json"])
            #expect(mine.stdout.contains(#""name":"mine""#) && mine.stdout.contains(#""owner_uid":65534"#), "\(mine.stdout)")
            // Root sees everyone's, each other user's as uid/name, and can change them.
            let list = try daemon.connect().request("LIST").countdowns.map { "\($0.name) \($0.owner ?? 0)" }.sorted()
            #expect(list == ["65534/mine 65534", "65534/otp:+4915199999999 65534", "mine 0", "otp:+4915112345678 0", "otp:+4915199999999 0"])
            #expect(try daemon.connect().request("PAUSE 65534/mine").countdown?.state == .paused)
            #expect(try nobody.run(["status", "mine", "--format", "{state}"]).stdout == "paused\n")
            // The watcher saw its own countdowns, under their plain names, and nothing of root's.
            try waitUntil(timeout: 60) { ((try? String(contentsOfFile: watchOutput, encoding: .utf8)) ?? "").contains(" paused mine ") }
            let seen = try String(contentsOfFile: watchOutput, encoding: .utf8)
            #expect(seen.contains(" started mine ") && seen.contains(" started otp:+4915199999999 "))
            #expect(!seen.contains("otp:+4915112345678") && !seen.contains("65534/"), "\(seen)")
            let lines = seen.split(separator: "\n")
            #expect(lines.filter { $0.contains(" started ") }.count == 2, "root's starts are not shown: \(seen)")
        }

        @Test(
            "per-user quotas: a user's countdowns and connections are capped; removing a finished countdown frees its slot; root is not capped",
            .enabled(if: getuid() == 0, "needs root to run cdctl as another user (setpriv --reuid=nobody)"),
            .enabled(if: toolExists("/usr/bin/setpriv"), "setpriv is not installed")
        )
        func perUserQuotas() throws {
            let directory = TemporaryDirectory()
            chmod(directory.path, 0o755)
            let daemon = try DaemonProcess(
                arguments: ["--socket-mode", "0666", "--max-countdowns-per-user", "3", "--max-connections-per-user", "2"], directory: directory
            )
            let nobody = CdctlAsNobody(socket: daemon.socketPath)
            for name in ["a", "b", "c"] {
                #expect(try nobody.run(["start", name, "1h"]).status == 0)
            }
            let over = try nobody.run(["start", "d", "1h"])
            #expect(over.status == 1 && over.stderr.contains("uid 65534 already holds its maximum of 3 countdowns"), "\(over.stderr)")
            #expect(over.stderr.contains("cdctl rm finished ones"), "the next cdctl command, not a protocol verb: \(over.stderr)")
            for name in ["a", "b", "c", "d"] {
                #expect(try daemon.connect().request("START \(name) 1h").countdown != nil, "root is not capped")
            }
            _ = try nobody.run(["cancel", "a"])
            #expect(try nobody.run(["start", "d", "1h"]).status == 1, "a finished countdown counts until removed")
            #expect(try nobody.run(["rm", "a"]).status == 0)
            #expect(try nobody.run(["start", "d", "1h"]).status == 0, "removing it freed the slot")
            // Two connections of nobody's stay open; the third is refused.
            var holders: [ChildProcess] = []
            defer { holders.forEach { $0.signal(SIGKILL); $0.wait() } }
            for _ in 0..<2 {
                holders.append(try nobody.spawn(["watch"]))
            }
            // Both are connected when the daemon counts them (plus the connection asking).
            try waitUntil(timeout: 60) {
                try daemon.connect().request("STATS").stats.first { $0.key == "connections" }?.value == "3"
            }
            let refused = try nobody.run(["list"])
            #expect(refused.status == 6 && refused.stderr.contains("--max-connections-per-user"), "\(refused.status) \(refused.stderr) \(refused.stdout)")
            #expect(try daemon.connect().request("PING").outcome == .ok("pong"), "root still connects")
        }

        @Test("2,000 clients that hang up before reading the greeting, each followed by one that reads it")
        func hangUpBeforeGreeting() throws {
            // A hang-up is reported as readable and writable at once; the connection is closed by
            // the first and must still be safe to look at for the second (this crashed the daemon).
            let daemon = try DaemonProcess()
            for cycle in 0..<2000 {
                let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
                var address = sockaddr_un()
                address.sun_family = sa_family_t(AF_UNIX)
                withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(daemon.socketPath.utf8)) }
                let connected = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(probe, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
                }
                close(probe)
                guard connected == 0 else {
                    Issue.record("cycle \(cycle): connect failed: \(String(cString: strerror(errno))); the daemon's log: \(daemon.stderrText)")
                    return
                }
                do {
                    _ = try daemon.connect()
                } catch {
                    Issue.record("cycle \(cycle): \(error); the daemon's log: \(daemon.stderrText)")
                    return
                }
            }
            #expect(try daemon.connect().request("PING").outcome == .ok("pong"))
        }

        @Test("5,000 connects and disconnects, some mid-line or mid-reply, leak no descriptors")
        func descriptorHygiene() throws {
            let daemon = try DaemonProcess()
            let setup = try daemon.connect()
            var batch = ""
            for index in 0..<300 { batch += "START h\(index) 1h\n" }
            try setup.send(batch)
            for _ in 0..<300 { _ = try setup.readReply() }
            let baseline = daemon.openSocketCount()
            let descriptorsBefore = daemon.openDescriptorCount()
            for cycle in 0..<5000 {
                let c: CountdownConnection
                do {
                    c = try daemon.connect()
                } catch {
                    Issue.record("cycle \(cycle): \(error); the daemon's log: \(daemon.stderrText)")
                    return
                }
                switch cycle % 4 {
                case 0: try c.send("STAT")             // mid-line
                case 1: try c.send("LIST\n")           // mid-reply: the 300-line answer is never read
                case 2: _ = try c.request("PING")
                default: break                         // nothing at all
                }
            }
            try waitUntil(timeout: 60) { daemon.openSocketCount() <= baseline }
            #expect(daemon.openSocketCount() == baseline)
            // libdispatch may add a descriptor or two of its own as its thread pool grows.
            #expect(daemon.openDescriptorCount() <= descriptorsBefore + 4)
            #expect(try setup.request("PING").outcome == .ok("pong"))
        }

        @Test(
            "a descriptor limit below --max-connections: a warning at start, and clients past it get ERR limit instead of hanging",
            .enabled(if: toolExists("/usr/bin/prlimit"), "prlimit (util-linux) is not installed")
        )
        func descriptorLimit() throws {
            let daemon = try DaemonProcess(launcher: ["/usr/bin/prlimit", "--nofile=48:48", "--"])
            let warning = try #require(daemon.stderrText.split(separator: "\n").first { $0.contains("the descriptor limit (48") })
            #expect(warning.contains("fewer than --max-connections 10000") && warning.contains("LimitNOFILE="))
            let words = warning.split(separator: " ")
            let room = try #require(words.firstIndex(of: "for").flatMap { Int(words[$0 + 1]) })
            #expect(room > 5 && room < 48)
            var clients: [CountdownConnection] = []
            for _ in 0..<room {
                clients.append(try daemon.connect())
            }
            do {
                _ = try daemon.connect()
                Issue.record("a client past the descriptor limit was accepted")
            } catch {
                #expect("\(error)".contains("descriptor limit"), "\(error)")
            }
            #expect(try clients[0].request("PING").outcome == .ok("pong"), "the others are served")
            clients.removeLast()
            try waitUntil(timeout: 60) { (try? daemon.connect()) != nil }
        }
    }
}

/// The real `cdctl` run as uid nobody (through setpriv), against a daemon's socket.
struct CdctlAsNobody {
    let socket: String

    private var command: [String] {
        ["/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", TestBinaries.cdctl, "--socket", socket]
    }

    /// Runs cdctl to completion.
    func run(_ arguments: [String]) throws -> CommandResult {
        try runCommand(command[0], Array(command.dropFirst()) + arguments)
    }

    /// Starts cdctl and leaves it running (for `watch`).
    func spawn(_ arguments: [String], stdout: Int32? = nil) throws -> ChildProcess {
        try ChildProcess(command[0], Array(command.dropFirst()) + arguments, environment: ProcessInfo.processInfo.environment, stdout: stdout)
    }
}
