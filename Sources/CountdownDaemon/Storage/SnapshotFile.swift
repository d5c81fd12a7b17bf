import CountdownCore
import Glibc

/// One stored countdown: its durable state, with times as they are kept on disk.
struct StoredCountdown: Equatable, Sendable {
    var name: String
    var state: CountdownState
    var totalMilliseconds: Int64
    /// Running: the wall-clock deadline, valid across reboots.
    var deadlineUnixMilliseconds: Int64?
    /// Running: the deadline on `CLOCK_BOOTTIME`, valid within the boot that wrote it.
    var deadlineBootNanoseconds: Int64?
    var remainingNanoseconds: Int64
    var finishedUnixMilliseconds: Int64?
    var owner: UInt32
    var lateMilliseconds: Int64?
    /// Running to a wall-clock time: that time (the deadline follows the wall clock).
    var pinnedUnixMilliseconds: Int64? = nil
    /// Stands still while the machine sleeps (`START … ON-SUSPEND pause`).
    var pausesOnSuspend = false
}

/// The snapshot: every countdown and the recent events at one moment, in SQLite, so the state can
/// be inspected with the `sqlite3` tool. Together with the journal files from its generation on,
/// it is the daemon's durable state.
///
/// Schema (version 4):
///
///     countdowns(name, state, total_ms, deadline_unix_ms, deadline_boot_ns, remaining_ns,
///                finished_unix_ms, owner_uid, late_ms, pinned_unix_ms, on_suspend, crc,
///                PRIMARY KEY (owner_uid, name))
///                -- pinned_unix_ms: set for a countdown to a wall-clock time (START … AT)
///                -- on_suspend: 'pause' for one that stands still while the machine sleeps,
///                --   NULL (count on) otherwise
///                -- names are per owner: two users may both have `tea`
///                -- crc: CRC-32C of the row's values (`SnapshotChecksum`)
///     events(seq PRIMARY KEY, kind, name, remaining_ms, total_ms, late_ms, owner_uid, cause, crc)
///                -- the replay ring; cause: 'suspend' on a paused/resumed the machine's sleep caused
///     meta(key PRIMARY KEY, value)  -- schema_version, journal_generation (replay journals from
///                                   -- this one on), last_seq, events_kept_after, boot_id,
///                                   -- written_unix_ms, countdowns_digest and events_digest
///                                   -- (the number of rows and the sum of their crc),
///                                   -- meta_crc (CRC-32C of the other entries, by key)
///
/// SQLite checks none of its pages, so every value carries a checksum: a flipped bit anywhere
/// in a row, a row lost or added, or a changed entry of `meta` is damage, refused at start and
/// named by `--check-state`, and `--repair-state` keeps every row that verifies.
///
/// A snapshot is written whole to a temporary file, synced, and renamed over the old one, so the
/// file on disk is always complete. Versions 1 (the row store of countdownd 0.1), 2 (without
/// `on_suspend` and `cause`) and 3 (without checksums) are read too.
enum SnapshotFile {
    /// The snapshot's name inside the state directory.
    static let fileName = "countdownd.db"
    static let schemaVersion = "4"
    /// The `cause` of an event the machine's sleep caused.
    static let suspendCause = "suspend"

    /// What a snapshot holds.
    struct Contents: Sendable {
        var rows: [StoredCountdown] = []
        var lastSequence: UInt64 = 0
        var bootID: String?
        /// Journal files from this generation on come after the snapshot.
        var journalGeneration: UInt64 = 0
        /// The replay ring, oldest first, and the number after which it is complete.
        var events: [CountdownEvent] = []
        var eventsKeptAfter: UInt64 = 0
        /// Rows that could not be read, or whose checksum does not match (their names, sanitized).
        var unreadableRows: [String] = []
        /// What is damaged: rows that do not verify, rows missing or added, metadata altered.
        /// Recovery refuses a snapshot with any; `--check-state` names them; `--repair-state`
        /// keeps `rows`, the ones that verify.
        var problems: [String] = []
    }

    /// Reads the snapshot in `directory`, or returns `nil` when there is none.
    /// - Throws: `StorageError.damaged` when the file exists but is not a complete snapshot (the
    ///   file is left as it is), `.unreadable` when it cannot be opened.
    static func read(directory: String) throws(StorageError) -> Contents? {
        let path = directory + "/" + fileName
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
                throw SQLiteError(code: 0, message: "schema version \(version) is not one this countdownd reads (1 to \(schemaVersion))")
            }
            var contents = Contents()
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
        _ database: SQLiteDatabase, into contents: inout Contents, version: Int, digest: inout SnapshotChecksum.Digest
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
            guard !nameBytes.isEmpty, nameBytes.count <= CountdownName.maximumLength, nameBytes.allSatisfy(CountdownName.isAllowed),
                  onSuspend.isEmpty || pausesOnSuspend,
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
            if version >= 4, storedChecksum.map({ UInt32(exactly: $0) }) != checksum.of(row) {
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
        _ database: SQLiteDatabase, into contents: inout Contents, version: Int, digest: inout SnapshotChecksum.Digest
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
            event.causedBySuspend = select.text(7) == Self.suspendCause
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
    private static func applyVersion1Watermark(_ database: SQLiteDatabase, to contents: inout Contents) throws(SQLiteError) {
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

    /// Writes a complete snapshot to `directory` and puts it in place atomically: a temporary
    /// file, synced, renamed over the old snapshot, then the directory synced.
    /// Runs off the daemon's queue (a snapshot of a million countdowns takes seconds).
    static func write(_ contents: Contents, directory: String) throws(StorageError) {
        let path = directory + "/" + fileName
        let temporary = path + ".tmp"
        // Ignored on purpose: usually there is none; one that cannot be removed fails the open below.
        _ = unlink(temporary)
        // SQLite would create the file 0644 less the umask; the snapshot holds every name (phone
        // numbers, for OTP cooldowns), so it is made here, the owner's alone like the journal,
        // and SQLite opens it as it is.
        let created = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard created >= 0 else { throw .system(what: "cannot create \(temporary)", errno: errno) }
        _ = close(created)  // Nothing was written through it.
        do throws(SQLiteError) {
            let database = try SQLiteDatabase(path: temporary)
            // The file is renamed into place only once complete and synced, so SQLite's own
            // rollback journal would protect nothing.
            try database.execute("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF")
            try database.execute("""
                CREATE TABLE countdowns (
                    name TEXT NOT NULL,
                    state TEXT NOT NULL CHECK (state IN ('running', 'paused', 'done', 'cancelled')),
                    total_ms INTEGER NOT NULL CHECK (total_ms > 0),
                    deadline_unix_ms INTEGER,
                    deadline_boot_ns INTEGER,
                    remaining_ns INTEGER NOT NULL DEFAULT 0,
                    finished_unix_ms INTEGER,
                    owner_uid INTEGER NOT NULL,
                    late_ms INTEGER,
                    pinned_unix_ms INTEGER,
                    on_suspend TEXT CHECK (on_suspend IN ('pause')),
                    crc INTEGER NOT NULL,
                    PRIMARY KEY (owner_uid, name)
                ) WITHOUT ROWID;
                CREATE TABLE events (
                    seq INTEGER PRIMARY KEY NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL,
                    remaining_ms INTEGER NOT NULL, total_ms INTEGER NOT NULL, late_ms INTEGER,
                    owner_uid INTEGER NOT NULL DEFAULT 0,
                    cause TEXT CHECK (cause IN ('suspend')),
                    crc INTEGER NOT NULL
                );
                CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
                """)
            try database.transaction { () throws(SQLiteError) in
                var checksum = SnapshotChecksum()
                var digests = SnapshotChecksum.Digests()
                let insert = try database.prepare("INSERT INTO countdowns VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)")
                for row in contents.rows {
                    let crc = checksum.of(row)
                    digests.countdowns.add(crc)
                    try insert.bind(12, Int64(crc))
                    try insert.bind(1, row.name)
                    try insert.bind(2, row.state.rawValue)
                    try insert.bind(3, row.totalMilliseconds)
                    try insert.bind(4, row.deadlineUnixMilliseconds)
                    try insert.bind(5, row.deadlineBootNanoseconds)
                    try insert.bind(6, row.remainingNanoseconds)
                    try insert.bind(7, row.finishedUnixMilliseconds)
                    try insert.bind(8, Int64(row.owner))
                    try insert.bind(9, row.lateMilliseconds)
                    try insert.bind(10, row.pinnedUnixMilliseconds)
                    try insert.bind(11, row.pausesOnSuspend ? SuspendPolicy.pause.rawValue : nil)
                    try insert.run()
                }
                let event = try database.prepare("INSERT INTO events VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")
                for item in contents.events {
                    let name = CountdownAddress.display(item.name, owner: item.owner, to: item.owner)
                    let crc = checksum.of(item, name: name)
                    digests.events.add(crc)
                    try event.bind(9, Int64(crc))
                    try event.bind(1, Int64(bitPattern: item.sequence))
                    try event.bind(2, item.kind.rawValue)
                    try event.bind(3, name)
                    try event.bind(7, Int64(item.owner))
                    try event.bind(4, item.remainingMilliseconds)
                    try event.bind(5, item.totalMilliseconds)
                    try event.bind(6, item.lateMilliseconds)
                    try event.bind(8, item.causedBySuspend ? Self.suspendCause : nil)
                    try event.run()
                }
                let meta = try database.prepare("INSERT INTO meta VALUES (?1, ?2)")
                var values: [(String, String)] = [
                    ("schema_version", schemaVersion),
                    ("journal_generation", "\(contents.journalGeneration)"),
                    ("last_seq", "\(contents.lastSequence)"),
                    ("events_kept_after", "\(contents.eventsKeptAfter)"),
                    ("written_unix_ms", "\(SystemClock.unixNanoseconds() / 1_000_000)"),
                    ("countdowns_digest", digests.countdowns.description),
                    ("events_digest", digests.events.description),
                ]
                if let bootID = contents.bootID { values.append(("boot_id", bootID)) }
                values.append((SnapshotChecksum.metaKey, String(SnapshotChecksum.metaChecksum(values))))
                for (key, value) in values {
                    try meta.bind(1, key)
                    try meta.bind(2, value)
                    try meta.run()
                }
            }
        } catch {
            _ = unlink(temporary)  // Ignored on purpose: a leftover is removed before the next attempt.
            throw .writeFailed(path: temporary, reason: error.message)
        }
        try FileSystem.sync(path: temporary)
        // A WAL left by countdownd 0.1 belongs to the old file; SQLite must not apply it to this one.
        // (Ignored on purpose when there is none, the usual case.)
        _ = unlink(path + "-wal")
        _ = unlink(path + "-shm")  // As above.
        guard rename(temporary, path) == 0 else {
            let code = errno
            _ = unlink(temporary)  // As above.
            throw .system(what: "rename \(temporary) to \(path)", errno: code)
        }
        try FileSystem.sync(path: directory)
    }
}
