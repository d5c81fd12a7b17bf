import CountdownClient
import CountdownCore
import Foundation
import Glibc
import Testing

extension Integration {
    /// A real suspend cannot be had on a test machine (no `systemctl suspend` in a container or
    /// CI runner), so the daemon's boot clock is moved by its test hook, `COUNTDOWND_TEST_SLEEP_FILE`,
    /// which adds a number of milliseconds to `CLOCK_BOOTTIME` and not to `CLOCK_MONOTONIC`:
    /// exactly what a resume does to the two clocks.
    @Suite("Pause on suspend: the real daemon, with a simulated sleep of its boot clock")
    struct SuspendTests {
        @Test("after a 10-minute sleep the pomodoro stands still (paused, resumed, marked suspend) and the tea is done late; both survive SIGKILL")
        func simulatedSleep() throws {
            let directory = TemporaryDirectory()
            let sleepFile = directory.file("slept-ms")
            let environment = [SleepHook.variable: sleepFile]
            var daemon = try DaemonProcess(environment: environment, directory: directory)
            let started = try cdctl(["start", "pomodoro", "25m", "--pause-on-suspend"], socket: daemon.socketPath)
            #expect(started.status == 0 && started.stdout.contains("stands still while the machine sleeps"), "\(started.stdout)\(started.stderr)")
            // A bar's restart click (--replace) keeps the setting; --count-on-suspend clears it.
            let replaced = try cdctl(["start", "pomodoro", "25m", "--replace"], socket: daemon.socketPath)
            #expect(replaced.status == 0 && replaced.stdout.contains("stands still while the machine sleeps"), "\(replaced.stdout)\(replaced.stderr)")
            #expect(try cdctl(["status", "pomodoro", "--format", "{on_suspend}"], socket: daemon.socketPath).stdout == "pause\n")
            #expect(try cdctl(["start", "other", "1m", "--count-on-suspend"], socket: daemon.socketPath).status == 0)
            #expect(try cdctl(["status", "other", "--format", "{on_suspend}"], socket: daemon.socketPath).stdout == "count\n")
            let cleared = try cdctl(["start", "other", "1m", "--replace", "--pause-on-suspend"], socket: daemon.socketPath)
            #expect(cleared.status == 0 && cleared.stdout.contains("stands still"))
            #expect(try cdctl(["start", "other", "1m", "--replace", "--count-on-suspend"], socket: daemon.socketPath).stdout.contains("stands still") == false)
            #expect(try cdctl(["status", "other", "--format", "{on_suspend}"], socket: daemon.socketPath).stdout == "count\n")
            #expect(try cdctl(["start", "x", "--pause-on-suspend", "--count-on-suspend"], socket: daemon.socketPath).status == 2)
            let at = try cdctl(["start", "meeting", "--at", "now + 1 min", "--count-on-suspend"], socket: daemon.socketPath)
            #expect(at.status == 0, "a time of day counts on anyway: \(at.stderr)")
            let setup = try daemon.connect()
            #expect(try setup.request("CANCEL meeting").countdown != nil && setup.request("REMOVE meeting").countdown != nil)
            let c = try daemon.connect()
            // Gone before the sleep below, whose events the test reads in order.
            #expect(try c.request("CANCEL other").countdown?.name == "other" && c.request("REMOVE other").countdown?.name == "other")
            #expect(try c.request("START tea 3m").countdown?.pausesOnSuspend == nil)
            let subscriber = try daemon.connect()
            let subscribed = try subscriber.request("SUBSCRIBE EVENTS lifecycle")
            guard case .ok = subscribed.outcome else {
                Issue.record("SUBSCRIBE: \(subscribed)")
                return
            }
            // The machine sleeps for 10 minutes; the next batch (this PING's) notices.
            try "600000".write(toFile: sleepFile, atomically: true, encoding: .utf8)
            #expect(try c.request("PING").outcome == .ok("pong"))
            let paused = try subscriber.waitForEvent { $0.kind != .snapshot }
            let resumed = try subscriber.waitForEvent { $0.kind != .snapshot }
            let done = try subscriber.waitForEvent { $0.kind != .snapshot }
            #expect(paused.kind == .paused && paused.name == "pomodoro" && paused.causedBySuspend == true, "\(paused)")
            #expect(resumed.kind == .resumed && resumed.name == "pomodoro" && resumed.causedBySuspend == true, "\(resumed)")
            #expect(resumed.sequence == paused.sequence + 1 && resumed.remainingMilliseconds == paused.remainingMilliseconds)
            #expect(done.kind == .done && done.name == "tea" && (done.lateMilliseconds ?? 0) >= 400_000, "the tea counted through the sleep: \(done)")
            func pomodoro(on connection: CountdownConnection) throws -> CountdownInfo {
                try #require(try connection.request("STATUS pomodoro").countdowns.first)
            }
            // Counting on, it would have under 15 minutes left; standing still, nearly all 25.
            let after = try pomodoro(on: c)
            #expect(after.state == .running && after.pausesOnSuspend == true && after.remainingMilliseconds > 1_400_000, "\(after)")
            let shown = try cdctl(["status"], socket: daemon.socketPath)
            #expect(shown.stdout.contains("running (pauses on suspend)"), "\(shown.stdout)")
            // The sleep is read to within a millisecond (SleepDetector): 10m or 9m59s999ms.
            #expect(daemon.stderrText.contains("the machine slept for 10m; 1 countdowns that pause on suspend stood still")
                || daemon.stderrText.contains("the machine slept for 9m59s999ms; 1 countdowns that pause on suspend stood still"), "\(daemon.stderrText)")
            daemon.crash()
            daemon = try DaemonProcess(environment: environment, directory: directory)
            let restarted = try daemon.connect()
            let kept = try pomodoro(on: restarted)
            #expect(kept.pausesOnSuspend == true && kept.remainingMilliseconds > 1_400_000 && kept.remainingMilliseconds <= after.remainingMilliseconds, "\(kept)")
            let replay = try restarted.request("SUBSCRIBE pomodoro EVENTS paused,resumed SINCE 0")
            guard case .ok = replay.outcome else {
                Issue.record("SUBSCRIBE … SINCE: \(replay)")
                return
            }
            let replayed = [try restarted.waitForEvent { _ in true }, try restarted.waitForEvent { _ in true }]
            #expect(replayed.map(\.kind) == [.paused, .resumed] && replayed.allSatisfy { $0.causedBySuspend == true }, "\(replayed)")
        }

        @Test("ON-SUSPEND is refused with AT, and for an unknown policy, with what to do")
        func refusals() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            guard case .error(.badRequest?, _, let message) = try c.request("START x AT 2099-01-01T00:00:00Z ON-SUSPEND pause").outcome else {
                Issue.record("AT with ON-SUSPEND was accepted")
                return
            }
            #expect(message.contains("time of day"), "\(message)")
            guard case .error(.badRequest?, _, let unknown) = try c.request("START x 5m ON-SUSPEND hibernate").outcome else {
                Issue.record("an unknown policy was accepted")
                return
            }
            #expect(unknown.contains("pause") && unknown.contains("count"), "\(unknown)")
            let cli = try cdctl(["start", "x", "--at", "09:30", "--pause-on-suspend"], socket: daemon.socketPath)
            #expect(cli.status == 2 && cli.stderr.contains("give a DURATION"), "\(cli.stderr)")
        }
    }
}

/// The daemon's test hook for a simulated sleep (see `SleepDetector`).
enum SleepHook {
    static let variable = "COUNTDOWND_TEST_SLEEP_FILE"
}
