@testable import CountdownCore
import Testing

@Suite("The engine's name index and timer heap")
struct SchedulerStructureTests {
    /// Slots are indexes into `names`; nil marks a removed one.
    struct Model {
        var index = NameIndex()
        var names: [String?] = []
        var reference: [String: Int32] = [:]

        func find(_ name: String) -> Int32? {
            index.find(hash: NameIndex.hash(name)) { names[Int($0)] == name }
        }

        mutating func insert(_ name: String) {
            let slot = Int32(names.count)
            names.append(name)
            index.insert(hash: NameIndex.hash(name), slot: slot)
            reference[name] = slot
        }

        mutating func remove(_ name: String) {
            guard let slot = reference.removeValue(forKey: name) else { return }
            index.remove(hash: NameIndex.hash(name), slot: slot)
            names[Int(slot)] = nil
        }
    }

    @Test("name index: 20,000 random inserts and removals agree with a Dictionary at every step")
    func nameIndexMatchesDictionary() {
        var model = Model()
        var random = SplitMix64(state: 42)
        for step in 0..<20_000 {
            let name = "n\(Int.random(in: 0..<3000, using: &random))"
            if model.reference[name] == nil {
                model.insert(name)
            } else if Bool.random(using: &random) {
                model.remove(name)
            }
            if step % 1000 == 0 {
                for probe in 0..<3000 {
                    let name = "n\(probe)"
                    #expect(model.find(name) == model.reference[name], "step \(step), \(name)")
                }
            }
        }
        #expect(model.index.count == model.reference.count)
        for (name, slot) in model.reference {
            #expect(model.find(name) == slot)
        }
    }

    @Test("name index: colliding hashes are told apart by the name, and removal keeps the others findable")
    func nameIndexCollisions() {
        // Everything filed under one hash: one long probe run, then holes punched in it.
        var index = NameIndex()
        let names = (0..<50).map { "same\($0)" }
        for (slot, _) in names.enumerated() {
            index.insert(hash: 7, slot: Int32(slot))
        }
        func find(_ name: String) -> Int32? {
            index.find(hash: 7) { names[Int($0)] == name }
        }
        #expect(find("same31") == 31)
        for slot in stride(from: 0, to: 50, by: 3) {
            index.remove(hash: 7, slot: Int32(slot))
        }
        for (slot, name) in names.enumerated() {
            #expect(find(name) == (slot % 3 == 0 ? nil : Int32(slot)), "\(name)")
        }
        #expect(index.count == 50 - 17)
    }

    @Test("timer heap: pops in (due, slot) order through pushes, replacements and compaction")
    func heapOrder() {
        var heap = TimerHeap()
        var random = SplitMix64(state: 7)
        var reference: [TimerHeap.Entry] = []
        for slot in 0..<5000 {
            let entry = TimerHeap.Entry(due: Int64.random(in: 0..<1000, using: &random), slot: Int32(slot), generation: 0)
            heap.push(entry)
            reference.append(entry)
        }
        // Replace the top a thousand times, as the engine does when a countdown's tick fires.
        for round in 0..<1000 {
            reference.sort { $0.precedes($1) }
            #expect(heap.minimum == reference[0], "round \(round)")
            let replacement = TimerHeap.Entry(due: reference[0].due + Int64.random(in: 0..<2000, using: &random), slot: reference[0].slot, generation: 1)
            heap.replaceMinimum(with: replacement)
            reference[0] = replacement
        }
        #expect(heap.laneCount > 0, "replacements that keep the lane sorted went into it")
        heap.compact { $0.slot % 2 == 0 }
        reference.removeAll { $0.slot % 2 != 0 }
        reference.sort { $0.precedes($1) }
        var popped: [TimerHeap.Entry] = []
        while let entry = heap.popMinimum() {
            popped.append(entry)
        }
        #expect(popped == reference)
    }
}

@Suite("Timer heap: the sorted lane for ticks")
struct SchedulerStructureTestsLane {
    @Test("ticks re-armed one second later go into the lane, in order, and the heap stays empty of them")
    func ticksUseTheLane() {
        var heap = TimerHeap()
        for slot in 0..<1000 {
            heap.push(TimerHeap.Entry(due: Int64(slot % 97) * 10_000_000, slot: Int32(slot), generation: 0))
        }
        var fired: [TimerHeap.Entry] = []
        // Five seconds of ticks: each fired entry is replaced by the same one a second later.
        while let top = heap.minimum, top.due < 5_000_000_000 {
            fired.append(top)
            heap.replaceMinimum(with: TimerHeap.Entry(due: top.due + 1_000_000_000, slot: top.slot, generation: 0))
        }
        #expect(fired.count == 5000)
        #expect(zip(fired, fired.dropFirst()).allSatisfy { $0.precedes($1) }, "fired in (due, slot) order")
        #expect(heap.laneCount == 1000 && heap.entries.isEmpty, "after the first second every entry lives in the lane")
        // A far-off replacement (a purge) goes to the heap, and order still holds across both.
        let top = heap.minimum!  // Not empty: it holds the 1,000 entries.
        heap.replaceMinimum(with: TimerHeap.Entry(due: top.due + 600_000_000_000, slot: top.slot, generation: 1))
        #expect(heap.entries.count == 1)
        var previous: TimerHeap.Entry?
        while let entry = heap.popMinimum() {
            if let previous { #expect(previous.precedes(entry)) }
            previous = entry
        }
    }

    @Test("storage is given back once most of it is unused, in the heap and in the lane, and order holds")
    func storageIsGivenBack() {
        var heap = TimerHeap()
        // 100,000 countdowns' first ticks go into the heap; as they fire, their successors go into
        // the lane, so the heap's storage empties while the lane's fills.
        let countdowns = 100_000
        for slot in 0..<countdowns {
            heap.push(TimerHeap.Entry(due: Int64(slot % 997) * 1_000_000, slot: Int32(slot), generation: 0))
        }
        let grown = heap.storageCapacity
        #expect(grown >= countdowns)
        var fired = 0
        var previous: TimerHeap.Entry?
        while let top = heap.minimum, top.due < 1_000_000_000 {
            if let previous { #expect(previous.precedes(top)) }
            previous = top
            heap.replaceMinimum(with: TimerHeap.Entry(due: top.due + 1_000_000_000, slot: top.slot, generation: 0))
            fired += 1
        }
        #expect(fired == countdowns && heap.laneCount == countdowns && heap.entries.isEmpty)
        #expect(heap.storageCapacity < grown * 2, "the emptied heap's storage went back: \(heap.storageCapacity) entries for \(countdowns)")
        // Nobody follows them any more: the lane's entries leave one by one, in order, and the
        // storage shrinks with them. Kept without shrinking, it would be 100,000 entries for the
        // last few; given back at a quarter's use, it stays within 8 entries a live one (the
        // lane is compacted once half of it is taken) plus what is kept anyway.
        previous = nil
        var left = countdowns
        var ordered = true
        var worstExcess = 0
        while let entry = heap.popMinimum() {
            if let previous, !previous.precedes(entry) { ordered = false }
            previous = entry
            left -= 1
            worstExcess = max(worstExcess, heap.storageCapacity - 8 * left)
        }
        #expect(ordered && left == 0)
        #expect(worstExcess <= 2 * TimerHeap.storageKeptAnyway, "storage ran \(worstExcess) entries past 8 a live one")
        #expect(heap.storageCapacity <= 2 * TimerHeap.storageKeptAnyway, "an empty heap keeps at most \(TimerHeap.storageKeptAnyway) entries of storage in the heap and as many in the lane")
    }
}

@Suite("The engine's slot table")
struct SlotTableTests {
    @Test("slots across many pages read back what was stored, in order, empty ones as nil")
    func pagesHoldTheirSlots() {
        var table = SlotTable<Int>()
        for value in 0..<10_000 {
            table.append(value % 7 == 0 ? nil : value)
        }
        #expect(table.count == 10_000)
        #expect(table[4094] == 4094 && table[4095] == nil && table[4096] == 4096 && table[4097] == 4097)
        table[4096] = nil
        table[9999] = -1
        #expect(table[4096] == nil && table[9999] == -1)
        let expected: [Int?] = (0..<10_000).map { $0 == 4096 ? nil : $0 == 9999 ? -1 : ($0 % 7 == 0 ? nil : $0) }
        #expect(Array(table) == expected)
    }
}
