import CountdownCore
import Testing

@Suite("The engine as a replica of a shared store (cluster mode)")
struct EngineReplicaTests {
    func running(_ name: String, total: Int64, deadline: Int64) -> Countdown {
        Countdown(name: name, owner: 0, totalMilliseconds: total, status: .running(deadline: .milliseconds(deadline), pinnedUnixMilliseconds: nil))
    }

    @Test("a START … REPLACE from the store announces the replaced countdown's cancelled, then the started, numbered in order; a copy that did not hold it numbers the started alike")
    func replacement() throws {
        var replica = CountdownEngine(configuration: EngineConfiguration(decidesLocally: false))
        var events: [CountdownEvent] = []
        let now = Instant.milliseconds(1000)
        #expect(replica.applyReplicated("tea", state: running("tea", total: 60_000, deadline: 61_000), event: .started, eventRemainingMilliseconds: 60_000, sequence: 5000, now: now, events: &events))
        events.removeAll()
        let replaced = replica.applyReplicated(
            "tea", state: running("tea", total: 300_000, deadline: 301_000), event: .started, eventRemainingMilliseconds: 300_000,
            replacedRemainingMilliseconds: 42_000, sequence: 6000, now: now, events: &events
        )
        #expect(replaced)
        #expect(events.map(\.kind) == [.cancelled, .started])
        #expect(events.map(\.sequence) == [6000, 6001])
        #expect(events.map(\.remainingMilliseconds) == [42_000, 300_000])
        #expect(events.map(\.totalMilliseconds) == [60_000, 300_000], "the cancelled one is the one replaced")
        #expect(replica.lastSequence == 6001)
        #expect(try replica.status(of: "tea", now: now).totalMilliseconds == 300_000)

        // A copy that never held the replaced countdown: no cancelled, and the same number.
        var fresh = CountdownEngine(configuration: EngineConfiguration(decidesLocally: false))
        events.removeAll()
        _ = fresh.applyReplicated(
            "tea", state: running("tea", total: 300_000, deadline: 301_000), event: .started, eventRemainingMilliseconds: 300_000,
            replacedRemainingMilliseconds: 42_000, sequence: 6000, now: now, events: &events
        )
        #expect(events.map(\.kind) == [.started] && events.map(\.sequence) == [6001])
        // Repeated (a resumed watch): ignored.
        events.removeAll()
        #expect(!replica.applyReplicated("tea", state: nil, event: .removed, eventRemainingMilliseconds: 0, sequence: 6001, now: now, events: &events))
        #expect(events.isEmpty)
    }

    @Test("a proposal of START … REPLACE over a running countdown carries the cancelled it causes")
    func replacementProposal() throws {
        var replica = CountdownEngine(configuration: EngineConfiguration(decidesLocally: false))
        var events: [CountdownEvent] = []
        let now = Instant.milliseconds(1000)
        _ = replica.applyReplicated("tea", state: running("tea", total: 60_000, deadline: 61_000), event: .started, eventRemainingMilliseconds: 60_000, sequence: 5000, now: now, events: &events)
        let later = Instant.milliseconds(19_000)
        let proposal = try replica.proposal(for: "tea", now: later) { engine, events throws(ProtocolError) in
            try engine.start("tea", milliseconds: 300_000, replace: true, requester: 0, now: later, events: &events)
        }
        #expect(proposal.replaced?.kind == .cancelled && proposal.replaced?.remainingMilliseconds == 42_000)
        #expect(proposal.event?.kind == .started)
        let fresh = try replica.proposal(for: "new", now: later) { engine, events throws(ProtocolError) in
            try engine.start("new", milliseconds: 300_000, replace: true, requester: 0, now: later, events: &events)
        }
        #expect(fresh.replaced == nil, "nothing replaced")
    }

    @Test("a replica refuses ON-SUSPEND pause with bad-request, in its proposal, before anything is proposed; ON-SUSPEND count is a plain START")
    func noPauseOnSuspendInTheFleet() throws {
        let replica = CountdownEngine(configuration: EngineConfiguration(decidesLocally: false))
        let now = Instant.milliseconds(1000)
        #expect {
            try replica.proposal(for: "pomodoro", now: now) { engine, events throws(ProtocolError) in
                try engine.start("pomodoro", milliseconds: 1_500_000, requester: 0, onSuspend: .pause, now: now, events: &events)
            }
        } throws: { error in
            (error as? ProtocolError)?.code == .badRequest && "\(error)".contains("not available in cluster mode")
        }
        let plain = try replica.proposal(for: "pomodoro", now: now) { engine, events throws(ProtocolError) in
            try engine.start("pomodoro", milliseconds: 1_500_000, requester: 0, onSuspend: .count, now: now, events: &events)
        }
        #expect(plain.event?.kind == .started && plain.state?.pausesOnSuspend == false)
    }

    @Test("a done from the store announced more than a second after its deadline says how late, on the host that announces it; one on time does not")
    func lateDone() throws {
        var replica = CountdownEngine(configuration: EngineConfiguration(decidesLocally: false))
        var events: [CountdownEvent] = []
        func done(_ name: String, deadline: Int64, late: Int64?) -> Countdown {
            Countdown(name: name, owner: 0, totalMilliseconds: 1000, status: .done(finishedAt: .milliseconds(deadline), lateMilliseconds: late))
        }
        for (index, name) in ["prompt", "held", "proposed-late"].enumerated() {
            _ = replica.applyReplicated(name, state: running(name, total: 1000, deadline: 2000), event: .started, eventRemainingMilliseconds: 1000, sequence: UInt64(1000 * (index + 1)), now: .milliseconds(1000), events: &events)
        }
        events.removeAll()
        _ = replica.applyReplicated("prompt", state: done("prompt", deadline: 2000, late: nil), event: .done, eventRemainingMilliseconds: 0, sequence: 9000, now: .milliseconds(2300), events: &events)
        // Proposed on time, but etcd took 2.5 s to commit it.
        _ = replica.applyReplicated("held", state: done("held", deadline: 2000, late: nil), event: .done, eventRemainingMilliseconds: 0, sequence: 9001, now: .milliseconds(4500), events: &events)
        // Proposed late (every host was down): the store's figure stands.
        _ = replica.applyReplicated("proposed-late", state: done("proposed-late", deadline: 2000, late: 60_000), event: .done, eventRemainingMilliseconds: 0, sequence: 9002, now: .milliseconds(62_100), events: &events)
        #expect(events.map(\.lateMilliseconds) == [nil, 2500, 60_000])
    }

    @Test("creations in flight count against the limits as if held: the global one and the per-user quota")
    func pendingCreationsCount() throws {
        var replica = CountdownEngine(configuration: EngineConfiguration(maximumCountdowns: 10, maximumCountdownsPerOwner: 3, decidesLocally: false))
        var events: [CountdownEvent] = []
        _ = replica.applyReplicated("1000/a", state: Countdown(name: "a", owner: 1000, totalMilliseconds: 1000, status: .running(deadline: .milliseconds(2000), pinnedUnixMilliseconds: nil)), event: .started, eventRemainingMilliseconds: 1000, sequence: 1000, now: .milliseconds(1000), events: &events)
        var pending = PendingCreations()
        try replica.checkRoom(forNewCountdownOf: 1000, pending: pending)
        pending.add(1000)
        try replica.checkRoom(forNewCountdownOf: 1000, pending: pending)
        pending.add(1000)
        #expect(throws: ProtocolError.self, "uid 1000 holds 1 and has 2 in flight: its quota of 3 is full") {
            try replica.checkRoom(forNewCountdownOf: 1000, pending: pending)
        }
        try replica.checkRoom(forNewCountdownOf: 1001, pending: pending)
        for _ in 0..<7 { pending.add(0) }
        #expect(throws: ProtocolError.self, "1 held and 9 in flight fill the 10") {
            try replica.checkRoom(forNewCountdownOf: 0, pending: pending)
        }
        pending.remove(0)
        try replica.checkRoom(forNewCountdownOf: 0, pending: pending)
        #expect(pending.total == 8 && pending.byOwner == [1000: 2, 0: 6])
    }
}
