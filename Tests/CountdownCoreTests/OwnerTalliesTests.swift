@testable import CountdownCore
import Testing

@Suite("Owner tallies: the owner counted last kept aside")
struct OwnerTalliesTests {
    @Test("counts of interleaved owners stay exact, whichever is kept aside; an owner counted back to nothing holds nothing")
    func interleavedOwners() {
        var tallies = OwnerTallies()
        var expected: [UInt32: OwnerTally] = [:]
        var random = SplitMix64(state: 34)
        for _ in 0..<20_000 {
            let owner = UInt32(random.next() % 5) * 1000
            let held = expected[owner]?.held ?? 0
            let delta = held > 0 && random.next() % 3 == 0 ? -1 : 1
            tallies.update(owner) { $0.held += delta; $0.running += delta }
            expected[owner, default: OwnerTally()].held += delta
            expected[owner, default: OwnerTally()].running += delta
            for other in stride(from: UInt32(0), through: 4000, by: 1000) {
                #expect(tallies.tally(of: other) == expected[other] ?? OwnerTally(), "owner \(other)")
            }
        }
        // Everything counted back out: every owner holds nothing.
        for (owner, tally) in expected {
            tallies.update(owner) { $0.held -= tally.held; $0.running -= tally.running }
        }
        for owner in stride(from: UInt32(0), through: 4000, by: 1000) {
            #expect(tallies.tally(of: owner) == OwnerTally())
        }
        #expect(tallies.tally(of: 77) == OwnerTally(), "an owner never counted holds nothing")
    }
}
