import CLinuxShims
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

/// The snapshot: every countdown and the recent events at one moment. Together with the journal
/// files from its generation on, it is the daemon's durable state.
///
/// It is a flat image (`SnapshotImage`: the journal's checksummed, numbered frames), written
/// whole to a temporary file, synced, and renamed over the old one, so the file on disk is always
/// complete; any flipped bit, any frame missing, repeated or out of place, and a file cut short is
/// damage, refused at start and named by `--check-state`, and `--repair-state` keeps every
/// countdown that verifies. `countdownd --dump-state DIR` prints it as JSON lines.
///
/// A directory written by an earlier countdownd holds an SQLite snapshot instead
/// (`SnapshotDatabase`): it is read when there is no image, and removed once the first image
/// has landed.
enum SnapshotFile {
    /// The snapshot's name inside the state directory.
    static let fileName = "countdownd.snapshot"

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
        /// Rows of an SQLite snapshot that could not be read, or whose checksum does not match
        /// (their names, sanitized).
        var unreadableRows: [String] = []
        /// What is damaged: frames or rows that do not verify, missing or added, metadata altered.
        /// Recovery refuses a snapshot with any; `--check-state` names them; `--repair-state`
        /// keeps `rows`, the ones that verify.
        var problems: [String] = []
    }

    /// The path of the snapshot in `directory`: the image, or an earlier countdownd's database
    /// when there is no image; `nil` when there is neither.
    static func path(in directory: String) -> String? {
        for name in [fileName, SnapshotDatabase.fileName] where access(directory + "/" + name, F_OK) == 0 {
            return directory + "/" + name
        }
        return nil
    }

    /// Reads the snapshot in `directory`, or returns `nil` when there is none.
    /// - Throws: `StorageError.damaged` when an earlier countdownd's database is not a complete
    ///   snapshot (the file is left as it is), `.unreadable` when the file cannot be read. An
    ///   image that does not verify is returned with its `problems`.
    static func read(directory: String) throws(StorageError) -> Contents? {
        let path = directory + "/" + fileName
        let bytes: [UInt8]
        do throws(StorageError) {
            bytes = try FileSystem.readAll(path)
        } catch {
            if case .unreadable(_, let code) = error, code == ENOENT {
                return try SnapshotDatabase.read(path: directory + "/" + SnapshotDatabase.fileName)
            }
            throw error
        }
        return SnapshotImage.decode(bytes)
    }

    /// Writes a complete snapshot to `directory` and puts it in place atomically: a temporary
    /// file, synced, renamed over the old snapshot, then the directory synced. An earlier
    /// countdownd's database is removed after that: the image replaces it.
    /// Runs off the daemon's queue.
    static func write(_ contents: Contents, directory: String) throws(StorageError) {
        let path = directory + "/" + fileName
        let temporary = path + ".tmp"
        // Ignored on purpose: usually there is none; one that cannot be removed fails the open below.
        _ = unlink(temporary)
        // The snapshot holds every name (phone numbers, for OTP cooldowns): the owner's alone,
        // like the journal, whatever the umask.
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .system(what: "cannot create \(temporary)", errno: errno) }
        var offset: Int64 = 0
        do throws(StorageError) {
            defer { countdownd_close(descriptor) }
            try SnapshotImage.encode(contents, writtenUnixMilliseconds: SystemClock.unixNanoseconds() / 1_000_000) { (bytes) throws(StorageError) in
                try FileSystem.write(bytes, to: descriptor, at: offset, path: temporary)
                offset += Int64(bytes.count)
            }
            guard fsync(descriptor) == 0 else { throw .system(what: "fsync \(temporary)", errno: errno) }
        } catch {
            _ = unlink(temporary)  // Ignored on purpose: a leftover is removed before the next attempt.
            throw error
        }
        guard rename(temporary, path) == 0 else {
            let code = errno
            _ = unlink(temporary)  // As above.
            throw .system(what: "rename \(temporary) to \(path)", errno: code)
        }
        try FileSystem.sync(path: directory)
        // The image has landed, so an earlier countdownd's database is superseded. Ignored on
        // purpose when there is none (the usual case); one left behind is never read while the
        // image is there, and is removed after the next snapshot.
        for name in [SnapshotDatabase.fileName, SnapshotDatabase.fileName + "-wal", SnapshotDatabase.fileName + "-shm", SnapshotDatabase.fileName + ".tmp"] {
            _ = unlink(directory + "/" + name)
        }
    }
}
