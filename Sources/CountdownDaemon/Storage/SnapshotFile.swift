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
    /// A cycle of phases: its phases and the running one.
    var cycle: CountdownCycle? = nil
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
        /// Each user's last own number (`nil`: written before per-user numbers, when every
        /// user saw the daemon-wide numbers).
        var ownerSequences: OwnerSequences?
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

    /// A snapshot read in two steps, as recovery needs it: on opening, its header and replay
    /// history (`contents`, without rows); then its countdowns, handed over one by one, so a
    /// million are never gathered into an array.
    struct Reader {
        /// The file read: the image, or an earlier countdownd's database.
        let path: String
        /// The header's fields and the replay history; `rows` stays empty.
        private(set) var contents: Contents
        /// How many countdowns the snapshot says it holds.
        let countdownCount: Int
        private var image: SnapshotImage.Decoder?
        private var databaseRows: [StoredCountdown]

        /// Whether it is an earlier countdownd's SQLite database, not an image.
        var isDatabase: Bool { image == nil }

        /// What is damaged so far; complete once `readCountdowns` has run.
        var problems: [String] { (image?.problems ?? []) + contents.problems }

        fileprivate init(path: String, image: SnapshotImage.Decoder) {
            self.path = path
            self.image = image
            contents = image.contents
            // A countdown record takes at least 64 bytes: a header that claims more is not believed.
            countdownCount = Int(clamping: min(image.header?.countdowns ?? 0, UInt64(image.bytes.count / 64)))
            databaseRows = []
        }

        fileprivate init(path: String, database: Contents) {
            self.path = path
            contents = database
            databaseRows = database.rows
            contents.rows = []
            countdownCount = databaseRows.count
        }

        /// Hands each countdown to `visit`, in the order stored; `problems` is then complete.
        mutating func readCountdowns(_ visit: (StoredCountdown) -> Void) {
            if image != nil {
                image?.readCountdowns(visit)
            } else {
                databaseRows.forEach(visit)
                databaseRows = []
            }
        }
    }

    /// Opens the snapshot in `directory` and reads its header and history, or returns `nil`
    /// when there is none.
    /// - Throws: `StorageError.damaged` when an earlier countdownd's database is not a complete
    ///   snapshot (the file is left as it is), `.unreadable` when the file cannot be read. An
    ///   image that does not verify is returned with its `problems`.
    static func reader(directory: String) throws(StorageError) -> Reader? {
        let path = directory + "/" + fileName
        let bytes: [UInt8]
        do throws(StorageError) {
            bytes = try FileSystem.readStateFile(path)
        } catch {
            // No image: the database, if any. (A symbolic link to nothing is not "no image".)
            if case .unreadable(_, let code) = error, code == ENOENT, !FileSystem.entryExists(path) {
                let database = directory + "/" + SnapshotDatabase.fileName
                return try SnapshotDatabase.read(path: database).map { Reader(path: database, database: $0) }
            }
            throw error
        }
        var decoder = SnapshotImage.Decoder(bytes)
        decoder.readHistory()
        return Reader(path: path, image: decoder)
    }

    /// Reads the whole snapshot in `directory`, or returns `nil` when there is none (see
    /// `reader(directory:)`): what `--check-state` and `--repair-state` inspect.
    static func read(directory: String) throws(StorageError) -> Contents? {
        guard var reader = try reader(directory: directory) else { return nil }
        var rows: [StoredCountdown] = []
        rows.reserveCapacity(reader.countdownCount)
        reader.readCountdowns { rows.append($0) }
        var contents = reader.contents
        contents.rows = rows
        contents.problems = reader.problems
        return contents
    }

    /// Writes `contents` as a complete snapshot to `directory` (see the other `write`).
    static func write(_ contents: Contents, directory: String) throws(StorageError) {
        let header = SnapshotImage.Header(
            journalGeneration: contents.journalGeneration, lastSequence: contents.lastSequence,
            eventsKeptAfter: contents.eventsKeptAfter, writtenUnixMilliseconds: SystemClock.unixNanoseconds() / 1_000_000,
            countdowns: UInt64(contents.rows.count), events: UInt64(contents.events.count), bootID: contents.bootID
        )
        try write(
            header, owners: OwnerSequences(startingFrom: contents), events: contents.events,
            countdowns: { contents.rows.forEach($0) }, directory: directory
        )
    }

    /// Writes the engine's durable image as a complete snapshot to `directory`, each countdown
    /// encoded as it is read (a million are never gathered into an array first), continued by
    /// the journal files from `journalGeneration` on.
    static func write(
        _ image: CountdownEngine.DurableImage, events: [CountdownEvent], eventsKeptAfter: UInt64, bootID: String?,
        journalGeneration: UInt64, clock: WallClockMapping, directory: String
    ) throws(StorageError) {
        let header = SnapshotImage.Header(
            journalGeneration: journalGeneration, lastSequence: image.lastSequence, eventsKeptAfter: eventsKeptAfter,
            writtenUnixMilliseconds: clock.unixMilliseconds, countdowns: UInt64(image.count), events: UInt64(events.count),
            bootID: bootID
        )
        try write(
            header, owners: image.ownerSequences, events: events,
            countdowns: { visit in image.forEach { visit(StoredCountdown($0, clock: clock)) } }, directory: directory
        )
    }

    /// Writes a complete snapshot to `directory` and puts it in place atomically: a temporary
    /// file, synced, renamed over the old snapshot, then the directory synced. An earlier
    /// countdownd's database is removed after that: the image replaces it.
    /// Runs off the daemon's queue.
    private static func write(
        _ header: SnapshotImage.Header, owners: OwnerSequences, events: [CountdownEvent],
        countdowns: ((StoredCountdown) -> Void) -> Void, directory: String
    ) throws(StorageError) {
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
            try SnapshotImage.encode(header, owners: owners, events: events, countdowns: countdowns) { (bytes) throws(StorageError) in
                try FileSystem.write(bytes, to: descriptor, at: offset, path: temporary)
                offset += Int64(bytes.count)
                // The file unlinked under the writer (the directory deleted: `rm -rf` removes
                // its files first): the rest of a million would be written for nothing, while
                // the recreated directory waits for its own snapshot.
                var info = stat()
                if fstat(descriptor, &info) == 0 && info.st_nlink == 0 { throw .directoryGone(path: directory) }
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
        removeSupersededDatabase(in: directory)
    }

    /// Removes an earlier countdownd's database once an image is in place: it is never read
    /// while the image is there, and must not be taken for the snapshot should the image be
    /// lost. Returns whether there was one. (At the end of a write, and at a start, for one a
    /// crash left between the two.)
    @discardableResult
    static func removeSupersededDatabase(in directory: String) -> Bool {
        let database = directory + "/" + SnapshotDatabase.fileName
        guard access(database, F_OK) == 0 else { return false }
        // Ignored on purpose: a file that cannot be removed is tried again at the next snapshot
        // and start; the `-wal`, `-shm` and `.tmp` files are usually not there at all.
        for suffix in ["", "-wal", "-shm", ".tmp"] { _ = unlink(database + suffix) }
        // Ignored on purpose, as above: the image is already durable either way.
        try? FileSystem.sync(path: directory)
        return true
    }
}
