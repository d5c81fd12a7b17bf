import CountdownCore
import Testing

@Suite("Engine persistence and restore, and time that jumps")
struct EngineRestoreTests {
    /// Moves every countdown from one engine to a fresh one at `now`, as a restarted daemon does.
    func restart(_ clock: ManualClock, at now: Instant) -> (CountdownEngine, [CountdownEvent]) {
        var fresh = CountdownEngine()
        fresh.continueSequence(after: clock.engine.lastSequence)
        var events: [CountdownEvent] = []
        for name in clock.engine.names.sorted() {
            if let state = clock.engine.persistentState(of: name) {
                fresh.restore(state, now: now, events: &events)
            }
        }
        return (fresh, events)
    }

    @Test("running countdowns keep their deadline, paused ones their remaining time, across a restart")
    func restoreKeepsTime() throws {
        var clock = ManualClock()
        try clock.start("run", 10_000)
        try clock.start("hold", 60_000)
        clock.advance(byMilliseconds: 2500)
        try clock.perform { e, now, ev throws(ProtocolError) in try e.pause("hold", requester: 1000, now: now, events: &ev) }
        let (restored, events) = restart(clock, at: .milliseconds(4000))
        #expect(events.isEmpty)
        let run = try restored.status(of: "run", now: .milliseconds(4000))
        #expect(run.state == .running && run.remainingMilliseconds == 6000 && run.deadline == .milliseconds(10_000))
        let hold = try restored.status(of: "hold", now: .milliseconds(99_000))
        #expect(hold.state == .paused && hold.remainingMilliseconds == 57_500)
        #expect(restored.nextWakeup == .milliseconds(5000), "the next tick is still aligned to the deadline")
        #expect(restored.lastSequence == clock.engine.lastSequence)
    }

    @Test("a deadline that passed while the daemon was down is done once, with how late it is")
    func expiredWhileDown() throws {
        var clock = ManualClock()
        try clock.start("tea", 3000)
        let (restored, events) = restart(clock, at: .milliseconds(10_500))
        #expect(events.count == 1)
        #expect(events.first?.kind == .done && events.first?.lateMilliseconds == 7500)
        #expect(events.first?.sequence == clock.engine.lastSequence + 1)
        let tea = try restored.status(of: "tea", now: .milliseconds(10_500))
        #expect(tea.state == .done && tea.lateMilliseconds == 7500)
        // Restarting again restores it as done and reports nothing: it never fires twice.
        var second = CountdownEngine()
        var again: [CountdownEvent] = []
        second.restore(try #require(restored.persistentState(of: "tea")), now: .seconds(20), events: &again)
        #expect(again.isEmpty)
        #expect(try second.status(of: "tea", now: .seconds(20)).state == .done)
    }

    @Test("a finished countdown past its retention at a restart is forgotten by the first advance, with its removed event; one within it stays")
    func retentionAcrossRestart() throws {
        var clock = ManualClock()
        try clock.start("old", 1000)
        clock.advance(byMilliseconds: 1000)
        let state = try #require(clock.engine.persistentState(of: "old"))
        var fresh = CountdownEngine()
        var events: [CountdownEvent] = []
        #expect(fresh.restore(state, now: .milliseconds(1000 + 599_000), events: &events))
        fresh.advance(to: .milliseconds(1000 + 599_000), events: &events)
        #expect(fresh.count == 1 && events.isEmpty, "within its retention: kept, nothing announced")
        var late = CountdownEngine()
        #expect(late.restore(state, now: .milliseconds(1000 + 600_000), events: &events))
        late.advance(to: .milliseconds(1000 + 600_000), events: &events)
        #expect(late.count == 0 && events.map(\.kind) == [.removed] && events.first?.name == "old", "\(events)")
    }

    @Test("a finished countdown is purged exactly at the end of its retention")
    func purgedAfterRetention() throws {
        var clock = ManualClock(configuration: EngineConfiguration(retentionMilliseconds: 1000))
        try clock.start("x", 1000)
        clock.advance(byMilliseconds: 1999)
        #expect(clock.engine.persistentState(of: "x")?.state == .done)
        clock.advance(byMilliseconds: 1)
        #expect(clock.engine.persistentState(of: "x") == nil)
        #expect(clock.engine.count == 0)
    }

    @Test("a wall-clock step moves nothing: only the reported Unix deadline follows the new wall clock")
    func wallClockStep() throws {
        var clock = ManualClock()
        let snapshot = try clock.start("tea", 180_000)
        let before = WallClockMapping(monotonic: .zero, unixMilliseconds: 1_700_000_000_000)
        // `date -s` one hour ahead: the wall clock jumps, the monotonic clock does not.
        let after = WallClockMapping(monotonic: .seconds(10), unixMilliseconds: 1_700_000_010_000 + 3_600_000)
        clock.advance(to: .seconds(10))
        let now = try clock.engine.status(of: "tea", now: clock.now)
        #expect(now.deadline == snapshot.deadline)
        #expect(now.remainingMilliseconds == 170_000)
        #expect(clock.engine.nextWakeup == .seconds(11))
        let deadline = try #require(snapshot.deadline)
        #expect(before.unixMilliseconds(of: deadline) == 1_700_000_180_000)
        #expect(after.unixMilliseconds(of: deadline) == 1_700_000_180_000 + 3_600_000)
        clock.advance(to: .seconds(200))
        #expect(clock.events(of: "tea").last?.0 == .seconds(180))
    }

    @Test("the monotonic clock jumping forward (resume from suspend) fires what is due, once, in order")
    func suspendJump() throws {
        var clock = ManualClock()
        try clock.start("short", 5000)
        try clock.start("long", 3_600_000)
        clock.jump(to: .seconds(1800))  // Half an hour asleep.
        let kinds = clock.log.map { "\($0.event.name):\($0.event.kind.rawValue)" }
        #expect(kinds.contains("short:done"))
        #expect(clock.events(of: "long").last?.2 == 1_800_000, "one tick for the current second, not 1,800 stale ones")
        #expect(clock.log.filter { $0.event.kind == .tick }.count == 1)
    }
}
