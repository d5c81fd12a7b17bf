@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Foundation
import Glibc
import Testing

extension StateJournalTests {
    @Test("the policy and the suspend marks survive the journal, then the snapshot")
    func journalThenSnapshot() throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        var engine = CountdownEngine()
        engine.setTicksEnabled(false, now: SystemClock.now())
        var events: [CountdownEvent] = []
        let now = SystemClock.now()
        try engine.start("1000/pomodoro", milliseconds: 1_500_000, requester: 1000, onSuspend: .pause, now: now, events: &events)
        try engine.start("1000/tea", milliseconds: 1_500_000, requester: 1000, now: now, events: &events)
        engine.machineSlept(for: 60_000_000_000, now: now.advanced(byMilliseconds: 61_000), events: &events)
        #expect(events.map(\.kind) == [.started, .started, .paused, .resumed])
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
        func check(_ recovered: StateJournal.Recovered, _ from: String) {
            let byName = Dictionary(uniqueKeysWithValues: recovered.countdowns.map { ($0.name, $0) })
            #expect(byName["1000/pomodoro"]?.pausesOnSuspend == true, "\(from)")
            #expect(byName["1000/tea"]?.pausesOnSuspend == false, "\(from)")
            #expect(recovered.ring.events.map(\.causedBySuspend) == [false, false, true, true], "\(from)")
        }
        var second: StateJournal? = journal(in: directory)
        let fromJournal = try recover(try #require(second))
        check(fromJournal, "from the journal")
        try queue.sync {
            try #require(second).snapshotAtStop(engine.durableImage(), ring: fromJournal.ring, clock: DaemonClock.system.mapping())
        }
        second = nil
        let image = try #require(try SnapshotFile.read(directory: directory))
        #expect(image.problems.isEmpty && access(directory + "/" + SnapshotFile.fileName, F_OK) == 0, "\(image.problems)")
        #expect(image.rows.first { $0.name == "pomodoro" }?.pausesOnSuspend == true)
        #expect(image.events.filter(\.causedBySuspend).count == 2)
        let fromSnapshot = try recover(journal(in: directory))
        check(fromSnapshot, "from the snapshot")
    }
}

@Suite("Pause on suspend in the snapshot of the version before, and in journal records")
struct SuspendStorageTests {
    @Test("a snapshot of schema version 2 (before ON-SUSPEND) is read: every countdown counts on")
    func readsVersion2() throws {
        let scratch = ScratchDirectory()
        let database = try SQLiteDatabase(path: scratch.path + "/countdownd.db")
        try database.execute("""
            CREATE TABLE countdowns (name TEXT NOT NULL, state TEXT NOT NULL, total_ms INTEGER NOT NULL, deadline_unix_ms INTEGER,
                deadline_boot_ns INTEGER, remaining_ns INTEGER NOT NULL DEFAULT 0, finished_unix_ms INTEGER, owner_uid INTEGER NOT NULL,
                late_ms INTEGER, pinned_unix_ms INTEGER, PRIMARY KEY (owner_uid, name)) WITHOUT ROWID;
            CREATE TABLE events (seq INTEGER PRIMARY KEY NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, remaining_ms INTEGER NOT NULL,
                total_ms INTEGER NOT NULL, late_ms INTEGER, owner_uid INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
            INSERT INTO countdowns VALUES ('tea', 'paused', 60000, NULL, NULL, 30000000000, NULL, 1000, NULL, NULL);
            INSERT INTO events VALUES (1, 'paused', 'tea', 30000, 60000, NULL, 1000);
            INSERT INTO meta VALUES ('schema_version', '2'), ('last_seq', '1'), ('journal_generation', '1');
            """)
        let contents = try #require(try SnapshotFile.read(directory: scratch.path))
        #expect(contents.rows.map(\.name) == ["tea"] && contents.rows.first?.pausesOnSuspend == false)
        #expect(contents.events.map(\.kind) == [.paused] && contents.events.first?.causedBySuspend == false)
    }

    /// A directory holding a version 3 SQLite snapshot (an earlier countdownd's, with `on_suspend`
    /// and `cause`) whose countdowns are `rows` (`INSERT` statements), last_seq 2, generation 1.
    func versionThreeDatabase(rows: String) throws -> ScratchDirectory {
        let scratch = ScratchDirectory()
        let database = try SQLiteDatabase(path: scratch.path + "/" + SnapshotDatabase.fileName)
        try database.execute("""
            CREATE TABLE countdowns (name TEXT NOT NULL, state TEXT NOT NULL, total_ms INTEGER NOT NULL, deadline_unix_ms INTEGER,
                deadline_boot_ns INTEGER, remaining_ns INTEGER NOT NULL DEFAULT 0, finished_unix_ms INTEGER, owner_uid INTEGER NOT NULL,
                late_ms INTEGER, pinned_unix_ms INTEGER, on_suspend TEXT, PRIMARY KEY (owner_uid, name)) WITHOUT ROWID;
            CREATE TABLE events (seq INTEGER PRIMARY KEY NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, remaining_ms INTEGER NOT NULL,
                total_ms INTEGER NOT NULL, late_ms INTEGER, owner_uid INTEGER NOT NULL DEFAULT 0, cause TEXT);
            CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
            \(rows)
            INSERT INTO meta VALUES ('schema_version', '3'), ('last_seq', '2'), ('journal_generation', '1');
            """)
        return scratch
    }

    @Test("a version 3 snapshot row with an on_suspend this countdownd does not know is unreadable, not silently a countdown that counts on")
    func unknownPolicy() throws {
        let scratch = try versionThreeDatabase(rows: """
            INSERT INTO countdowns VALUES ('a', 'paused', 60000, NULL, NULL, 30000000000, NULL, 1000, NULL, NULL, 'pause');
            INSERT INTO countdowns VALUES ('b', 'paused', 60000, NULL, NULL, 30000000000, NULL, 1000, NULL, NULL, 'PAUSE');
            """)
        let read = try #require(try SnapshotFile.read(directory: scratch.path))
        #expect(read.rows.map(\.name) == ["a"] && read.rows.first?.pausesOnSuspend == true)
        #expect(read.unreadableRows == ["b"])
    }

    @Test("a version 3 snapshot row whose name breaks the name rules, or whose values no countdownd writes, is unreadable, not a countdown")
    func implausibleDatabaseRows() throws {
        let scratch = try versionThreeDatabase(rows: """
            INSERT INTO countdowns VALUES ('ok', 'paused', 60000, NULL, NULL, 30000000000, NULL, 1000, NULL, NULL, NULL);
            INSERT INTO countdowns VALUES ('a b', 'paused', 60000, NULL, NULL, 30000000000, NULL, 1000, NULL, NULL, NULL);
            INSERT INTO countdowns VALUES ('', 'paused', 60000, NULL, NULL, 30000000000, NULL, 1000, NULL, NULL, NULL);
            INSERT INTO countdowns VALUES ('none', 'paused', 0, NULL, NULL, 30000000000, NULL, 1000, NULL, NULL, NULL);
            INSERT INTO countdowns VALUES ('far', 'running', 60000, 99999999999999, NULL, 0, NULL, 1000, NULL, NULL, NULL);
            """)
        let read = try #require(try SnapshotFile.read(directory: scratch.path))
        #expect(read.rows.map(\.name) == ["ok"])
        #expect(read.unreadableRows.count == 4, "\(read.unreadableRows)")
    }

    @Test("every journal event record is type 4 with the owner's own number; a record of the version before (type 2, no flags) reads back numbered as all users saw it")
    func flaggedRecord() {
        var plain = CountdownEvent(sequence: 1, kind: .paused, name: "1000/p", remainingMilliseconds: 5, totalMilliseconds: 10, owner: 1000, ownerSequence: 1)
        let state = StoredCountdown(
            name: "p", state: .paused, totalMilliseconds: 10, deadlineUnixMilliseconds: nil, deadlineBootNanoseconds: nil,
            remainingNanoseconds: 5_000_000, finishedUnixMilliseconds: nil, owner: 1000, lateMilliseconds: nil
        )
        var header: [UInt8] = []
        JournalFormat.beginFrame(in: &header)
        JournalFormat.appendHeader(.init(generation: 1, createdUnixMilliseconds: 1, bootID: nil), to: &header)
        JournalFormat.sealFrame(in: &header, at: 0, index: 0)
        func framed(_ record: [UInt8]) -> [UInt8] {
            var frame: [UInt8] = []
            JournalFormat.beginFrame(in: &frame)
            frame += record
            JournalFormat.sealFrame(in: &frame, at: 0, index: 1)
            return frame
        }
        var bytes: [UInt8] = []
        JournalFormat.appendEvent(plain, state: state, to: &bytes)
        #expect(bytes.first == 4 && bytes[bytes.count - 9] == JournalFormat.EventFlag.ownerSequence, "flags, then the owner's number")
        // The version before's record: type 2, no flags, no owner's number.
        let legacy = [2] + bytes.dropFirst().dropLast(9)
        let legacyScan = JournalFormat.scan(header + framed(Array(legacy)))
        #expect(legacyScan.damage == nil && legacyScan.events.first?.event == plain)
        #expect(legacyScan.events.first?.numberedByOwner == false)

        var flaggedState = state
        flaggedState.pausesOnSuspend = true
        plain.sequence = 2
        plain.ownerSequence = 1
        plain.causedBySuspend = true
        var record: [UInt8] = []
        JournalFormat.appendEvent(plain, state: flaggedState, to: &record)
        #expect(record.count == bytes.count)
        let scan = JournalFormat.scan(header + framed(record))
        #expect(scan.damage == nil && scan.events.count == 1)
        #expect(scan.events.first?.event == plain && scan.events.first?.state == flaggedState)
        #expect(scan.events.first?.numberedByOwner == true && scan.events.first?.event.ownerSequence == 1)
        // Every bit of the flags is taken now (the last, 0x80, by an event's own total): one
        // set on a record that does not carry what it announces is damage, not dropped.
        record[record.count - 9] |= 0x80
        let damage = JournalFormat.scan(header + framed(record)).damage?.reason
        #expect(damage?.contains("cut short") == true, "\(String(describing: damage))")
    }
}
