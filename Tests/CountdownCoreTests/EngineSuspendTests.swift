import CountdownCore
import Testing

@Suite("Pause on suspend, against a manual clock")
struct EngineSuspendTests {
    @Test("a pause countdown stands still for exactly the time slept, with paused and resumed marked suspend; a count one counts on")
    func pauseAndCount() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        try clock.start("pomodoro", 1_500_000, onSuspend: .pause)
        try clock.start("tea", 180_000)
        clock.advance(to: .seconds(60))
        clock.clearLog()
        // Asleep from 60 s to 660 s.
        clock.sleep(forMilliseconds: 600_000)
        let pomodoro = clock.log.filter { $0.event.name == "pomodoro" }.map(\.event)
        #expect(pomodoro.map(\.kind) == [.paused, .resumed])
        #expect(pomodoro.map(\.remainingMilliseconds) == [1_440_000, 1_440_000], "the time left when the machine fell asleep")
        #expect(pomodoro.allSatisfy { $0.causedBySuspend })
        #expect(pomodoro.map(\.sequence) == [3, 4], "each is a lifecycle event with its own number")
        let status = try clock.engine.status(of: "pomodoro", now: clock.now)
        #expect(status.remainingMilliseconds == 1_440_000 && status.deadline == .milliseconds(2_100_000))
        #expect(status.pausesOnSuspend)
        // The tea counted through the sleep: its done comes at the wake-up, once, with how late.
        let tea = clock.log.filter { $0.event.name == "tea" }.map(\.event)
        #expect(tea.map(\.kind) == [.done])
        #expect(tea.first?.lateMilliseconds == 480_000 && tea.first?.causedBySuspend == false)
        // And the pomodoro is done at its new deadline, on time.
        clock.advance(to: .seconds(3000))
        let done = clock.log.filter { $0.event.name == "pomodoro" && $0.event.kind == .done }
        #expect(done.map(\.at) == [.milliseconds(2_100_000)] && done.first?.event.lateMilliseconds == nil)
    }

    @Test("SET ON-SUSPEND changes a running or paused countdown's policy without restarting it, with one changed event; the same again changes nothing; a finished one, AT and another uid are refused; cluster mode refuses it")
    func setOnAnExistingCountdown() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        try clock.start("pomodoro", 1_500_000)
        clock.advance(to: .seconds(60))
        func set(_ name: String, _ policy: SuspendPolicy, uid: UInt32 = 1000) throws(ProtocolError) -> CountdownSnapshot {
            try clock.perform { engine, now, events throws(ProtocolError) in
                try engine.setSuspendPolicy(name, to: policy, requester: uid, now: now, events: &events)
            }
        }
        clock.clearLog()
        let changed = try set("pomodoro", .pause)
        #expect(changed.pausesOnSuspend && changed.state == .running && changed.deadline == .seconds(1500), "its deadline is kept")
        #expect(clock.log.map(\.event.kind) == [.changed] && clock.log.first?.event.suspendPolicy == .pause)
        #expect(clock.log.first?.event.remainingMilliseconds == 1_440_000)
        #expect(clock.engine.persistentState(of: "pomodoro")?.pausesOnSuspend == true)
        _ = try set("pomodoro", .pause)
        #expect(clock.log.count == 1, "the same again changes nothing and announces nothing")
        clock.sleep(forMilliseconds: 100_000)
        #expect(try clock.engine.status(of: "pomodoro", now: clock.now).deadline == .seconds(1600), "it stood still through the sleep")
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("pomodoro", requester: 1000, now: now, events: &events) }
        let counting = try set("pomodoro", .count)
        #expect(!counting.pausesOnSuspend && counting.state == .paused)
        #expect(throws: ProtocolError.self) { try set("pomodoro", .pause, uid: 1001) }
        #expect(throws: ProtocolError.self) { try set("nothing", .pause) }
        try clock.start("tea", 1000)
        clock.advance(to: clock.now.advanced(byMilliseconds: 2000))
        #expect(throws: ProtocolError.self) { try set("tea", .pause) }
        try clock.perform { engine, now, events throws(ProtocolError) in
            try engine.start("standup", milliseconds: 60_000, requester: 1000, pinnedTo: 1_800_000_000_000, now: now, events: &events)
        }
        #expect(throws: ProtocolError.self) { try set("standup", .pause) }
        #expect(try set("standup", .count).pausesOnSuspend == false)
        // Cluster mode: the proposal a replica would send is refused.
        var replica = ManualClock(configuration: EngineConfiguration(decidesLocally: false))
        replica.engine.revert("pomodoro", to: clock.engine.persistentState(of: "pomodoro"), now: replica.now)
        for policy in [SuspendPolicy.pause, .count] {
            do {
                _ = try replica.engine.proposal(for: "pomodoro", now: replica.now) { engine, events throws(ProtocolError) in
                    try engine.setSuspendPolicy("pomodoro", to: policy, requester: 1000, now: replica.now, events: &events)
                }
                Issue.record("SET ON-SUSPEND \(policy) was proposed to the shared store")
            } catch {
                #expect(error.code == .badRequest, "\(error)")
            }
        }
    }

    @Test("after the sleep, ticks align to the moved deadline")
    func ticksAfterWaking() throws {
        var clock = ManualClock()
        try clock.start("focus", 10_500, onSuspend: .pause)
        clock.advance(to: .milliseconds(2_000))  // Ticks at 0.5 and 1.5 s.
        clock.sleep(forMilliseconds: 3_250)  // Asleep 2.0 – 5.25 s; the deadline moves to 13.75 s.
        clock.clearLog()
        clock.advance(to: .seconds(20))
        let events = clock.events(of: "focus")
        // 8.5 s were left when it fell asleep, and are left on waking: the next whole second is 8 s.
        #expect(events.first?.0 == .milliseconds(5_750) && events.first?.1 == .tick && events.first?.2 == 8_000, "\(events)")
        #expect(events.filter { $0.1 == .tick }.map(\.0).allSatisfy { ($0.nanoseconds - 13_750_000_000) % 1_000_000_000 == 0 })
        #expect(events.last?.0 == .milliseconds(13_750) && events.last?.1 == .done)
    }

    @Test("the sleep never began before the daemon last ran: a countdown started since is credited no more than it lived")
    func awakeUntil() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        clock.advance(to: .seconds(100))
        try clock.start("new", 1_000, onSuspend: .pause)
        // A sleep of 5 s noticed at 103 s: it cannot have begun before 102 s, when the daemon
        // last ran (after the start).
        var events: [CountdownEvent] = []
        clock.engine.machineSlept(for: 5_000_000_000, now: .seconds(103), awakeUntil: .seconds(102), events: &events)
        #expect(events.map(\.kind) == [.done], "due at 101 s, before the sleep began: done, not moved")
        try clock.start("later", 10_000, onSuspend: .pause)  // At 100 s, deadline 110 s.
        events.removeAll()
        clock.engine.machineSlept(for: 60_000_000_000, now: .seconds(104), awakeUntil: .seconds(103), events: &events)
        #expect(events.map(\.kind) == [.paused, .resumed], "\(events.map(\.kind))")
        #expect(events.allSatisfy { $0.remainingMilliseconds == 7_000 }, "10 s less the 3 s it ran: \(events.map(\.remainingMilliseconds))")
        #expect(try clock.engine.status(of: "later", now: .seconds(104)).deadline == .seconds(170))
    }

    @Test("what fell due before the sleep began finishes as before; paused and finished ones are untouched")
    func onlyRunningOnesMove() throws {
        var clock = ManualClock()
        try clock.start("egg", 30_000, onSuspend: .pause)
        try clock.start("held", 60_000, onSuspend: .pause)
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("held", requester: 1000, now: now, events: &events) }
        try clock.start("gone", 5_000, onSuspend: .pause)
        clock.advance(to: .seconds(10))  // gone is done.
        clock.clearLog()
        // The daemon last ran at 10 s; the machine fell asleep at 40 s (after the egg's 30 s
        // deadline, which a real daemon would have fired on time) and woke at 50 s.
        var events: [CountdownEvent] = []
        let moved = clock.engine.machineSlept(for: 10_000_000_000, now: .seconds(50), events: &events)
        #expect(moved == 0)
        #expect(events.map(\.kind) == [.done] && events.first?.name == "egg" && events.first?.causedBySuspend == false)
        #expect(try clock.engine.status(of: "held", now: .seconds(50)).remainingMilliseconds == 60_000)
        #expect(try clock.engine.status(of: "gone", now: .seconds(50)).state == .done)
        events.removeAll()
        #expect(clock.engine.machineSlept(for: 0, now: .seconds(50), events: &events) == 0 && events.isEmpty)
    }

    @Test("the policy is kept in durable state and restored; REPLACE with ON-SUSPEND count counts on (without it: settingKept); AT cannot pause")
    func storedAndRestored() throws {
        var clock = ManualClock()
        try clock.start("pomodoro", 1_500_000, onSuspend: .pause)
        try clock.start("plain", 1_500_000)
        let persisted = try #require(clock.engine.persistentState(of: "pomodoro"))
        #expect(persisted.pausesOnSuspend && clock.engine.persistentState(of: "plain")?.pausesOnSuspend == false)
        var restored = CountdownEngine()
        var events: [CountdownEvent] = []
        #expect(restored.restore(persisted, now: .seconds(1), events: &events))
        #expect(try restored.status(of: "pomodoro", now: .seconds(1)).pausesOnSuspend)
        #expect(restored.machineSlept(for: 5_000_000_000, now: .seconds(6), events: &events) == 1)
        #expect(try clock.start("pomodoro", 60_000, replace: true, onSuspend: .count).pausesOnSuspend == false)
        #expect(throws: ProtocolError.self) {
            try clock.perform { engine, now, events throws(ProtocolError) in
                try engine.start("meeting", milliseconds: 60_000, requester: 1000, pinnedTo: 1_800_000_000_000, onSuspend: .pause, now: now, events: &events)
            }
        }
        // The flag shares a word with the state and the generation: many changes of schedule
        // leave it (and the state) alone.
        for _ in 0..<40 {
            try clock.perform { engine, now, events throws(ProtocolError) in try engine.extend("plain", by: 1, requester: 1000, now: now, events: &events) }
        }
        try clock.start("kept", 600_000, onSuspend: .pause)
        for _ in 0..<40 {
            try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("kept", requester: 1000, now: now, events: &events) }
            try clock.perform { engine, now, events throws(ProtocolError) in try engine.resume("kept", requester: 1000, now: now, events: &events) }
        }
        let kept = try clock.engine.status(of: "kept", now: clock.now)
        #expect(kept.pausesOnSuspend && kept.state == .running)
        #expect(try clock.engine.status(of: "plain", now: clock.now).pausesOnSuspend == false)
    }

    @Test("started again without ON-SUSPEND, a name keeps its setting (replaced, or after it finished); count clears it; a new name and AT count on")
    func settingKept() throws {
        var clock = ManualClock()
        try clock.start("pomodoro", 1_500_000, onSuspend: .pause)
        try clock.start("pomodoro", 1_500_000, replace: true)
        #expect(try clock.engine.status(of: "pomodoro", now: clock.now).pausesOnSuspend, "a bar's restart click keeps it")
        clock.advance(byMilliseconds: 1_500_000)
        #expect(try clock.engine.status(of: "pomodoro", now: clock.now).state == .done)
        try clock.start("pomodoro", 1_500_000)
        #expect(try clock.engine.status(of: "pomodoro", now: clock.now).pausesOnSuspend, "started again once done")
        try clock.start("pomodoro", 1_500_000, replace: true, onSuspend: .count)
        #expect(try clock.engine.status(of: "pomodoro", now: clock.now).pausesOnSuspend == false, "count clears it")
        try clock.start("pomodoro", 1_500_000, replace: true)
        #expect(try clock.engine.status(of: "pomodoro", now: clock.now).pausesOnSuspend == false, "and that is kept too")
        try clock.start("fresh", 60_000)
        #expect(try clock.engine.status(of: "fresh", now: clock.now).pausesOnSuspend == false)
        try clock.start("meeting", 60_000, onSuspend: .pause)
        try clock.perform { engine, now, events throws(ProtocolError) in
            try engine.start("meeting", milliseconds: 60_000, replace: true, requester: 1000, pinnedTo: 1_800_000_000_000, now: now, events: &events)
        }
        #expect(try clock.engine.status(of: "meeting", now: clock.now).pausesOnSuspend == false, "a countdown to a time of day cannot pause")
    }
}
