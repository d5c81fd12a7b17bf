@testable import CountdownCore
import Testing

/// What storage needs from the engine: undoing a batch whose commit failed, an O(1) image for
/// snapshots, and event numbers that only lifecycle events use.
@Suite("Engine: undo, durable images, event numbers")
struct EngineUndoTests {
    /// Runs `change` at the clock's instant, then reverts it with the state from before.
    private func changeAndRevert(
        _ clock: inout ManualClock, _ name: String,
        _ change: (inout ManualClock) throws(ProtocolError) -> Void
    ) throws {
        let before = clock.engine.persistentState(of: name)
        let counts = (clock.engine.runningCount, clock.engine.pausedCount, clock.engine.count)
        try change(&clock)
        clock.engine.revert(name, to: before, now: clock.now)
        #expect(clock.engine.persistentState(of: name) == before)
        #expect((clock.engine.runningCount, clock.engine.pausedCount, clock.engine.count) == counts)
    }

    @Test("reverting each kind of change restores the state, the counts and the schedule")
    func revertEachChange() throws {
        var clock = ManualClock()
        try clock.start("keep", 10_000)
        // A start of a new name disappears again.
        try changeAndRevert(&clock, "new") { (clock: inout ManualClock) throws(ProtocolError) in try clock.start("new", 5000) }
        #expect(clock.engine.persistentState(of: "new") == nil)
        // Pause, extend, cancel and replace of a running one: it runs on, due at its old deadline.
        try changeAndRevert(&clock, "keep") { (clock: inout ManualClock) throws(ProtocolError) in
            try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("keep", requester: 1000, now: now, events: &events) }
        }
        try changeAndRevert(&clock, "keep") { (clock: inout ManualClock) throws(ProtocolError) in
            try clock.perform { engine, now, events throws(ProtocolError) in try engine.extend("keep", by: 60_000, requester: 1000, now: now, events: &events) }
        }
        try changeAndRevert(&clock, "keep") { (clock: inout ManualClock) throws(ProtocolError) in
            try clock.perform { engine, now, events throws(ProtocolError) in try engine.cancel("keep", requester: 1000, now: now, events: &events) }
        }
        try changeAndRevert(&clock, "keep") { (clock: inout ManualClock) throws(ProtocolError) in try clock.start("keep", 99_000, replace: true) }
        clock.clearLog()
        clock.advance(byMilliseconds: 10_000)
        let lifecycle = clock.events(of: "keep").filter { $0.1 != .tick }
        #expect(lifecycle.map(\.1) == [.done], "due once, at the original deadline")
        #expect(lifecycle.first?.0 == .seconds(10))
        #expect(clock.events(of: "keep").filter { $0.1 == .tick }.map(\.2) == Array(stride(from: 9000, through: 1000, by: -1000)))
        // A start on a finished name reverts to the finished one, still purged on time.
        try changeAndRevert(&clock, "keep") { (clock: inout ManualClock) throws(ProtocolError) in try clock.start("keep", 1000) }
        #expect(clock.engine.persistentState(of: "keep")?.state == .done)
        clock.advance(to: .seconds(10).advanced(byMilliseconds: 600_000))
        #expect(clock.engine.persistentState(of: "keep") == nil)
    }

    @Test("several changes to one name in a batch, reverted in reverse order, restore the first state")
    func revertInReverse() throws {
        var clock = ManualClock()
        try clock.start("tea", 60_000)
        var undo: [(String, Countdown?)] = []
        undo.append(("tea", clock.engine.persistentState(of: "tea")))
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("tea", requester: 1000, now: now, events: &events) }
        undo.append(("tea", clock.engine.persistentState(of: "tea")))
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.cancel("tea", requester: 1000, now: now, events: &events) }
        undo.append(("tea", clock.engine.persistentState(of: "tea")))
        try clock.start("tea", 5000)
        for (name, previous) in undo.reversed() {
            clock.engine.revert(name, to: previous, now: clock.now)
        }
        #expect(clock.engine.persistentState(of: "tea") == undo[0].1)
        #expect(clock.engine.runningCount == 1 && clock.engine.pausedCount == 0 && clock.engine.count == 1)
    }

    @Test("only lifecycle events take a number: ticks and snapshots carry the last one")
    func ticksTakeNoNumber() throws {
        var clock = ManualClock()
        try clock.start("tea", 3000)
        clock.advance(byMilliseconds: 3000)
        let numbers = clock.log.map { ($0.event.kind, $0.event.sequence) }
        #expect(numbers.map(\.0) == [.started, .tick, .tick, .done])
        #expect(numbers.map(\.1) == [1, 1, 1, 2])
        #expect(clock.engine.lastSequence == 2)
    }

    @Test("a durable image is a snapshot in time: later changes do not show in it")
    func durableImage() throws {
        var clock = ManualClock()
        try clock.start("a", 10_000)
        try clock.start("b", 20_000)
        let image = clock.engine.durableImage()
        try clock.start("c", 5000)
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("a", requester: 1000, now: now, events: &events) }
        var seen: [String: CountdownState] = [:]
        image.forEach { seen[$0.name] = $0.state }
        #expect(seen == ["a": .running, "b": .running])
        #expect(image.lastSequence == 2)
    }

    @Test("the replay ring keeps the newest lifecycle events and says from where it is complete")
    func eventRing() throws {
        var ring = EventRing(depth: 3)
        func event(_ sequence: UInt64, _ name: String, _ kind: EventKind = .started) -> CountdownEvent {
            CountdownEvent(sequence: sequence, kind: kind, name: name, remainingMilliseconds: 0, totalMilliseconds: 1000)
        }
        ring.append(event(1, "a"))
        ring.append(event(1, "a", .tick))  // Ignored: not a change.
        ring.append(event(2, "b"))
        #expect(try ring.events(after: 0, names: nil, viewer: 0).map(\.sequence) == [1, 2])
        ring.append(event(3, "a", .done))
        ring.append(event(4, "c"))
        #expect(ring.keptAfter == 1)
        #expect(try ring.events(after: 1, names: nil, viewer: 0).map(\.sequence) == [2, 3, 4])
        #expect(try ring.events(after: 2, names: ["a"], viewer: 0).map(\.sequence) == [3])
        #expect(try ring.events(after: 4, names: nil, viewer: 0).isEmpty)
        #expect(throws: EventRing.ReplayError.tooOld(keptAfter: 1, owner: 0)) { try ring.events(after: 0, names: nil, viewer: 0) }
    }
}

@Suite("Engine: a slot freed and taken again")
struct EngineSlotReuseTests {
    /// The tick and `done` events of `name` in `clock`'s log, as (kind, remaining).
    private func lifeOf(_ name: String, in clock: ManualClock) -> [String] {
        clock.events(of: name).filter { $0.1 == .tick || $0.1 == .done }.map { "\($0.1) \($0.2)" }
    }

    @Test("a countdown undone with its next wake-up still queued leaves nothing to the one that takes its slot: each tick once, one done")
    func revertedSlot() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(true, now: clock.now)
        try clock.start("first", 60_000)
        clock.engine.revert("first", to: nil, now: clock.now)  // Storage refused it.
        clock.advance(byMilliseconds: 500)
        try clock.start("second", 3_500)
        clock.advance(byMilliseconds: 10_000)
        #expect(lifeOf("second", in: clock) == ["tick 3000", "tick 2000", "tick 1000", "done 0"])
    }

    @Test("at a restart, the journal's cancelled countdown takes the slot of the snapshot's running row without its wake-up, though other countdowns keep that wake-up from the heap's top: removed once, at the end of its retention")
    func replacedAtRestore() {
        var clock = ManualClock(configuration: EngineConfiguration(retentionMilliseconds: 600_000))
        let start = clock.now
        func running(_ name: String, _ milliseconds: Int64) -> Countdown {
            Countdown(
                name: name, owner: 0, totalMilliseconds: milliseconds,
                status: .running(deadline: start.advanced(byMilliseconds: milliseconds), pinnedUnixMilliseconds: nil)
            )
        }
        var events: [CountdownEvent] = []
        var snapshot = RestoreBatch(capacity: 3, now: start)
        for (name, milliseconds) in [("early", Int64(60_000)), ("x", 300_000), ("later", 3_600_000)] {
            snapshot.append(name: name, hash: NameIndex.hash(name), countdown: running(name, milliseconds))
        }
        clock.engine.restore(snapshot, replacing: false, events: &events)
        var journal = RestoreBatch(capacity: 1, now: start)
        let cancelled = Countdown(
            name: "x", owner: 0, totalMilliseconds: 300_000, status: .cancelled(remainingNanoseconds: 240_000_000_000, finishedAt: start)
        )
        journal.append(name: "x", hash: NameIndex.hash("x"), countdown: cancelled)
        clock.engine.restore(journal, replacing: true, events: &events)
        #expect(events.isEmpty, "nothing announced at the restore")
        clock.advance(byMilliseconds: 400_000)  // Past the snapshot row's deadline (300 s).
        #expect(clock.events(of: "early").filter { $0.1 == .done }.count == 1, "other countdowns came due meanwhile")
        #expect(!clock.events(of: "x").contains { $0.1 == .removed }, "not removed at the replaced row's old wake-up")
        clock.advance(byMilliseconds: 300_000)  // Past the end of its retention (600 s).
        #expect(clock.events(of: "x").map(\.1) == [.removed], "removed once, at the end of its retention")
        #expect((try? clock.engine.status(of: "later", now: clock.now))?.state == .running)
    }

    @Test("a countdown forgotten at the end of its retention, with wake-ups of an earlier schedule still queued, leaves nothing to the one that takes its slot")
    func purgedSlot() throws {
        var clock = ManualClock(configuration: EngineConfiguration(retentionMilliseconds: 1_000))
        try clock.start("first", 60_000)
        // Paused and cancelled: its deadline's wake-up (at 60 s) stays queued, stale.
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("first", requester: 1000, now: now, events: &events) }
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.cancel("first", requester: 1000, now: now, events: &events) }
        clock.advance(byMilliseconds: 2_000)  // Forgotten: its slot is free.
        #expect(clock.events(of: "first").contains { $0.1 == .removed })
        clock.engine.setTicksEnabled(true, now: clock.now)
        try clock.start("second", 120_000)
        clock.clearLog()
        clock.advance(byMilliseconds: 60_000)
        let remaining = clock.events(of: "second").filter { $0.1 == .tick }.map(\.2)
        #expect(remaining == Array(stride(from: Int64(119_000), through: 60_000, by: -1000)), "each tick once, none early")
    }
}

@Suite("Replay history per user")
struct ReplayShareTests {
    func event(_ sequence: UInt64, owner: UInt32, _ name: String = "x") -> CountdownEvent {
        CountdownEvent(
            sequence: sequence, kind: .started, name: CountdownAddress.key(owner: owner, name: name),
            remainingMilliseconds: 0, totalMilliseconds: 1000, owner: owner
        )
    }

    @Test("one uid's flood of 70,000 events pushes out its own history only: root's and another user's stay whole, and each replays from before the flood")
    func floodPushesOutItsOwn() throws {
        var ring = EventRing(depth: 4_096)
        var sequence: UInt64 = 0
        func next(_ owner: UInt32) -> CountdownEvent { sequence += 1; return event(sequence, owner: owner) }
        for _ in 0..<100 { ring.append(next(0)); ring.append(next(1000)) }
        let beforeFlood = sequence
        for _ in 0..<70_000 { ring.append(next(65_534)) }
        ring.append(next(0))
        #expect(ring.count == 101 + 100 + 4_096, "each keeps its own, the flooder its last 4,096")
        #expect(ring.keptAfter(owner: 0) == 0 && ring.keptAfter(owner: 1000) == 0, "nobody else lost anything")
        #expect(ring.keptAfter(owner: 65_534) > beforeFlood)
        #expect(try ring.events(after: 0, names: nil, viewer: 1000).count == 100, "a user replays its own, all of it")
        #expect(try ring.events(after: 0, names: ["x"], viewer: 0).count == 101, "root replays its own names")
        // Root asking for everything is told whose history was cut.
        #expect(throws: EventRing.ReplayError.tooOld(keptAfter: ring.keptAfter(owner: 65_534), owner: 65_534)) {
            try ring.events(after: beforeFlood, names: nil, viewer: 0)
        }
        let recent = try ring.events(after: sequence - 10, names: nil, viewer: 0)
        #expect(recent.map(\.sequence) == Array((sequence - 9)...sequence), "merged in order across owners")
    }

    @Test("each uid keeps exactly its latest events, up to the depth, however the others fill theirs")
    func depthHolds() throws {
        var ring = EventRing(depth: 100)
        var sequence: UInt64 = 0
        var generator = SystemRandomNumberGenerator()
        var lastOf: [UInt32: [UInt64]] = [:]
        for _ in 0..<50_000 {
            // Uid 0..63, the low ones far busier.
            let owner = UInt32(min(Int.random(in: 0..<64, using: &generator), Int.random(in: 0..<64, using: &generator)))
            sequence += 1
            ring.append(event(sequence, owner: owner))
            lastOf[owner, default: []].append(sequence)
        }
        #expect(ring.count == lastOf.values.reduce(0) { $0 + min($1.count, 100) })
        for (owner, sequences) in lastOf {
            let mine = ring.events.filter { $0.owner == owner }.map(\.sequence)
            if owner != 0 {
                #expect(try ring.events(after: ring.keptAfter(owner: owner), names: nil, viewer: owner).map(\.sequence) == mine, "uid \(owner) replays all it keeps")
            }
            #expect(mine == Array(sequences.suffix(100)), "uid \(owner) keeps its own last 100 (or all it has)")
        }
    }

    /// What `viewer` can read of the ring: its replay from every number, and where its history
    /// is whole.
    func view(of ring: EventRing, by viewer: UInt32, upTo last: UInt64) -> [String] {
        (0...last).map { since in
            do throws(EventRing.ReplayError) {
                return "\(since): " + (try ring.events(after: since, names: nil, viewer: viewer)).map { "\($0.ownerSequence)" }.joined(separator: ",")
            } catch {
                return "\(since): \(error)"
            }
        } + ["kept after \(ring.keptAfterOwn(owner: viewer))"]
    }

    @Test("a user's history reads the same whatever the others do: with none, a few or a flood of other users' events between its own, at every depth, its replays and kept_after are identical")
    func othersLeaveNoTrace() throws {
        for depth in [1, 3, 16, 4_096] {
            var views: [[String]] = []
            for othersPerStep in [0, 1, 7, 5_000] {
                var ring = EventRing(depth: depth, owners: OwnerSequences())
                var ownNumbers: [UInt32: UInt64] = [:]
                var sequence: UInt64 = 0
                func append(_ owner: UInt32) {
                    sequence += 1
                    var event = event(sequence, owner: owner)
                    ownNumbers[owner, default: 0] += 1
                    event.ownerSequence = owner == 0 ? sequence : ownNumbers[owner]!
                    ring.append(event)
                }
                for step in 0..<40 {
                    append(1000)
                    for other in 0..<othersPerStep { append(other % 3 == 0 ? 0 : 65_534 - UInt32(other % 2)) }
                    if step % 10 == 0 { append(1000) }
                }
                views.append(view(of: ring, by: 1000, upTo: 44))
            }
            #expect(views.allSatisfy { $0 == views[0] }, "depth \(depth): \(views.map { $0.suffix(3) })")
        }
    }
}

@Suite("Lateness histogram")
struct LatenessHistogramTests {
    @Test("percentiles come from bucket edges within 25 %, never above the maximum")
    func percentiles() {
        var histogram = LatenessHistogram()
        #expect(histogram.percentileMicroseconds(0.99) == 0)
        for microseconds in 1...1000 {
            histogram.record(nanoseconds: Int64(microseconds) * 1000)
        }
        #expect(histogram.count == 1000 && histogram.maximumMicroseconds == 1000)
        let p50 = histogram.percentileMicroseconds(0.5)
        let p99 = histogram.percentileMicroseconds(0.99)
        #expect(p50 >= 500 && p50 <= 625, "\(p50)")
        #expect(p99 >= 990 && p99 <= 1000, "\(p99)")
        histogram.record(nanoseconds: -5)
        #expect(histogram.percentileMicroseconds(0) == 0, "early counts as on time")
    }

    @Test("every value lands in a bucket whose upper edge is at least the value")
    func edges() {
        for value in [Int64(0), 1, 2, 3, 4, 5, 7, 8, 100, 1023, 1024, 1279, 1280, 999_999, 1 << 39, 1 << 45] {
            let bucket = LatenessHistogram.bucket(of: value)
            #expect(LatenessHistogram.upperEdge(of: bucket) >= value, "\(value)")
            if bucket > 0 {
                #expect(LatenessHistogram.upperEdge(of: bucket - 1) < value, "\(value)")
            }
        }
    }
}

@Suite("Engine: REMOVE and purging")
struct EngineRemoveTests {
    @Test("REMOVE forgets a finished countdown at once with a removed event; a running one is busy; purge says removed too")
    func remove() throws {
        var clock = ManualClock()
        try clock.start("tea", 1000)
        #expect(throws: ProtocolError.self) {
            try clock.perform { engine, now, events throws(ProtocolError) in try engine.remove("tea", requester: 1000, now: now, events: &events) }
        }
        clock.advance(byMilliseconds: 1000)
        clock.clearLog()
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.remove("tea", requester: 1000, now: now, events: &events) }
        #expect(clock.log.map(\.event.kind) == [.removed])
        #expect(clock.engine.count == 0 && clock.engine.persistentState(of: "tea") == nil)
        clock.advance(byMilliseconds: 600_000)
        #expect(clock.log.count == 1, "nothing is purged twice")
        try clock.start("tea", 1000)
        #expect(throws: ProtocolError.self) {
            try clock.perform { engine, now, events throws(ProtocolError) in try engine.remove("nothing", requester: 1000, now: now, events: &events) }
        }
    }
}

@Suite("Engine: per-owner quota")
struct EngineQuotaTests {
    @Test("a non-root owner is capped; root is not; a purged or reverted countdown frees its place")
    func perOwner() throws {
        var clock = ManualClock(configuration: EngineConfiguration(retentionMilliseconds: 1000, maximumCountdownsPerOwner: 2))
        try clock.start("1000/a", 1000, uid: 1000)
        try clock.start("1000/b", 60_000, uid: 1000)
        do {
            try clock.start("1000/c", 60_000, uid: 1000)
            Issue.record("a third countdown of uid 1000 was accepted")
        } catch {
            #expect(error.code == .limit && error.message.contains("uid 1000"))
        }
        try clock.start("r1", 1000, uid: 0)
        try clock.start("r2", 1000, uid: 0)
        try clock.start("r3", 1000, uid: 0)
        // "a" finishes at 1 s and is purged at 2 s.
        clock.advance(byMilliseconds: 2000)
        let before = clock.engine.persistentState(of: "1000/c")
        try clock.start("1000/c", 60_000, uid: 1000)
        clock.engine.revert("1000/c", to: before, now: clock.now)
        try clock.start("1000/d", 60_000, uid: 1000)
    }
}

@Suite("Engine: ticks only where someone looks")
struct EngineTickInterestTests {
    @Test("with nobody following everything, only a followed key, or a followed owner's countdowns, tick; counted, not timed")
    func followedOnly() throws {
        var clock = ManualClock()
        clock.engine.setTicksEnabled(false, now: clock.now)
        for index in 0..<1000 {
            try clock.start("1000/c\(index)", 60_000, uid: 1000)
        }
        try clock.start("2000/mine", 60_000, uid: 2000)
        // A status bar follows one countdown before it even exists.
        clock.engine.watch("pomodoro", now: clock.now)
        try clock.start("pomodoro", 60_000, uid: 0)
        clock.clearLog()
        clock.advance(byMilliseconds: 10_000)
        let ticks = clock.log.filter { $0.event.kind == .tick }
        #expect(ticks.count == 10 && ticks.allSatisfy { $0.event.name == "pomodoro" }, "\(ticks.count) ticks")
        #expect(clock.engine.scheduledEntryCount <= 1002 + 1024, "one wake-up each, not one a second")
        // A user who follows all of theirs: their countdowns tick too, nobody else's.
        clock.engine.watchOwner(2000, now: clock.now)
        clock.clearLog()
        clock.advance(byMilliseconds: 5000)
        #expect(Set(clock.log.filter { $0.event.kind == .tick }.map(\.event.name)) == ["pomodoro", "2000/mine"])
        // Nobody follows any more: the ticks stop after each one's next wake-up.
        clock.engine.unwatch("pomodoro")
        clock.engine.unwatchOwner(2000)
        clock.advance(byMilliseconds: 1000)
        clock.clearLog()
        clock.advance(byMilliseconds: 10_000)
        #expect(clock.log.filter { $0.event.kind == .tick }.isEmpty)
        // Everything followed: all tick again.
        clock.engine.setTicksEnabled(true, now: clock.now)
        clock.clearLog()
        clock.advance(byMilliseconds: 1000)
        #expect(clock.log.filter { $0.event.kind == .tick }.count == 1002)
    }
}

@Suite("Numbers per user: a user's seq steps for its own changes only")
struct OwnerSequenceTests {
    @Test("each user's events are numbered 1, 2, 3… by its own changes; root's carry the daemon-wide number; a tick carries its owner's last")
    func numberedPerUser() throws {
        var clock = ManualClock()
        try clock.start("1000/a", 3_000, uid: 1000)
        try clock.start("2000/b", 60_000, uid: 2000)
        try clock.start("root", 60_000, uid: 0)
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("2000/b", requester: 2000, now: now, events: &events) }
        try clock.start("1000/c", 60_000, uid: 1000)
        let numbers = clock.log.filter(\.event.kind.isLifecycle).map { ($0.event.name, $0.event.sequence, $0.event.ownerSequence) }
        #expect(numbers.map(\.0) == ["1000/a", "2000/b", "root", "2000/b", "1000/c"])
        #expect(numbers.map(\.1) == [1, 2, 3, 4, 5], "the daemon-wide numbers, for root")
        #expect(numbers.map(\.2) == [1, 1, 3, 2, 2], "each user's own; root's own is the daemon-wide one")
        #expect(clock.engine.lastSequence(seenBy: 0) == 5)
        #expect(clock.engine.lastSequence(seenBy: 1000) == 2 && clock.engine.lastSequence(seenBy: 2000) == 2)
        #expect(clock.engine.lastSequence(seenBy: 3000) == 0, "a user without changes has seen none")
        clock.clearLog()
        clock.advance(byMilliseconds: 3_000)
        let ticks = clock.log.filter { $0.event.name == "1000/a" && $0.event.kind == .tick }
        #expect(!ticks.isEmpty && ticks.allSatisfy { $0.event.ownerSequence == 2 && $0.event.sequence == 5 })
        let done = try #require(clock.log.first { $0.event.kind == .done })
        #expect(done.event.ownerSequence == 3 && done.event.sequence == 6)
        #expect(done.event.sequence(seenBy: 0) == 6 && done.event.sequence(seenBy: 1000) == 3)
    }

    @Test("a restart continues each user's numbers from what storage held, and state from before per-user numbers starts every user after the daemon-wide number")
    func continuedAfterRestart() throws {
        var clock = ManualClock()
        clock.engine.continueSequence(after: 40)
        clock.engine.continueOwnerSequences(OwnerSequences(base: 0, last: [1000: 7]))
        try clock.start("1000/a", 60_000, uid: 1000)
        try clock.start("2000/b", 60_000, uid: 2000)
        #expect(clock.log.map(\.event.ownerSequence) == [8, 1])
        var upgraded = ManualClock()
        upgraded.engine.continueSequence(after: 40)
        upgraded.engine.continueOwnerSequences(OwnerSequences(base: 40))
        try upgraded.start("2000/b", 60_000, uid: 2000)
        #expect(upgraded.log.map(\.event.ownerSequence) == [41], "after every number the user may have seen before")
    }

    @Test("an undone batch gives back the numbers its refused changes took: the user's next event follows its last that stands, and a tick of the batch says so")
    func undoneNumbersGivenBack() throws {
        for timeFinishesOne in [false, true] {
            var clock = ManualClock()
            try clock.start("1000/a", timeFinishesOne ? 1_000 : 2_000, uid: 1000)  // The user's 1.
            clock.clearLog()
            // The batch: a START (the user's 2), then time: a's tick (carrying 2), or its done (3),
            // and b's first tick.
            let before = clock.engine.persistentState(of: "1000/b")
            try clock.start("1000/b", 60_000, uid: 1000)
            clock.advance(byMilliseconds: 1_000)
            let batch = clock.log.map(\.event)
            #expect(batch.map(\.ownerSequence) == (timeFinishesOne ? [2, 3, 3] : [2, 2, 2]))
            // Its commit fails: the START is undone; what time did stands.
            clock.engine.revert("1000/b", to: before, now: clock.now)
            var standing = Array(batch.dropFirst())
            clock.engine.giveBackOwnerSequences(undone: batch.filter(\.kind.isLifecycle), standing: &standing)
            if timeFinishesOne {
                #expect(standing.map(\.ownerSequence) == [3, 3], "a done keeps its number; the refused 2 is a gap")
                #expect(clock.engine.lastSequence(seenBy: 1000) == 3)
            } else {
                #expect(standing.map(\.ownerSequence) == [1, 1], "the ticks say the user's last is 1 again")
                #expect(clock.engine.lastSequence(seenBy: 1000) == 1)
            }
            clock.clearLog()
            try clock.start("1000/c", 60_000, uid: 1000)
            #expect(clock.log.map(\.event.ownerSequence) == [timeFinishesOne ? 4 : 2])
        }
    }

    @Test("a replica numbers every event by the store's number, the same for every user")
    func replicaNumbers() throws {
        var replica = CountdownEngine(configuration: EngineConfiguration(decidesLocally: false))
        var events: [CountdownEvent] = []
        let state = Countdown(name: "1000/a", owner: 1000, totalMilliseconds: 60_000, status: .running(deadline: .milliseconds(60_000), pinnedUnixMilliseconds: nil))
        replica.applyReplicated("1000/a", state: state, event: .started, eventRemainingMilliseconds: 60_000, sequence: 4_217_000, now: .zero, events: &events)
        #expect(events.map(\.ownerSequence) == [4_217_000])
        #expect(replica.lastSequence(seenBy: 1000) == 4_217_000)
    }

    func event(_ sequence: UInt64, own: UInt64, owner: UInt32, _ name: String = "x") -> CountdownEvent {
        CountdownEvent(
            sequence: sequence, kind: .started, name: CountdownAddress.key(owner: owner, name: name),
            remainingMilliseconds: 0, totalMilliseconds: 1000, owner: owner, ownerSequence: owner == 0 ? nil : own
        )
    }

    @Test("a user replays by its own numbers, and is told from which of its own its history is whole after its own flood")
    func replayByOwnNumbers() throws {
        var ring = EventRing(depth: 1_600, owners: OwnerSequences())
        var sequence: UInt64 = 0
        var own: [UInt32: UInt64] = [:]
        func next(_ owner: UInt32) -> CountdownEvent {
            sequence += 1
            own[owner, default: 0] += 1
            return event(sequence, own: own[owner]!, owner: owner)
        }
        for _ in 0..<50 { ring.append(next(1000)); ring.append(next(2000)); ring.append(next(0)) }
        #expect(try ring.events(after: 40, names: nil, viewer: 1000).map(\.ownerSequence) == Array(41...50))
        #expect(try ring.events(after: 0, names: nil, viewer: 2000).count == 50)
        for _ in 0..<3_000 { ring.append(next(2000)) }
        #expect(try ring.events(after: 0, names: nil, viewer: 1000).count == 50, "another's flood cost it nothing")
        let kept = ring.keptAfterOwn(owner: 2000)
        #expect(kept > 50 && kept < 3_050)
        #expect(throws: EventRing.ReplayError.tooOld(keptAfter: kept, owner: 2000)) { try ring.events(after: kept - 1, names: nil, viewer: 2000) }
        #expect(try ring.events(after: kept, names: nil, viewer: 2000).first?.ownerSequence == kept + 1)
        #expect(try ring.events(after: 3_049, names: nil, viewer: 2000).map(\.ownerSequence) == [3_050])
    }

    @Test("after a restart, a user whose history was all pushed out is whole only after its last stored number; one whose history was kept replays it")
    func restoredRing() throws {
        var ring = EventRing(depth: 100, keptAfter: 90, owners: OwnerSequences(base: 0, last: [1000: 12, 2000: 30]))
        for own in UInt64(21)...30 { ring.append(event(80 + own, own: own, owner: 2000)) }
        #expect(throws: EventRing.ReplayError.tooOld(keptAfter: 12, owner: 1000)) { try ring.events(after: 11, names: nil, viewer: 1000) }
        #expect(try ring.events(after: 12, names: nil, viewer: 1000).isEmpty)
        #expect(try ring.events(after: 20, names: nil, viewer: 2000).count == 10)
        #expect(throws: EventRing.ReplayError.tooOld(keptAfter: 20, owner: 2000)) { try ring.events(after: 19, names: nil, viewer: 2000) }
        ring.append(event(111, own: 13, owner: 1000))
        #expect(try ring.events(after: 12, names: nil, viewer: 1000).map(\.ownerSequence) == [13])
    }
}
