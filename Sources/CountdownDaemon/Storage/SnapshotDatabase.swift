import CountdownCore
import Glibc

/// The snapshot as countdownd wrote it before the flat image (`SnapshotImage`): an SQLite
/// database, `countdownd.db`, read once when upgrading and never written. The next snapshot is an
/// image, and the database is removed once it has landed.
///
/// Schema (version 4; versions 1 to 3 lack the later columns and the checksums):
///
///     countdowns(name, state, total_ms, deadline_unix_ms, deadline_boot_ns, remaining_ns,
///                finished_unix_ms, owner_uid, late_ms, pinned_unix_ms, on_suspend, crc,
///                PRIMARY KEY (owner_uid, name))
///     events(seq PRIMARY KEY, kind, name, remaining_ms, total_ms, late_ms, owner_uid, cause, crc)
///     meta(key PRIMARY KEY, value)  -- schema_version, journal_generation, last_seq,
///                                   -- events_kept_after, boot_id, written_unix_ms,
///                                   -- countdowns_digest, events_digest, meta_crc
///
/// SQLite checks none of its pages, so version 4 carries a CRC-32C on every row
/// (`SnapshotChecksum`), the number of rows and the sum of their checksums per table, and a
/// checksum over `meta`: a flipped bit in a row, a row lost or added, or a changed entry is damage.
/// Version 1 (countdownd 0.1) kept one watermark instead of a row per `done`.
enum SnapshotDatabase {
    /// Its name inside the state directory.
    static let fileName = "countdownd.db"
    /// The `cause` of an event the machine's sleep caused.
    static let suspendCause = "suspend"

    /// Reads the database at `path`, or returns `nil` when there is none.
    /// - Throws: `StorageError.damaged` when the file exists but is not a complete snapshot (the
    ///   file is left as it is), `.unreadable` when it cannot be opened.
    static func read(path: String) throws(StorageError) -> SnapshotFile.Contents? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT { return nil }
            throw .unreadable(path: path, errno: errno)
        }
        guard info.st_size > 0 else {
            throw .damaged(path: path, reason: "the file is empty (0 bytes)")
        }
        guard access(path, R_OK) == 0 else { throw .unreadable(path: path, errno: errno) }
        do throws(SQLiteError) {
            // Read-only: a snapshot is never changed in place, and a read-only file is not damage.
            let database = try SQLiteDatabase(path: path, readOnly: true)
            guard let version = try? database.scalarText("SELECT value FROM meta WHERE key = 'schema_version'") else {
                throw SQLiteError(code: 0, message: "it has no countdownd metadata")
            }
            guard let versionNumber = Int(version), (1...4).contains(versionNumber) else {
                throw SQLiteError(code: 0, message: "schema version \(version) is not one this countdownd reads (1 to 4)")
            }
            var contents = SnapshotFile.Contents()
            func meta(_ key: String) throws(SQLiteError) -> String? {
                try database.scalarText("SELECT value FROM meta WHERE key = '\(key)'")
            }
            contents.lastSequence = UInt64(try meta("last_seq") ?? "0") ?? 0
            contents.bootID = try meta("boot_id")
            contents.journalGeneration = UInt64(try meta("journal_generation") ?? "0") ?? 0
            contents.eventsKeptAfter = UInt64(try meta("events_kept_after") ?? "") ?? contents.lastSequence
            var digests = SnapshotChecksum.Digests()
            contents.rows = try readRows(database, into: &contents, version: versionNumber, digest: &digests.countdowns)
            if versionNumber == 1 {
                try applyVersion1Watermark(database, to: &contents)
            } else {
                contents.events = try readEvents(database, into: &contents, version: versionNumber, digest: &digests.events)
            }
            if versionNumber >= 4 {
                contents.problems += try verifyMeta(database, digests: digests)
            }
            if !contents.unreadableRows.isEmpty {
                contents.problems.insert("\(contents.unreadableRows.count) rows that do not verify (a checksum that does not match, or values this countdownd cannot read)", at: 0)
            }
            return contents
        } catch {
            throw .damaged(path: path, reason: error.message)
        }
    }

    private static func readRows(
        _ database: SQLiteDatabase, into contents: inout SnapshotFile.Contents, version: Int, digest: inout SnapshotChecksum.Digest
    ) throws(SQLiteError) -> [StoredCountdown] {
        var rows: [StoredCountdown] = []
        var checksum = SnapshotChecksum()
        let select = try database.prepare("""
            SELECT name, state, total_ms, deadline_unix_ms, deadline_boot_ns, remaining_ns, finished_unix_ms, owner_uid, late_ms,
                \(version >= 2 ? "pinned_unix_ms" : "NULL"), \(version >= 3 ? "on_suspend" : "NULL"), \(version >= 4 ? "crc" : "NULL")
            FROM countdowns
            """)
        while try select.step() {
            digest.count += 1
            let storedChecksum = select.int(11)
            if let storedChecksum { digest.sum &+= UInt64(truncatingIfNeeded: storedChecksum) }
            // A million rows are read at start-up: bytes are checked in place, one String made.
            let nameBytes = select.bytes(0)
            // NULL (count on) or 'pause'; anything else is a row this countdownd cannot read.
            let onSuspend = select.bytes(10)
            let pausesOnSuspend = onSuspend.elementsEqual(SuspendPolicy.pause.rawValue.utf8)
            // The name is judged with every other field (`implausibility`, below).
            guard onSuspend.isEmpty || pausesOnSuspend,
                  let state = Self.state(select.bytes(1)),
                  let total = select.int(2), let owner = select.int(7), let ownerUID = UInt32(exactly: owner)
            else {
                contents.unreadableRows.append(ProtocolText.sanitized(Array(select.bytes(0)), limit: 128))
                continue
            }
            let name = String(decoding: nameBytes, as: UTF8.self)
            let row = StoredCountdown(
                name: name, state: state, totalMilliseconds: total,
                deadlineUnixMilliseconds: select.int(3), deadlineBootNanoseconds: select.int(4),
                remainingNanoseconds: select.int(5) ?? 0, finishedUnixMilliseconds: select.int(6),
                owner: ownerUID, lateMilliseconds: select.int(8), pinnedUnixMilliseconds: select.int(9),
                pausesOnSuspend: pausesOnSuspend
            )
            if row.implausibility != nil || (version >= 4 && storedChecksum.map({ UInt32(exactly: $0) }) != checksum.of(row)) {
                contents.unreadableRows.append(ProtocolText.sanitized(Array(nameBytes), limit: 128))
                continue
            }
            rows.append(row)
        }
        return rows
    }

    /// The problems with a version 4 snapshot's `meta`: its own checksum, and the number and
    /// checksum sum of the rows it says were written against those read.
    private static func verifyMeta(_ database: SQLiteDatabase, digests: SnapshotChecksum.Digests) throws(SQLiteError) -> [String] {
        var entries: [(String, String)] = []
        let select = try database.prepare("SELECT key, value FROM meta")
        while try select.step() {
            entries.append((select.text(0) ?? "", select.text(1) ?? ""))
        }
        var problems: [String] = []
        let stored = entries.first { $0.0 == SnapshotChecksum.metaKey }.map(\.1)
        if stored != String(SnapshotChecksum.metaChecksum(entries)) {
            problems.append("its metadata (the meta table) does not match its checksum")
        }
        let table = Dictionary(entries, uniquingKeysWith: { first, _ in first })
        for (name, key, read) in [
            ("countdowns", "countdowns_digest", digests.countdowns), ("events", "events_digest", digests.events),
        ] where table[key] != read.description {
            let written = table[key].flatMap { $0.split(separator: ":").first } ?? "an unknown number of"
            problems.append("the \(name) table holds \(read.count) rows where \(written) were written, or rows were altered: rows are missing, added or changed")
        }
        return problems
    }

    /// A state spelled as stored, without making a String.
    private static func state(_ bytes: UnsafeBufferPointer<UInt8>) -> CountdownState? {
        for state in JournalFormat.states where bytes.elementsEqual(state.rawValue.utf8) {
            return state
        }
        return nil
    }

    private static func readEvents(
        _ database: SQLiteDatabase, into contents: inout SnapshotFile.Contents, version: Int, digest: inout SnapshotChecksum.Digest
    ) throws(SQLiteError) -> [CountdownEvent] {
        var events: [CountdownEvent] = []
        var checksum = SnapshotChecksum()
        let select = try database.prepare(
            "SELECT seq, kind, name, remaining_ms, total_ms, late_ms, owner_uid, \(version >= 3 ? "cause" : "NULL"), \(version >= 4 ? "crc" : "NULL") FROM events ORDER BY seq"
        )
        var unreadable = 0
        while try select.step() {
            digest.count += 1
            let storedChecksum = select.int(8)
            if let storedChecksum { digest.sum &+= UInt64(truncatingIfNeeded: storedChecksum) }
            guard let sequence = select.int(0), let kind = select.text(1).flatMap(EventKind.init(rawValue:)),
                  let name = select.text(2), let remaining = select.int(3), let total = select.int(4),
                  let owner = UInt32(exactly: select.int(6) ?? 0) else {
                unreadable += 1
                continue
            }
            var event = CountdownEvent(
                sequence: UInt64(sequence), kind: kind, name: CountdownAddress.key(owner: owner, name: name),
                remainingMilliseconds: remaining, totalMilliseconds: total, lateMilliseconds: select.int(5), owner: owner
            )
            event.causedBySuspend = select.text(7) == suspendCause
            if version >= 4, storedChecksum.map({ UInt32(exactly: $0) }) != checksum.of(event, name: name) {
                unreadable += 1
                continue
            }
            events.append(event)
        }
        if unreadable > 0 {
            contents.problems.append("\(unreadable) rows of the replay history (the events table) that do not verify")
        }
        return events
    }

    /// countdownd 0.1 stored one watermark instead of a row per `done`: running rows with a
    /// deadline at or before it had already been announced done. Read once, when upgrading.
    private static func applyVersion1Watermark(_ database: SQLiteDatabase, to contents: inout SnapshotFile.Contents) throws(SQLiteError) {
        let boot = try database.scalarText("SELECT value FROM meta WHERE key = 'done_through_boot_ns'").flatMap { Int64($0) }
        let unix = try database.scalarText("SELECT value FROM meta WHERE key = 'done_through_unix_ms'").flatMap { Int64($0) }
        let sameBoot = contents.bootID != nil && contents.bootID == SystemClock.bootID
        for index in contents.rows.indices where contents.rows[index].state == .running {
            let row = contents.rows[index]
            let passed: Bool
            if sameBoot, let boot, let deadline = row.deadlineBootNanoseconds {
                passed = deadline <= boot
            } else if let unix, let deadline = row.deadlineUnixMilliseconds {
                passed = deadline <= unix
            } else {
                passed = false
            }
            if passed {
                contents.rows[index].state = .done
                contents.rows[index].finishedUnixMilliseconds = row.deadlineUnixMilliseconds
                contents.rows[index].deadlineUnixMilliseconds = nil
                contents.rows[index].deadlineBootNanoseconds = nil
            }
        }
    }
}
