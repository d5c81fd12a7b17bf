import CountdownCore
import Testing

@Suite("Listings: slices, frozen and live consistency, filters; event kind sets")
struct EngineListingTests {
    /// Every slice of `listing`, `limit` at a time, with `between` run after each slice.
    private func drain(
        _ listing: inout CountdownListing, in clock: inout ManualClock, limit: Int,
        between: (inout ManualClock) throws -> Void = { _ in }
    ) rethrows -> [[CountdownSnapshot]] {
        var slices: [[CountdownSnapshot]] = []
        while !listing.isFinished {
            slices.append(clock.engine.nextSlice(of: &listing, limit: limit, now: clock.now))
            try between(&clock)
        }
        return slices
    }

    @Test("a frozen listing shows every countdown as of its start, in bounded slices, whatever changes meanwhile")
    func frozenUnderMutation() throws {
        var clock = ManualClock()
        for index in 0..<10_000 {
            try clock.start("c\(index)", 60_000, uid: 0)
        }
        var listing = clock.engine.listing(ListFilter(viewer: 0), frozen: true, now: clock.now)
        var round = 0
        let slices = try drain(&listing, in: &clock, limit: 1000) { clock in
            // Between slices: cancel one already listed and one not yet, start new ones, and let time pass.
            round += 1
            try clock.perform { e, now, ev throws(ProtocolError) in try e.cancel("c\(round)", requester: 0, now: now, events: &ev) }
            try clock.perform { e, now, ev throws(ProtocolError) in try e.cancel("c\(9_999 - round)", requester: 0, now: now, events: &ev) }
            try clock.start("new\(round)", 5000, uid: 0)
            clock.advance(byMilliseconds: 700)
        }
        #expect(slices.allSatisfy { $0.count <= 1000 })
        #expect(slices.count >= 10)
        let listed = Array(slices.joined())
        #expect(listed.count == 10_000)
        #expect(listing.producedCount == 10_000)
        #expect(Set(listed.map(\.name)).count == 10_000, "no countdown twice")
        #expect(listed.allSatisfy { $0.state == .running && $0.remainingMilliseconds == 60_000 }, "all as of the start: none cancelled, no time passed")
        #expect(!listed.contains { $0.name.hasPrefix("new") })
        #expect(clock.engine.count == 10_000 + round)
    }

    @Test("a live listing shows each countdown as it is when its slice is produced")
    func liveListing() throws {
        var clock = ManualClock()
        for index in 0..<3000 {
            try clock.start("c\(index)", 60_000, uid: 0)
        }
        var listing = clock.engine.listing(ListFilter(viewer: 0, states: [.running, .paused]), frozen: false, now: clock.now)
        let first = clock.engine.nextSlice(of: &listing, limit: 1000, now: clock.now)
        clock.advance(byMilliseconds: 2000)
        try clock.perform { e, now, ev throws(ProtocolError) in try e.cancel("c2999", requester: 0, now: now, events: &ev) }
        let rest = Array(try drain(&listing, in: &clock, limit: 1000).joined())
        #expect(first.allSatisfy { $0.remainingMilliseconds == 60_000 })
        #expect(rest.allSatisfy { $0.remainingMilliseconds == 58_000 })
        #expect(rest.count == 1999, "the cancelled one is no longer active")
    }

    @Test("filters: a user sees only its own namespace; states; a name prefix as the viewer writes it")
    func filters() throws {
        var clock = ManualClock()
        try clock.start("1000/otp:1", 60_000, uid: 1000)
        try clock.start("1000/otp:2", 1000, uid: 1000)
        try clock.start("1000/tea", 60_000, uid: 1000)
        try clock.start("1001/otp:9", 60_000, uid: 1001)
        try clock.start("otp:root", 60_000, uid: 0)
        clock.advance(byMilliseconds: 1000)
        func names(_ filter: ListFilter) -> [String] {
            var listing = clock.engine.listing(filter, frozen: true, now: clock.now)
            var names: [String] = []
            while !listing.isFinished {
                names += clock.engine.nextSlice(of: &listing, limit: 2, now: clock.now).map(\.name)
            }
            return names.sorted()
        }
        #expect(names(ListFilter(viewer: 1000)) == ["1000/otp:1", "1000/otp:2", "1000/tea"])
        #expect(names(ListFilter(viewer: 1000, prefix: "otp:")) == ["1000/otp:1", "1000/otp:2"])
        #expect(names(ListFilter(viewer: 1000, states: [.done])) == ["1000/otp:2"])
        #expect(names(ListFilter(viewer: 1000, states: [.running], prefix: "otp")) == ["1000/otp:1"])
        #expect(names(ListFilter(viewer: 0, prefix: "otp")) == ["otp:root"])
        #expect(names(ListFilter(viewer: 0, prefix: "1001/")) == ["1001/otp:9"])
        #expect(names(ListFilter(viewer: 0)).count == 5)
        #expect(names(ListFilter(viewer: 1002)).isEmpty)
    }

    @Test("a slice that finds few matches stops after looking at a bounded number of slots")
    func sparseFilterIsBounded() throws {
        var clock = ManualClock()
        for index in 0..<5000 {
            try clock.start("c\(index)", 60_000, uid: 0)
        }
        try clock.start("needle", 60_000, uid: 0)
        var listing = clock.engine.listing(ListFilter(viewer: 0, prefix: "needle"), frozen: true, now: clock.now)
        var slices = 0
        var found: [String] = []
        while !listing.isFinished {
            found += clock.engine.nextSlice(of: &listing, limit: 10, now: clock.now).map(\.name)
            slices += 1
        }
        #expect(found == ["needle"])
        #expect(slices >= 5001 / 80, "each slice looked at no more than 8 × 10 slots")
    }

    @Test("event kind sets: parsed from kinds and groups, case-insensitively; unknown words refused")
    func eventKinds() throws {
        let lifecycle = try EventKindSet.parse(bytes: Array("lifecycle".utf8))
        #expect(!lifecycle.includes(.tick) && !lifecycle.includes(.snapshot))
        #expect(lifecycle.includes(.done) && lifecycle.includes(.removed) && lifecycle.includes(.started))
        #expect(try EventKindSet.parse(bytes: Array("Done,CANCELLED".utf8)) == [EventKindSet(.done), EventKindSet(.cancelled)])
        #expect(try EventKindSet.parse(bytes: Array("all".utf8)) == .all)
        #expect(try EventKindSet.parse(bytes: Array("lifecycle,tick".utf8)).description == "lifecycle,tick")
        #expect(EventKindSet.all.description == "all")
        #expect(throws: ProtocolError.self) { try EventKindSet.parse(bytes: Array("ticks".utf8)) }
        #expect(throws: ProtocolError.self) { try EventKindSet.parse(bytes: Array("".utf8)) }
        // Each kind has a bit of its own: a set of one holds that kind and no other.
        for kind in EventKind.allCases {
            let one = EventKindSet(kind)
            #expect(one.rawValue.nonzeroBitCount == 1, "\(kind)")
            #expect(EventKind.allCases.filter { one.includes($0) } == [kind], "\(kind)")
        }
        #expect(EventKindSet.all.rawValue.nonzeroBitCount == EventKind.allCases.count)
    }
}

@Suite("Engine memory layout")
struct EngineLayoutTests {
    @Test("a countdown's record is 48 bytes: state and generation share a word")
    func recordSize() {
        #expect(CountdownEngine.bytesPerRecord == 48)
    }
}

@Suite("Engine: proposals for a replica")
struct EngineProposalTests {
    @Test("a proposal computes a change with the engine's own rules and errors, and leaves the engine as it was")
    func proposalsChangeNothing() throws {
        var clock = ManualClock()
        try clock.start("tea", 60_000, uid: 1000)
        clock.advance(byMilliseconds: 18_000)
        let engine = clock.engine
        let pause = try engine.proposal(for: "tea", now: clock.now) { e, events throws(ProtocolError) in
            try e.pause("tea", requester: 1000, now: clock.now, events: &events)
        }
        #expect(pause.state?.state == .paused && pause.state?.remainingNanoseconds == 42_000_000_000)
        #expect(pause.event?.kind == .paused && pause.event?.remainingMilliseconds == 42_000)
        #expect(try clock.engine.status(of: "tea", now: clock.now).state == .running, "the engine itself did not change")
        #expect(throws: ProtocolError.self) {
            try engine.proposal(for: "tea", now: clock.now) { e, events throws(ProtocolError) in
                try e.start("tea", milliseconds: 5000, replace: false, requester: 1000, now: clock.now, events: &events)
            }
        }
        let forbidden = #expect(throws: ProtocolError.self) {
            try engine.proposal(for: "tea", now: clock.now) { e, events throws(ProtocolError) in
                try e.cancel("tea", requester: 1001, now: clock.now, events: &events)
            }
        }
        #expect(forbidden?.code == .forbidden)
        let fresh = try engine.proposal(for: "new", now: clock.now) { e, events throws(ProtocolError) in
            try e.start("new", milliseconds: 5000, replace: false, requester: 1000, now: clock.now, events: &events)
        }
        #expect(fresh.state?.state == .running && fresh.event?.kind == .started && fresh.reply.remainingMilliseconds == 5000)
    }

    @Test("a replica's countdown past its deadline: a START over it is busy until the store decides its done, which dueDone makes by the engine's rules, also when the deadline is further back than the retention")
    func pastTheDeadline() throws {
        var clock = ManualClock(configuration: EngineConfiguration(decidesLocally: false))
        try clock.start("otp:1", 1_000, uid: 1000)
        clock.advance(byMilliseconds: 3_500)  // A replica does not finish it by itself.
        #expect(try clock.engine.status(of: "otp:1", now: clock.now).state == .running)
        let engine = clock.engine
        let busy = #expect(throws: ProtocolError.self) {
            try engine.proposal(for: "otp:1", now: clock.now) { e, events throws(ProtocolError) in
                try e.start("otp:1", milliseconds: 60_000, replace: false, requester: 1000, now: clock.now, events: &events)
            }
        }
        #expect(busy?.code == .busy && busy?.fields.contains(.init("remaining_ms", "0")) == true, "\(String(describing: busy))")
        let done = try #require(engine.dueDone(for: "otp:1", now: clock.now))
        #expect(done.state?.state == .done && done.event?.kind == .done && done.state?.lateMilliseconds == 2_500, "\(done)")
        #expect(engine.dueDone(for: "nothing", now: clock.now) == nil)
        // Past the deadline and the whole retention after it (every host was down, or the
        // writer gone with a short --retention): still its done alone, never its removal, or
        // the store would keep it running for ever.
        clock.advance(byMilliseconds: 601_000)
        let long = try #require(clock.engine.dueDone(for: "otp:1", now: clock.now), "a done, however late")
        #expect(long.state?.state == .done && long.event?.kind == .done && long.state?.lateMilliseconds == 603_500, "\(long)")
        #expect(clock.engine.dueDone(for: "otp:1", now: clock.now)?.state?.finishedAt == clock.engine.persistentState(of: "otp:1")?.deadline)
    }

    @Test("a proposal that creates a countdown must fit the replica's limits, counted over all it holds; one that reuses a name need not")
    func proposalsKeepTheLimits() throws {
        var clock = ManualClock(configuration: EngineConfiguration(maximumCountdowns: 100, maximumCountdownsPerOwner: 2))
        try clock.start("a", 60_000, uid: 1000)
        try clock.start("b", 1_000, uid: 1000)
        clock.advance(byMilliseconds: 2_000)  // b is done, and still counts.
        let engine = clock.engine
        func start(_ name: String, uid: UInt32) throws(ProtocolError) -> CountdownProposal {
            try engine.proposal(for: name, now: clock.now) { e, events throws(ProtocolError) in
                try e.start(name, milliseconds: 5000, replace: false, requester: uid, now: clock.now, events: &events)
            }
        }
        let refused = #expect(throws: ProtocolError.self) { try start("c", uid: 1000) }
        #expect(refused?.code == .limit && refused?.message.contains("uid 1000 already holds its maximum of 2") == true, "\(String(describing: refused))")
        #expect(try start("b", uid: 1000).state?.state == .running, "a finished name starts again in its own slot")
        #expect(try start("c", uid: 1001).state?.state == .running, "another uid has room")
        let root = EngineConfiguration(maximumCountdowns: 2)
        var full = ManualClock(configuration: root)
        try full.start("x", 60_000, uid: 0)
        try full.start("y", 60_000, uid: 0)
        let whole = #expect(throws: ProtocolError.self) {
            try full.engine.proposal(for: "z", now: full.now) { e, events throws(ProtocolError) in
                try e.start("z", milliseconds: 5000, replace: false, requester: 0, now: full.now, events: &events)
            }
        }
        #expect(whole?.code == .limit && whole?.message.contains("--max-countdowns") == true)
    }
}
