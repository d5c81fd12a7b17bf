import CountdownClient
import CountdownCore
import Foundation
import Glibc
import Testing

extension Integration {
    @Suite("Countdowns to a wall-clock time: START … AT, cdctl --at, storage, a real clock step")
    struct WallClockTests {
        @Test("START … AT: the deadline is the time asked for, the line says at, it survives SIGKILL; a past time is refused")
        func startAt() throws {
            let directory = TemporaryDirectory()
            var daemon = try DaemonProcess(directory: directory)
            let c = try daemon.connect()
            let target = Int64(unixNowMilliseconds()) + 3_600_000
            try c.send("START standup AT \(target)\n")
            let line = try #require(try c.readLine(timeout: 30))
            #expect(line.hasPrefix("OK standup running ") && line.hasSuffix(" \(target) 0 - at"), "\(line)")
            // Tomorrow, to the second, in RFC 3339.
            let tomorrow = (Int64(unixNowMilliseconds()) / 1000 + 86_400) * 1000
            let rfcText = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(tomorrow) / 1000))
            let rfc = try c.request("START party AT \(rfcText)")
            #expect(rfc.countdown?.deadlineUnixMilliseconds == tomorrow && rfc.countdown?.isPinned == true, "\(rfcText): \(rfc)")
            guard case .error(.badDuration?, _, let message) = try c.request("START past AT 2020-01-01T00:00:00Z").outcome else {
                Issue.record("a time in the past was accepted")
                return
            }
            #expect(message.contains("not in the future"))
            // Too far: said of the time asked for (it once said "duration must be … at most 366 days").
            for far in ["2999-01-01T00:00:00Z", "9999999999999"] {
                guard case .error(.badDuration?, _, let message) = try c.request("START far AT \(far)").outcome else {
                    Issue.record("\(far) was accepted")
                    continue
                }
                #expect(message.contains("days away") && message.contains("ends at most 366 days from now: use a nearer time"), "\(far): \(message)")
            }
            #expect(try c.request("START plain 1h").countdown?.isPinned == nil, "a plain duration is not marked")
            daemon.crash()
            daemon = try DaemonProcess(directory: directory)
            let standup = try #require(try daemon.connect().request("STATUS standup").countdowns.first)
            #expect(standup.isPinned == true && standup.deadlineUnixMilliseconds == target)
        }

        @Test("cdctl start --at: 'now + 2s' is done on time; a time of day shows until when; --json says at")
        func cdctlAt() throws {
            let daemon = try DaemonProcess()
            let s = daemon.socketPath
            let begun = monotonicNow()
            let waited = try cdctl(["start", "soon", "--at", "now + 2s", "--wait"], socket: s)
            #expect(waited.status == 0, "\(waited.stderr)")
            #expect(monotonicNow() - begun >= 1.5, "it waited for the time")
            let later = try cdctl(["start", "later", "--at", "tomorrow 09:30"], socket: s)
            #expect(later.status == 0 && later.stdout.contains(", until "), "\(later.stdout)")
            let json = try cdctl(["status", "later", "--json"], socket: s).stdout
            #expect(json.contains(#""at":true"#), "\(json)")
            let both = try runCommand(TestBinaries.cdctl, ["--socket", s, "start", "x", "5m", "--at", "09:30"])
            #expect(both.status == 2 && both.stderr.contains("not both"))
        }

        @Test("cdctl --at reads local time through the C library's zone (TZ): an offset, a skipped and a doubled hour")
        func cdctlAtLocalZones() throws {
            let daemon = try DaemonProcess()
            let s = daemon.socketPath
            func run(_ zone: String, _ arguments: [String]) throws -> CommandResult {
                try runCommand(TestBinaries.cdctl, ["--socket", s] + arguments, environment: ["TZ": zone])
            }
            // A day 30 days on, at 18:00 in UTC+05:30 (a POSIX TZ string: no tzdata needed).
            let day = CivilTime(unixSeconds: Int64(unixNowMilliseconds() / 1000)).addingDays(30)
            let date = String(day.text.prefix(10))
            let india = try run("IST-5:30", ["start", "kolkata", "--at", "\(date) 18:00"])
            #expect(india.status == 0, "\(india.stderr)")
            #expect(india.stdout.contains(", until \(date) 18:00"), "shown in the same zone: \(india.stdout)")
            let expected = CivilTime(year: day.year, month: day.month, day: day.day, hour: 18).unixSeconds(offset: 19_800) * 1000
            let status = try #require(try daemon.connect().request("STATUS kolkata").countdowns.first)
            #expect(status.deadlineUnixMilliseconds == expected)

            // Central Europe's rules: the next last Sunday of March and of October, 2 to 365 days on.
            let europe = "CET-1CEST,M3.5.0,M10.5.0/3"
            func nextLastSunday(_ month: Int) -> CivilTime {
                let today = CivilTime(unixSeconds: Int64(unixNowMilliseconds() / 1000))
                for year in [today.year, today.year + 1] {
                    let last = CivilTime.daysFromCivil(year: year, month: month, day: 31)
                    let sunday = last - (last + 4) % 7  // 1970-01-01 was a Thursday.
                    let (y, m, d) = CivilTime.civil(fromDays: sunday)
                    if sunday - CivilTime.daysFromCivil(year: today.year, month: today.month, day: today.day) >= 2 {
                        return CivilTime(year: y, month: m, day: d, hour: 2, minute: 30)
                    }
                }
                return today
            }
            let spring = nextLastSunday(3), autumn = nextLastSunday(10)
            let skipped = try run(europe, ["start", "spring", "--at", String(spring.text.prefix(16))])
            #expect(skipped.status == 2, "\(skipped.stdout)")
            #expect(skipped.stderr.contains("does not exist here: the clocks skip it (they go forward, to \(spring.text.prefix(10)) 03:30:00 CEST)"), "\(skipped.stderr)")
            let doubled = try run(europe, ["start", "autumn", "--at", String(autumn.text.prefix(16))])
            #expect(doubled.status == 0, "\(doubled.stderr)")
            #expect((doubled.stdout + doubled.stderr).contains("\(autumn.text) happens twice (the clocks go back); taking the first, \(autumn.text) CEST, not \(autumn.text) CET"),
                    "\(doubled.stdout) \(doubled.stderr)")
            let first = try #require(try daemon.connect().request("STATUS autumn").countdowns.first)
            #expect(first.deadlineUnixMilliseconds == autumn.unixSeconds(offset: 7200) * 1000, "the first: still summer time")
        }

        @Test(
            "a real wall-clock step moves a countdown to a time of day and leaves a plain one alone",
            .enabled(if: getuid() == 0, "setting the clock needs root"),
            .enabled(
                if: ProcessInfo.processInfo.environment["CI"] == "true" || ProcessInfo.processInfo.environment["COUNTDOWND_TEST_CLOCK_STEP"] == "1",
                "steps this machine's wall clock by 10 s and back: runs in CI (CI=true) or with COUNTDOWND_TEST_CLOCK_STEP=1"
            )
        )
        func clockStep() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            // Time on the test's monotonic clock since just before the two STARTs: what each
            // countdown has left is checked against it, bracketed by the moments before and after
            // each STATUS, so a slow machine only widens the bracket, never fails it.
            let began = monotonicNow()
            let target = Int64(unixNowMilliseconds()) + 120_000
            _ = try c.request("START pinned AT \(target)")
            _ = try c.request("START plain 120s")
            func left(_ name: String, is total: Int64) throws -> Bool {
                try WallClockStep.left(name, is: total, since: began, on: c)
            }
            WallClockStep.step(by: 10)
            defer { WallClockStep.step(by: -10) }
            // Ten seconds nearer by the wall clock: the pinned one has 10 s less (an error of
            // 10 s, far outside the bracket's second); the plain one is untouched.
            try waitUntil(timeout: 30) { try left("pinned", is: 110_000) }
            #expect(try left("plain", is: 120_000), "a plain duration ignores the wall clock")
            #expect(daemon.stderrText.contains("the wall clock was set; 1 countdowns to a time of day follow it"))
            WallClockStep.step(by: -10)
            try waitUntil(timeout: 30) { try left("pinned", is: 120_000) }
            #expect(try left("plain", is: 120_000))
            WallClockStep.step(by: 10)  // Undone by the deferred step back.
        }
    }
}
