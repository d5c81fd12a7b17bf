import CountdownClient
import CountdownCore
import Foundation
import Glibc
import Testing

/// Whether an executable is on this machine, for skipping with a reason.
func toolExists(_ path: String) -> Bool {
    FileManager.default.isExecutableFile(atPath: path)
}

let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

extension Integration {
    @Suite("systemd: notify protocol, watchdog, socket activation, units, a real user manager")
    struct SystemdTests {
        @Test("READY=1 comes only once the socket accepts connections, with a STATUS= line")
        func readiness() throws {
            let daemon = try DaemonProcess(waitForReady: false)
            let ready = try #require(daemon.notify.waitFor("READY=1", timeout: 60), "no READY=1: \(daemon.stderrText)")
            #expect(ready == "READY=1")
            // Connect exactly once, right now: no retry. A READY=1 sent early would fail here.
            let connection = try CountdownConnection(path: daemon.socketPath, timeout: 30)
            #expect(try connection.request("PING").outcome == .ok("pong"))
            #expect(daemon.notify.lines(withPrefix: "STATUS=").first == "STATUS=0 running, 0 paused, 0 subscribers, 0 connections")
        }

        @Test("STATUS= follows changes, at most once per --status-interval, and ends on the truth")
        func statusUpdates() throws {
            // A one-second interval: the 52 changes below take far less on any machine, and the
            // bound is computed from the time they really took, so a slow run only loosens it.
            let daemon = try DaemonProcess(arguments: ["--status-interval", "1000"])
            _ = daemon.notify.waitFor("READY=1", timeout: 60)
            let began = monotonicNow()
            let c = try daemon.connect()
            _ = try c.request("SUBSCRIBE")
            for index in 0..<50 {
                _ = try c.request("START s\(index) 1h")
            }
            _ = try c.request("PAUSE s0")
            let expected = "STATUS=49 running, 1 paused, 1 subscribers, 1 connections"
            let deadline = monotonicNow() + 30
            while daemon.notify.lines(withPrefix: "STATUS=").last != expected && monotonicNow() < deadline {
                _ = daemon.notify.waitFor("STATUS=49", timeout: 0.5)
                daemon.notify.drain()
            }
            let elapsed = monotonicNow() - began
            // The READY=1 datagram carries the first STATUS=; every later one is an update.
            let updates = daemon.notify.lines(withPrefix: "STATUS=").dropFirst()
            #expect(updates.last == expected)
            // At most one update per second of the test's own measured time, plus the first.
            let allowed = Int(elapsed.rounded(.up)) + 1
            #expect(updates.count <= allowed && updates.count < 52, "\(updates.count) updates in \(elapsed) s for 52 changes: rate-limited to \(allowed)")
        }

        @Test("a service manager that stops reading STATUS= updates cannot wedge the daemon")
        func unreadNotifySocket() throws {
            // Every change sends STATUS=; the listener reads READY=1 and then nothing. A Unix
            // datagram socket queues at most net.unix.max_dgram_qlen (512) datagrams; a blocking
            // sender waits after that.
            let daemon = try DaemonProcess(arguments: ["--status-interval", "0"])
            let control = try daemon.connect()
            let started = monotonicNow()
            for index in 0..<800 {
                _ = try control.request("START n\(index) 1h", timeout: 5)
            }
            #expect(try control.request("PING", timeout: 5).outcome == .ok("pong"))
            #expect(monotonicNow() - started < 30)
            // Reading again lets the coalesced latest status through.
            #expect(daemon.notify.waitFor("STATUS=800 running", timeout: 10) != nil)
        }

        @Test("WATCHDOG=1 is sent at half the interval while the queue is healthy")
        func watchdog() throws {
            let daemon = try DaemonProcess(environment: ["WATCHDOG_USEC": "400000"], watchdogPIDSelf: true)
            // The period it chose, in its own words, then the pings themselves.
            #expect(daemon.stderrText.contains("watchdog enabled: pinging every 200 ms"), "\(daemon.stderrText)")
            #expect(daemon.notify.waitFor("WATCHDOG=1", timeout: 20) != nil)
            daemon.notify.clear()
            let start = monotonicNow()
            for ping in 0..<10 {
                #expect(daemon.notify.waitFor("WATCHDOG=1", timeout: 20) != nil, "ping \(ping) never came")
                daemon.notify.clear()
            }
            // Ten more pings at a 200 ms period are sent over 2 s. A few may have queued while
            // the test was busy, but ten cannot arrive in a fraction of that unless the daemon
            // floods; a period of a second or more would take 10 s. (The period itself is the
            // log line above; these bounds only catch a timer that is badly wrong.)
            let elapsed = monotonicNow() - start
            #expect(elapsed >= 0.5 && elapsed < 10, "ten pings at a 200 ms period took \(elapsed) s")
        }

        @Test("no WATCHDOG=1 when systemd did not ask for one")
        func noWatchdogByDefault() throws {
            let daemon = try DaemonProcess()
            _ = try daemon.connect().request("START witness 1200ms")
            let subscriber = try daemon.connect()
            _ = try subscriber.request("SUBSCRIBE witness")
            _ = try subscriber.waitForEvent { $0.kind == .done }
            daemon.notify.drain()
            #expect(daemon.notify.lines(withPrefix: "WATCHDOG").isEmpty)
        }

        @Test(
            "socket activation through the real systemd-socket-activate: greeting, commands, socket not unlinked",
            .enabled(if: toolExists("/usr/bin/systemd-socket-activate"), "systemd-socket-activate is not installed")
        )
        func socketActivation() throws {
            let directory = TemporaryDirectory()
            let socketPath = directory.file("activated.sock")
            let notify = NotifyListener(path: directory.file("notify.sock"))
            let activator = try ChildProcess("/usr/bin/systemd-socket-activate", [
                "-l", socketPath, "--fdname=control", "-E", "NOTIFY_SOCKET=\(notify.path)",
                "-E", "XDG_STATE_HOME=\(directory.file("state"))",
                TestBinaries.countdownd, "--socket", directory.file("unused.sock"),
            ], environment: ProcessInfo.processInfo.environment)
            // The tool binds first, and execs the daemon on the first connection.
            try waitUntil(timeout: 60) { FileManager.default.fileExists(atPath: socketPath) }
            let connection = try CountdownConnection(path: socketPath, timeout: 10)
            #expect(connection.protocolVersion == 1)
            #expect(try connection.request("START activated 1h").countdown?.name == "activated")
            #expect(try connection.request("LIST").countdowns.map(\.name) == ["activated"])
            #expect(notify.waitFor("READY=1", timeout: 10) != nil)
            #expect(!FileManager.default.fileExists(atPath: directory.file("unused.sock")), "it used the passed socket, not --socket")
            activator.signal(SIGTERM)  // systemd-socket-activate exec'd into countdownd.
            #expect(activator.wait() == 0)
            #expect(FileManager.default.fileExists(atPath: socketPath), "a passed socket belongs to systemd and is never unlinked")
        }

        @Test(
            "every unit passes systemd-analyze verify (strict flags)",
            .enabled(if: toolExists("/usr/bin/systemd-analyze"), "systemd-analyze is not installed")
        )
        func unitsVerify() throws {
            let units = InstalledUnits()
            let system = try runCommand("/usr/bin/systemd-analyze", ["verify", "--recursive-errors=no", "--man=no"] + units.system)
            #expect(system.status == 0, "\(system.stdout)\(system.stderr)")
            let user = try runCommand(
                "/usr/bin/systemd-analyze", ["verify", "--user", "--recursive-errors=no", "--man=no"] + units.user,
                environment: ["XDG_RUNTIME_DIR": units.runtimeDirectory]
            )
            #expect(user.status == 0, "\(user.stdout)\(user.stderr)")
            // The check itself must be able to fail: a typo is caught.
            let typo = units.directory.file("typo.service")
            try "[Service]\nType=notify\nExecStart=\(TestBinaries.countdownd)\nProtectSytem=strict\n".write(toFile: typo, atomically: true, encoding: .utf8)
            #expect(try runCommand("/usr/bin/systemd-analyze", ["verify", "--recursive-errors=no", "--man=no", typo]).status != 0)
        }

        @Test(
            "the system service's exposure score is 0.5 or lower, the metrics service's 1.0 or lower",
            .enabled(if: toolExists("/usr/bin/systemd-analyze"), "systemd-analyze is not installed")
        )
        func securityScore() throws {
            let units = InstalledUnits()
            let service = try #require(units.system.first { $0.hasSuffix("/countdownd.service") })
            let result = try runCommand("/usr/bin/systemd-analyze", ["security", "--offline=yes", service])
            let match = try #require(result.stdout.firstMatch(of: #/Overall exposure level for countdownd.service: (\d+\.\d)/#), "\(result.stdout)")
            let score = try #require(Double(match.1))
            #expect(score <= 0.5, "exposure \(score)")
            let metrics = try #require(units.system.first { $0.hasSuffix("/countdownd-metrics.service") })
            let analysed = try runCommand("/usr/bin/systemd-analyze", ["security", "--offline=yes", metrics])
            let metricsMatch = try #require(analysed.stdout.firstMatch(of: #/Overall exposure level for countdownd-metrics.service: (\d+\.\d)/#), "\(analysed.stdout)")
            let metricsScore = try #require(Double(metricsMatch.1))
            #expect(metricsScore <= 1.0, "the metrics service's exposure \(metricsScore)")
        }

        @Test("the metrics service writes the textfile collector's file atomically, and removes it when the daemon is gone")
        func metricsTextfile() throws {
            let unit = try String(contentsOfFile: "\(packageRoot)/systemd/countdownd-metrics.service", encoding: .utf8)
            let execStart = try #require(unit.split(separator: "\n").first { $0.hasPrefix("ExecStart=") })
            // ExecStart=/bin/sh -c '<script>': the script, as systemd hands it to the shell.
            let script = try #require(execStart.firstMatch(of: #/^ExecStart=/bin/sh -c '(.*)'$/#)).1
                .replacingOccurrences(of: "@BINDIR@", with: TestBinaries.directory)
            let daemon = try DaemonProcess()
            let textfiles = daemon.directory.file("textfile")
            try FileManager.default.createDirectory(atPath: textfiles, withIntermediateDirectories: true)
            let environment = ["TEXTFILE_DIR": textfiles, "COUNTDOWND_SOCKET": daemon.socketPath]
            let written = try runCommand("/bin/sh", ["-c", script], environment: environment)
            #expect(written.status == 0, "\(written.stderr)")
            let text = try String(contentsOfFile: textfiles + "/countdownd.prom", encoding: .utf8)
            #expect(text.contains("# TYPE countdownd_countdowns gauge") && text.contains("countdownd_storage_ok 1"))
            #expect(try FileManager.default.contentsOfDirectory(atPath: textfiles) == ["countdownd.prom"], "no temporary file left")
            let mode = try #require(try FileManager.default.attributesOfItem(atPath: textfiles + "/countdownd.prom")[.posixPermissions] as? Int)
            #expect(mode == 0o644, "node_exporter (another user) reads it")
            #expect(daemon.terminate() == 0)
            let failed = try runCommand("/bin/sh", ["-c", script], environment: environment)
            #expect(failed.status != 0 && failed.stderr.contains("cdctl: cannot connect"), "\(failed.stderr)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: textfiles).isEmpty, "stale figures are not left for a scrape")
        }

        @Test(
            "the cluster drop-in verifies, opens only IP sockets and the network, and scores 1.5 or lower",
            .enabled(if: toolExists("/usr/bin/systemd-analyze"), "systemd-analyze is not installed")
        )
        func clusterDropIn() throws {
            let units = InstalledUnits()
            let service = try #require(units.system.first { $0.hasSuffix("/countdownd.service") })
            let dropIns = units.directory.file("countdownd.service.d")
            try FileManager.default.createDirectory(atPath: dropIns, withIntermediateDirectories: true)
            let text = try String(contentsOfFile: "\(packageRoot)/systemd/countdownd-cluster.conf", encoding: .utf8)
                .replacingOccurrences(of: "@BINDIR@", with: TestBinaries.directory)
                .replacingOccurrences(of: "@SYSCONFDIR@", with: units.configurationDirectory)
            try text.write(toFile: dropIns + "/cluster.conf", atomically: true, encoding: .utf8)
            let verified = try runCommand("/usr/bin/systemd-analyze", ["verify", "--recursive-errors=no", "--man=no", service])
            #expect(verified.status == 0, "\(verified.stdout)\(verified.stderr)")
            let result = try runCommand("/usr/bin/systemd-analyze", ["security", "--offline=yes", service])
            #expect(result.stdout.contains("✗ PrivateNetwork="), "the drop-in was read: the network is open")
            #expect(result.stdout.contains("✓ RestrictAddressFamilies=~AF_PACKET") && result.stdout.contains("✓ RestrictAddressFamilies=~AF_NETLINK"))
            let match = try #require(result.stdout.firstMatch(of: #/Overall exposure level for countdownd.service: (\d+\.\d)/#), "\(result.stdout)")
            let score = try #require(Double(match.1))
            #expect(score <= 1.5, "exposure \(score) with the cluster drop-in")
        }

        @Test(
            "under a real systemd --user manager: socket activation by cdctl, STATUS in systemctl status, clean stop",
            .enabled(if: getuid() == 0, "needs root for a private mount namespace (unshare --mount)"),
            .enabled(if: toolExists("/usr/bin/unshare") && toolExists("/lib/systemd/systemd"), "unshare or systemd is not installed")
        )
        func userManager() throws {
            let result = try runCommand(
                "/usr/bin/unshare",
                ["--mount", "bash", packageRoot + "/Tests/Scripts/systemd-user-session.sh", TestBinaries.directory, packageRoot + "/systemd/user"],
                timeout: 90
            )
            var seen: [String: String] = [:]
            for line in result.stdout.split(separator: "\n") {
                if let equals = line.firstIndex(of: "=") {
                    seen[String(line[..<equals])] = String(line[line.index(after: equals)...])
                }
            }
            if let reason = seen["SKIP"] {
                // The namespace could not be set up here (a container without mount rights).
                try Test.cancel("skipped: a real systemd --user manager cannot run here: \(reason)")
            }
            #expect(seen["DONE"] == "yes", "script output:\n\(result.stdout)\n\(result.stderr)")
            #expect(seen["SOCKET_ACTIVE"] == "active")
            #expect(seen["SERVICE_BEFORE"] == "inactive", "the service starts only on the first connection")
            #expect(seen["SOCKET_PATH_EXISTS"] == "yes")
            #expect(seen["CDCTL_START_STATUS"] == "0", "\(seen["CDCTL_START"] ?? "")")
            #expect(seen["SERVICE_AFTER"] == "active")
            #expect(seen["STATUS_LINE"]?.contains("1 running, 0 paused") == true, "\(seen["STATUS_LINE"] ?? "")")
            #expect(seen["WATCHDOG_USEC"] == "20s")
            #expect(seen["SERVICE_STOPPED"] == "inactive")
            #expect(seen["RESULT"] == "success")
            #expect(seen["EXIT_STATUS"] == "0")
            #expect(seen["SOCKET_STILL_ACTIVE"] == "active")
            // The hardened unit's sandbox is real, and its state lives under a read-only home.
            #expect(seen["SANDBOX_NET"] != nil && seen["SANDBOX_NET"] != seen["HOST_NET"], "a private network namespace")
            #expect(seen["STATE_FILES"]?.contains("countdownd.snapshot") == true, "the state directory is writable under ProtectHome=read-only: \(seen["STATE_FILES"] ?? "")")
            #expect(seen["CDCTL_AFTER_RESTART"]?.contains("tea") == true && seen["CDCTL_AFTER_RESTART"]?.contains("running") == true)
            // --then ran its command from a transient unit of the manager, after the countdown.
            #expect(seen["THEN_OUTPUT"]?.contains("from run-") == true && seen["THEN_OUTPUT"]?.contains("journalctl --user -u") == true, "\(seen["THEN_OUTPUT"] ?? "")")
            #expect(seen["THEN_EARLY"] == "no", "not before the countdown is done")
            #expect(seen["THEN_RAN"] == "yes")
            // "Runs as root" is 0.3 of this score: systemd 252 says so of any user unit without
            // User= (the booted-container test sees the same 1.5 under a regular user's manager).
            let security = try #require(seen["SECURITY"].flatMap(Double.init), "\(seen["SECURITY"] ?? "no score")")
            #expect(security <= 1.5, "exposure under the user manager: \(security)")
        }

        @Test(
            "the per-user service's exposure score is 1.1 or lower for a regular user (offline, with User= naming one)",
            .enabled(if: toolExists("/usr/bin/systemd-analyze"), "systemd-analyze is not installed")
        )
        func userSecurityScore() throws {
            let units = InstalledUnits()
            let service = try #require(units.user.first { $0.hasSuffix(".service") })
            // A user manager runs its units as its user; offline, User= stands in for that uid
            // (any ordinary one: the analysis only asks whether it is root or nobody).
            let text = try String(contentsOfFile: service, encoding: .utf8).replacingOccurrences(of: "[Service]\n", with: "[Service]\nUser=alice\n")
            try text.write(toFile: service, atomically: true, encoding: .utf8)
            let result = try runCommand("/usr/bin/systemd-analyze", ["security", "--offline=yes", service])
            let match = try #require(result.stdout.firstMatch(of: #/Overall exposure level for countdownd.service: (\d+\.\d)/#), "\(result.stdout)")
            let score = try #require(Double(match.1))
            #expect(score <= 1.1, "exposure \(score)")
        }
    }
}

/// The repository's units with `@BINDIR@` pointing at the built binaries and `@SYSCONFDIR@` at a
/// copy of the package's configuration file, in a temporary directory.
struct InstalledUnits {
    let directory = TemporaryDirectory()
    var system: [String] = []
    var user: [String] = []
    var runtimeDirectory: String
    var configurationDirectory: String

    init() {
        runtimeDirectory = directory.file("runtime")
        configurationDirectory = directory.file("etc")
        // Creating folders and files in a fresh temporary directory only fails if /tmp is broken.
        try! FileManager.default.createDirectory(atPath: runtimeDirectory, withIntermediateDirectories: true)
        try! FileManager.default.createDirectory(atPath: directory.file("user"), withIntermediateDirectories: true)
        try! FileManager.default.createDirectory(atPath: configurationDirectory + "/countdownd", withIntermediateDirectories: true)
        try! FileManager.default.copyItem(atPath: "\(packageRoot)/systemd/countdownd.conf", toPath: configurationDirectory + "/countdownd/countdownd.conf")
        for (source, target, units) in [
            ("systemd", "", ["countdownd.service", "countdownd.socket", "countdownd-metrics.service", "countdownd-metrics.timer"]),
            ("systemd/user", "user/", ["countdownd.service", "countdownd.socket"]),
        ] {
            for unit in units {
                // The units are part of the repository; a missing one is a broken checkout.
                let text = try! String(contentsOfFile: "\(packageRoot)/\(source)/\(unit)", encoding: .utf8)
                    .replacingOccurrences(of: "@BINDIR@", with: TestBinaries.directory)
                    .replacingOccurrences(of: "@SYSCONFDIR@", with: configurationDirectory)
                let path = directory.file(target + unit)
                try! text.write(toFile: path, atomically: true, encoding: .utf8)
                if target.isEmpty { system.append(path) } else { user.append(path) }
            }
        }
    }
}
