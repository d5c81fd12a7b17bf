import CountdownCore
import Testing

@Suite("Engine timing against a manual clock")
struct EngineTimingTests {
    @Test("start announces, ticks once per whole second at deadline - k s, then done at the deadline")
    func ticksAlignToDeadline() throws {
        var clock = ManualClock()
        clock.advance(to: .milliseconds(1234))
        let snapshot = try clock.start("tea", 3000)
        #expect(snapshot.state == .running)
        #expect(snapshot.remainingMilliseconds == 3000)
        #expect(snapshot.deadline == .milliseconds(4234))
        clock.advance(to: .seconds(10))
        let events = clock.events(of: "tea")
        #expect(events.map(\.1) == [.started, .tick, .tick, .done])
        #expect(events.map(\.0) == [.milliseconds(1234), .milliseconds(2234), .milliseconds(3234), .milliseconds(4234)])
        #expect(events.map(\.2) == [3000, 2000, 1000, 0])
    }

    @Test("with ticks off only lifecycle events come, on time; turned on mid-way, ticks resume at deadline - k s")
    func ticksOffAndOn() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        try clock.start("quiet", 5500)
        try clock.start("short", 2000)
        clock.advance(to: .milliseconds(2100))
        #expect(clock.events(of: "short").map(\.1) == [.started, .done])
        #expect(clock.events(of: "short").last?.0 == .milliseconds(2000))
        #expect(clock.events(of: "quiet").map(\.1) == [.started])
        // Turned on at 2.1 s: the next whole second before the 5.5 s deadline is 2.5 s.
        clock.engine.setTicksEnabled(true, now: clock.now)
        clock.advance(to: .seconds(10))
        let quiet = clock.events(of: "quiet")
        #expect(quiet.map(\.1) == [.started, .tick, .tick, .tick, .done])
        #expect(quiet.map(\.0) == [.zero, .milliseconds(2500), .milliseconds(3500), .milliseconds(4500), .milliseconds(5500)])
        #expect(quiet.map(\.2) == [5500, 3000, 2000, 1000, 0])
        // Off again: a running countdown's scheduled tick passes silently, its done still comes.
        try clock.start("again", 3000)
        clock.advance(to: .milliseconds(10_500))
        clock.engine.setTicksEnabled(false, now: clock.now)
        clock.advance(to: .seconds(20))
        #expect(clock.events(of: "again").map(\.1) == [.started, .done])
        #expect(clock.events(of: "again").last?.0 == .seconds(13))
        #expect(clock.engine.scheduledEntryCount <= 2 * clock.engine.count + 1024)
    }

    @Test("a fractional duration's first tick comes at the first whole second before the deadline")
    func fractionalDuration() throws {
        var clock = ManualClock()
        try clock.start("x", 2500)
        clock.advance(to: .seconds(5))
        let events = clock.events(of: "x")
        #expect(events.map(\.0) == [.zero, .milliseconds(500), .milliseconds(1500), .milliseconds(2500)])
        #expect(events.map(\.2) == [2500, 2000, 1000, 0])
    }

    @Test("a countdown of one second or less has no tick, only started and done")
    func noTickForShortCountdowns() throws {
        var clock = ManualClock()
        try clock.start("a", 1000)
        try clock.start("b", 1)
        clock.advance(to: .seconds(2))
        #expect(clock.events(of: "a").map(\.1) == [.started, .done])
        #expect(clock.events(of: "b").map(\.1) == [.started, .done])
        #expect(clock.events(of: "b").last?.0 == .milliseconds(1))
    }

    @Test("a 3-hour countdown's last tick is exactly as punctual as its first: no drift")
    func noDriftOverThreeHours() throws {
        var clock = ManualClock()
        clock.advance(to: Instant(nanoseconds: 123_456_789))
        let total: Int64 = 3 * 3_600_000
        let deadline = try clock.start("long", total).deadline
        clock.advance(to: .seconds(4 * 3600))
        let ticks = clock.log.filter { $0.event.kind == .tick }
        #expect(ticks.count == Int(total / 1000) - 1)
        for (index, tick) in ticks.enumerated() {
            let k = Int64(ticks.count - index)
            #expect(tick.event.remainingMilliseconds == k * 1000)
            #expect(tick.at == deadline?.advanced(byMilliseconds: -k * 1000))
        }
        let done = clock.log.last { $0.event.kind == .done }
        #expect(done?.at == deadline)
        // Ten minutes after it finished, it is forgotten.
        #expect(clock.log.last?.event.kind == .removed)
        #expect(clock.log.last?.at == deadline?.advanced(byMilliseconds: 600_000))
    }

    @Test("events of many countdowns come out in time order; lifecycle events numbered one apart, ticks carry the last number")
    func timeOrderAcrossCountdowns() throws {
        var clock = ManualClock()
        try clock.start("slow", 5000)
        clock.advance(byMilliseconds: 300)
        try clock.start("fast", 2000)
        clock.advance(to: .seconds(10))
        let instants = clock.log.map(\.at)
        #expect(instants == instants.sorted())
        let lifecycle = clock.log.filter { $0.event.kind.isLifecycle }.map(\.event.sequence)
        #expect(lifecycle == Array(1...UInt64(lifecycle.count)))
        var last: UInt64 = 0
        for entry in clock.log {
            if entry.event.kind.isLifecycle { last = entry.event.sequence }
            #expect(entry.event.sequence == last, "a \(entry.event.kind) carries the last lifecycle number")
        }
        #expect(clock.engine.nextWakeup != nil)  // Retention of the finished ones is still scheduled.
    }

    @Test("a late wake-up skips to the latest whole second instead of replaying stale ticks")
    func lateWakeSkipsAhead() throws {
        var clock = ManualClock()
        try clock.start("x", 10_000)
        clock.jump(to: .milliseconds(6500))
        #expect(clock.events(of: "x").map(\.2) == [10_000, 4000])
        clock.advance(to: .seconds(20))
        #expect(clock.events(of: "x").map(\.2) == [10_000, 4000, 3000, 2000, 1000, 0])
    }

    @Test("a wake-up after the deadline (the machine slept) reports done once, with how late")
    func doneAfterSuspendSaysHowLate() throws {
        var clock = ManualClock()
        try clock.start("tea", 3000)
        clock.jump(to: .seconds(60))
        let done = clock.log.filter { $0.event.kind == .done }
        #expect(done.count == 1)
        #expect(done.first?.event.lateMilliseconds == 57_000)
        clock.advance(to: .seconds(120))
        #expect(clock.log.filter { $0.event.kind == .done }.count == 1)
    }

    @Test("nothing is scheduled on an empty engine")
    func emptyEngineSleeps() {
        let engine = CountdownEngine()
        #expect(engine.nextWakeup == nil)
        #expect(engine.count == 0)
    }

    @Test("nextWakeup names the earliest due event, not a stale one")
    func nextWakeupSkipsStaleEntries() throws {
        var clock = ManualClock()
        try clock.start("a", 1500)
        try clock.start("b", 5000)
        #expect(clock.engine.nextWakeup == .milliseconds(500))
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("a", requester: 1000, now: now, events: &events) }
        #expect(clock.engine.nextWakeup == .milliseconds(1000))
    }
}
