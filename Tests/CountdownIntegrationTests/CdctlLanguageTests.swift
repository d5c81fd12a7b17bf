import CountdownClient
import CountdownCore
import Foundation
import Glibc
import Testing

extension Integration {
    @Suite("cdctl speaks cdctl: toggle, rm, list --state, stats, messages, follow across restarts")
    struct CdctlLanguageTests {
        /// Protocol verbs a cdctl user should never be told to type.
        static let protocolWords = ["START", "CANCEL", "LIST", "RESUME", "PAUSE", "SUBSCRIBE", "REPLACE", "REMOVE", "STATUS"]

        @Test("toggle pauses and resumes; rm forgets a finished countdown, refuses a running one; list --state filters")
        func toggleRemoveAndStates() throws {
            let daemon = try DaemonProcess()
            let s = daemon.socketPath
            _ = try cdctl(["start", "tea", "3m"], socket: s)
            _ = try cdctl(["start", "bread", "1h"], socket: s)
            #expect(try cdctl(["toggle", "tea"], socket: s).stdout.hasPrefix("tea: paused"))
            #expect(try cdctl(["toggle", "tea"], socket: s).stdout.hasPrefix("tea: running"))
            let busy = try cdctl(["rm", "tea"], socket: s)
            #expect(busy.status == 4 && busy.stderr.contains("cdctl cancel tea first"), "\(busy.stderr)")
            _ = try cdctl(["cancel", "tea"], socket: s)
            let finished = try cdctl(["toggle", "tea"], socket: s)
            #expect(finished.status == 3 && finished.stderr.contains("cdctl start tea starts it again"))
            #expect(try cdctl(["list", "--state", "cancelled", "--format", "{name}"], socket: s).stdout == "tea\n")
            #expect(try cdctl(["list", "--state", "running", "--format", "{name}"], socket: s).stdout == "bread\n")
            #expect(try cdctl(["list", "--state", "paused"], socket: s).stdout == "no paused countdowns\n")
            let removed = try cdctl(["rm", "tea"], socket: s)
            #expect(removed.status == 0 && removed.stdout == "tea: removed\n")
            #expect(try cdctl(["status", "tea"], socket: s).status == 3)
            // The name is free at once, and the removal survives a restart.
            #expect(daemon.terminate() == 0)
            let again = try DaemonProcess(directory: daemon.directory)
            #expect(try cdctl(["status", "tea"], socket: again.socketPath).status == 3)
            #expect(try cdctl(["status", "bread"], socket: again.socketPath).status == 0)
        }

        @Test("errors name the cdctl command to run next, never a protocol verb; --if-idle and --replace say what they did")
        func messagesInCdctlTerms() throws {
            let daemon = try DaemonProcess()
            let s = daemon.socketPath
            _ = try cdctl(["start", "tea", "3m"], socket: s)
            var errors: [String] = []
            let busy = try cdctl(["start", "tea", "3m"], socket: s)
            #expect(busy.stderr.contains("cdctl cancel tea") && busy.stderr.contains("cdctl start tea --replace"), "\(busy.stderr)")
            errors.append(busy.stderr)
            _ = try cdctl(["pause", "tea"], socket: s)
            let paused = try cdctl(["pause", "tea"], socket: s)
            #expect(paused.stderr.contains("cdctl resume tea continues it"), "\(paused.stderr)")
            errors.append(paused.stderr)
            let unknown = try cdctl(["cancel", "coffee"], socket: s)
            #expect(unknown.stderr.contains("cdctl list shows the existing ones"), "\(unknown.stderr)")
            errors.append(unknown.stderr)
            let typo = try runCommand(TestBinaries.cdctl, ["strat", "tea"])
            #expect(typo.status == 2 && typo.stderr.contains("did you mean 'start'?"))
            errors.append(typo.stderr)
            for error in errors {
                let words = error.split(whereSeparator: { !$0.isLetter }).map(String.init)
                #expect(Set(words).isDisjoint(with: Self.protocolWords), "a protocol verb in: \(error)")
            }
            let idle = try cdctl(["start", "tea", "5m", "--if-idle"], socket: s)
            #expect(idle.status == 0 && idle.stdout.hasPrefix("tea: already paused, left alone;"), "\(idle.stdout)")
            let replaced = try cdctl(["start", "tea", "5m", "--replace"], socket: s)
            #expect(replaced.stdout.hasPrefix("tea: restarted (the paused one, with 0:03:00 left, was cancelled); 0:05:00 left"), "\(replaced.stdout)")
            let fresh = try cdctl(["start", "other", "5m", "--replace"], socket: s)
            #expect(fresh.stdout.hasPrefix("other: running, 0:05:00 left"), "nothing replaced, nothing said: \(fresh.stdout)")
            #expect(try cdctl(["start", "long", "1h 30min"], socket: s).stdout == "long: running, 1:30:00 left of 1:30:00\n")
            #expect(try runCommand(TestBinaries.cdctl, ["help", "toggle"]).stdout.hasPrefix("Usage: cdctl toggle NAME"))
        }

        @Test("what a person trips over gets cdctl's own words: times passed or too far, a missing name, an unquoted duration, --since, a second cancel, a command's start or capitals")
        func roughEdges() throws {
            let daemon = try DaemonProcess()
            let s = daemon.socketPath
            func refused(_ arguments: [String]) throws -> CommandResult { try cdctl(arguments, socket: s) }
            let past = try refused(["start", "x", "--at", "2020-01-01 06:00"])
            #expect(past.status == 2 && past.stderr.contains("which has passed (it is now") && !past.stderr.contains("1577858400000"), "\(past.stderr)")
            let far = try refused(["start", "x", "--at", "now + 400 days"])
            #expect(far.status == 2 && far.stderr.contains("more than 366 days away"), "\(far.stderr)")
            let leap = try refused(["start", "x", "--at", "2027-02-29 10:00"])
            #expect(leap.status == 2 && leap.stderr.contains("is not a date: 2027-02 has 28 days"), "\(leap.stderr)")
            let nameless = try refused(["start", "--at", "09:30"])
            #expect(nameless.status == 2 && nameless.stderr.contains("start needs a NAME"), "\(nameless.stderr)")
            let unquoted = try refused(["start", "tea", "5", "minutes"])
            #expect(unquoted.status == 2 && unquoted.stderr.contains("quote it, as in cdctl start tea '5 minutes'"), "\(unquoted.stderr)")
            let usage = try refused(["start", "tea", "5m", "extra", "words"])
            #expect(usage.status == 2 && usage.stderr.contains("[DURATION | --at TIME | --cycle PHASES | --pomodoro]"), "\(usage.stderr)")
            let since = try refused(["watch", "--since", "99999"])
            #expect(since.status != 0 && since.stderr.contains("--since 99999 is ahead") && !since.stderr.contains("SINCE"), "\(since.stderr)")
            _ = try refused(["start", "t", "1h"])
            _ = try refused(["cancel", "t"])
            let again = try refused(["cancel", "t"])
            #expect(again.status != 0 && again.stderr.contains("already finished (cancelled)") && !again.stderr.contains("not-found"), "\(again.stderr)")
            let stat = try runCommand(TestBinaries.cdctl, ["stat", "tea"])
            #expect(stat.status == 2 && stat.stderr.contains("did you mean 'status' or 'stats'?"), "\(stat.stderr)")
            let capitals = try runCommand(TestBinaries.cdctl, ["START", "tea"])
            #expect(capitals.status == 2 && capitals.stderr.contains("commands are lower case: did you mean 'start'?"), "\(capitals.stderr)")
            // list: as people sort, and several states in one --state or many.
            for name in ["many10", "many2", "many1", "many11"] { _ = try refused(["start", name, "1h"]) }
            _ = try refused(["pause", "many11"])
            let listed = try refused(["list", "--prefix", "many", "--format", "{name}"])
            #expect(listed.stdout == "many1\nmany2\nmany10\nmany11\n", "\(listed.stdout)")
            #expect(try refused(["list", "--state", "paused,cancelled", "--format", "{name}"]).stdout == "many11\nt\n")
            #expect(try refused(["list", "--state", "paused", "--state", "cancelled", "--format", "{name}"]).stdout == "many11\nt\n")
        }

        @Test("STATS counts events and measures lateness; cdctl stats prints it as a table, JSON, and Prometheus text")
        func stats() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            _ = try c.request("SUBSCRIBE")
            _ = try c.request("START brew 1500ms")
            _ = try c.waitForEvent { $0.name == "brew" && $0.kind == .done }
            let reply = try c.request("STATS")
            #expect(reply.outcome == .ok("\(reply.stats.count)"))
            let values = Dictionary(uniqueKeysWithValues: reply.stats.map { ($0.key, $0.value) })
            #expect(values["events_started"] == "1" && values["events_done"] == "1" && values["events_tick"] == "1")
            #expect(values["done_late_count"] == "1" && values["tick_late_count"] == "1")
            let p99 = try #require(values["done_late_p99_us"].flatMap(Int.init))
            #expect(p99 >= 0 && p99 < 1_000_000, "a done within a second of its deadline: \(p99) µs")
            #expect(values["storage"] == "ok" && values["finished"] == "1" && values["subscribers"] == "1")
            let json = try cdctl(["stats", "--json"], socket: daemon.socketPath)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
            #expect(object["events_done"] as? Int == 1 && object["storage"] as? String == "ok")
            let prometheus = try cdctl(["stats", "--prometheus"], socket: daemon.socketPath).stdout
            #expect(prometheus.contains("countdownd_countdowns{state=\"finished\"} 1\n"))
            #expect(prometheus.contains("countdownd_events_total{kind=\"done\"} 1\n"))
            #expect(prometheus.contains("countdownd_done_lateness_seconds{quantile=\"0.99\"} "))
            #expect(prometheus.contains("countdownd_done_lateness_seconds_count 1\n") && prometheus.contains("countdownd_done_lateness_seconds_sum "))
            #expect(!prometheus.contains("quantile=\"1\""), "a maximum is a gauge of its own")
            #expect(prometheus.contains("# TYPE countdownd_done_lateness_max_seconds gauge\n"))
            #expect(prometheus.contains("countdownd_storage_ok 1\n"))
            // The text format: comments, or `name{labels} value`.
            for line in prometheus.split(separator: "\n") where !line.hasPrefix("#") {
                let parts = line.split(separator: " ")
                #expect(parts.count == 2 && parts[0].hasPrefix("countdownd_") && Double(parts[1]) != nil, "not a sample: \(line)")
                // Exact decimals: microseconds have at most six places, never float noise.
                #expect((parts.last?.split(separator: ".").dropFirst().first?.count ?? 0) <= 6, "float noise: \(line)")
            }
            // Every family says what it is.
            let families = Set(prometheus.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.map { $0.split(separator: " ")[2] })
            let helped = Set(prometheus.split(separator: "\n").filter { $0.hasPrefix("# HELP ") }.map { $0.split(separator: " ")[2] })
            #expect(families == helped && families.contains("countdownd_journal_generation") && families.contains("countdownd_replay_kept_after"))

            let table = try cdctl(["stats"], socket: daemon.socketPath).stdout
            #expect(table.contains("events_done") && table.contains("storage"))
        }

        @Test(
            "cdctl stats --prometheus passes promtool check metrics, with every figure present (lateness, subscribers, cluster-free)",
            .enabled(if: toolExists("/usr/bin/promtool"), "promtool (Debian's prometheus package) is not installed; make test installs it as root")
        )
        func promtoolAccepts() throws {
            let daemon = try DaemonProcess()
            let subscriber = try daemon.connect()
            _ = try subscriber.request("SUBSCRIBE")
            _ = try cdctl(["start", "egg", "300ms"], socket: daemon.socketPath)
            _ = try subscriber.waitForEvent(timeout: 30) { $0.kind == .done }
            let prometheus = try cdctl(["stats", "--prometheus"], socket: daemon.socketPath).stdout
            #expect(prometheus.contains("countdownd_done_lateness_seconds_count 1\n"))
            let checked = try runCommand("/bin/sh", ["-c", "printf '%s' \"$0\" | /usr/bin/promtool check metrics", prometheus], timeout: 60)
            #expect(checked.status == 0 && checked.stdout.isEmpty && checked.stderr.isEmpty, "promtool: \(checked.stdout)\(checked.stderr)")
        }

        @Test("status --follow rides through a daemon restart, shows what happened meanwhile, and prints an empty line when its countdown is removed")
        func followAcrossRestart() throws {
            let daemon = try DaemonProcess()
            _ = try cdctl(["start", "tea", "1h"], socket: daemon.socketPath)
            let output = daemon.directory.file("follow.out")
            let file = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            let follower = try ChildProcess(
                TestBinaries.cdctl, ["--socket", daemon.socketPath, "status", "tea", "--follow", "--format", "{name} {state}"],
                environment: ProcessInfo.processInfo.environment, stdout: file, stderr: file
            )
            close(file)
            defer {
                follower.signal(SIGKILL)
                follower.wait()
            }
            func lines() -> [String] {
                ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            }
            try waitUntil(timeout: 60) { lines().contains("tea running") }
            #expect(daemon.terminate() == 0)
            let second = try DaemonProcess(directory: daemon.directory)
            _ = try cdctl(["pause", "tea"], socket: second.socketPath)
            try waitUntil(timeout: 60) { lines().contains("tea paused") }
            _ = try cdctl(["cancel", "tea"], socket: second.socketPath)
            _ = try cdctl(["rm", "tea"], socket: second.socketPath)
            try waitUntil(timeout: 60) { lines().contains("tea cancelled") && lines().suffix(2) == ["", ""] }
            #expect(follower.isRunning, "it keeps following")
            #expect(lines().contains { $0.contains("reconnecting") }, "it said why it reconnected")
        }

        @Test(
            "--then without a user manager: the command runs detached when the countdown is done, and not at all when it is cancelled",
            .enabled(if: toolExists("/bin/sh"), "no /bin/sh")
        )
        func thenWithoutUserManager() throws {
            let daemon = try DaemonProcess()
            let noManager = daemon.directory.file("no-manager")
            try FileManager.default.createDirectory(atPath: noManager, withIntermediateDirectories: true)
            let environment = ["XDG_RUNTIME_DIR": noManager, "DBUS_SESSION_BUS_ADDRESS": "unix:path=\(noManager)/none"]
            let done = daemon.directory.file("done-ran"), cancelled = daemon.directory.file("cancelled-ran")
            let before = unixNowMilliseconds()
            let started = try runCommand(TestBinaries.cdctl, ["--socket", daemon.socketPath, "start", "brew", "1500ms", "--then", "touch '\(done)'"], environment: environment)
            #expect(started.status == 0 && started.stdout.contains("then runs 'touch") && started.stdout.contains("no user manager"), "\(started.stdout)\(started.stderr)")
            let other = try runCommand(TestBinaries.cdctl, ["--socket", daemon.socketPath, "start", "other", "1h", "--then", "touch '\(cancelled)'"], environment: environment)
            let pid = try #require(other.stdout.firstMatch(of: #/from process (\d+)/#).flatMap { pid_t($0.1) })
            _ = try cdctl(["cancel", "other"], socket: daemon.socketPath)
            try waitUntil(timeout: 60) { FileManager.default.fileExists(atPath: done) }
            // Nothing ran before the countdown was done: the file is no older than its deadline,
            // which is at least 1.5 s after the moment before cdctl was started.
            var info = stat()
            #expect(stat(done, &info) == 0)
            let touched = Double(info.st_mtim.tv_sec) * 1000 + Double(info.st_mtim.tv_nsec) / 1e6
            #expect(touched >= before + 1500 - CorrectnessBounds.earlinessMilliseconds - 10, "the command ran \(before + 1500 - touched) ms before the deadline")
            // The waiter of the cancelled one ends without running its command.
            try waitUntil(timeout: 60) { kill(pid, 0) != 0 }
            #expect(!FileManager.default.fileExists(atPath: cancelled))
            #expect(try runCommand(TestBinaries.cdctl, ["start", "x", "--then", "  "]).status == 2, "an empty --then is a usage error")
            // A descriptor the caller holds (a lock on fd 9) does not reach the waiter, which
            // lives as long as the countdown: it has only /dev/null open (the shell keeps a copy
            // of its stdout on fd 10 while it runs `cdctl wait >/dev/null`).
            let lock = daemon.directory.file("lock")
            let held = try runCommand("/bin/sh", ["-c", "exec 9>\"$1\"; exec \"$2\" --socket \"$3\" start held 1h --then true", "sh", lock, TestBinaries.cdctl, daemon.socketPath], environment: environment)
            let waiter = try #require(held.stdout.firstMatch(of: #/from process (\d+)/#).flatMap { pid_t($0.1) }, "\(held.stdout)\(held.stderr)")
            let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(waiter)/fd").sorted()
            let targets = descriptors.map { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(waiter)/fd/\($0)")) ?? "?" }
            #expect(!descriptors.contains("9") && targets.allSatisfy { $0 == "/dev/null" }, "the waiter holds \(zip(descriptors, targets).map { "\($0)->\($1)" })")
            _ = try cdctl(["cancel", "held"], socket: daemon.socketPath)
            try waitUntil(timeout: 60) { kill(waiter, 0) != 0 }
        }

        @Test("a subscriber to one name among 1,000 running countdowns makes only that one tick (counted by STATS)")
        func ticksOnlyWhereWatched() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            try c.send((0..<1000).map { "START c\($0) 1h\n" }.joined() + "START pomodoro 1h\n")
            for _ in 0...1000 { _ = try c.readReply() }
            let bar = try daemon.connect()
            _ = try bar.request("SUBSCRIBE pomodoro")
            // Leaving ends the only interest in ticks.
            let ticks = try ticksUntilInterestEnds(on: bar, endingWith: "UNSUBSCRIBE")
            let emitted = try #require(try statValue("events_tick", on: c))
            #expect(emitted == ticks.count, "\(emitted) ticks emitted, \(ticks.count) delivered: only the followed countdown ticks")
        }
    }
}
