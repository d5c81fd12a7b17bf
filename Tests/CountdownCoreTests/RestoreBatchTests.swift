import CountdownCore
import Testing

@Suite("A batch of countdowns read from storage, as recovery hands it to the engine")
struct RestoreBatchTests {
    static let now = Instant.seconds(100)
    static let twoPhases = CountdownCycle(phases: [.init(milliseconds: 250_000, label: "work"), .init(milliseconds: 60_000, label: "rest")])

    static func running(_ name: String, deadlineSeconds: Int64, cycle: CountdownCycle? = nil, owner: UInt32 = 0) -> Countdown {
        Countdown(
            name: name, owner: owner, totalMilliseconds: 250_000, status: .running(deadline: .seconds(deadlineSeconds), pinnedUnixMilliseconds: nil),
            pausesOnSuspend: name.hasPrefix("s"), cycle: cycle
        )
    }

    static let paused = Countdown(name: "p", owner: 1000, totalMilliseconds: 60_000, status: .paused(remainingNanoseconds: 5_000_000_000))

    /// Running "a" and "sleepy" ahead, "late1" past, the cycle "cyc" ahead and "latecyc" past,
    /// "p" paused, the removal of "gone", and "late2" due exactly at `now`.
    static func mixedBatch() -> RestoreBatch {
        var batch = RestoreBatch(capacity: 8, now: now)
        let entries: [(String, Countdown?)] = [
            ("a", running("a", deadlineSeconds: 200)),
            ("late1", running("late1", deadlineSeconds: 50)),
            ("cyc", running("cyc", deadlineSeconds: 300, cycle: twoPhases)),
            ("latecyc", running("latecyc", deadlineSeconds: 90, cycle: twoPhases)),
            ("p", paused),
            ("gone", nil),
            ("sleepy", running("sleepy", deadlineSeconds: 400, owner: 1000)),
            ("late2", running("late2", deadlineSeconds: 100)),
        ]
        for (name, countdown) in entries {
            batch.append(name: name, hash: NameIndex.hash(name), countdown: countdown)
        }
        return batch
    }

    @Test("late countdowns are taken out in order, with their cycles and hashes, each left behind as its name's removal; the rest are kept as stored")
    func takingLate() {
        var batch = Self.mixedBatch()
        #expect(batch.hasLateCountdowns)
        let late = batch.takeLateCountdowns()
        #expect(late.map(\.countdown.name) == ["late1", "latecyc", "late2"])
        #expect(late.map(\.hash) == ["late1", "latecyc", "late2"].map(NameIndex.hash))
        #expect(late.map(\.countdown) == [
            Self.running("late1", deadlineSeconds: 50), Self.running("latecyc", deadlineSeconds: 90, cycle: Self.twoPhases),
            Self.running("late2", deadlineSeconds: 100),
        ])
        #expect(!batch.hasLateCountdowns)
        #expect(batch.takeLateCountdowns().isEmpty, "taken once")
        #expect(batch.count == 8, "each late entry stays, as a removal")
        #expect(batch.countdowns == [
            Self.running("a", deadlineSeconds: 200), Self.running("cyc", deadlineSeconds: 300, cycle: Self.twoPhases), Self.paused,
            Self.running("sleepy", deadlineSeconds: 400, owner: 1000),
        ])
        batch.removeAll()
        #expect(batch.isEmpty && !batch.hasLateCountdowns && batch.countdowns.isEmpty)
    }

    @Test("restored with `replacing`, a batch whose late countdowns were taken removes what was restored under their names, and restores the rest as stored, announcing nothing")
    func restoringWhatIsLeft() throws {
        var engine = CountdownEngine()
        var events: [CountdownEvent] = []
        var earlier = RestoreBatch(capacity: 3, now: Self.now)
        for name in ["late1", "gone", "a"] {
            earlier.append(name: name, hash: NameIndex.hash(name), countdown: Self.running(name, deadlineSeconds: 500))
        }
        engine.restore(earlier, replacing: false, events: &events)
        var batch = Self.mixedBatch()
        _ = batch.takeLateCountdowns()
        engine.restore(batch, replacing: true, events: &events)
        #expect(events.isEmpty)
        #expect(engine.names.sorted() == ["a", "cyc", "p", "sleepy"])
        #expect(try engine.status(of: "a", now: Self.now).deadline == .seconds(200), "the later state replaced the earlier")
        let cycle = try engine.status(of: "cyc", now: Self.now)
        #expect(cycle.cycle == Self.twoPhases && cycle.deadline == .seconds(300))
        let paused = try engine.status(of: "p", now: Self.now)
        #expect(paused.state == .paused && paused.remainingMilliseconds == 5_000 && paused.owner == 1000)
        #expect(try engine.status(of: "sleepy", now: Self.now).pausesOnSuspend)
        #expect(engine.persistentState(of: "cyc") == Self.running("cyc", deadlineSeconds: 300, cycle: Self.twoPhases))
    }

    @Test("late countdowns left in a batch are finished by the engine as it restores them: `done` once, with how late, and a cycle's next phase begins")
    func lateLeftInTheBatch() throws {
        var engine = CountdownEngine()
        var events: [CountdownEvent] = []
        engine.restore(Self.mixedBatch(), replacing: false, events: &events)
        let done = events.filter { $0.kind == .done }
        #expect(done.map(\.name) == ["late1", "late2"])
        #expect(done.map(\.lateMilliseconds) == [50_000, 0])
        #expect(try engine.status(of: "latecyc", now: Self.now).cycle?.phaseIndex == 1, "its rest phase began")
        #expect(engine.names.count == 7)
    }
}
