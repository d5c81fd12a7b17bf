import CountdownCore
import Testing

@Suite("Cycles of phases (a pomodoro), against a manual clock")
struct EngineCycleTests {
    /// 25 min work and 5 min break, three times, then 25 min work and a 15 min long break.
    static let pomodoro = CountdownCycle(phases: [
        .init(milliseconds: 1_500_000, label: "work"), .init(milliseconds: 300_000, label: "break"),
        .init(milliseconds: 1_500_000, label: "work"), .init(milliseconds: 300_000, label: "break"),
        .init(milliseconds: 1_500_000, label: "work"), .init(milliseconds: 300_000, label: "break"),
        .init(milliseconds: 1_500_000, label: "work"), .init(milliseconds: 900_000, label: "long-break"),
    ])

    static func cycle(_ seconds: [Int64], rounds: UInt32 = 1) -> CountdownCycle {
        CountdownCycle(phases: seconds.enumerated().map { .init(milliseconds: $1 * 1000, label: "p\($0 + 1)") }, rounds: rounds)
    }

    @discardableResult
    static func start(
        _ clock: inout ManualClock, _ name: String, _ cycle: CountdownCycle, onSuspend: SuspendPolicy? = nil, replace: Bool = false
    ) throws(ProtocolError) -> CountdownSnapshot {
        try clock.perform { engine, now, events throws(ProtocolError) in
            try engine.start(name, milliseconds: 1, replace: replace, requester: 1000, onSuspend: onSuspend, cycle: cycle, now: now, events: &events)
        }
    }

    /// Moves every countdown to a fresh engine at `now`, as a restarted daemon does; then runs
    /// what is due at `now` (the daemon's `settleAfterRestore`).
    static func restart(_ engine: CountdownEngine, at now: Instant) -> (CountdownEngine, [CountdownEvent]) {
        var fresh = CountdownEngine()
        fresh.continueSequence(after: engine.lastSequence)
        fresh.continueOwnerSequences(engine.ownerSequences)
        var events: [CountdownEvent] = []
        for name in engine.names.sorted() {
            if let state = engine.persistentState(of: name) {
                fresh.restore(state, now: now, events: &events)
            }
        }
        fresh.settleAfterRestore(now: now, events: &events)
        return (fresh, events)
    }

    @Test("each phase begins on the deadline of the one before: the 8th at exactly the sum of the first seven, with a phase event naming it; done once, after the last")
    func boundariesFromTheDeadline() throws {
        var clock = ManualClock()
        let started = try Self.start(&clock, "pomodoro", Self.pomodoro)
        #expect(started.totalMilliseconds == 1_500_000 && started.cycle?.phaseIndex == 0 && started.cycle?.phase.label == "work")
        clock.advance(to: .seconds(8_000))  // Before the end of its retention.
        let changes = clock.log.filter { $0.event.kind.isLifecycle }
        #expect(changes.map(\.event.kind) == [.started] + Array(repeating: .phase, count: 7) + [.done])
        var boundary: Int64 = 0
        for (index, change) in changes.dropFirst().dropLast().enumerated() {
            boundary += Self.pomodoro.phases[index].milliseconds
            #expect(change.at == .milliseconds(boundary), "phase \(index + 2) began at \(change.at), not \(boundary) ms")
            #expect(change.event.cycle?.phaseIndex == UInt16(index + 1))
            #expect(change.event.remainingMilliseconds == Self.pomodoro.phases[index + 1].milliseconds)
            #expect(change.event.totalMilliseconds == Self.pomodoro.phases[index + 1].milliseconds)
            #expect(change.event.lateMilliseconds == nil)
        }
        #expect(boundary == 6_900_000, "the 8th phase starts at the sum of the first seven")
        #expect(changes.last?.at == .milliseconds(7_800_000) && changes.last?.event.cycle?.phase.label == "long-break")
        // Ticks follow each phase's own deadline.
        let ticks = clock.log.filter { $0.event.kind == .tick && $0.at > .milliseconds(1_500_000) && $0.at < .milliseconds(1_800_000) }
        #expect(!ticks.isEmpty && ticks.allSatisfy { (1_800_000_000_000 - $0.at.nanoseconds) % 1_000_000_000 == 0 })
        #expect(ticks.allSatisfy { $0.event.cycle?.phase.label == "break" })
        #expect(try clock.engine.status(of: "pomodoro", now: clock.now).state == .done)
    }

    @Test("PAUSE and RESUME hold the running phase, EXTEND lengthens it alone; the next phase is whole and starts on the moved deadline")
    func pauseAndExtendActOnThePhase() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        try Self.start(&clock, "c", Self.cycle([10, 5]))
        clock.advance(to: .seconds(4))
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("c", requester: 1000, now: now, events: &events) }
        clock.advance(to: .seconds(100))
        #expect(clock.log.filter { $0.event.kind == .phase }.isEmpty, "a paused phase does not end")
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.resume("c", requester: 1000, now: now, events: &events) }
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.extend("c", by: 3_000, requester: 1000, now: now, events: &events) }
        #expect(try clock.engine.status(of: "c", now: clock.now).totalMilliseconds == 13_000)
        clock.advance(to: .seconds(200))
        let changes = clock.log.filter { $0.event.kind == .phase || $0.event.kind == .done }
        #expect(changes.map(\.at) == [.seconds(109), .seconds(114)], "6 s left at 100 s, 3 s more: the break at 109 s, 5 s long")
        #expect(changes.first?.event.totalMilliseconds == 5_000)
    }

    @Test("SKIP starts the next phase now (running, from a paused phase too); skipping the last is done; a plain countdown cannot be skipped")
    func skip() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        try Self.start(&clock, "c", Self.cycle([10, 20, 30]))
        try clock.start("plain", 10_000)
        clock.advance(to: .seconds(3))
        func skip(_ name: String) throws(ProtocolError) -> CountdownSnapshot {
            try clock.perform { engine, now, events throws(ProtocolError) in try engine.skip(name, requester: 1000, now: now, events: &events) }
        }
        let second = try skip("c")
        #expect(second.state == .running && second.remainingMilliseconds == 20_000 && second.cycle?.phaseIndex == 1)
        clock.advance(to: .seconds(5))
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("c", requester: 1000, now: now, events: &events) }
        let third = try skip("c")
        #expect(third.state == .running && third.deadline == .seconds(35) && third.cycle?.phaseIndex == 2)
        #expect(clock.engine.runningCount == 2 && clock.engine.pausedCount == 0, "counted as running again")
        let done = try skip("c")
        #expect(done.state == .done && done.lateMilliseconds == nil)
        #expect(clock.log.filter { $0.event.name == "c" }.map(\.event.kind) == [.started, .phase, .paused, .phase, .done])
        #expect(throws: ProtocolError.self) { try skip("plain") }
        #expect(throws: ProtocolError.self) { try skip("c") }  // Finished.
        do {
            _ = try clock.perform { engine, now, events throws(ProtocolError) in try engine.skip("c", requester: 1001, now: now, events: &events) }
        } catch {
            #expect(error.code == .notFound)
        }
    }

    @Test("REPEAT n runs n rounds and is done once; REPEAT for ever is never done, counting its rounds")
    func repeatRounds() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        try Self.start(&clock, "three", Self.cycle([2, 1], rounds: 3))
        try Self.start(&clock, "ever", Self.cycle([2, 1], rounds: 0))
        clock.advance(to: .seconds(600))
        let three = clock.log.filter { $0.event.name == "three" && $0.event.kind.isLifecycle }
        #expect(three.map(\.event.kind) == [.started] + Array(repeating: .phase, count: 5) + [.done])
        #expect(three.last?.at == .seconds(9))
        #expect(three.dropFirst().dropLast().map { $0.event.cycle!.round } == [0, 1, 1, 2, 2])
        let ever = clock.log.filter { $0.event.name == "ever" && $0.event.kind.isLifecycle }
        #expect(ever.count == 401 && !ever.contains { $0.event.kind == .done }, "started, and a phase every 1.5 s on average for 600 s")
        #expect(try clock.engine.status(of: "ever", now: clock.now).cycle?.round == 200)
    }

    @Test("ON-SUSPEND pause holds the whole cycle through a sleep; the phases after it keep their lengths")
    func suspend() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        try Self.start(&clock, "c", Self.cycle([10, 5]), onSuspend: .pause)
        clock.advance(to: .seconds(4))
        clock.sleep(forMilliseconds: 60_000)
        clock.advance(to: .seconds(200))
        let changes = clock.log.filter { $0.event.kind == .phase || $0.event.kind == .done }
        #expect(changes.map(\.at) == [.seconds(70), .seconds(75)])
        #expect(changes.allSatisfy { $0.event.lateMilliseconds == nil })
    }

    @Test("restarted after boundaries passed: each missed phase begins once, in order, from the deadlines (the first with how late); past the end, done once")
    func restart() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        try Self.start(&clock, "c", Self.cycle([10, 10, 10, 10]))
        try Self.start(&clock, "short", Self.cycle([6, 4]))
        clock.advance(to: .seconds(5))
        let (restarted, events) = Self.restart(clock.engine, at: .milliseconds(25_500))
        let c = events.filter { $0.name == "c" }
        #expect(c.map(\.kind) == [.phase, .phase])
        #expect(c.map { $0.cycle!.phaseIndex } == [1, 2])
        #expect(c.map(\.lateMilliseconds) == [15_500, 5_500])
        let status = try restarted.status(of: "c", now: .milliseconds(25_500))
        #expect(status.deadline == .seconds(30) && status.cycle?.phaseIndex == 2)
        let short = events.filter { $0.name == "short" }
        #expect(short.map(\.kind) == [.phase, .done] && short.map(\.lateMilliseconds) == [19_500, 15_500], "\(short)")
        // Restarted again at once: nothing is announced twice.
        let (_, again) = Self.restart(restarted, at: .milliseconds(25_600))
        #expect(again.isEmpty, "\(again.map(\.kind))")
    }

    @Test("stopped for days, a cycle that repeats for ever skips whole rounds silently and announces at most one round's boundaries")
    func longStop() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        try Self.start(&clock, "ever", Self.cycle([2, 1], rounds: 0))
        try Self.start(&clock, "five", Self.cycle([2, 1], rounds: 5))
        let (restarted, events) = Self.restart(clock.engine, at: .seconds(3 * 86_400 + 1))
        let ever = events.filter { $0.name == "ever" }
        #expect((1...2).contains(ever.count) && ever.allSatisfy { $0.kind == .phase }, "\(ever.count)")
        let status = try restarted.status(of: "ever", now: .seconds(3 * 86_400 + 1))
        #expect(status.state == .running && status.deadline! > .seconds(3 * 86_400 + 1) && status.deadline! <= .seconds(3 * 86_400 + 3))
        #expect(status.cycle?.round == 86_400, "rounds counted, though not announced")
        // Done long ago: its done, then its removed (its retention ended too), after at most
        // two rounds' boundaries.
        let five = events.filter { $0.name == "five" }
        #expect(five.suffix(2).map(\.kind) == [.done, .removed] && five.filter { $0.kind == .done }.count == 1 && five.count <= 5, "\(five.map(\.kind))")
    }

    @Test("exactly one phase event per boundary over 1,000 boundaries, with restarts at random moments, some within 20 ms of a boundary")
    func restartsAtRandomMoments() throws {
        var random = SplitMix64(state: 36)
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        // Phases of 1.0–1.9 s, 1,000 boundaries in all.
        let phases = (0..<10).map { CountdownCycle.Phase(milliseconds: 1000 + Int64($0) * 100, label: "p\($0)") }
        try Self.start(&clock, "c", CountdownCycle(phases: phases, rounds: 100))
        var engine = clock.engine
        var now = Instant.zero
        var announced: [CountdownEvent] = []
        var boundaries: [Int64] = []
        var sum: Int64 = 0
        for _ in 0..<100 {
            for phase in phases {
                sum += phase.milliseconds
                boundaries.append(sum)  // The last is the end, not a boundary: `done`.
            }
        }
        while now < .milliseconds(sum + 1000) {
            // The next stop: near a boundary one time in three, otherwise anywhere in 0–3 s.
            var next = now.advanced(byMilliseconds: Int64(random.next() % 3000))
            if random.next() % 3 == 0, let boundary = boundaries.first(where: { $0 > now.nanoseconds / 1_000_000 }) {
                next = .milliseconds(boundary + Int64(random.next() % 41) - 20)
            }
            next = max(next, now)
            // Run to there as the daemon would (every wake-up), then stop and start again.
            while let due = engine.nextWakeup, due <= next {
                var events: [CountdownEvent] = []
                engine.advance(to: due, events: &events)
                announced += events
            }
            now = next
            var events: [CountdownEvent] = []
            (engine, events) = Self.restart(engine, at: now)
            announced += events
        }
        let phaseEvents = announced.filter { $0.kind == .phase }
        #expect(phaseEvents.count == 999, "1,000 phases: 999 boundaries between them")
        let positions = phaseEvents.map { Int($0.cycle!.round) * 10 + Int($0.cycle!.phaseIndex) }
        #expect(positions == Array(1..<1000), "each boundary once, in order")
        #expect(announced.filter { $0.kind == .done }.count == 1)
        let changes = announced.filter(\.kind.isLifecycle)
        #expect(Set(changes.map(\.sequence)).count == changes.count, "no number given twice")
    }

    @Test("started again without a duration (a bar's restart click), replacing or after it finished, a cycle runs its phases again from the first; with a duration it is plain")
    func restartKeepsTheCycle() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        try Self.start(&clock, "c", Self.cycle([10, 5], rounds: 2), onSuspend: .pause)
        clock.advance(to: .seconds(12))
        func restart(replace: Bool, keepsCycle: Bool = true) throws(ProtocolError) -> CountdownSnapshot {
            try clock.perform { engine, now, events throws(ProtocolError) in
                try engine.start("c", milliseconds: 60_000, replace: replace, requester: 1000, keepsCycle: keepsCycle, now: now, events: &events)
            }
        }
        #expect(throws: ProtocolError.self) { try restart(replace: false) }
        let again = try restart(replace: true)
        #expect(again.cycle == Self.cycle([10, 5], rounds: 2) && again.totalMilliseconds == 10_000 && again.pausesOnSuspend)
        clock.advance(to: .seconds(100))
        #expect(try clock.engine.status(of: "c", now: clock.now).state == .done)
        let afterDone = try restart(replace: false)
        #expect(afterDone.cycle?.phaseIndex == 0 && afterDone.cycle?.round == 0 && afterDone.remainingMilliseconds == 10_000)
        let plain = try restart(replace: true, keepsCycle: false)
        #expect(plain.cycle == nil && plain.totalMilliseconds == 60_000)
        let stillPlain = try restart(replace: true)
        #expect(stillPlain.cycle == nil, "once plain, plain")
    }

    @Test("a frozen listing (LIST) shows a cycle as it was when it began, its phase with its own total, whatever phase it is in by the time the slice is made")
    func frozenListingKeepsThePhase() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        try Self.start(&clock, "c", Self.cycle([10, 5]))
        var listing = clock.engine.listing(ListFilter(viewer: 0), frozen: true, now: clock.now)
        clock.advance(to: .seconds(12))  // The second phase now.
        let shown = clock.engine.nextSlice(of: &listing, limit: 10, now: clock.now)
        #expect(shown.count == 1 && shown.first?.cycle?.phaseIndex == 0 && shown.first?.totalMilliseconds == 10_000, "\(shown)")
        var live = clock.engine.listing(ListFilter(viewer: 0), frozen: false, now: clock.now)
        #expect(clock.engine.nextSlice(of: &live, limit: 10, now: clock.now).first?.cycle?.phaseIndex == 1)
    }

    @Test("a user holds at most maximumCyclesPerOwner cycles (root any number); a cycle replacing its own cycle, or a plain one, frees or keeps its place; purged and restored ones are counted")
    func cyclesPerOwner() throws {
        var clock = ManualClock(configuration: EngineConfiguration(retentionMilliseconds: 1000, maximumCyclesPerOwner: 2))
        clock.engine.setTicksEnabled(false, now: clock.now)
        try Self.start(&clock, "a", Self.cycle([1]))
        try Self.start(&clock, "b", Self.cycle([1]))
        do {
            try Self.start(&clock, "c", Self.cycle([1]))
            Issue.record("a third cycle was started")
        } catch {
            #expect(error.code == .limit && error.message.contains("maximum of 2 cycles"), "\(error)")
        }
        #expect(throws: Never.self) { try Self.start(&clock, "b", Self.cycle([2]), replace: true) }  // Its own place.
        // A running plain countdown started again as a cycle without REPLACE is busy, whatever
        // the count of cycles says.
        try clock.start("plain", 60_000)
        do {
            try Self.start(&clock, "plain", Self.cycle([1]))
        } catch {
            #expect(error.code == .busy, "\(error)")
        }
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.cancel("plain", requester: 1000, now: now, events: &events) }
        do {
            try Self.start(&clock, "plain", Self.cycle([1]))
            Issue.record("a finished plain countdown became a third cycle")
        } catch {
            #expect(error.code == .limit, "\(error)")
        }
        try clock.start("b", 5000, replace: true)  // Plain: its place is free.
        try Self.start(&clock, "c", Self.cycle([1]))
        try clock.perform { engine, now, events throws(ProtocolError) in
            try engine.start("root-one", milliseconds: 1, requester: 0, cycle: Self.cycle([1]), now: now, events: &events)
        }
        try clock.perform { engine, now, events throws(ProtocolError) in
            try engine.start("root-two", milliseconds: 1, requester: 0, cycle: Self.cycle([1]), now: now, events: &events)
        }
        // Done, then purged at the end of their retention: their places are free.
        clock.advance(to: .seconds(10))
        try Self.start(&clock, "d", Self.cycle([1]))
        try Self.start(&clock, "e", Self.cycle([1]))
        // Restored ones count as started ones do.
        var restarted = CountdownEngine(configuration: EngineConfiguration(maximumCyclesPerOwner: 2))
        var events: [CountdownEvent] = []
        for name in clock.engine.names {
            if let state = clock.engine.persistentState(of: name) { restarted.restore(state, now: clock.now, events: &events) }
        }
        #expect(throws: ProtocolError.self) {
            try restarted.start("f", milliseconds: 1, requester: 1000, cycle: Self.cycle([1]), now: clock.now, events: &events)
        }
    }

    @Test("the shortest phase is 100 ms; a cycle past round 4,294,967,295 wraps its count rather than trap; boundaries passed while the daemon was down say how late, however little")
    func edges() throws {
        var clock = ManualClock()
        #expect(throws: ProtocolError.self) { try Self.start(&clock, "tiny", CountdownCycle(phases: [.init(milliseconds: 99)])) }
        try Self.start(&clock, "fine", CountdownCycle(phases: [.init(milliseconds: 100)]))
        // A cycle for ever, stored in its last countable round, restored 10 days later.
        var engine = CountdownEngine()
        var events: [CountdownEvent] = []
        let stored = Countdown(
            name: "ever", owner: 1000, totalMilliseconds: 100, status: .running(deadline: .milliseconds(100), pinnedUnixMilliseconds: nil),
            cycle: CountdownCycle(phases: [.init(milliseconds: 100), .init(milliseconds: 100)], rounds: 0, round: .max - 1)
        )
        engine.restore(stored, now: .seconds(864_000), events: &events)
        #expect(events.allSatisfy { $0.kind == .phase } && !events.isEmpty && events.count <= 2)
        let status = try engine.status(of: "ever", now: .seconds(864_000))
        #expect(status.state == .running && status.cycle.map { $0.round < 10_000_000 } == true, "wrapped: \(String(describing: status.cycle?.round))")
        // 300 ms after a boundary, at a restart: the phase says so.
        var short = CountdownEngine()
        events = []
        short.restore(
            Countdown(
                name: "c", owner: 1000, totalMilliseconds: 1000, status: .running(deadline: .seconds(1), pinnedUnixMilliseconds: nil),
                cycle: Self.cycle([1, 5])
            ),
            now: .milliseconds(1300), events: &events
        )
        #expect(events.map(\.kind) == [.phase] && events.first?.lateMilliseconds == 300, "\(events)")
    }

    @Test("the rules: no cycle in cluster mode or to a time of day; REPLACE with a plain duration leaves no cycle behind; the durable state carries the phases")
    func rules() throws {
        var replica = ManualClock(configuration: EngineConfiguration(decidesLocally: false))
        #expect(throws: ProtocolError.self) { try Self.start(&replica, "c", Self.cycle([1])) }
        // The path a cluster-mode change takes: a proposal, run on a scratch engine that decides
        // locally, is refused all the same.
        do {
            _ = try replica.engine.proposal(for: "c", now: replica.now) { engine, events throws(ProtocolError) in
                try engine.start("c", milliseconds: 1, requester: 1000, cycle: Self.cycle([1]), now: replica.now, events: &events)
            }
            Issue.record("a cycle was proposed to the shared store")
        } catch {
            #expect(error.code == .badRequest && error.message.contains("cluster mode"), "\(error)")
        }
        var clock = ManualClock()
        #expect(throws: ProtocolError.self) {
            try clock.perform { engine, now, events throws(ProtocolError) in
                try engine.start("c", milliseconds: 1000, requester: 1000, pinnedTo: 1_800_000_000_000, cycle: Self.cycle([1]), now: now, events: &events)
            }
        }
        #expect(throws: ProtocolError.self) { try Self.start(&clock, "c", CountdownCycle(phases: [])) }
        try Self.start(&clock, "c", Self.pomodoro, onSuspend: .pause)
        let persisted = try #require(clock.engine.persistentState(of: "c"))
        #expect(persisted.cycle == Self.pomodoro && persisted.pausesOnSuspend)
        let plain = try clock.start("c", 5_000, replace: true)
        #expect(plain.cycle == nil && plain.pausesOnSuspend, "the cycle goes; ON-SUSPEND stays, as for any restart")
        clock.advance(to: .seconds(10))
        #expect(clock.log.filter { $0.event.kind == .phase }.isEmpty)
        #expect(clock.engine.persistentState(of: "c")?.cycle == nil)
    }
}
