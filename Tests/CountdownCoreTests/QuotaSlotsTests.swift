import CountdownCore
import Testing

@Suite("Quota slots: the fleet-wide limits as numbered slots, claimed once each")
struct QuotaSlotsTests {
    /// The message of the `limit` error `body` throws; `nil` if it throws none.
    func limitMessage(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch let error as ProtocolError {
            #expect(error.code == .limit, "\(error)")
            return error.message
        } catch {
            Issue.record("not a protocol error: \(error)")
            return "\(error)"
        }
    }

    @Test("a slot's key names its pool and number, and only such keys are slots")
    func keys() {
        let shared = QuotaSlots.Slot(owner: nil, index: 17), own = QuotaSlots.Slot(owner: 1000, index: 4)
        #expect(shared.key == ".slots/all/17" && own.key == ".slots/1000/4")
        #expect(QuotaSlots.Slot(key: shared.key) == shared && QuotaSlots.Slot(key: own.key) == own)
        for key in ["tea", "1000/tea", ".hosts/me", ".slots/x/1", ".slots/all/-1", ".slots/all/1/2", ".slots/all/", ".slots/1000"] {
            #expect(QuotaSlots.Slot(key: key) == nil, "\(key)")
        }
        #expect(QuotaSlots.isSlotKey(".slots/all/0") && !QuotaSlots.isSlotKey("slots") && !QuotaSlots.isSlotKey("1000/.slots"))
    }

    @Test("root fills a pool of 10: ten different slots, then limit; a freed slot is claimed again")
    func rootFillsThePool() {
        var slots = QuotaSlots(limits: EngineConfiguration(maximumCountdowns: 10, maximumCountdownsPerOwner: 3))
        var generator = SplitMix64(state: 1)
        var claimed: [QuotaSlots.Slot] = []
        for _ in 0..<10 {
            guard let claim = try? slots.claim(for: 0, using: &generator) else {
                Issue.record("a free slot was refused")
                return
            }
            #expect(claim.count == 1 && claim[0].owner == nil, "root claims no slot of its own: it has no per-user quota")
            claimed += claim
        }
        #expect(Set(claimed.map(\.index)) == Set(0..<10), "each slot once")
        let message = limitMessage { _ = try slots.claim(for: 0, using: &generator) }
        #expect(message?.contains("maximum of 10 countdowns") == true, "\(message ?? "no error")")
        // Decided and held by the store; then one is freed by a removal.
        slots.release(claimed)
        for (number, slot) in claimed.enumerated() { slots.noteHeld(slot, by: "c\(number)") }
        #expect(slots.claimedCount == 0 && slots.heldCount(owner: nil) == 10)
        #expect(limitMessage { _ = try slots.claim(for: 0, using: &generator) } != nil, "held slots are not free")
        slots.noteFreed(claimed[3])
        slots.noteFreed(claimed[3])  // Twice: the watch may repeat a revision.
        #expect(slots.heldCount(owner: nil) == 9 && slots.slots(heldBy: "c3").isEmpty)
        #expect((try? slots.claim(for: 0, using: &generator)) == [claimed[3]])
    }

    @Test("other users take slots below root's reserve (38 of 40), root takes the reserve first, and nobody passes 40")
    func rootReserve() {
        var slots = QuotaSlots(limits: EngineConfiguration(maximumCountdowns: 40, maximumCountdownsPerOwner: 100))
        var generator = SplitMix64(state: 7)
        var shared: [Int] = []
        for number in 0..<38 {
            guard let claim = try? slots.claim(for: 1000 + UInt32(number % 3), using: &generator) else {
                Issue.record("claim \(number) refused")
                return
            }
            shared.append(claim[0].index)
        }
        #expect(Set(shared) == Set(0..<38))
        let message = limitMessage { _ = try slots.claim(for: 1001, using: &generator) }
        #expect(message?.contains("the last 2 are kept for root") == true, "\(message ?? "no error")")
        let root = [try? slots.claim(for: 0, using: &generator), try? slots.claim(for: 0, using: &generator)]
        #expect(Set(root.compactMap { $0?.first?.index }) == [38, 39], "root's claims use the reserve")
        #expect(limitMessage { _ = try slots.claim(for: 0, using: &generator) } != nil, "nobody passes the pool")
    }

    @Test("root's countdowns take the others' range first, as a single host counts them against it, and the reserve once it is full")
    func rootFillsTheOthersRangeFirst() throws {
        var slots = QuotaSlots(limits: EngineConfiguration(maximumCountdowns: 100, maximumCountdownsPerOwner: 100))
        var generator = SplitMix64(state: 3)
        for _ in 0..<95 {
            #expect(try slots.claim(for: 0, using: &generator)[0].index < 95)
        }
        #expect(limitMessage { _ = try slots.claim(for: 1000, using: &generator) }?.contains("kept for root") == true, "root's count against the others")
        for _ in 0..<5 {
            #expect(try slots.claim(for: 0, using: &generator)[0].index >= 95, "then the reserve")
        }
        #expect(limitMessage { _ = try slots.claim(for: 0, using: &generator) } != nil)
    }

    @Test("a uid's own pool: its 6th claim is refused, and the daemon-wide slot it took for it is given back")
    func perUserPool() {
        var slots = QuotaSlots(limits: EngineConfiguration(maximumCountdowns: 100, maximumCountdownsPerOwner: 5))
        var generator = SplitMix64(state: 11)
        var own: [Int] = []
        for _ in 0..<5 {
            guard let claim = try? slots.claim(for: 1000, using: &generator) else {
                Issue.record("refused within the quota")
                return
            }
            #expect(claim.count == 2 && claim[0].owner == nil && claim[1].owner == 1000)
            own.append(claim[1].index)
        }
        #expect(Set(own) == Set(0..<5))
        let message = limitMessage { _ = try slots.claim(for: 1000, using: &generator) }
        #expect(message?.contains("uid 1000 already holds its maximum of 5 countdowns across the fleet") == true, "\(message ?? "no error")")
        #expect(slots.claimedCount == 10, "the refused claim keeps nothing")
        #expect((try? slots.claim(for: 1001, using: &generator))?.count == 2, "another uid has its own pool")
    }

    @Test("slots held by the store, read at once or noted one by one, are not claimed; a holder's slots are what its removal frees")
    func heldSlots() {
        var slots = QuotaSlots(limits: EngineConfiguration(maximumCountdowns: 4, maximumCountdownsPerOwner: 2))
        var generator = SplitMix64(state: 5)
        let a = QuotaSlots.Slot(owner: nil, index: 0), b = QuotaSlots.Slot(owner: nil, index: 1)
        let aOwn = QuotaSlots.Slot(owner: 1000, index: 0)
        slots.replaceHeld(with: [(a, "1000/a"), (aOwn, "1000/a"), (b, "b")])
        slots.noteHeld(b, by: "b")  // Again: changes nothing.
        #expect(Set(slots.slots(heldBy: "1000/a")) == [a, aOwn] && slots.slots(heldBy: "b") == [b])
        #expect(slots.heldCount(owner: nil) == 2 && slots.heldCount(owner: 1000) == 1)
        let claim = try? slots.claim(for: 1000, using: &generator)
        #expect(claim?.first.map { [2, 3].contains($0.index) } == true && claim?.last == QuotaSlots.Slot(owner: 1000, index: 1))
        #expect(limitMessage { _ = try slots.claim(for: 1000, using: &generator) }?.contains("uid 1000") == true, "both of its own taken")
        slots.replaceHeld(with: [])
        #expect(slots.heldCount(owner: nil) == 0 && slots.claimedCount == 2, "a new read keeps the claims in flight")
    }
}
