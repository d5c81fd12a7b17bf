import CountdownCore
import Foundation
import Testing

extension Integration {
    @Suite("cdctl against the real daemon")
    struct CdctlTests {
        @Test("a cluster host whose copy trails etcd (OK … replica <revision> behind): cdctl list and status show what it sent, and say on standard error that it may be out of date; without `behind`, nothing is said", arguments: [true, false])
        func behindCopy(behind: Bool) throws {
            let directory = TemporaryDirectory()
            let path = directory.path + "/scripted.sock"
            let ending = behind ? " behind" : ""
            let countdown = "COUNTDOWN tea running 0 60000 1798135200000 1000\n"
            for (arguments, answer) in [(["list"], "OK 0 replica 5\(ending)\n"), (["status", "tea"], countdown + "OK 1 replica 5\(ending)\n")] {
                let server = try ScriptedServer(path: path, answer: answer)
                let result = try cdctl(arguments, socket: path)
                server.finish()
                #expect(result.status == 0, "\(result.stderr)")
                #expect(result.stderr.contains("copy of the cluster trails etcd") == behind, "\(arguments): \(result.stderr)")
                #expect(result.stdout.isEmpty == false)
            }
        }

        @Test("start, status, list, pause, resume, extend, cancel: output and exit codes")
        func lifecycle() throws {
            let daemon = try DaemonProcess()
            let s = daemon.socketPath
            let started = try cdctl(["start", "tea", "3m"], socket: s)
            #expect(started.status == 0 && started.stdout == "tea: running, 0:03:00 left of 0:03:00\n")
            let busy = try cdctl(["start", "tea", "3m"], socket: s)
            #expect(busy.status == 4 && busy.stderr.contains("(busy)"))
            #expect(try cdctl(["start", "tea", "1m", "--replace"], socket: s).status == 0)
            let status = try cdctl(["status", "tea"], socket: s)
            #expect(status.status == 0 && status.stdout.hasPrefix("NAME ") && status.stdout.contains("tea   running"))
            let json = try cdctl(["status", "tea", "--json"], socket: s)
            let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
            #expect(object?["name"] as? String == "tea" && object?["total_ms"] as? Int == 60_000 && object?["state"] as? String == "running")
            #expect(try cdctl(["pause", "tea"], socket: s).stdout.hasPrefix("tea: paused"))
            #expect(try cdctl(["resume", "tea"], socket: s).stdout.hasPrefix("tea: running"))
            #expect(try cdctl(["extend", "tea", "1m"], socket: s).stdout.hasSuffix("of 0:02:00\n"))
            #expect(try cdctl(["cancel", "tea"], socket: s).stdout.hasPrefix("tea: cancelled"))
            let list = try cdctl(["list", "--json"], socket: s)
            let array = try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]]
            #expect(array?.count == 1 && array?.first?["state"] as? String == "cancelled")
        }

        @Test("an unknown name exits 3 and suggests the closest one")
        func notFound() throws {
            let daemon = try DaemonProcess()
            _ = try cdctl(["start", "pomodoro", "25m"], socket: daemon.socketPath)
            let result = try cdctl(["cancel", "pomodor"], socket: daemon.socketPath)
            #expect(result.status == 3)
            #expect(result.stderr.contains("did you mean 'pomodoro'?"))
        }

        @Test("an unreachable daemon exits 6, naming the socket and how to start it")
        func unreachable() throws {
            let directory = TemporaryDirectory()
            let result = try cdctl(["list"], socket: directory.file("none.sock"))
            #expect(result.status == 6)
            #expect(result.stderr.contains(directory.file("none.sock")))
            #expect(result.stderr.contains("systemctl"))
        }

        @Test("usage errors exit 2")
        func usage() throws {
            let result = try runCommand(TestBinaries.cdctl, ["start", "tea", "soon"])
            #expect(result.status == 2 && result.stderr.contains("bad duration"))
            #expect(try runCommand(TestBinaries.cdctl, ["--help"]).stdout.contains("Exit codes:"))
        }

        @Test("wait: 0 when done, 5 when cancelled, 3 when unknown, at once when already finished")
        func waitExitCodes() throws {
            let daemon = try DaemonProcess()
            let s = daemon.socketPath
            _ = try cdctl(["start", "quick", "1500ms"], socket: s)
            let waited = try cdctl(["wait", "quick"], socket: s)
            #expect(waited.status == 0)
            #expect(try cdctl(["status", "quick"], socket: s).stdout.contains("done"))

            // Already finished: returns at once with the outcome.
            #expect(try cdctl(["wait", "quick"], socket: s, timeout: 30).status == 0)

            #expect(try cdctl(["wait", "ghost"], socket: s).status == 3)

            // Cancelled while waited for: a second client cancels once the waiter is subscribed.
            _ = try cdctl(["start", "long", "1h"], socket: s)
            let watcher = try daemon.connect()
            _ = try watcher.request("SUBSCRIBE long")
            let waiter = try ChildProcess(TestBinaries.cdctl, ["--socket", s, "wait", "long"], environment: ProcessInfo.processInfo.environment)
            // The waiter subscribes before it reads STATUS; the daemon's STATUS= line to systemd
            // counts subscribers, so wait until it shows the waiter beside the watcher.
            try waitUntil(timeout: 60) { subscriberCount(daemon) >= 2 }
            _ = try cdctl(["cancel", "long"], socket: s)
            #expect(waiter.wait() == 5)
        }

        @Test("wait rides through a daemon restart: it reconnects and still sees the countdown finish")
        func waitSurvivesRestart() throws {
            let directory = TemporaryDirectory()
            var daemon = try DaemonProcess(directory: directory)
            _ = try cdctl(["start", "build", "2500ms"], socket: daemon.socketPath)
            let watcher = try daemon.connect()
            _ = try watcher.request("SUBSCRIBE build")
            let waiter = try ChildProcess(TestBinaries.cdctl, ["--socket", daemon.socketPath, "wait", "build"], environment: ProcessInfo.processInfo.environment)
            try waitUntil(timeout: 60) { subscriberCount(daemon) >= 2 }  // The waiter is subscribed.
            #expect(daemon.terminate() == 0)
            daemon = try DaemonProcess(directory: directory)
            #expect(waiter.wait() == 0, "the countdown finished after the restart, and wait saw it")
            #expect(try daemon.connect().request("STATUS build").countdowns.first?.state == .done)
        }

        @Test("watch into a pipe, having printed nothing yet, rides through a restart whose late done comes before it is back: it resumes from the number it subscribed at, so that done is printed, once, before what follows")
        func watchResumesFromItsSubscription() throws {
            let directory = TemporaryDirectory()
            var daemon = try DaemonProcess(directory: directory)
            let started = monotonicNow()
            _ = try cdctl(["start", "tea", "3s"], socket: daemon.socketPath)
            let outPath = directory.file("watch.out")
            let out = open(outPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            let watcher: ChildProcess
            do {
                defer { close(out) }
                watcher = try ChildProcess(
                    TestBinaries.cdctl, ["--socket", daemon.socketPath, "watch", "--events", "lifecycle"],
                    environment: ProcessInfo.processInfo.environment, stdout: out
                )
            }
            defer {
                watcher.signal(SIGKILL)
                watcher.wait()
            }
            func lines() -> [String] {
                let text = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
                return text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
            }
            try waitUntil(timeout: 60) { subscriberCount(daemon) >= 1 }
            #expect(daemon.terminate() == 0)
            // Down past tea's deadline: the restart announces its done (late) before it listens.
            try waitUntil(timeout: 60) { monotonicNow() - started > 3.5 }
            daemon = try DaemonProcess(directory: directory)
            try waitUntil(timeout: 60) { subscriberCount(daemon) >= 1 }  // The watcher is back.
            _ = try cdctl(["start", "marker", "1h"], socket: daemon.socketPath)
            try waitUntil(timeout: 60) { lines().contains { $0.contains(" started marker ") } }
            let printed = lines()
            let done = printed.indices.filter { printed[$0].contains(" done tea ") }
            #expect(done.count == 1, "tea's done, once: \(printed)")
            #expect(done.first.map { $0 < printed.firstIndex { $0.contains(" started marker ") }! } == true, "in order: \(printed)")
        }

        @Test("watch into a pipe, when the daemon that comes back no longer has the events after the last it printed (its state was lost), says so on stderr and follows on")
        func watchSaysWhenItCannotResume() throws {
            let directory = TemporaryDirectory()
            var daemon = try DaemonProcess(directory: directory)
            let (outPath, errPath) = (directory.file("watch.out"), directory.file("watch.err"))
            let out = open(outPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            let err = open(errPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            let watcher: ChildProcess
            do {
                defer { close(out); close(err) }
                watcher = try ChildProcess(
                    TestBinaries.cdctl, ["--socket", daemon.socketPath, "watch", "--events", "lifecycle"],
                    environment: ProcessInfo.processInfo.environment, stdout: out, stderr: err
                )
            }
            defer {
                watcher.signal(SIGKILL)
                watcher.wait()
            }
            func lines(_ path: String) -> [String] {
                let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
                return text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
            }
            try waitUntil(timeout: 60) { subscriberCount(daemon) >= 1 }
            for name in ["a", "b", "c"] { _ = try cdctl(["start", name, "1h"], socket: daemon.socketPath) }
            try waitUntil(timeout: 60) { lines(outPath).count == 3 }
            #expect(daemon.terminate() == 0)
            // The same socket, a state directory that starts from nothing: its numbers begin again.
            daemon = try DaemonProcess(arguments: ["--state-dir", directory.file("another-state")], directory: directory)
            try waitUntil(timeout: 60) { subscriberCount(daemon) >= 1 }
            _ = try cdctl(["start", "z", "1h"], socket: daemon.socketPath)
            try waitUntil(timeout: 60) { lines(outPath).contains { $0.contains(" started z ") } || !watcher.isRunning }
            #expect(watcher.isRunning, "it follows on")
            #expect(lines(outPath).last?.hasPrefix("1 started z ") == true, "\(lines(outPath))")
            #expect(lines(errPath).contains { $0.contains("no longer has the events after 3") }, "\(lines(errPath))")
        }

        @Test("start --wait blocks until the countdown is done")
        func startWait() throws {
            let daemon = try DaemonProcess()
            let before = monotonicNow()
            let result = try cdctl(["start", "brew", "1200ms", "--wait"], socket: daemon.socketPath)
            #expect(result.status == 0)
            #expect(monotonicNow() - before >= 1.1)
        }
    }
}

/// Polls a condition that depends on another process, up to `timeout` seconds.
func waitUntil(timeout: Double, interval: Double = 0.01, _ condition: () throws -> Bool) throws {
    let deadline = monotonicNow() + timeout
    while try !condition() {
        guard monotonicNow() < deadline else { throw HarnessError.unexpected("condition not met within \(timeout) s") }
        usleep(useconds_t(interval * 1_000_000))
    }
}

/// How many subscribers the daemon has, read from the status it reports to systemd.
func subscriberCount(_ daemon: DaemonProcess) -> Int {
    daemon.notify.drain()
    guard let last = daemon.notify.lines(withPrefix: "STATUS=").last,
          let match = last.firstMatch(of: #/(\d+) subscribers/#) else { return 0 }
    return Int(match.1) ?? 0
}
