@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Foundation
import Glibc
import Testing

@Suite("The state journal on real files: commit, rollback, lock, failure and recovery")
struct StateJournalTests {
    let queue = DispatchQueue(label: "journal-test")
    let logger = Logger(threshold: .error, environment: [:])

    func journal(in directory: String) -> StateJournal {
        StateJournal(directory: directory, durability: .power, logger: logger, queue: queue)
    }

    /// A running countdown and its `started` event.
    func started(_ name: String, sequence: UInt64) -> (CountdownEvent, Countdown) {
        let deadline = SystemClock.now().advanced(byMilliseconds: 3_600_000)
        return (
            CountdownEvent(sequence: sequence, kind: .started, name: name, remainingMilliseconds: 3_600_000, totalMilliseconds: 3_600_000),
            Countdown(name: name, owner: 0, totalMilliseconds: 3_600_000, status: .running(deadline: deadline, pinnedUnixMilliseconds: nil))
        )
    }

    /// One batch noting `names`: its commit's outcome.
    func batch(_ journal: StateJournal, _ names: [String], from sequence: UInt64, rollback: Bool = false) -> StateJournal.CommitOutcome {
        queue.sync {
            journal.beginBatch()
            for (offset, name) in names.enumerated() {
                let (event, state) = started(name, sequence: sequence + UInt64(offset))
                journal.note(event, state: state, clock: DaemonClock.system.mapping())
            }
            if rollback { journal.rollbackBatch() }
            return journal.commit()
        }
    }

    func recover(_ journal: StateJournal) throws(StorageError) -> StateJournal.Recovered {
        try journal.recoverForTest(on: queue)
    }

    /// A journal holding one durable batch, whose directory was then deleted and whose next
    /// commit met that (rolled back); `nil`, recorded, if the commit did not fail as such.
    func journalWhoseCommitMetDeletion(in directory: String) throws -> StateJournal? {
        let journal = self.journal(in: directory)
        _ = try recover(journal)
        #expect(batch(journal, ["tea"], from: 1) == .durable)
        try FileManager.default.removeItem(atPath: directory)
        guard case .failed(.directoryGone) = batch(journal, ["lost"], from: 2) else {
            Issue.record("a commit into a deleted directory did not fail as such")
            return nil
        }
        queue.sync { journal.rollbackBatch() }
        return journal
    }

    /// Waits for a snapshot written off the queue to land back on it and make the journal
    /// available; whether it did within a minute.
    func waitUntilAvailable(_ journal: StateJournal) -> Bool {
        let deadline = Date().addingTimeInterval(60)
        while queue.sync(execute: { journal.health }) != .available && Date() < deadline {
            usleep(10_000)
        }
        return queue.sync { journal.health } == .available
    }

    /// Recovers a fresh journal on a directory whose last journal was just let go (the wait for
    /// a spawned process's copy of its lock is `recoverForTest`'s).
    func recoverOnceReleased(in directory: String) throws(StorageError) -> StateJournal.Recovered {
        try recover(journal(in: directory))
    }

    func mode(_ path: String) -> mode_t {
        var info = stat()
        return stat(path, &info) == 0 ? info.st_mode & 0o777 : 0
    }

    @Test("a journal file is created whole: a stop before its rename leaves journal.N.new, which is never read and is replaced (no gap); an emptied newest journal is damage, refused and kept")
    func journalCreatedWhole() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        do {
            let first = journal(in: directory)
            _ = try recover(first)
            #expect(batch(first, ["tea"], from: 1) == .durable)
        }
        #expect(!FileManager.default.fileExists(atPath: directory + "/journal.000000000001.new"), "renamed into place")
        // What a stop between creating journal.2's temporary and renaming it leaves.
        try #require(FileManager.default.createFile(atPath: directory + "/journal.000000000002.new", contents: Data()), "the temporary could not be created")
        do {
            let second = journal(in: directory)
            #expect(try recover(second).countdowns.map(\.name) == ["tea"])
            #expect(second.generation == 2, "journal.2 made, not journal.3")
            #expect(!FileManager.default.fileExists(atPath: directory + "/journal.000000000002.new"), "the leftover was replaced")
            #expect(batch(second, ["egg"], from: 2) == .durable)
        }
        do {
            let third = journal(in: directory)
            #expect(Set(try recover(third).countdowns.map(\.name)) == ["tea", "egg"], "no gap: the start is not refused")
        }
        // The newest journal emptied (damage, not a stop): refused, the file kept as it is.
        let newest = directory + "/journal.000000000003"
        try #require(FileManager.default.fileExists(atPath: newest))
        try Data().write(to: URL(fileURLWithPath: newest))
        do {
            _ = try recover(journal(in: directory))
            Issue.record("an emptied newest journal was started on")
        } catch {
            #expect("\(error)".contains("the file is empty (0 bytes), though journal files are created with their header"), "\(error)")
        }
        #expect(FileManager.default.fileExists(atPath: newest), "kept for the repair")
    }

    @Test("each user's own numbers come back from the journal; records of the version before (the daemon-wide numbers) start every user after the last of them, and replay as they were numbered")
    func ownerSequencesRecovered() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // The version before's journal: uid 1000's start numbered 5, root's 9, without owners' numbers.
        var bytes: [UInt8] = []
        JournalFormat.beginFrame(in: &bytes)
        JournalFormat.appendHeader(.init(generation: 1, createdUnixMilliseconds: 1, bootID: nil), to: &bytes)
        JournalFormat.sealFrame(in: &bytes, at: 0, index: 0)
        let frameStart = bytes.count
        JournalFormat.beginFrame(in: &bytes)
        for (sequence, owner) in [(UInt64(5), UInt32(1000)), (9, 0)] {
            let (plain, state) = started(CountdownAddress.key(owner: owner, name: "old\(sequence)"), sequence: sequence)
            var event = plain
            event.owner = owner
            var stored = StoredCountdown(state, clock: DaemonClock.system.mapping())
            stored.owner = owner
            stored.name = "old\(sequence)"
            var record: [UInt8] = []
            JournalFormat.appendEvent(event, state: stored, to: &record)
            bytes += [2] + record.dropFirst().dropLast(9)  // Type 2: no flags, no owner's number.
        }
        JournalFormat.sealFrame(in: &bytes, at: frameStart, index: 1)
        #expect(FileManager.default.createFile(atPath: directory + "/journal.000000000001", contents: Data(bytes), attributes: [.posixPermissions: 0o600]))
        do {
            let journal = journal(in: directory)
            let recovered = try recover(journal)
            #expect(recovered.ownerSequences.base == 9, "every user saw the daemon-wide numbers up to 9")
            #expect(recovered.ownerSequences.last(of: 1000) == 9 && recovered.ownerSequences.last(of: 2000) == 9)
            #expect(try recovered.ring.events(after: 4, names: nil, viewer: 1000).map(\.ownerSequence) == [5], "numbered as the user saw it")
            // This version's records: uid 1000's next change is its 10th.
            queue.sync {
                journal.beginBatch()
                var (event, state) = started("1000/new", sequence: 10)
                event.owner = 1000
                event.ownerSequence = 10
                state.owner = 1000
                journal.note(event, state: state, clock: DaemonClock.system.mapping())
                #expect(journal.commit() == .durable)
            }
        }
        let recovered = try recoverOnceReleased(in: directory)
        #expect(recovered.ownerSequences.base == 9 && recovered.ownerSequences.last(of: 1000) == 10 && recovered.ownerSequences.last(of: 2000) == 9)
        #expect(try recovered.ring.events(after: 9, names: nil, viewer: 1000).map(\.name) == ["1000/new"])
    }

    @Test("--repair-state keeps each user's own numbers: a user goes on past its last intact one (by the repair's skip, the same for everyone), never at the daemon-wide number")
    func ownerSequencesRepaired() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        do {
            let journal = journal(in: directory)
            _ = try recover(journal)
            // Frame 1: root's six; frames 2 and 3: uid 1000's first and second, numbered 7 and 8.
            func commit(_ events: [(UInt64, UInt32, UInt64)]) {
                queue.sync {
                    journal.beginBatch()
                    for (sequence, owner, own) in events {
                        var (event, state) = started(CountdownAddress.key(owner: owner, name: "n\(sequence)"), sequence: sequence)
                        event.owner = owner
                        event.ownerSequence = own
                        state.owner = owner
                        journal.note(event, state: state, clock: DaemonClock.system.mapping())
                    }
                    #expect(journal.commit() == .durable)
                }
            }
            commit((1...6).map { ($0, 0, $0) })
            commit([(7, 1000, 1)])
            commit([(8, 1000, 2)])
        }
        // Root's frame damaged in the middle.
        let path = try #require(try StateJournal.journalFiles(in: directory).first?.1)
        var bytes = try #require(FileManager.default.contents(atPath: path)).map { $0 }
        let frames = JournalFormat.wholeFrames(in: bytes)
        bytes[frames[1].payload.lowerBound + 20] ^= 0x40
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        #expect(StateRepair.repair(directory) { _ in } == 0)
        let recovered = try recoverOnceReleased(in: directory)
        let skip = StateRepair.numbersSkipped
        #expect(recovered.ownerSequences.last(of: 1000) == 2 + skip && recovered.ownerSequences.last(of: 2000) == skip, "\(recovered.ownerSequences)")
        #expect(recovered.lastSequence == 8 + skip)
        // A number lost with the damage is never given again: a SINCE from before is told the
        // history is gone, not replayed something else under that number.
        #expect(throws: EventRing.ReplayError.tooOld(keptAfter: 2 + skip, owner: 1000)) { try recovered.ring.events(after: 3, names: nil, viewer: 1000) }
        #expect(throws: EventRing.ReplayError.tooOld(keptAfter: skip, owner: 2000)) { try recovered.ring.events(after: 0, names: nil, viewer: 2000) }
        #expect(try recovered.ring.events(after: skip, names: nil, viewer: 2000).isEmpty)
    }

    @Test("a snapshot keeps each user's last number and the history's own numbers: a user whose history was pushed out is told from where it is whole")
    func ownerSequencesInSnapshot() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var engine = CountdownEngine()
        var events: [CountdownEvent] = []
        var ring = EventRing(depth: 16, owners: OwnerSequences())
        for index in 0..<20 {
            _ = try engine.start("1000/a\(index)", milliseconds: 3_600_000, requester: 1000, now: SystemClock.now(), events: &events)
        }
        _ = try engine.start("2000/b", milliseconds: 3_600_000, requester: 2000, now: SystemClock.now(), events: &events)
        for event in events { ring.append(event) }
        try SnapshotFile.write(
            engine.durableImage(), events: ring.events, eventsKeptAfter: ring.keptAfter, bootID: nil, journalGeneration: 1,
            clock: DaemonClock.system.mapping(), directory: directory
        )
        let recovered = try recoverOnceReleased(in: directory)
        #expect(recovered.ownerSequences == OwnerSequences(base: 0, last: [1000: 20, 2000: 1]))
        #expect(try recovered.ring.events(after: 0, names: nil, viewer: 2000).map(\.ownerSequence) == [1])
        let kept = recovered.ring.keptAfterOwn(owner: 1000)
        #expect(kept == ring.keptAfterOwn(owner: 1000) && kept > 0)
        #expect(try recovered.ring.events(after: kept, names: nil, viewer: 1000).map(\.ownerSequence) == Array((kept + 1)...20))
        #expect(throws: EventRing.ReplayError.self) { try recovered.ring.events(after: kept - 1, names: nil, viewer: 1000) }
    }

    @Test("a committed batch is recovered by the next journal; a rolled-back one is not; files are 0600; the directory is locked meanwhile")
    func commitAndRecover() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        var first: StateJournal? = journal(in: directory)
        #expect(try recover(try #require(first)).countdowns.isEmpty)
        #expect(batch(try #require(first), ["tea", "egg"], from: 1) == .durable)
        #expect(batch(try #require(first), ["undone"], from: 3, rollback: true) == .durable)
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix("journal.") }
        #expect(files.count == 1)
        for file in files + ["countdownd.lock"] {
            #expect(mode(directory + "/" + file) == 0o600, "\(file) is \(String(mode(directory + "/" + file), radix: 8))")
        }
        // A second journal on the same directory is refused while the first holds it.
        do throws(StorageError) {
            _ = try journal(in: directory).recoverForTest(on: queue, waitingOutForks: false)
            Issue.record("a second journal recovered a locked directory")
        } catch {
            guard case .locked = error else {
                Issue.record("refused for another reason: \(error)")
                return
            }
        }
        first = nil  // Released: the lock goes with it.
        let recovered = try recoverOnceReleased(in: directory)
        #expect(recovered.countdowns.map(\.name).sorted() == ["egg", "tea"])
        #expect(recovered.lastSequence == 2)
        #expect(recovered.ring.events.map(\.name) == ["tea", "egg"])
    }

    @Test(
        "a full disk fails the commit; later events are deferred and written once there is room, with nothing failed kept",
        .enabled(if: canMountTmpfs, "needs root with the right to mount a small tmpfs")
    )
    func fullDisk() throws {
        let scratch = ScratchDirectory()
        let mountPoint = scratch.path + "/small"
        #expect(mkdir(mountPoint, 0o700) == 0)
        try #require(runTool("/bin/mount", ["-t", "tmpfs", "-o", "size=256k", "tmpfs", mountPoint]) == 0, "mount a tmpfs")
        defer { runTool("/bin/umount", ["-l", mountPoint]) }
        let directory = mountPoint + "/state"
        let deferred = (0..<200).map { "deferred\($0)" }
        do {
            // This journal is released at the end of the block, and its lock with it.
            let journal = self.journal(in: directory)
            _ = try recover(journal)
            #expect(batch(journal, ["before"], from: 1) == .durable)
            // Fill what is left.
            let filler = mountPoint + "/filler"
            let fd = open(filler, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
            try #require(fd >= 0)
            let block = [UInt8](repeating: 1, count: 4096)
            while block.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) > 0 {}
            #expect(errno == ENOSPC, "filled up")
            close(fd)
            // More than the page the journal's last frame sits in: a small frame could still fit there.
            let refused = (0..<200).map { "refused\($0)" }
            guard case .failed = batch(journal, refused, from: 2) else {
                Issue.record("a commit to a full disk did not fail")
                return
            }
            queue.sync {
                #expect(!journal.acceptsChanges)
                journal.rollbackBatch()  // What the daemon does with the failed batch.
            }
            // While failing, a batch's events (time's, in the daemon) are kept for later.
            #expect(batch(journal, deferred, from: 202) == .deferred)
            #expect(queue.sync { journal.retry() } == false, "still full")
            #expect(unlink(filler) == 0)
            #expect(queue.sync { journal.retry() } == true, "room again: the deferred events are written")
            #expect(batch(journal, ["after"], from: 402) == .durable)
        }
        let recovered = try recoverOnceReleased(in: directory)
        #expect(recovered.countdowns.map(\.name).sorted() == (["after", "before"] + deferred).sorted())
        #expect(recovered.lastSequence == 402, "the last event written is the one after the deferred ones")
    }

    @Test("a deleted directory fails the next commit; retry recreates it holding only its lock, the full snapshot lands first and the journal follows it, 0600")
    func deletedDirectory() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        try recreateSnapshotFirst(in: directory)
        // What the next start reads, once that journal has let go: the snapshot's countdown and
        // the journal's, nothing refused.
        let recovered = try recoverOnceReleased(in: directory)
        #expect(Set(recovered.countdowns.map(\.name)) == ["tea", "after"])
    }

    /// The body of the test above, in a scope of its own so that its journal is released at its end.
    private func recreateSnapshotFirst(in directory: String) throws {
        guard let journal = try journalWhoseCommitMetDeletion(in: directory) else { return }
        #expect(queue.sync { journal.retry() } == false, "recreated, but not whole until a snapshot lands")
        #expect(queue.sync { journal.health } == .awaitingSnapshot)
        #expect(access(directory, F_OK) == 0, "recreated")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["countdownd.lock"], "no journal before its snapshot: a stop now would leave frames continuing nothing")
        var engine = CountdownEngine()
        var events: [CountdownEvent] = []
        _ = try engine.start("tea", milliseconds: 3_600_000, requester: 0, now: SystemClock.now(), events: &events)
        journal.snapshotQueue.suspend()
        queue.sync {
            #expect(journal.snapshotIsDue(now: SystemClock.now()))
            journal.takeSnapshot(engine.durableImage(), ring: EventRing(depth: 16), clock: DaemonClock.system.mapping())
        }
        #expect(!(try FileManager.default.contentsOfDirectory(atPath: directory).contains { $0.hasPrefix("journal.") }), "still none while the snapshot is written")
        journal.snapshotQueue.resume()
        // The snapshot is written off the queue and lands back on it.
        #expect(waitUntilAvailable(journal))
        #expect(mode(directory + "/" + SnapshotFile.fileName) == 0o600, "the snapshot is private like the journal")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).contains { $0.hasPrefix("journal.") }, "the journal follows the snapshot")
        #expect(batch(journal, ["after"], from: 3) == .durable)
    }

    @Test("only the journal being written deleted, the directory and older files left: a stop before the snapshot lands leaves a gap the next start refuses (not older files that read as whole); once it lands, the next start has everything")
    func journalAloneDeleted() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        try journalAloneDeletedThenStopped(in: directory, letSnapshotLand: false)
        do throws(StorageError) {
            _ = try recoverOnceReleased(in: directory)
            Issue.record("started on older files without what the deleted journal held")
        } catch {
            #expect("\(error)".contains("missing"), "\(error)")
        }
        let landed = scratch.path + "/landed"
        try journalAloneDeletedThenStopped(in: landed, letSnapshotLand: true)
        #expect(Set(try recoverOnceReleased(in: landed).countdowns.map(\.name)) == ["early", "lost", "after"])
    }

    /// A journal whose first run left `early`; its second run wrote `lost`, whose file is then
    /// deleted alone; the loss is noticed, and the snapshot (holding both, and `after`) lands, or
    /// the journal is let go first.
    private func journalAloneDeletedThenStopped(in directory: String, letSnapshotLand: Bool) throws {
        do {
            let first = journal(in: directory)
            _ = try recover(first)
            #expect(batch(first, ["early"], from: 1) == .durable)
        }
        let journal = try recoverableJournal(in: directory)
        #expect(batch(journal, ["lost"], from: 2) == .durable)
        let current = try #require(try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix("journal.") }.sorted().last)
        try FileManager.default.removeItem(atPath: directory + "/" + current)
        #expect(queue.sync { journal.checkDirectory() }, "the deleted journal is a lost state")
        #expect(queue.sync { journal.health } == .awaitingSnapshot)
        var engine = CountdownEngine()
        var events: [CountdownEvent] = []
        for name in ["early", "lost", "after"] {
            _ = try engine.start(name, milliseconds: 3_600_000, requester: 0, now: SystemClock.now(), events: &events)
        }
        // Without it, the stop comes before the snapshot has landed.
        if letSnapshotLand {
            queue.sync { journal.takeSnapshot(engine.durableImage(), ring: EventRing(depth: 16), clock: DaemonClock.system.mapping()) }
            #expect(waitUntilAvailable(journal))
        }
    }

    /// A fresh journal, recovered on `directory` once an earlier one has let go.
    private func recoverableJournal(in directory: String) throws -> StateJournal {
        let candidate = journal(in: directory)
        _ = try recover(candidate)
        return candidate
    }

    @Test("a snapshot that fails because its directory was deleted, after the directory was recreated: the recreated one gets its snapshot at once, not a second later")
    func snapshotFailedInLostDirectory() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        let journal = self.journal(in: directory)
        _ = try recover(journal)
        #expect(batch(journal, ["tea"], from: 1) == .durable)
        var engine = CountdownEngine()
        var events: [CountdownEvent] = []
        _ = try engine.start("tea", milliseconds: 3_600_000, requester: 0, now: SystemClock.now(), events: &events)
        // The snapshot waits to be written; meanwhile the directory goes (as `rm -rf` takes it,
        // after the file whose loss started the snapshot).
        journal.snapshotQueue.suspend()
        queue.sync { journal.takeSnapshot(engine.durableImage(), ring: EventRing(depth: 16), clock: DaemonClock.system.mapping()) }
        try FileManager.default.removeItem(atPath: directory)
        // The daemon notices the deletion (inotify) and recreates the directory before the
        // snapshot's failure reaches its queue: the two are put on the queue in that order.
        queue.suspend()
        queue.async { _ = journal.checkDirectory() }
        journal.snapshotQueue.resume()
        journal.snapshotQueue.sync {}  // Written, and failed: its directory was not there.
        queue.resume()
        queue.sync {
            #expect(journal.health == .awaitingSnapshot, "recreated, waiting for its snapshot")
            #expect(journal.snapshotIsDue(now: SystemClock.now()), "the recreated directory's snapshot is due at once")
        }
        queue.sync { journal.takeSnapshot(engine.durableImage(), ring: EventRing(depth: 16), clock: DaemonClock.system.mapping()) }
        #expect(waitUntilAvailable(journal))
    }

    @Test("a directory whose deletion a commit met first is recreated by the next look at it (the file system's word), not a second later by the retry")
    func commitMetDeletionFirst() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        guard let journal = try journalWhoseCommitMetDeletion(in: directory) else { return }
        #expect(queue.sync { journal.checkDirectory() }, "lost")
        #expect(queue.sync { journal.health } == .awaitingSnapshot, "recreated at once, waiting for its snapshot")
        #expect(access(directory, F_OK) == 0, "recreated")
    }
}
