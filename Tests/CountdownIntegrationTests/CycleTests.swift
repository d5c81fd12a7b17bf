import CountdownClient
import CountdownCore
import Foundation
import Glibc
import Testing

extension Integration {
    @Suite("Cycles of phases on the real binaries: SIGKILL at boundaries, replay, cdctl, the README's waybar module")
    struct CycleTests {
        @Test("SIGKILL right after phase events and at other moments: each of 40 boundaries announced once, in order, and SINCE 0 replays them so")
        func killsAtBoundaries() throws {
            let directory = TemporaryDirectory()
            var daemon = try DaemonProcess(directory: directory)
            // 41 phases of 150 ms: the boundaries come faster than a restart, so some pass while
            // the daemon is down, and the kills land near them.
            let phases = (0..<41).map { "150ms:p\($0)" }.joined(separator: ",")
            _ = try daemon.connect().request("START c CYCLE \(phases)")
            var seen: [EventInfo] = []
            var kills = 0
            while !seen.contains(where: { $0.kind == .done }) {
                let watcher = try daemon.connect()
                _ = try watcher.request("SUBSCRIBE c EVENTS lifecycle SINCE \(seen.last?.sequence ?? 0)")
                // Wait for the next change (it may be a replay of one made before the last
                // kill), then kill at once: the daemon is at a boundary it has just announced.
                let event = try watcher.waitForEvent(timeout: 60) { _ in true }
                seen.append(event)
                // Every other time, one more event first: the kill falls elsewhere in a phase.
                if kills % 2 == 1, event.kind != .done, let more = try? watcher.waitForEvent(timeout: 60, where: { _ in true }) {
                    seen.append(more)
                }
                guard !seen.contains(where: { $0.kind == .done }) else { break }
                daemon.crash()
                kills += 1
                daemon = try DaemonProcess(directory: directory)
            }
            #expect(kills >= 5, "the cycle ran through \(kills) kills")
            let replay = try daemon.connect()
            _ = try replay.request("SUBSCRIBE c EVENTS lifecycle SINCE 0")
            var replayed: [EventInfo] = []
            while replayed.last?.kind != .done {
                replayed.append(try replay.waitForEvent(timeout: 60) { _ in true })
            }
            #expect(replayed.map(\.kind) == [.started] + Array(repeating: .phase, count: 40) + [.done], "\(replayed.map(\.kind))")
            #expect(replayed.dropFirst().dropLast().map { $0.cycle?.phase } == Array(2...41), "each phase once, in order")
            #expect(replayed.dropFirst().dropLast().map { $0.cycle?.label } == (1...40).map { "p\($0)" })
            #expect(replayed.last?.cycle == CyclePosition(phase: 41, phases: 41, label: "p40"))
            #expect(zip(replayed, replayed.dropFirst()).allSatisfy { $0.sequence + 1 == $1.sequence }, "numbered one by one")
            // What the watchers saw live is the same, without repeats.
            let live = seen.filter { $0.kind == .phase }.map { $0.cycle?.phase ?? 0 }
            #expect(live == live.sorted() && Set(live).count == live.count, "\(live)")
        }

        @Test("a cycle's removed event names its phase live, and in SINCE 0's replay after a SIGKILL as before it")
        func removedKeepsPhaseThroughKill() throws {
            let directory = TemporaryDirectory()
            var daemon = try DaemonProcess(directory: directory)
            let client = try daemon.connect()
            for request in ["START pom CYCLE 25m:work,5m:break REPEAT 4", "CANCEL pom", "REMOVE pom"] {
                let reply = try client.request(request)
                guard case .ok = reply.outcome else {
                    Issue.record("\(request): \(reply)")
                    return
                }
            }
            func replay(_ daemon: DaemonProcess) throws -> [EventInfo] {
                let replay = try daemon.connect()
                _ = try replay.request("SUBSCRIBE pom EVENTS lifecycle SINCE 0")
                return try (0..<3).map { _ in try replay.waitForEvent(timeout: 60) { _ in true } }
            }
            let before = try replay(daemon)
            #expect(before.map(\.kind) == [.started, .cancelled, .removed])
            #expect(before.last?.cycle == CyclePosition(phase: 1, phases: 2, label: "work", round: 1, rounds: 4), "\(String(describing: before.last))")
            daemon.crash()
            daemon = try DaemonProcess(directory: directory)
            let after = try replay(daemon)
            #expect(after == before, "the journal keeps the removed event's phase")
        }

        @Test("cdctl start --pomodoro, skip, status and list show the phase; STATUS after a clean restart too")
        func cdctlCycle() throws {
            let directory = TemporaryDirectory()
            var daemon = try DaemonProcess(directory: directory)
            let started = try cdctl(["start", "focus", "--pomodoro", "--repeat", "2"], socket: daemon.socketPath)
            #expect(started.stdout == "focus: running, 0:25:00 left of 0:25:00 in work, phase 1 of 8 (round 1 of 2)\n", "\(started.stdout)\(started.stderr)")
            let skipped = try cdctl(["skip", "focus"], socket: daemon.socketPath)
            #expect(skipped.stdout.hasPrefix("focus: running, 0:05:00 left of 0:05:00 in break, phase 2 of 8"), "\(skipped.stdout)\(skipped.stderr)")
            let plain = try cdctl(["start", "tea", "3m"], socket: daemon.socketPath)
            #expect(plain.status == 0)
            let refused = try cdctl(["skip", "tea"], socket: daemon.socketPath)
            #expect(refused.status != 0 && refused.stderr.contains("'tea' is not a cycle"), "\(refused.stderr)")
            #expect(daemon.terminate() == 0)
            daemon = try DaemonProcess(directory: directory)
            let json = try cdctl(["status", "focus", "--json"], socket: daemon.socketPath)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any], "\(json.stdout)")
            #expect(object["label"] as? String == "break" && object["phase"] as? Int == 2 && object["phases"] as? Int == 8)
            #expect(object["round"] as? Int == 1 && object["rounds"] as? Int == 2)
            let list = try cdctl(["list", "--format", "{name} {label} {phase}/{phases} {round}"], socket: daemon.socketPath)
            #expect(list.stdout == "focus break 2/8 1\ntea  / \n", "\(list.stdout)")
            // A bar's restart click: no duration, so the same phases from the first.
            let restarted = try cdctl(["start", "focus", "--replace"], socket: daemon.socketPath)
            #expect(restarted.stdout.hasPrefix("focus: restarted (the running one") && restarted.stdout.hasSuffix("in work, phase 1 of 8 (round 1 of 2)\n"), "\(restarted.stdout)\(restarted.stderr)")
            let plainAgain = try cdctl(["start", "focus", "10m", "--replace"], socket: daemon.socketPath)
            #expect(plainAgain.stdout.hasSuffix("0:10:00 left of 0:10:00\n"), "with a duration, a plain countdown: \(plainAgain.stdout)")
        }

        @Test("cdctl set NAME --pause-on-suspend changes a running countdown without restarting it; a follower sees it; a finished one is refused with exit 3")
        func setOnSuspend() throws {
            let daemon = try DaemonProcess()
            let started = try cdctl(["start", "pomodoro", "25m"], socket: daemon.socketPath)
            #expect(started.status == 0)
            let watcher = try daemon.connect()
            _ = try watcher.request("SUBSCRIBE pomodoro EVENTS lifecycle")
            let set = try cdctl(["set", "pomodoro", "--pause-on-suspend"], socket: daemon.socketPath)
            #expect(set.status == 0 && set.stdout.hasSuffix("left of 0:25:00; stands still while the machine sleeps\n"), "\(set.stdout)\(set.stderr)")
            let event = try watcher.waitForEvent(timeout: 30) { _ in true }
            #expect(event.kind == .changed && event.pausesOnSuspend == true, "\(event)")
            let format = try cdctl(["status", "pomodoro", "--format", "{state} {on_suspend} {total}"], socket: daemon.socketPath)
            #expect(format.stdout == "running pause 25:00\n", "\(format.stdout)")
            #expect(try cdctl(["set", "pomodoro", "--count-on-suspend"], socket: daemon.socketPath).stdout.hasSuffix("left of 0:25:00\n"))
            _ = try cdctl(["cancel", "pomodoro"], socket: daemon.socketPath)
            let finished = try cdctl(["set", "pomodoro", "--pause-on-suspend"], socket: daemon.socketPath)
            #expect(finished.status == 3 && finished.stderr.contains("already finished"), "\(finished.status) \(finished.stderr)")
        }

        @Test(
            "--then-each (no user manager): the command runs once at each phase, with the phase in its environment, in order, and the waiter ends with the cycle",
            .enabled(if: toolExists("/bin/sh"), "no /bin/sh")
        )
        func thenEach() throws {
            let daemon = try DaemonProcess()
            let noManager = daemon.directory.file("no-manager")
            try FileManager.default.createDirectory(atPath: noManager, withIntermediateDirectories: true)
            let environment = ["XDG_RUNTIME_DIR": noManager, "DBUS_SESSION_BUS_ADDRESS": "unix:path=\(noManager)/none"]
            let log = daemon.directory.file("phases.log")
            let started = try runCommand(
                TestBinaries.cdctl,
                ["--socket", daemon.socketPath, "start", "quick", "--cycle", "300ms:a,300ms:b,300ms:c", "--repeat", "2",
                 "--then-each", "echo \"$COUNTDOWN_NAME $COUNTDOWN_PHASE/$COUNTDOWN_PHASES $COUNTDOWN_LABEL $COUNTDOWN_ROUND\" >> '\(log)'",
                 "--then", "echo done >> '\(log)'"],
                environment: environment
            )
            #expect(started.status == 0 && started.stdout.contains("at each phase, from process"), "\(started.stdout)\(started.stderr)")
            let pid = try #require(started.stdout.firstMatch(of: #/at each phase, from process (\d+)/#).flatMap { pid_t($0.1) })
            func lines() -> [String] {
                ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            }
            try waitUntil(timeout: 60) { lines().contains("done") }
            try waitUntil(timeout: 60) { kill(pid, 0) != 0 }
            let phases = lines().filter { $0 != "done" }
            #expect(phases == ["quick 2/3 b 1", "quick 3/3 c 1", "quick 1/3 a 2", "quick 2/3 b 2", "quick 3/3 c 2"], "\(lines())")
            let refused = try runCommand(TestBinaries.cdctl, ["--socket", daemon.socketPath, "start", "tea", "3m", "--then-each", "true"])
            #expect(refused.status == 2 && refused.stderr.contains("for a plain countdown use --then"), "\(refused.stderr)")
        }

        @Test("the README's waybar module, run as waybar runs it: the phase's label and time left, a click pauses, a right click skips")
        func readmeWaybarModule() throws {
            let readme = try String(contentsOfFile: "\(packageRoot)/README.md", encoding: .utf8)
            let start = try #require(readme.range(of: "\"custom/focus\": {"), "the README has the focus module")
            let end = try #require(readme[start.upperBound...].range(of: "\n}\n"))
            let block = "{" + readme[start.lowerBound..<end.lowerBound] + "\n}}"
            let module = try #require(try JSONSerialization.jsonObject(with: Data(block.utf8)) as? [String: [String: Any]])["custom/focus"]
            let exec = try #require(module?["exec"] as? String)
            let click = try #require(module?["on-click"] as? String), rightClick = try #require(module?["on-click-right"] as? String)
            #expect(module?["return-type"] as? String == "json")

            let daemon = try DaemonProcess()
            _ = try cdctl(["start", "focus", "--pomodoro"], socket: daemon.socketPath)
            let environment = [
                "PATH": "\(TestBinaries.directory):/usr/bin:/bin",
                "COUNTDOWND_SOCKET": daemon.socketPath,
            ]
            let scratch = TemporaryDirectory()  // Kept: it is removed when released.
            let output = scratch.file("waybar.out")
            let out = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            // waybar runs `exec` through sh -c and reads a JSON object per line.
            let bar = try ChildProcess("/bin/sh", ["-c", exec], environment: environment, stdout: out)
            close(out)
            defer {
                bar.signal(SIGKILL)
                bar.wait()
            }
            func objects() -> [[String: Any]] {
                ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                    try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
                }
            }
            func shown(_ object: [String: Any]?) -> String {
                "\(object?["text"] ?? "-") \(object?["class"] ?? "-") \(object?["tooltip"] ?? "-")"
            }
            func lastShown(_ what: String, _ matches: @escaping (String) -> Bool) throws {
                do {
                    try waitUntil(timeout: 30) { objects().last.map { matches(shown($0)) } ?? false }
                } catch {
                    Issue.record("\(what): the bar showed \(((try? String(contentsOfFile: output, encoding: .utf8)) ?? "nothing").suffix(400))")
                    throw error
                }
            }
            try lastShown("started") { $0.hasPrefix("work 2") && $0.hasSuffix("running phase 1 of 8") }
            #expect(objects().allSatisfy { $0["percentage"] is Int && $0["alt"] as? String == "work" })
            #expect(try runCommand("/bin/sh", ["-c", click], environment: environment).status == 0)
            try lastShown("clicked") { $0.hasSuffix("paused phase 1 of 8") }
            #expect(try runCommand("/bin/sh", ["-c", rightClick], environment: environment).status == 0)
            try lastShown("right-clicked") { $0.hasPrefix("break 5:00 running") || $0.hasPrefix("break 4:5") }
            #expect(shown(objects().last).hasSuffix("running phase 2 of 8"), "\(shown(objects().last))")
        }
    }
}
