import CountdownClient
import CountdownCore
import Foundation
import Testing

extension Integration {
    @Suite("Events: ticks, done, pause, slow subscribers")
    struct EventTests {
        /// How late and how early an event may arrive: correctness bounds (`CorrectnessBounds`).
        static let lateness = CorrectnessBounds.latenessMilliseconds
        static let earliness = CorrectnessBounds.earlinessMilliseconds

        @Test("a subscriber gets started, one exact tick per whole second in order, never early, and done")
        func ticksAndDone() throws {
            let daemon = try DaemonProcess()
            let subscriber = try daemon.connect()
            #expect(try subscriber.request("SUBSCRIBE EVENTS lifecycle,tick").outcome == .ok("subscribed all seq 0 events lifecycle,tick"))
            let control = try daemon.connect()
            let reply = try control.request("START tea 3")
            let deadline = Double(try #require(reply.countdown?.deadlineUnixMilliseconds))

            let started = try subscriber.waitForEvent { $0.name == "tea" }
            #expect(started.kind == .started && started.remainingMilliseconds == 3000 && started.totalMilliseconds == 3000)
            for k in [2, 1] {
                let tick = try subscriber.waitForEvent { $0.name == "tea" }
                let arrived = unixNowMilliseconds()
                #expect(tick.kind == .tick && tick.remainingMilliseconds == Int64(k) * 1000)
                let nominal = deadline - Double(k) * 1000
                #expect(arrived >= nominal - Self.earliness && arrived - nominal <= Self.lateness, "tick \(k) arrived \(arrived - nominal) ms from nominal")
                #expect(tick.sequence == started.sequence, "a tick carries the number of the last lifecycle event")
            }
            let done = try subscriber.waitForEvent { $0.name == "tea" }
            let lateness = unixNowMilliseconds() - deadline
            #expect(done.kind == .done && done.remainingMilliseconds == 0)
            #expect(lateness >= -Self.earliness && lateness <= Self.lateness, "done arrived \(lateness) ms after the deadline")
        }

        @Test("ticks start with the first subscriber and stop with the last; done comes either way")
        func ticksFollowSubscribers() throws {
            // Nobody subscribed: the daemon schedules deadlines only, and counts no tick. A
            // subscriber arriving mid-countdown gets a snapshot, then the next whole-second tick
            // below it and every one after, in order, then done: whenever it arrives.
            let daemon = try DaemonProcess()
            let control = try daemon.connect()
            _ = try control.request("START brew 4500ms")
            // A second countdown with a deadline after brew's first whole second: its done,
            // seen by a subscriber to it alone, proves brew's first tick instant has passed.
            _ = try control.request("START clock 1200ms")
            let witness = try daemon.connect()
            _ = try witness.request("SUBSCRIBE clock EVENTS done")
            _ = try witness.waitForEvent { $0.name == "clock" && $0.kind == .done }
            #expect(try statValue("events_tick", on: control) == 0, "nobody followed brew with ticks: it never ticked")
            let subscriber = try daemon.connect()
            _ = try subscriber.request("SUBSCRIBE brew EVENTS lifecycle,tick,snapshot")
            let snapshot = try subscriber.waitForEvent { _ in true }
            #expect(snapshot.kind == .snapshot && snapshot.name == "brew")
            var expected = (snapshot.remainingMilliseconds - 1) / 1000 * 1000  // The next whole second below.
            var ticks: [Int64] = []
            while true {
                let event = try subscriber.waitForEvent { $0.name == "brew" }
                if event.kind == .done { break }
                #expect(event.kind == .tick)
                ticks.append(event.remainingMilliseconds)
            }
            var wanted: [Int64] = []
            while expected >= 1000 {
                wanted.append(expected)
                expected -= 1000
            }
            #expect(ticks == wanted, "every whole second from the snapshot's \(snapshot.remainingMilliseconds) ms down, once, in order")
            // The last subscriber leaves; a later subscriber still gets ticks.
            _ = try subscriber.request("UNSUBSCRIBE")
            _ = try control.request("START later 1h")
            let another = try daemon.connect()
            _ = try another.request("SUBSCRIBE")
            let tick = try another.waitForEvent { $0.name == "later" && $0.kind == .tick }
            #expect(tick.remainingMilliseconds % 1000 == 0 && tick.remainingMilliseconds < 3_600_000)
        }

        @Test("a new subscriber sees the current state at once, right after its OK")
        func snapshotOnSubscribe() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            _ = try c.request("START a 1h")
            _ = try c.request("START b 2h")
            _ = try c.request("PAUSE b")
            _ = try c.request("START other 1h")
            let subscriber = try daemon.connect()
            try subscriber.send("SUBSCRIBE a b\n")
            #expect(try subscriber.readLine(timeout: 30) == "OK subscribed 2 seq 4")
            let first = try subscriber.waitForEvent { _ in true }
            let second = try subscriber.waitForEvent { _ in true }
            #expect(first.kind == .snapshot && first.name == "a" && first.state == .running && first.deadlineUnixMilliseconds != nil)
            // Paused with what was left at the PAUSE: no bet that it came within a millisecond of
            // the START, only that it came within a minute.
            #expect(second.kind == .snapshot && second.name == "b" && second.state == .paused)
            #expect(second.remainingMilliseconds <= 7_200_000 && second.remainingMilliseconds > 7_140_000, "\(second.remainingMilliseconds)")
        }

        @Test("a paused countdown stops ticking, and resumes with ticks on the new deadline")
        func pauseStopsTicks() throws {
            let daemon = try DaemonProcess()
            let subscriber = try daemon.connect()
            _ = try subscriber.request("SUBSCRIBE")
            let control = try daemon.connect()
            _ = try control.request("START p 10")
            _ = try subscriber.waitForEvent { $0.name == "p" && $0.kind == .tick && $0.remainingMilliseconds == 9000 }
            let paused = try #require(try control.request("PAUSE p").countdown)
            #expect(paused.state == .paused && paused.remainingMilliseconds > 8000 && paused.remainingMilliseconds <= 9000)
            // A second countdown is the test's clock: 2.2 s pass while "p" is paused.
            _ = try control.request("START witness 2200ms")
            var sawDuringPause: [EventInfo] = []
            _ = try subscriber.waitForEvent { event in
                if event.name == "p" && event.kind == .tick { sawDuringPause.append(event) }
                return event.name == "witness" && event.kind == .done
            }
            #expect(sawDuringPause.isEmpty, "ticks while paused: \(sawDuringPause)")
            let resumed = try #require(try control.request("RESUME p").countdown)
            #expect(resumed.remainingMilliseconds == paused.remainingMilliseconds)
            let deadline = Double(try #require(resumed.deadlineUnixMilliseconds))
            let tick = try subscriber.waitForEvent { $0.name == "p" && $0.kind == .tick }
            #expect(tick.remainingMilliseconds == 8000)
            let lateness = unixNowMilliseconds() - (deadline - 8000)
            #expect(lateness >= -Self.earliness && lateness <= Self.lateness, "first tick after resume \(lateness) ms from nominal")
        }

        @Test("SIGTERM: subscribers are told, STOPPING=1 is sent, exit 0, the socket file is removed")
        func cleanShutdown() throws {
            let daemon = try DaemonProcess()
            let subscriber = try daemon.connect()
            _ = try subscriber.request("SUBSCRIBE")
            #expect(FileManager.default.fileExists(atPath: daemon.socketPath))
            #expect(daemon.terminate() == 0)
            #expect(try subscriber.nextEvent(timeout: 30) == nil)
            #expect(subscriber.shutdownReason?.contains("stopping") == true)
            #expect(daemon.notify.waitFor("STOPPING=1", timeout: 10) != nil)
            #expect(!FileManager.default.fileExists(atPath: daemon.socketPath))
        }

        @Test("a SIGTERM at any moment once the daemon has started (here: before READY=1, as systemd may send one) is a clean stop, never lost, never fatal")
        func earlySIGTERM() throws {
            let daemon = try DaemonProcess(waitForReady: false)
            // The first thing the daemon does is block the signal, so that it waits for the
            // poller's signalfd; from then on a SIGTERM cannot be lost, however busy the machine.
            let terminationBit = UInt64(1) << (SIGTERM - 1)
            let deadline = Date().addingTimeInterval(60)
            while (daemon.blockedSignals() ?? 0) & terminationBit == 0 && Date() < deadline {
                usleep(1_000)
            }
            try #require((daemon.blockedSignals() ?? 0) & terminationBit != 0, "the daemon never blocked SIGTERM; its stderr: \(daemon.stderrText)")
            #expect(daemon.terminate() == 0, "exit 0, not killed by the signal; stderr: \(daemon.stderrText)")
            #expect(daemon.stderrText.contains("received SIGTERM, stopping"))
            #expect(daemon.stderrText.contains("stopped with 0 running"))
        }
    }
}
