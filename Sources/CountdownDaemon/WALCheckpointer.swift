import CSQLite
import Dispatch

/// Checkpoints the state database's write-ahead log from a background queue, on a connection of
/// its own, so the daemon's queue never waits for a checkpoint (which copies pages into the
/// database file and syncs it). PASSIVE checkpoints never block the writer; WAL lets the two
/// connections work side by side.
final class WALCheckpointer: @unchecked Sendable {
    // The connection and timer are only touched on `queue` (and at init, before it is shared).
    private let database: SQLiteDatabase
    private let queue = DispatchQueue(label: "countdownd.checkpoint", qos: .utility)
    private let timer: any DispatchSourceTimer

    /// Opens a second connection to `path` and checkpoints every `interval`.
    init(path: String, interval: DispatchTimeInterval = .seconds(1)) throws(SQLiteError) {
        database = try SQLiteDatabase(path: path)
        timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(100))
        timer.setEventHandler { [database] in
            // Errors (say, a busy lock) are harmless: the next round tries again.
            try? database.execute("PRAGMA wal_checkpoint(PASSIVE)")
        }
        timer.activate()
    }

    /// Runs a final checkpoint that also truncates the log, then stops. Used at shutdown.
    func finish() {
        timer.cancel()
        queue.sync {
            try? database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }
}
