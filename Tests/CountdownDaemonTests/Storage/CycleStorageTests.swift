@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Foundation
import Glibc
import Testing

extension StateJournalTests {
    @Test("a cycle's phases, where it is, and each event's own phase survive the journal, then the snapshot; a cycle out of its limits is damage")
    func cycleThroughJournalAndSnapshot() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        var engine = CountdownEngine()
        engine.setTicksEnabled(false, now: SystemClock.now())
        var events: [CountdownEvent] = []
        let now = SystemClock.now()
        let cycle = CountdownCycle(
            phases: [.init(milliseconds: 1_000, label: "work"), .init(milliseconds: 300_000, label: "break"), .init(milliseconds: 60_000)],
            rounds: 0
        )
        try engine.start("1000/pomodoro", milliseconds: 1, requester: 1000, onSuspend: .pause, cycle: cycle, now: now, events: &events)
        try engine.start("1000/tea", milliseconds: 1_500_000, requester: 1000, now: now, events: &events)
        engine.advance(to: now.advanced(byMilliseconds: 1_000), events: &events)
        try engine.setSuspendPolicy("1000/tea", to: .pause, requester: 1000, now: now.advanced(byMilliseconds: 1_000), events: &events)
        #expect(events.map(\.kind) == [.started, .started, .phase, .changed])
        var first: StateJournal? = journal(in: directory)
        _ = try recover(try #require(first))
        let outcome = try queue.sync {
            let journal = try #require(first)
            journal.beginBatch()
            for event in events {
                journal.note(event, state: engine.persistentState(of: event.name), clock: DaemonClock.system.mapping())
            }
            return journal.commit()
        }
        #expect(outcome == .durable)
        first = nil  // Releases the directory's lock.
        var expected = cycle
        expected.phaseIndex = 1
        func check(_ recovered: StateJournal.Recovered, _ from: String) {
            let byName = Dictionary(uniqueKeysWithValues: recovered.countdowns.map { ($0.name, $0) })
            #expect(byName["1000/pomodoro"]?.cycle == expected && byName["1000/pomodoro"]?.pausesOnSuspend == true, "\(from)")
            #expect(byName["1000/pomodoro"]?.totalMilliseconds == 300_000, "\(from): the running phase's")
            #expect(byName["1000/tea"]?.cycle == nil && byName["1000/tea"]?.pausesOnSuspend == true, "\(from)")
            #expect(recovered.ring.events.map { $0.cycle?.phaseIndex } == [0, nil, 1, nil], "\(from): each event with its own phase")
            #expect(recovered.ring.events.last?.suspendPolicy == .pause, "\(from): the changed event's setting")
        }
        var second: StateJournal? = journal(in: directory)
        let fromJournal = try recover(try #require(second))
        check(fromJournal, "from the journal")
        try queue.sync {
            try #require(second).snapshotAtStop(engine.durableImage(), ring: fromJournal.ring, clock: DaemonClock.system.mapping())
        }
        second = nil
        let image = try #require(try SnapshotFile.read(directory: directory))
        #expect(image.problems.isEmpty, "\(image.problems)")
        #expect(image.rows.first { $0.name == "pomodoro" }?.cycle == expected)
        let fromSnapshot = try recover(journal(in: directory))
        check(fromSnapshot, "from the snapshot")

        // A cycle block that checks out by CRC but not by a cycle's limits (0 phases) is damage.
        var state = StoredCountdown(
            name: "c", state: .running, totalMilliseconds: 1000, deadlineUnixMilliseconds: 1, deadlineBootNanoseconds: 1,
            remainingNanoseconds: 0, finishedUnixMilliseconds: nil, owner: 1000, lateMilliseconds: nil
        )
        state.cycle = CountdownCycle(phases: [], rounds: 1)
        var record: [UInt8] = []
        JournalFormat.appendEvent(CountdownEvent(sequence: 1, kind: .started, name: "1000/c", remainingMilliseconds: 1000, totalMilliseconds: 1000, owner: 1000), state: state, to: &record)
        var header: [UInt8] = []
        var out: [UInt8] = []
        JournalFormat.appendHeader(JournalFormat.Header(generation: 1, createdUnixMilliseconds: 0, bootID: nil), to: &header)
        for (index, payload) in [header, record].enumerated() {
            let start = out.count
            JournalFormat.beginFrame(in: &out)
            out += payload
            JournalFormat.sealFrame(in: &out, at: start, index: UInt64(index))
        }
        #expect(JournalFormat.scan(out).damage?.reason.contains("cycle of phases out of its limits") == true)

        // A `changed` keeps its own setting, whatever the countdown's state says by the commit
        // (two SETs in one batch), in the journal and in the snapshot's history.
        var journal: [UInt8] = []
        out = []
        state.cycle = nil
        state.pausesOnSuspend = false
        var toPause = CountdownEvent(sequence: 2, kind: .changed, name: "1000/c", remainingMilliseconds: 900, totalMilliseconds: 1000, owner: 1000)
        toPause.suspendPolicy = .pause
        var toCount = toPause
        toCount.sequence = 3
        toCount.suspendPolicy = .count
        JournalFormat.appendEvent(toPause, state: state, to: &journal)
        JournalFormat.appendEvent(toCount, state: state, to: &journal)
        for (index, payload) in [header, journal].enumerated() {
            let start = out.count
            JournalFormat.beginFrame(in: &out)
            out += payload
            JournalFormat.sealFrame(in: &out, at: start, index: UInt64(index))
        }
        let changes = JournalFormat.scan(out)
        #expect(changes.damage == nil && changes.events.map(\.event) == [toPause, toCount], "\(changes.events.map(\.event))")

        // Two phases begun in one batch (a restart): each event keeps its own total, though the
        // countdown's state is the second phase's by the commit.
        journal = []
        out = []
        state.totalMilliseconds = 450
        var firstPhase = CountdownEvent(sequence: 4, kind: .phase, name: "1000/c", remainingMilliseconds: 300, totalMilliseconds: 300, owner: 1000)
        firstPhase.lateMilliseconds = 644
        let secondPhase = CountdownEvent(sequence: 5, kind: .phase, name: "1000/c", remainingMilliseconds: 450, totalMilliseconds: 450, owner: 1000)
        JournalFormat.appendEvent(firstPhase, state: state, to: &journal)
        JournalFormat.appendEvent(secondPhase, state: state, to: &journal)
        for (index, payload) in [header, journal].enumerated() {
            let start = out.count
            JournalFormat.beginFrame(in: &out)
            out += payload
            JournalFormat.sealFrame(in: &out, at: start, index: UInt64(index))
        }
        let phases = JournalFormat.scan(out)
        #expect(phases.damage == nil && phases.events.map(\.event.totalMilliseconds) == [300, 450], "\(phases.events.map(\.event))")
        #expect(phases.events.map { $0.state?.totalMilliseconds } == [450, 450])
    }

    @Test("a cycle's phases read from the journal and the snapshot are one array for all its events, as they are in a running daemon, not a copy each")
    func phasesAreShared() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        var engine = CountdownEngine()
        engine.setTicksEnabled(false, now: SystemClock.now())
        var events: [CountdownEvent] = []
        let now = SystemClock.now()
        let phases = (0..<64).map { _ in CountdownCycle.Phase(milliseconds: 100, label: String(repeating: "l", count: 32)) }
        try engine.start("1000/c", milliseconds: 1, requester: 1000, cycle: CountdownCycle(phases: phases, rounds: 0), now: now, events: &events)
        engine.advance(to: now.advanced(byMilliseconds: 2_000), events: &events)
        #expect(events.filter { $0.kind == .phase }.count == 20)
        var first: StateJournal? = journal(in: directory)
        _ = try recover(try #require(first))
        _ = try queue.sync {
            let journal = try #require(first)
            journal.beginBatch()
            for event in events { journal.note(event, state: engine.persistentState(of: event.name), clock: DaemonClock.system.mapping()) }
            return journal.commit()
        }
        first = nil
        func buffers(_ recovered: StateJournal.Recovered) -> Set<Int> {
            Set(recovered.ring.events.compactMap { event in event.cycle?.phases.withUnsafeBufferPointer { Int(bitPattern: $0.baseAddress) } })
        }
        var second: StateJournal? = journal(in: directory)
        let fromJournal = try recover(try #require(second))
        #expect(fromJournal.ring.events.count == 21 && buffers(fromJournal).count == 1, "\(buffers(fromJournal).count) arrays")
        try queue.sync {
            try #require(second).snapshotAtStop(engine.durableImage(), ring: fromJournal.ring, clock: DaemonClock.system.mapping())
        }
        second = nil
        let fromSnapshot = try recover(journal(in: directory))
        #expect(fromSnapshot.ring.events.count == 21 && buffers(fromSnapshot).count == 1, "\(buffers(fromSnapshot).count) arrays")
    }

    @Test("a cycle block read back at every position (phase, round, rounds up to their limits), and no byte of it, however altered and sealed again, crashes the reader")
    func cycleBlocksAreReadSafely() {
        func sealed(_ payloads: [[UInt8]]) -> [UInt8] {
            var out: [UInt8] = []
            for (index, payload) in payloads.enumerated() {
                let start = out.count
                JournalFormat.beginFrame(in: &out)
                out += payload
                JournalFormat.sealFrame(in: &out, at: start, index: UInt64(index))
            }
            return out
        }
        var header: [UInt8] = []
        JournalFormat.appendHeader(JournalFormat.Header(generation: 1, createdUnixMilliseconds: 0, bootID: nil), to: &header)
        let phases = (0..<64).map { CountdownCycle.Phase(milliseconds: 1000 + Int64($0), label: $0 % 2 == 0 ? "p\($0)" : "") }
        var record: [UInt8] = []
        var events: [CountdownEvent] = []
        for (index, (phase, round)) in [(0, 0), (63, 0), (5, 999_998), (63, 999_999)].enumerated() {
            let cycle = CountdownCycle(phases: phases, rounds: 1_000_000, phaseIndex: UInt16(phase), round: UInt32(round))
            var state = StoredCountdown(
                name: "c", state: .running, totalMilliseconds: 1000, deadlineUnixMilliseconds: 1, deadlineBootNanoseconds: 1,
                remainingNanoseconds: 0, finishedUnixMilliseconds: nil, owner: 1000, lateMilliseconds: nil
            )
            state.cycle = cycle
            var event = CountdownEvent(sequence: UInt64(index + 1), kind: .phase, name: "1000/c", remainingMilliseconds: 1000, totalMilliseconds: 1000, owner: 1000)
            event.cycle = cycle
            events.append(event)
            JournalFormat.appendEvent(event, state: state, to: &record)
        }
        let whole = JournalFormat.scan(sealed([header, record]))
        #expect(whole.damage == nil && whole.events.map(\.event) == events)
        // Each event's cycle had the countdown's phases: written once a record, not twice.
        var once: [UInt8] = []
        JournalFormat.appendCycle(events[0].cycle!, to: &once)
        #expect(record.count < 4 * (once.count + 200), "\(record.count) bytes for four records with \(once.count)-byte cycles")
        #expect(whole.events.map { $0.state?.cycle?.round } == [0, 0, 999_998, 999_999])
        // Every byte, altered two ways, the frame sealed again so that its checksum holds: the
        // reader names damage or reads cycles within their limits, and never traps.
        var random = SplitMix64(state: 7)
        let first = record.count / 4  // The records are alike: the first one's bytes.
        for offset in 0..<first {
            for _ in 0..<2 {
                var altered = Array(record[..<first])
                altered[offset] = UInt8(truncatingIfNeeded: random.next())
                let scan = JournalFormat.scan(sealed([header, altered]))
                #expect(scan.events.allSatisfy { ($0.state?.cycle?.isValid ?? true) && ($0.event.cycle?.isValid ?? true) })
            }
        }
    }
}
