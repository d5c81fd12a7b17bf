import CountdownCore
import Testing

@Suite("Engine mutations: start, busy, replace, cancel, pause, resume, extend, retention, ownership")
struct EngineMutationTests {
    @Test("START on a running or paused name is busy; on a finished one it starts afresh")
    func busyUntilFinished() throws {
        var clock = ManualClock()
        try clock.start("otp:+4915112345678", 60_000)
        clock.advance(byMilliseconds: 18_000)
        #expect(throws: ProtocolError.self) { try clock.start("otp:+4915112345678", 60_000) }
        do {
            try clock.start("otp:+4915112345678", 60_000)
        } catch {
            #expect(error.code == .busy)
            #expect(error.message.contains("0:00:42"))
            // For programs: the time left in milliseconds, the state, and what to do.
            #expect(error.fields == [.init("remaining_ms", "42000"), .init("state", "running"), .advice(.waitCancelOrReplace)])
        }
        clock.advance(byMilliseconds: 42_000)
        #expect(try clock.engine.status(of: "otp:+4915112345678", now: clock.now).state == .done)
        let again = try clock.start("otp:+4915112345678", 60_000)
        #expect(again.state == .running && again.remainingMilliseconds == 60_000)
    }

    @Test("REPLACE reports the old countdown cancelled, then the new one started")
    func replace() throws {
        var clock = ManualClock()
        try clock.start("build", 600_000)
        clock.advance(byMilliseconds: 1500)
        clock.clearLog()
        let snapshot = try clock.start("build", 5000, replace: true)
        #expect(snapshot.totalMilliseconds == 5000)
        #expect(clock.log.map(\.event.kind) == [.cancelled, .started])
        #expect(clock.log.first?.event.remainingMilliseconds == 598_500)
        #expect(clock.engine.runningCount == 1)
    }

    @Test("pause keeps the remaining time exactly; resume continues with ticks aligned to the new deadline")
    func pauseResume() throws {
        var clock = ManualClock()
        try clock.start("x", 10_000)
        clock.advance(byMilliseconds: 2300)
        let paused = try clock.perform { e, now, ev throws(ProtocolError) in try e.pause("x", requester: 1000, now: now, events: &ev) }
        #expect(paused.state == .paused && paused.remainingMilliseconds == 7700 && paused.deadline == nil)
        clock.clearLog()
        clock.advance(to: .seconds(100))
        #expect(clock.log.isEmpty, "a paused countdown must not tick")
        let resumed = try clock.perform { e, now, ev throws(ProtocolError) in try e.resume("x", requester: 1000, now: now, events: &ev) }
        #expect(resumed.remainingMilliseconds == 7700)
        #expect(resumed.deadline == .milliseconds(107_700))
        clock.advance(to: .seconds(200))
        let events = clock.events(of: "x")
        #expect(events.map(\.1) == [.resumed] + Array(repeating: .tick, count: 7) + [.done])
        #expect(events[1].0 == .milliseconds(100_700) && events[1].2 == 7000)
        #expect(events.last?.0 == .milliseconds(107_700))
    }

    @Test("pausing a paused countdown or resuming a running one is busy, with a hint")
    func wrongStateIsBusy() throws {
        var clock = ManualClock()
        try clock.start("x", 10_000)
        #expect(throws: ProtocolError(.busy, "'x' is running, not paused; nothing to resume")) {
            try clock.perform { e, now, ev throws(ProtocolError) in try e.resume("x", requester: 1000, now: now, events: &ev) }
        }
        try clock.perform { e, now, ev throws(ProtocolError) in try e.pause("x", requester: 1000, now: now, events: &ev) }
        #expect(throws: ProtocolError(.busy, "'x' is already paused; RESUME it to continue", fields: [.init("state", "paused"), .advice(.resume)])) {
            try clock.perform { e, now, ev throws(ProtocolError) in try e.pause("x", requester: 1000, now: now, events: &ev) }
        }
    }

    @Test("extend adds to the remaining time and the total, running or paused")
    func extend() throws {
        var clock = ManualClock()
        try clock.start("x", 3000)
        clock.advance(byMilliseconds: 500)
        let extended = try clock.perform { e, now, ev throws(ProtocolError) in try e.extend("x", by: 2000, requester: 1000, now: now, events: &ev) }
        #expect(extended.remainingMilliseconds == 4500 && extended.totalMilliseconds == 5000)
        #expect(extended.deadline == .milliseconds(5000))
        clock.advance(to: .seconds(10))
        let events = clock.events(of: "x")
        #expect(events.map(\.2) == [3000, 4500, 4000, 3000, 2000, 1000, 0])
        #expect(events.last?.0 == .seconds(5))

        try clock.start("p", 3000)
        try clock.perform { e, now, ev throws(ProtocolError) in try e.pause("p", requester: 1000, now: now, events: &ev) }
        let pausedExtended = try clock.perform { e, now, ev throws(ProtocolError) in try e.extend("p", by: 60_000, requester: 1000, now: now, events: &ev) }
        #expect(pausedExtended.state == .paused && pausedExtended.remainingMilliseconds == 63_000)
    }

    @Test("extend past 366 days is bad-duration and changes nothing")
    func extendTooFar() throws {
        var clock = ManualClock()
        try clock.start("x", CountdownDuration.maximumMilliseconds - 1000)
        #expect(throws: ProtocolError.self) {
            try clock.perform { e, now, ev throws(ProtocolError) in try e.extend("x", by: 2000, requester: 1000, now: now, events: &ev) }
        }
        #expect(try clock.engine.status(of: "x", now: clock.now).totalMilliseconds == CountdownDuration.maximumMilliseconds - 1000)
    }

    @Test("cancel keeps the countdown visible as cancelled, with the time it had left")
    func cancel() throws {
        var clock = ManualClock()
        try clock.start("x", 10_000)
        clock.advance(byMilliseconds: 2500)
        let cancelled = try clock.perform { e, now, ev throws(ProtocolError) in try e.cancel("x", requester: 1000, now: now, events: &ev) }
        #expect(cancelled.state == .cancelled && cancelled.remainingMilliseconds == 7500)
        clock.advance(byMilliseconds: 60_000)
        #expect(clock.events(of: "x").map(\.1) == [.started, .tick, .tick, .cancelled])
        #expect(try clock.engine.status(of: "x", now: clock.now).state == .cancelled)
    }

    @Test("mutating a finished countdown is not-found and says it finished")
    func finishedIsNotFoundForMutations() throws {
        var clock = ManualClock()
        try clock.start("x", 1000)
        clock.advance(byMilliseconds: 1000)
        for verb in ["cancel", "pause", "resume", "extend"] {
            do {
                try clock.perform { e, now, ev throws(ProtocolError) in
                    switch verb {
                    case "cancel": return try e.cancel("x", requester: 1000, now: now, events: &ev)
                    case "pause": return try e.pause("x", requester: 1000, now: now, events: &ev)
                    case "resume": return try e.resume("x", requester: 1000, now: now, events: &ev)
                    default: return try e.extend("x", by: 1000, requester: 1000, now: now, events: &ev)
                    }
                }
                Issue.record("\(verb) of a finished countdown succeeded")
            } catch {
                #expect(error.code == .notFound)
                #expect(error.message.contains("already finished (done)"))
            }
        }
    }

    @Test("finished countdowns stay visible for the retention period, then disappear")
    func retention() throws {
        var clock = ManualClock(configuration: EngineConfiguration(retentionMilliseconds: 600_000))
        try clock.start("x", 1000)
        clock.advance(byMilliseconds: 1000 + 599_999)
        #expect(try clock.engine.status(of: "x", now: clock.now).state == .done)
        clock.advance(byMilliseconds: 1)
        #expect(throws: ProtocolError.self) { try clock.engine.status(of: "x", now: clock.now) }
        #expect(clock.engine.count == 0)
        #expect(clock.engine.nextWakeup == nil)
    }

    @Test("a name restarted during its retention is not purged by the old schedule")
    func restartSurvivesOldPurge() throws {
        var clock = ManualClock(configuration: EngineConfiguration(retentionMilliseconds: 10_000))
        try clock.start("x", 1000)
        clock.advance(byMilliseconds: 5000)
        try clock.start("x", 60_000)
        clock.advance(byMilliseconds: 20_000)
        #expect(try clock.engine.status(of: "x", now: clock.now).state == .running)
    }

    @Test("only the owner or root may change a countdown; anyone may read it")
    func ownership() throws {
        var clock = ManualClock()
        try clock.start("mine", 60_000, uid: 1000)
        #expect(throws: ProtocolError.self) {
            try clock.perform { e, now, ev throws(ProtocolError) in try e.cancel("mine", requester: 1001, now: now, events: &ev) }
        }
        #expect(throws: ProtocolError.self) { try clock.start("mine", 5000, replace: true, uid: 1001) }
        do {
            try clock.start("mine", 5000, replace: true, uid: 1001)
        } catch {
            #expect(error.code == .forbidden)
        }
        #expect(try clock.engine.status(of: "mine", now: clock.now).owner == 1000)
        let byRoot = try clock.perform { e, now, ev throws(ProtocolError) in try e.pause("mine", requester: 0, now: now, events: &ev) }
        #expect(byRoot.state == .paused)
    }

    @Test("the countdown limit is enforced with a clear limit error; finished ones count until purged")
    func limit() throws {
        var clock = ManualClock(configuration: EngineConfiguration(retentionMilliseconds: 1000, maximumCountdowns: 2))
        try clock.start("a", 1000)
        try clock.start("b", 5000)
        do {
            try clock.start("c", 1000)
            Issue.record("a third countdown was accepted")
        } catch {
            #expect(error.code == .limit)
            #expect(error.message.contains("--max-countdowns"))
        }
        clock.advance(byMilliseconds: 2000)  // "a" is done and purged.
        #expect(try clock.start("c", 1000).state == .running)
    }

    @Test("the last 5 % of --max-countdowns are root's: other uids are refused saying so, root fills the pool, and nobody goes past it")
    func rootReserve() throws {
        var clock = ManualClock(configuration: EngineConfiguration(maximumCountdowns: 40))
        for index in 0..<19 {
            try clock.start("a\(index)", 60_000, uid: 1000)
            try clock.start("b\(index)", 60_000, uid: 1001)
        }
        do {
            try clock.start("late", 60_000, uid: 1002)
            Issue.record("a 39th countdown of a non-root uid was accepted")
        } catch {
            #expect(error.code == .limit && error.message.contains("the last 2 are kept for root"), "\(error)")
        }
        try clock.start("root1", 60_000, uid: 0)
        try clock.start("root2", 60_000, uid: 0)
        do {
            try clock.start("root3", 60_000, uid: 0)
            Issue.record("a 41st countdown was accepted")
        } catch {
            #expect(error.code == .limit && error.message.contains("maximum of 40"), "\(error)")
        }
        #expect(RootReserve.share(of: 19) == 0 && RootReserve.usable(of: 19, by: 1000) == 19, "small pools keep nothing back")
    }

    @Test("each owner's tally (for a user's STATS) matches what it holds, through 3,000 random changes, deadlines and purges")
    func ownerTallies() {
        var clock = ManualClock(configuration: EngineConfiguration(retentionMilliseconds: 3_000))
        var generator = SystemRandomNumberGenerator()
        let owners: [UInt32] = [0, 1000, 1001]
        for step in 0..<3_000 {
            let uid = owners.randomElement(using: &generator)!
            let name = "c\(Int.random(in: 0..<40, using: &generator))"
            // Failures (busy, not found, not running) are part of the walk: they must change nothing.
            switch Int.random(in: 0..<6, using: &generator) {
            case 0, 1: _ = try? clock.start(name, Int64.random(in: 500...5_000, using: &generator), uid: uid)
            case 2: _ = try? clock.perform { e, now, ev throws(ProtocolError) in try e.cancel(name, requester: uid, now: now, events: &ev) }
            case 3: _ = try? clock.perform { e, now, ev throws(ProtocolError) in try e.pause(name, requester: uid, now: now, events: &ev) }
            case 4: _ = try? clock.perform { e, now, ev throws(ProtocolError) in try e.resume(name, requester: uid, now: now, events: &ev) }
            default: clock.advance(byMilliseconds: Int64.random(in: 1...700, using: &generator))
            }
            let active = clock.engine.activeSnapshots(matching: nil, now: clock.now)
            var held = 0
            for owner in owners {
                let tally = clock.engine.tally(of: owner)
                let mine = active.filter { $0.owner == owner }
                guard tally.running == mine.filter({ $0.state == .running }).count,
                      tally.paused == mine.filter({ $0.state == .paused }).count,
                      tally.finished >= 0 else {
                    Issue.record("step \(step): uid \(owner)'s tally \(tally) against \(mine.count) active")
                    return
                }
                held += tally.held
            }
            guard held == clock.engine.count, active.count == clock.engine.runningCount + clock.engine.pausedCount else {
                Issue.record("step \(step): tallies hold \(held) of \(clock.engine.count)")
                return
            }
        }
        for snapshot in clock.engine.activeSnapshots(matching: nil, now: clock.now) where snapshot.state == .paused {
            _ = try? clock.perform { e, now, ev throws(ProtocolError) in try e.cancel(snapshot.name, requester: 0, now: now, events: &ev) }
        }
        clock.advance(byMilliseconds: 60_000)
        #expect(owners.allSatisfy { clock.engine.tally(of: $0) == OwnerTally() }, "all finished and forgotten: nothing left in any tally")
    }

    @Test("active snapshots are sorted by name and show only running and paused countdowns")
    func activeSnapshots() throws {
        var clock = ManualClock()
        try clock.start("b", 5000)
        try clock.start("a", 1000)
        try clock.start("c", 9000)
        try clock.perform { e, now, ev throws(ProtocolError) in try e.pause("c", requester: 1000, now: now, events: &ev) }
        clock.advance(byMilliseconds: 1000)
        #expect(clock.engine.activeSnapshots(matching: nil, now: clock.now).map(\.name) == ["b", "c"])
        #expect(clock.engine.activeSnapshots(matching: ["c", "zzz"], now: clock.now).map(\.name) == ["c"])
    }

    @Test("heavy pause/resume churn keeps only live wake-ups scheduled")
    func churnDoesNotLeak() throws {
        var clock = ManualClock()
        for index in 0..<100 {
            try clock.start("c\(index)", 3_600_000)
        }
        for _ in 0..<200 {
            for index in 0..<100 {
                try clock.perform { e, now, ev throws(ProtocolError) in try e.pause("c\(index)", requester: 1000, now: now, events: &ev) }
                try clock.perform { e, now, ev throws(ProtocolError) in try e.resume("c\(index)", requester: 1000, now: now, events: &ev) }
            }
            clock.advance(byMilliseconds: 10)
        }
        #expect(clock.engine.runningCount == 100)
        #expect(clock.engine.scheduledEntryCount <= 2 * 100 + 1024)
    }
}
