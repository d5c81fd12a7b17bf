import CountdownCore
import Glibc

/// How hard storage works to keep an acknowledged change.
public enum Durability: String, Sendable, CaseIterable {
    /// WAL with `synchronous=NORMAL`: every `OK` survives the daemon being killed.
    case process
    /// WAL with `synchronous=FULL`: every `OK` also survives a power loss (one fsync per batch).
    case power
}

/// One stored row: a countdown's durable state, with times as they are kept on disk.
struct StoredCountdown: Equatable {
    var name: String
    var state: CountdownState
    var totalMilliseconds: Int64
    /// Running: the wall-clock deadline, valid across reboots.
    var deadlineUnixMilliseconds: Int64?
    /// Running: the deadline on `CLOCK_BOOTTIME`, valid while `bootID` matches the machine's.
    var deadlineBootNanoseconds: Int64?
    var remainingNanoseconds: Int64
    var finishedUnixMilliseconds: Int64?
    var owner: UInt32
    var lateMilliseconds: Int64?
}

/// The daemon's state in SQLite: one row per countdown that has not been purged.
///
/// Schema (readable with the `sqlite3` tool; see README "Reliability"):
///
///     countdowns(name PRIMARY KEY, state, total_ms, deadline_unix_ms, deadline_boot_ns,
///                remaining_ns, finished_unix_ms, owner_uid, late_ms)
///     meta(key PRIMARY KEY, value)   -- schema_version, boot_id, last_seq (numbers reserved
///                                       -- for events), done_through_boot_ns, done_through_unix_ms
///
/// Writes come in batches, one transaction each (group commit); ticks are never stored.
final class CountdownStore {
    /// The database file's name inside the state directory.
    static let fileName = "countdownd.db"
    static let schemaVersion = "1"

    /// The database file.
    let path: String
    private let database: SQLiteDatabase
    private let upsertStatement: SQLiteStatement
    private let deleteStatement: SQLiteStatement
    private let metaStatement: SQLiteStatement

    /// What `load` found.
    struct Contents {
        var rows: [StoredCountdown]
        var lastSequence: UInt64
        /// The boot the `deadline_boot_ns` values belong to.
        var bootID: String?
        /// Rows that could not be read, skipped with a log line each.
        var unreadableRows: [String]
        /// Every running row with a deadline at or before this (boot clock, same boot) was done.
        var doneThroughBootNanoseconds: Int64?
        /// The same on the wall clock, for after a reboot.
        var doneThroughUnixMilliseconds: Int64?
    }

    /// Opens (creating) the database in `directory` with the given durability.
    /// - Throws: `SQLiteError` when the file cannot be opened or is not a usable database.
    init(directory: String, durability: Durability) throws(SQLiteError) {
        path = directory + "/" + Self.fileName
        database = try SQLiteDatabase(path: path)
        try database.execute("PRAGMA journal_mode=WAL")
        try database.execute("PRAGMA synchronous=\(durability == .power ? "FULL" : "NORMAL")")
        // Checkpoints (which sync the database file) run on a background connection, not on the
        // daemon's queue: see `WALCheckpointer`. Room for the hot pages.
        try database.execute("PRAGMA wal_autocheckpoint=0")
        try database.execute("PRAGMA cache_size=-16000")
        try database.execute("""
            CREATE TABLE IF NOT EXISTS countdowns (
                name TEXT PRIMARY KEY NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('running', 'paused', 'done', 'cancelled')),
                total_ms INTEGER NOT NULL CHECK (total_ms > 0),
                deadline_unix_ms INTEGER,
                deadline_boot_ns INTEGER,
                remaining_ns INTEGER NOT NULL DEFAULT 0,
                finished_unix_ms INTEGER,
                owner_uid INTEGER NOT NULL,
                late_ms INTEGER
            ) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
            INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '\(Self.schemaVersion)');
            """)
        let version = try database.scalarText("SELECT value FROM meta WHERE key = 'schema_version'")
        guard version == Self.schemaVersion else {
            throw SQLiteError(code: 0, message: "schema version \(version ?? "none") is not \(Self.schemaVersion)")
        }
        upsertStatement = try database.prepare("""
            INSERT OR REPLACE INTO countdowns
                (name, state, total_ms, deadline_unix_ms, deadline_boot_ns, remaining_ns, finished_unix_ms, owner_uid, late_ms)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
            """)
        deleteStatement = try database.prepare("DELETE FROM countdowns WHERE name = ?1")
        metaStatement = try database.prepare("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)")
    }

    /// Reads every row and the metadata.
    func load() throws(SQLiteError) -> Contents {
        var contents = Contents(rows: [], lastSequence: 0, bootID: nil, unreadableRows: [])
        contents.lastSequence = UInt64(try database.scalarText("SELECT value FROM meta WHERE key = 'last_seq'") ?? "0") ?? 0
        contents.bootID = try database.scalarText("SELECT value FROM meta WHERE key = 'boot_id'")
        contents.doneThroughBootNanoseconds = try database.scalarText("SELECT value FROM meta WHERE key = 'done_through_boot_ns'").flatMap { Int64($0) }
        contents.doneThroughUnixMilliseconds = try database.scalarText("SELECT value FROM meta WHERE key = 'done_through_unix_ms'").flatMap { Int64($0) }
        let select = try database.prepare("""
            SELECT name, state, total_ms, deadline_unix_ms, deadline_boot_ns, remaining_ns, finished_unix_ms, owner_uid, late_ms
            FROM countdowns
            """)
        while try select.step() {
            let name = select.text(0) ?? ""
            guard (try? CountdownName.validate(name)) != nil,
                  let state = select.text(1).flatMap(CountdownState.init(rawValue:)),
                  let total = select.int(2), let owner = select.int(7), let ownerUID = UInt32(exactly: owner)
            else {
                contents.unreadableRows.append(ProtocolText.sanitized(Array(name.utf8), limit: 128))
                continue
            }
            contents.rows.append(StoredCountdown(
                name: name, state: state, totalMilliseconds: total,
                deadlineUnixMilliseconds: select.int(3), deadlineBootNanoseconds: select.int(4),
                remainingNanoseconds: select.int(5) ?? 0, finishedUnixMilliseconds: select.int(6),
                owner: ownerUID, lateMilliseconds: select.int(8)
            ))
        }
        return contents
    }

    /// Writes one batch in one transaction: the rows to store, the names to forget, and only the
    /// metadata that must change (each key is one more B-tree write per commit, and most commits
    /// need none).
    ///
    /// A countdown reaching its deadline is not written row by row (at 100,000 countdowns that
    /// would dirty a random page per `done`): the `done_through` watermark says that every running
    /// row with a deadline at or before it is done. Events fire in deadline order, so that is
    /// exact. `maintain` folds it into the rows now and then.
    /// - Parameters:
    ///   - sequenceReservation: when set, stored as `last_seq`: event numbers up to it may be in
    ///     use, so a restarted daemon continues after it.
    ///   - doneThrough: when set, the new watermark (boot clock, wall clock).
    ///   - bootID: when set, the boot the stored boot-clock deadlines belong to.
    func commit(
        upserts: [StoredCountdown], deletions: [String], sequenceReservation: UInt64?,
        doneThrough: (bootNanoseconds: Int64, unixMilliseconds: Int64)?, bootID: String?
    ) throws(SQLiteError) {
        try database.transaction { () throws(SQLiteError) in
            for row in upserts {
                upsertStatement.bind(1, row.name)
                upsertStatement.bind(2, row.state.rawValue)
                upsertStatement.bind(3, row.totalMilliseconds)
                upsertStatement.bind(4, row.deadlineUnixMilliseconds)
                upsertStatement.bind(5, row.deadlineBootNanoseconds)
                upsertStatement.bind(6, row.remainingNanoseconds)
                upsertStatement.bind(7, row.finishedUnixMilliseconds)
                upsertStatement.bind(8, Int64(row.owner))
                upsertStatement.bind(9, row.lateMilliseconds)
                try upsertStatement.run()
            }
            for name in deletions {
                deleteStatement.bind(1, name)
                try deleteStatement.run()
            }
            if let sequenceReservation {
                try setMeta("last_seq", "\(sequenceReservation)")
            }
            if let doneThrough {
                try setMeta("done_through_boot_ns", "\(doneThrough.bootNanoseconds)")
                try setMeta("done_through_unix_ms", "\(doneThrough.unixMilliseconds)")
            }
            if let bootID {
                try setMeta("boot_id", bootID)
            }
        }
    }

    /// Folds the `done_through` watermark into the rows (running rows past it become `done`) and
    /// deletes finished rows older than `finishedBeforeUnixMilliseconds`: one pass, now and then,
    /// instead of a write per countdown.
    func maintain(doneThroughBootNanoseconds: Int64, finishedBeforeUnixMilliseconds: Int64) throws(SQLiteError) {
        try database.transaction { () throws(SQLiteError) in
            let markDone = try database.prepare("""
                UPDATE countdowns SET state = 'done', finished_unix_ms = deadline_unix_ms,
                    deadline_unix_ms = NULL, deadline_boot_ns = NULL, remaining_ns = 0
                WHERE state = 'running' AND deadline_boot_ns <= ?1
                """)
            markDone.bind(1, doneThroughBootNanoseconds)
            try markDone.run()
            let forget = try database.prepare("""
                DELETE FROM countdowns WHERE state IN ('done', 'cancelled') AND finished_unix_ms < ?1
                """)
            forget.bind(1, finishedBeforeUnixMilliseconds)
            try forget.run()
        }
    }

    private func setMeta(_ key: String, _ value: String) throws(SQLiteError) {
        metaStatement.bind(1, key)
        metaStatement.bind(2, value)
        try metaStatement.run()
    }

    /// Moves an unusable database (and its WAL and shared-memory files) aside.
    /// - Returns: the path it was moved to.
    static func moveAside(directory: String, unixSeconds: Int64) -> String? {
        let base = directory + "/" + fileName
        let target = "\(base).corrupt-\(unixSeconds)"
        guard rename(base, target) == 0 else { return nil }
        for suffix in ["-wal", "-shm"] {
            if rename(base + suffix, target + suffix) != 0 {
                unlink(base + suffix)
            }
        }
        return target
    }

    /// The kernel's id for this boot, or `nil` when it cannot be read (e.g. under `ProcSubset=pid`).
    static func currentBootID() -> String? {
        guard let file = fopen("/proc/sys/kernel/random/boot_id", "r") else { return nil }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 64)
        guard fgets(&buffer, Int32(buffer.count), file) != nil else { return nil }
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let trimmed = text.trimmingCharacters(in: [" ", "\n"])
        return trimmed.isEmpty ? nil : trimmed
    }
}

private extension String {
    func trimmingCharacters(in set: Set<Character>) -> String {
        var result = Substring(self)
        while let first = result.first, set.contains(first) { result.removeFirst() }
        while let last = result.last, set.contains(last) { result.removeLast() }
        return String(result)
    }
}
