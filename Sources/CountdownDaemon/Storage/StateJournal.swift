import CLinuxShims
import CountdownCore
import Dispatch
import Glibc

/// Everything about durability: the append-only journal, the snapshots, recovery, and what to do
/// when the disk misbehaves. The daemon sees a narrow interface: `note` a lifecycle event with
/// the countdown's new state, `commit` at the end of a batch, `rollbackBatch` when a commit failed.
///
/// **Files** in the state directory:
/// - `countdownd.lock`: an exclusive `flock` for the daemon's life (`StateDirectoryLock`).
/// - `journal.<generation>`: frames of records (`JournalFormat`), one frame per committed batch,
///   written with one `pwrite` (plus `fdatasync` under `--durability power`). Each run of the
///   daemon, and each snapshot, starts a new generation.
/// - `countdownd.snapshot`: the snapshot (`SnapshotFile`, a checksummed flat image), which says
///   from which generation on the journal files continue it (`countdownd.db` instead, in SQLite,
///   as an earlier countdownd left it, until the first image lands).
///
/// **Recovery** reads the snapshot, then the journal files from its generation on. A torn last
/// frame (a write cut short) is cut off and logged. Any other damage stops the start-up with the
/// file kept as it is: a file error never becomes an empty start.
///
/// **Failure.** When a commit cannot be written (disk full, I/O error, immutable file, directory
/// deleted), the journal says `failed`; the daemon undoes the batch's changes and answers them
/// `ERR unavailable`. From then on `acceptsChanges` is false, commits are deferred, and `retry`
/// (once a second) tries again; it never does work that grows with the time spent failing
/// beyond writing the deferred events once. A deleted directory is recreated and a full snapshot
/// written before changes are accepted again.
///
/// Confined to the daemon's queue (hence `@unchecked Sendable`: the snapshot queue only hands
/// results back to that queue); snapshots are written on a queue of their own from an O(1) copy
/// of the engine's records.
final class StateJournal: @unchecked Sendable {
    /// Whether the journal takes changes.
    enum Health: Equatable {
        /// Writes work.
        case available
        /// The last write failed; changes are refused until `retry` succeeds.
        case failing(StorageError)
        /// The directory was lost and is recreated; a full snapshot of what is in memory must land
        /// in it before anything else does (no journal file is open meanwhile: a frame with no
        /// snapshot beneath it would be refused at the next start).
        case awaitingSnapshot
    }

    /// What a commit achieved.
    enum CommitOutcome: Equatable {
        /// Everything noted is on disk (to the configured durability).
        case durable
        /// Storage is failing: noted events (only those time caused: no changes are accepted)
        /// are kept and written when storage works again.
        case deferred
        /// The write failed now: the caller must undo the batch's changes.
        case failed(StorageError)
    }

    /// What recovery found.
    struct Recovered {
        /// Every countdown, on this run's clock; whether a deadline passed is the engine's call.
        var countdowns: [Countdown] = []
        var lastSequence: UInt64 = 0
        /// Each user's last own number.
        var ownerSequences = OwnerSequences()
        /// Recent lifecycle events: the replay ring as the snapshot and the journal leave it (a
        /// long journal trims it by the ring's own per-owner rule, never silently).
        var ring = EventRing(depth: 0)
        /// What recovery had to say (torn tails cut, unreadable rows skipped), for the log.
        var remarks: [String] = []
        /// The files it read.
        var sources: String = ""
        /// Milliseconds spent reading the snapshot's header and history; the journal files (on
        /// their own thread, beside the countdowns); handing every countdown over (the snapshot's
        /// as they are read, then the journal's changes); and waiting for the journal between.
        var historyMilliseconds: Int64 = 0
        var journalMilliseconds: Int64 = 0
        var countdownsMilliseconds: Int64 = 0
        var waitedForJournalMilliseconds: Int64 = 0
        /// Whether the journal changed a key (whose `NameIndex.hash` is given): its state, not
        /// the snapshot's, is the one that holds.
        var journalChanged: (String, UInt32) -> Bool = { _, _ in false }
    }

    let directory: String
    let durability: Durability
    private(set) var health = Health.available

    private let logger: Logger
    private let queue: DispatchQueue
    /// Where snapshots are written, off the daemon's queue. (Not private: a test suspends it to
    /// order a snapshot's failure against the directory's recreation.)
    let snapshotQueue = DispatchQueue(label: "countdownd.snapshot", qos: .utility)
    private var lock: StateDirectoryLock?
    /// The state directory's identity (device and inode) when it was locked: a directory moved
    /// away and another made at its path is a lost directory too.
    private var directoryIdentity: (dev_t, ino_t)?

    /// The journal file being written, and how much of it is known to be written.
    private var file: Int32 = -1
    private var filePath = ""
    private var fileLength: Int64 = 0
    private var headerFrameLength: Int64 = 0
    private(set) var generation: UInt64 = 0
    /// The index the next frame of the current file gets (its header frame is 0).
    private var nextFrameIndex: UInt64 = 1
    /// The last frame written to the current file (before one is opened: the last frame of the
    /// newest file recovery read), which the next file's header names.
    private var lastFrame: JournalFormat.FrameMark?
    /// Records noted but not yet written, behind a reserved frame header.
    private var pending: [UInt8] = []
    /// Where the current batch's records start in `pending`.
    private var batchStart = JournalFormat.frameHeaderSize

    /// Journal bytes and files written since the last snapshot, and when it was taken.
    private(set) var bytesSinceSnapshot: Int64 = 0
    private var filesSinceSnapshot = 0
    private var lastSnapshot: Instant
    /// Where snapshot schedules, failure times and recovery's durations are read.
    private let time: DaemonClock
    private var snapshotInProgress = false
    /// Whether any event was written (or recovered from the journal) since the last snapshot.
    private var eventsSinceSnapshot = false
    private var nextSnapshotAttempt = Instant(nanoseconds: .min)
    /// A full snapshot is needed now (a file the state rests on was removed).
    private var snapshotNeeded = false
    private var failingSince = Instant.zero
    /// Counts recreations of the state directory: a snapshot started before the last one was
    /// written into a directory that is gone, and does not make the state whole.
    private var directoryEpoch = 0
    /// The first journal file the state in memory needs besides the snapshot: every file from it
    /// to `generation` must exist, or a full snapshot must replace them.
    private var journalChainStart: UInt64 = 1
    /// Whether a snapshot file is part of the state on disk.
    private var hasSnapshotFile = false
    /// Runs on the queue when a snapshot has finished (landed or failed), outside any batch.
    var onSnapshotFinished: (() -> Void)?

    /// Snapshot when this much journal has accumulated: recovery time stays bounded. Half the
    /// 32 MB the journal behind a snapshot may reach, since it keeps growing while a snapshot of
    /// a million (about a second) is written.
    var snapshotBytes: Int64 = 16 << 20
    /// …or when this many journal files (one per start) have accumulated.
    var snapshotFiles = 8
    /// …or when the last snapshot is this old and anything changed since.
    var snapshotAge: Int64 = 3600 * 1_000_000_000

    init(directory: String, durability: Durability, logger: Logger, queue: DispatchQueue, time: DaemonClock = .system) {
        self.time = time
        lastSnapshot = time.now()
        self.directory = directory
        self.durability = durability
        self.logger = logger
        self.queue = queue
        JournalFormat.beginFrame(in: &pending)
    }

    deinit {
        if file >= 0 { countdownd_close(file) }
    }

    /// Whether changes are taken now.
    var acceptsChanges: Bool { health == .available }

    /// The journal file being written (for logs and status).
    var currentFile: String { filePath }

    // MARK: - Recovery

    /// How many countdowns recovery hands over at a time (from the snapshot's decoding thread,
    /// then to the engine): few hand-overs between threads, and a batch of each (some 26 KB)
    /// stays in the cache from one thread to the other.
    static let restoreBatch = 512

    /// How many decoded batches of the snapshot may wait for the engine at a time.
    static let batchesInFlight = 4

    /// Locks the state directory, then reads the snapshot and the journal that continues it,
    /// keeping each uid's last `replayDepth` lifecycle events for the replay ring; the countdowns are
    /// gathered into `Recovered.countdowns` (see the other `recover` for the daemon's way), each
    /// as the engine would hold it (`RestoreBatch.countdowns`).
    /// - Throws: `StorageError`: locked by another daemon, unreadable or damaged files.
    func recover(clock: WallClockMapping, bootID: String?, replayDepth: Int) throws(StorageError) -> Recovered {
        var countdowns: [Countdown] = []
        var changed: [Countdown] = []
        var recovered = try recover(
            clock: clock, asOf: time.now(), bootID: bootID, replayDepth: replayDepth,
            prepare: { countdowns.reserveCapacity($0) },
            restore: { batch in countdowns.append(contentsOf: batch.countdowns) },
            replace: { batch in changed.append(contentsOf: batch.countdowns) }
        )
        let journalChanged = recovered.journalChanged
        recovered.countdowns = countdowns.filter { !journalChanged($0.name, NameIndex.hash($0.name)) } + changed
        return recovered
    }

    /// Locks the state directory, then reads the snapshot and the journal that continues it,
    /// handing the countdowns over in batches, each with its name's `NameIndex.hash`: the
    /// snapshot's as they are read (a million are never gathered into an array), and each name
    /// is hashed once.
    ///
    /// Order: the snapshot's header and replay history; then the snapshot's countdowns go to
    /// `restore`, decoded on a thread of their own, while the journal is read on a third; then
    /// every countdown the journal changed goes to `replace` (the journal's records are later:
    /// they win), with a removal for one it removed. Every batch is on the daemon's `clock`, to
    /// be restored as of `now`; `restore` and `replace` are called on the caller's thread, and
    /// may take entries out of the batch they are given (`RestoreBatch.takeLateCountdowns()`).
    /// `prepare` is called once before the first, with how many may come. `Recovered.journalChanged` says which keys the journal changed. Nothing in the
    /// directory is changed (a torn tail is cut) unless everything verifies; on a throw, some
    /// countdowns may have been handed over already.
    /// - Throws: `StorageError`: locked by another daemon, unreadable or damaged files.
    func recover(
        clock: WallClockMapping, asOf now: Instant, bootID: String?, replayDepth: Int,
        prepare: (Int) -> Void,
        restore: (inout RestoreBatch) -> Void,
        replace: (inout RestoreBatch) -> Void
    ) throws(StorageError) -> Recovered {
        try FileSystem.createDirectory(directory)
        let lockedBefore = access(directory + "/" + StateDirectoryLock.fileName, F_OK) == 0
        lock = try StateDirectoryLock(directory: directory)
        directoryIdentity = Self.identity(of: directory)
        var recovered = Recovered()
        recovered.ring = EventRing(depth: replayDepth)
        var firstGeneration: UInt64 = 0
        var sources: [String] = []
        var phaseLists = CyclePhaseInterner()
        let began = time.now()
        let snapshot = try SnapshotFile.reader(directory: directory)
        var snapshotSameBoot = false
        if let snapshot {
            snapshotSameBoot = bootID != nil && snapshot.contents.bootID == bootID
            recovered.lastSequence = snapshot.contents.lastSequence
            recovered.ownerSequences = OwnerSequences(startingFrom: snapshot.contents)
            recovered.ring = EventRing(
                depth: replayDepth, keptAfter: snapshot.contents.eventsKeptAfter, owners: snapshot.contents.ownerSequences
            )
            for var event in snapshot.contents.events {
                phaseLists.intern(&event.cycle)
                recovered.ring.append(event)
            }
            firstGeneration = snapshot.contents.journalGeneration
            try Self.refuseDamaged(snapshot)
            let file = snapshot.path.split(separator: "/").last.map(String.init) ?? snapshot.path
            sources.append("\(file) (\(snapshot.countdownCount) countdowns)")
            if snapshot.isDatabase {
                // An earlier countdownd's SQLite snapshot: replaced by an image as soon as may be.
                snapshotNeeded = true
                recovered.remarks.append("\(file) is the SQLite snapshot of an earlier countdownd; it is replaced by \(SnapshotFile.fileName) at the next snapshot")
            } else if snapshot.contents.ownerSequences == nil {
                // Written before per-user numbers: rewritten with them as soon as may be, so that
                // each user's numbers are stored, not derived from the daemon-wide ones.
                snapshotNeeded = true
            }
        }
        let historyRead = time.now()
        recovered.historyMilliseconds = historyRead.nanoseconds(since: began) / 1_000_000
        // Each file continues the one before it, and the first continues the snapshot (or, with
        // none, the directory's beginning): a gap is a lost file, and a partial start would
        // silently drop what it held. Read beside the snapshot's countdowns, which do not
        // depend on it: the journal's changes are handed over after them and replace them.
        let files = try journalFiles()
        let chain = JournalChainReader(
            files: files, firstGeneration: firstGeneration, snapshotGeneration: snapshot != nil ? firstGeneration : nil,
            snapshotIsDatabase: snapshot?.isDatabase == true, bootID: bootID, directory: directory, clock: clock, now: now, ring: recovered.ring,
            lastSequence: recovered.lastSequence, ownerSequences: recovered.ownerSequences, phaseLists: phaseLists
        )
        let clockForJournal = time
        let reading = BackgroundResult(thread: .journalReader) { () throws(StorageError) -> (JournalChainReader, Int64) in
            let began = clockForJournal.now()
            var chain = chain
            try chain.read()
            return (chain, clockForJournal.now().nanoseconds(since: began) / 1_000_000)
        }
        // Room for the snapshot's countdowns and about as many as the journal may add (a record
        // is about 90 bytes), so the engine's tables grow once.
        let journalBytes = files.reduce(0) { $0 + FileSystem.size(of: $1.1) }
        prepare((snapshot?.countdownCount ?? 0) + journalBytes / 90)
        // The snapshot's rows are decoded (their checksums, their fields, their names hashed) on
        // a thread of their own as well, and handed over in batches: filling the engine is this
        // thread's part. Used batches go back to be emptied and filled again there (nothing is
        // allocated per batch), and at most a few wait at a time.
        let decoded = BatchChannel<RestoreBatch>(capacity: Self.batchesInFlight)
        let emptied = BatchChannel<RestoreBatch>(capacity: Self.batchesInFlight + 1)
        let rowsSameBoot = snapshotSameBoot
        let decoding = BackgroundResult(thread: .snapshotDecoder) { () -> SnapshotFile.Reader? in
            defer { decoded.close() }
            guard var reader = snapshot else { return nil }
            var batch = RestoreBatch(capacity: Self.restoreBatch, now: now)
            reader.readCountdowns { row in
                let key = row.key
                batch.append(name: key, hash: NameIndex.hash(key), countdown: row.persisted(clock: clock, sameBoot: rowsSameBoot, key: key))
                if batch.count == Self.restoreBatch {
                    decoded.send(batch)
                    if let used = emptied.tryReceive() {
                        batch = used
                        batch.removeAll()  // Here, not on the thread that fills the engine.
                    } else {
                        batch = RestoreBatch(capacity: Self.restoreBatch, now: now)
                    }
                }
            }
            if !batch.isEmpty { decoded.send(batch) }
            return reader
        }
        while var batch = decoded.receive() {
            restore(&batch)
            emptied.offer(batch)
        }
        var snapshotDamage: StorageError?
        if let reader = decoding.wait() {
            do throws(StorageError) {
                try Self.refuseDamaged(reader)
            } catch {
                snapshotDamage = error  // Said after the journal's damage, as when read one after the other.
            }
        }
        let snapshotRowsRead = time.now()
        let (journal, journalMilliseconds) = try reading.wait()
        let journalJoined = time.now()
        if let snapshotDamage { throw snapshotDamage }
        recovered.journalMilliseconds = journalMilliseconds
        recovered.lastSequence = journal.lastSequence
        recovered.ownerSequences = journal.ownerSequences
        recovered.ring = journal.ring
        sources += journal.sources
        lastFrame = journal.lastFrame
        filesSinceSnapshot += journal.filesRead
        bytesSinceSnapshot += journal.bytesRead
        eventsSinceSnapshot = eventsSinceSnapshot || journal.sawEvents
        let highest = journal.highest, chainStart = journal.chainStart, tornTails = journal.tornTails
        if !journal.changed.isEmpty {
            var changed = journal.changed
            replace(&changed)
        }
        recovered.journalChanged = { key, hash in journal.changed(key, hash: hash) }
        recovered.countdownsMilliseconds = (snapshotRowsRead.nanoseconds(since: historyRead) + time.now().nanoseconds(since: journalJoined)) / 1_000_000
        recovered.waitedForJournalMilliseconds = journalJoined.nanoseconds(since: snapshotRowsRead) / 1_000_000
        // Everything verified: only now is anything in the directory changed.
        if snapshot?.isDatabase == false, SnapshotFile.removeSupersededDatabase(in: directory) {
            recovered.remarks.append("removed \(SnapshotDatabase.fileName), an earlier countdownd's snapshot that \(SnapshotFile.fileName) replaced (a stop between the two left it)")
        }
        for (path, length, torn) in tornTails {
            let cut = truncate(path, off_t(length)) == 0 ? "cut it off" : "could not cut it off (\(String(cString: strerror(errno))))"
            recovered.remarks.append("\(path) ended in a torn write (\(torn)); \(cut) at byte \(length), keeping every complete commit")
        }
        if sources.isEmpty && lockedBefore {
            recovered.remarks.append("\(directory) holds no snapshot and no journal, only an earlier daemon's lock file: it was recreated after a deletion and the daemon stopped before its first snapshot landed, or it never held a countdown; starting with none")
        }
        recovered.sources = sources.isEmpty ? "nothing (a new state directory)" : sources.joined(separator: ", ")
        // With no journal file after the snapshot, the next one made is the one it continues
        // with, so that a start never accepts a first file one later (a lost file).
        generation = chainStart == .max && snapshot != nil && firstGeneration > 0 ? firstGeneration - 1 : highest
        // The files this state rests on: from the first read (or the next one made) on.
        journalChainStart = min(chainStart, generation + 1)
        hasSnapshotFile = snapshot != nil
        return recovered
    }

    /// Refuses a snapshot with damage (its countdowns are not named: a name can be personal
    /// data). `--check-state` says the same, from the same list.
    private static func refuseDamaged(_ snapshot: SnapshotFile.Reader) throws(StorageError) {
        guard snapshot.problems.isEmpty else {
            throw .damaged(path: snapshot.path, reason: snapshot.problems.joined(separator: "; "))
        }
    }

    /// What is wrong with journal file `generation` coming where it does (`nil`: nothing), shared
    /// by recovery and `countdownd --check-state`: it continues the previous file (no gap), or
    /// the snapshot (it continues with `snapshotGeneration`; an earlier countdownd's database,
    /// with that one or the next, as that countdownd numbered the first file after a stop), or,
    /// with no snapshot, the directory's first file, generation 1.
    static func continuityProblem(
        of generation: UInt64, after previous: (UInt64, String)?, snapshotGeneration: UInt64?, snapshotIsDatabase: Bool = false,
        directory: String
    ) -> String? {
        guard generation <= JournalFormat.largestNumber else {
            return "journal file \(generation) is numbered past any a countdownd makes (\(JournalFormat.largestNumber)): it was renamed or made by other hands"
        }
        if let (previousGeneration, previousPath) = previous {
            guard generation == previousGeneration + 1 else {
                return "journal files \(previousGeneration + 1) to \(generation - 1) are missing between \(previousPath) and this one: what they held is lost"
            }
        } else if let snapshotGeneration {
            // The file the snapshot names comes first, always: after a stop's snapshot removed
            // the files, the next start makes exactly that one. (An earlier countdownd made the
            // one after it: a database's journal may start one later.)
            guard generation == snapshotGeneration || (snapshotIsDatabase && generation == snapshotGeneration + 1) else {
                return "the snapshot \(SnapshotFile.fileName) continues with journal file \(snapshotGeneration), but the first one here is \(generation): what the files between held is lost"
            }
        } else {
            guard generation == 1 else {
                return "this journal continues a snapshot, \(directory)/\(SnapshotFile.fileName), that is missing: what it held is lost"
            }
        }
        return nil
    }

    /// What is wrong with a journal file, given its scan and how the file read before it ended
    /// (`nil`: none was read, or nothing): damage inside it, or frames missing from the end of the
    /// one before (its last frame is not the one this file's header says it follows). The verdict
    /// of `recover`, shared with `countdownd --check-state`.
    static func fileProblem(_ scan: JournalFormat.Scan, after previous: (path: String, last: JournalFormat.FrameMark?)?) -> String? {
        if let damage = scan.damage {
            return "at byte \(damage.offset): \(damage.reason); the \(damage.offset) bytes before it are intact"
        }
        // Unnumbered files (an earlier countdownd's) do not say what they follow.
        if let previous, scan.layout == .ordered, let header = scan.header, header.follows != previous.last {
            let follows = header.follows.map { "its \($0)" } ?? "nothing"
            let ends = previous.last.map { "at its \($0)" } ?? "without a whole frame"
            return "this file follows \(follows) of \(previous.path), but that file ends \(ends): frames were removed from its end or it was cut short, and what they held is lost"
        }
        return nil
    }

    /// What is wrong with a journal file named as older than the snapshot, which a start removes
    /// (`nil`: it is that file). Its header names its own generation: a later file renamed to an
    /// older name (whose records would go with it, and nothing would say so) is damage, kept,
    /// and so is one whose header cannot be read, since nothing then shows it is older. The
    /// verdict of `recover`, shared with `countdownd --check-state`.
    static func olderFileProblem(at path: String, generation: UInt64) -> String? {
        let bytes: [UInt8]
        do throws(StorageError) {
            bytes = try FileSystem.readStateFile(path)
        } catch {
            return "named as older than the snapshot, but it cannot be read to tell (\(error))"
        }
        guard let header = JournalFormat.header(of: bytes) else {
            return "named as older than the snapshot, but its header cannot be read to tell: it is kept, as it may hold what the snapshot does not"
        }
        guard header.generation == generation else {
            return "its header says it is journal file \(header.generation), not \(generation): a file renamed; under this name it would be removed as older than the snapshot, with what it holds. Put it back under its own name"
        }
        return nil
    }

    /// Why an empty journal file is damage, newest or not: a journal file is created whole
    /// (header first, then renamed into place), so an empty one was emptied. The verdict of
    /// `recover`, shared with `countdownd --check-state`.
    static func emptyFileProblem(isNewest: Bool) -> String {
        isNewest
            ? "the file is empty (0 bytes), though journal files are created with their header: what it held is lost"
            : "the file is empty (0 bytes), yet later journal files follow it: what it held is lost"
    }

    /// The journal files in the directory, by generation.
    func journalFiles() throws(StorageError) -> [(UInt64, String)] {
        try Self.journalFiles(in: directory)
    }

    /// The journal files in `directory`, by generation.
    static func journalFiles(in directory: String) throws(StorageError) -> [(UInt64, String)] {
        var files: [(UInt64, String)] = []
        for name in try FileSystem.entries(of: directory) {
            if name.hasPrefix("journal."), let number = UInt64(name.dropFirst("journal.".count)) {
                files.append((number, directory + "/" + name))
            }
        }
        return files.sorted { $0.0 < $1.0 }
    }

    func journalPath(_ generation: UInt64) -> String {
        let digits = String(generation)
        return directory + "/journal." + String(repeating: "0", count: max(0, 12 - digits.count)) + digits
    }

    /// Starts the next journal file, after recovery. On failure the daemon still starts, serving
    /// reads with changes refused, and `retry` tries again.
    func startWriting() {
        do throws(StorageError) {
            try openNextFile()
        } catch {
            enterFailing(error)
        }
    }

    /// Creates journal file `generation + 1` whole: its header is written and synced under a
    /// temporary name (`journal.N.new`, which recovery never reads, and the next attempt
    /// replaces), then renamed into place and the directory synced. So a journal file is never
    /// seen without its header, and an empty one is damage, never a legitimate state.
    private func openNextFile() throws(StorageError) {
        let next = generation + 1
        let path = journalPath(next)
        let temporary = path + ".new"
        let descriptor = open(temporary, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .system(what: "cannot create \(temporary)", errno: errno) }
        var frame: [UInt8] = []
        JournalFormat.beginFrame(in: &frame)
        JournalFormat.appendHeader(
            .init(
                generation: next, createdUnixMilliseconds: time.unixNanoseconds() / 1_000_000, bootID: SystemClock.bootID,
                follows: lastFrame
            ),
            to: &frame
        )
        let headerMark = JournalFormat.sealFrame(in: &frame, at: 0, index: 0)
        do throws(StorageError) {
            try FileSystem.write(frame, to: descriptor, at: 0, path: temporary)
            guard fdatasync(descriptor) == 0 else { throw .system(what: "fdatasync \(temporary)", errno: errno) }
            guard rename(temporary, path) == 0 else { throw .system(what: "rename \(temporary) to \(path)", errno: errno) }
            try FileSystem.sync(path: directory)
        } catch {
            countdownd_close(descriptor)
            // Ignored on purpose: a leftover temporary is never read, and replaced next time.
            _ = unlink(temporary)
            // Ignored on purpose: a journal file with no frame after its header reads as empty.
            _ = unlink(path)
            throw error
        }
        if file >= 0 { countdownd_close(file) }
        headerFrameLength = Int64(frame.count)
        lastFrame = headerMark
        nextFrameIndex = 1
        file = descriptor
        filePath = path
        fileLength = Int64(frame.count)
        generation = next
        filesSinceSnapshot += 1
        bytesSinceSnapshot += fileLength
    }

    // MARK: - Batches

    /// Marks the start of a batch: `rollbackBatch` forgets what is noted after this.
    func beginBatch() {
        batchStart = pending.count
    }

    /// Notes a lifecycle event and the countdown's state after it (`nil`: it no longer exists).
    func note(_ event: CountdownEvent, state: Countdown?, clock: WallClockMapping) {
        if let state {
            JournalFormat.appendEvent(event, state: StoredCountdown(state, clock: clock), to: &pending)
        } else {
            JournalFormat.appendRemoved(event, to: &pending)
        }
    }

    /// Forgets what was noted since `beginBatch`: the batch's changes were undone.
    func rollbackBatch() {
        pending.removeSubrange(batchStart...)
    }

    /// Writes what was noted, in one frame with one `pwrite`. Called once per batch, before any of
    /// the batch's output is released.
    func commit() -> CommitOutcome {
        // Awaiting its snapshot, the recreated directory takes no frame: what is noted meanwhile
        // (only what time caused) is kept and written after the snapshot, as while failing.
        guard health == .available else { return .deferred }
        guard pending.count > JournalFormat.frameHeaderSize else { return .durable }
        do throws(StorageError) {
            try writePending()
            return .durable
        } catch {
            enterFailing(error)
            return .failed(error)
        }
    }

    private func writePending() throws(StorageError) {
        guard file >= 0 else { throw .system(what: "no journal file is open in \(directory)", errno: EBADF) }
        // A deleted directory takes the open file with it: writes would still succeed, into a
        // file nobody will read. One fstat per commit notices.
        var info = stat()
        guard fstat(file, &info) == 0 else { throw .system(what: "cannot check \(filePath)", errno: errno) }
        if info.st_nlink == 0 {
            throw .directoryGone(path: directory)
        }
        let mark = JournalFormat.sealFrame(in: &pending, at: 0, index: nextFrameIndex)
        try FileSystem.write(pending, to: file, at: fileLength, path: filePath)
        if durability == .power {
            guard fdatasync(file) == 0 else {
                let code = errno
                // Ignored on purpose: the next frame is written at `fileLength` all the same, over
                // whatever this one left; past it, recovery sees a torn tail and cuts it.
                _ = ftruncate(file, off_t(fileLength))
                throw .system(what: "fdatasync \(filePath)", errno: code)
            }
        }
        fileLength += Int64(pending.count)
        lastFrame = mark
        nextFrameIndex += 1
        bytesSinceSnapshot += Int64(pending.count)
        eventsSinceSnapshot = true
        if pending.capacity > Self.pendingCapacityKept {
            // An oversized batch (the first after a restart, with every late `done` and every
            // phase begun then) does not keep its buffer for the daemon's life.
            pending = Array(pending[..<JournalFormat.frameHeaderSize])
        } else {
            pending.removeSubrange(JournalFormat.frameHeaderSize...)
        }
        batchStart = pending.count
    }

    /// The most room the batch buffer keeps between batches (1 MiB).
    static let pendingCapacityKept = 1 << 20

    // MARK: - Failure and recovery

    /// Whether the state on disk this journal continues is gone: the directory deleted, moved
    /// away or replaced, the journal file being written deleted (a deleted file takes writes that
    /// nobody will read), or the lock file deleted (an `rm -rf` under way: it locks nothing).
    private var directoryIsLost: Bool {
        guard let identity = Self.identity(of: directory), let directoryIdentity,
              identity == directoryIdentity else { return true }
        guard let lock, lock.isLinked else { return true }  // None: taking it again failed.
        guard file >= 0 else { return false }
        var info = stat()
        return fstat(file, &info) != 0 || info.st_nlink == 0
    }

    /// The device and inode of the directory at `path`, `nil` when there is none.
    private static func identity(of path: String) -> (dev_t, ino_t)? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return (info.st_dev, info.st_ino)
    }

    /// Looks at the state directory now (the file system said something in it changed, or a
    /// recovery snapshot is about to start). A lost directory is handled at once, as a failed
    /// write would be, busy or idle: recreated, with a new journal, and `awaitingSnapshot` until
    /// a full snapshot of what is in memory lands. Call between batches.
    /// - Returns: whether the directory was lost (it may be recreated already, or still failing).
    ///
    /// A file the state rests on deleted by hand (the snapshot, or a journal file since it) while
    /// the directory stays: a full snapshot is taken at once, so the next start does not find a
    /// gap.
    @discardableResult
    func checkDirectory() -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        if case .failing(let error) = health {
            // A commit that met the deleted directory first (a client's change just before the
            // file system said so) left it to the once-a-second retry: recreated now instead.
            // Storage failing otherwise (a full disk) is the retry loop's.
            guard case .directoryGone = error else { return false }
            _ = retry()  // Whether changes are accepted again is `health`'s to say, read by the caller.
            return true
        }
        guard file >= 0 || health == .awaitingSnapshot else { return false }
        guard directoryIsLost else {
            if health == .available && !snapshotNeeded && restingFileIsMissing {
                snapshotNeeded = true
                nextSnapshotAttempt = Instant(nanoseconds: .min)
                logger.log(.warning, "a file of the state in \(directory) was removed; writing a full snapshot so that nothing rests on it")
            }
            return false
        }
        enterFailing(.directoryGone(path: directory))
        _ = retry()  // As above.
        return true
    }

    /// Whether the snapshot, or a journal file from `journalChainStart` to the current one, is
    /// missing.
    private var restingFileIsMissing: Bool {
        if hasSnapshotFile && SnapshotFile.path(in: directory) == nil { return true }
        guard journalChainStart <= generation else { return false }
        return (journalChainStart...generation).contains { access(journalPath($0), F_OK) != 0 }
    }

    private func enterFailing(_ error: StorageError) {
        if case .failing = health {
            health = .failing(error)
            return
        }
        health = .failing(error)
        failingSince = time.now()
        logger.log(.error, "storage failed: \(error); changes are refused with ERR unavailable until it works again (\(error.advice)); reads and events go on")
    }

    /// Tries storage again while it is failing: recreates a lost directory (which then awaits its
    /// snapshot), or opens a journal file and writes the deferred events to it. Returns whether
    /// changes are accepted now.
    ///
    /// A recreated directory gets its snapshot first and its journal only after: written the
    /// other way round, a stop between the two left frames continuing a snapshot that was not
    /// there, refused at the next start with nothing to repair.
    func retry() -> Bool {
        guard case .failing = health else { return acceptsChanges }
        do throws(StorageError) {
            if directoryIsLost {
                try recreateDirectory()
                return false
            }
            if file < 0 { try openNextFile() }
            try writePending()
            health = .available
            logger.log(.notice, "storage works again after \(time.now().nanoseconds(since: failingSince) / 1_000_000_000) s; changes are accepted and every event is stored")
            return true
        } catch {
            health = .failing(error)
            return false
        }
    }

    /// Makes the state directory again and locks it: the old snapshot and journal went with the
    /// old one (or a file of them did), and only a full snapshot of what is in memory, started at
    /// once, makes the state durable again (one already being written does not).
    ///
    /// When the directory itself stayed and still holds older files of the state (only the
    /// journal being written was deleted), an empty journal file is made after the lost one
    /// first: a stop before the snapshot lands then leaves a gap that the next start refuses and
    /// `--repair-state` mends, instead of files that read as whole and lack what the lost one held.
    private func recreateDirectory() throws(StorageError) {
        if file >= 0 { countdownd_close(file) }
        file = -1
        filePath = ""
        try FileSystem.createDirectory(directory)
        let identity = Self.identity(of: directory)
        let sameDirectory = identity.map { found in directoryIdentity.map { found == $0 } ?? false } ?? false
        if !sameDirectory || lock?.isLinked != true {
            lock = nil
            lock = try StateDirectoryLock(directory: directory)
        }
        directoryIdentity = identity
        let olderFiles = (try? journalFiles())?.isEmpty == false || SnapshotFile.path(in: directory) != nil
        if sameDirectory && olderFiles {
            try openNextFile()
            countdownd_close(file)
            file = -1
            filePath = ""
        }
        // Ignored on purpose: the directory's own entry reaches the disk with the parent's next
        // sync all the same; a parent this user may not open for reading is no reason to keep
        // changes refused.
        _ = try? FileSystem.sync(path: FileSystem.parent(of: directory))
        directoryEpoch += 1
        nextSnapshotAttempt = Instant(nanoseconds: .min)
        hasSnapshotFile = false
        journalChainStart = generation + 1
        health = .awaitingSnapshot
        logger.log(.notice, "recreated the state directory \(directory); writing a full snapshot into it before accepting changes")
    }

    // MARK: - Snapshots

    /// When the next snapshot is to be tried while the recreated directory awaits one (after one
    /// failed): the daemon wakes for it, busy or idle. `nil` otherwise.
    var awaitedSnapshotRetry: Instant? {
        health == .awaitingSnapshot && !snapshotInProgress ? nextSnapshotAttempt : nil
    }

    /// Whether a snapshot should be taken now.
    func snapshotIsDue(now: Instant) -> Bool {
        guard !snapshotInProgress, now >= nextSnapshotAttempt else { return false }
        switch health {
        case .failing: return false
        case .awaitingSnapshot: return true
        case .available:
            return snapshotNeeded || bytesSinceSnapshot >= snapshotBytes || filesSinceSnapshot >= snapshotFiles
                || (filesSinceSnapshot > 0 && now.nanoseconds(since: lastSnapshot) >= snapshotAge && bytesSinceSnapshot > 4096)
        }
    }

    /// Starts a snapshot: a new journal file takes the changes from now on, and the engine's
    /// state at this moment, with the replay ring, is written on the snapshot queue. When it has
    /// landed, the older journal files are removed.
    func takeSnapshot(_ image: CountdownEngine.DurableImage, ring: EventRing, clock: WallClockMapping) {
        dispatchPrecondition(condition: .onQueue(queue))
        // Deleted again while being recreated: recreated again first.
        if health == .awaitingSnapshot && checkDirectory() && health != .awaitingSnapshot { return }
        let covered: UInt64
        if file < 0 {
            // A recreated directory's first snapshot: the image holds what was noted and not yet
            // written, and the journal it continues, `generation + 1`, is opened once it lands.
            guard health == .awaitingSnapshot else { return }
            pending.removeSubrange(JournalFormat.frameHeaderSize...)
            batchStart = pending.count
            covered = generation + 1
        } else {
            guard pending.count == JournalFormat.frameHeaderSize else { return }  // Only between batches.
            do throws(StorageError) {
                // A file holding nothing but its header can start the snapshot's generation as it is.
                if fileLength > headerFrameLength {
                    try openNextFile()
                }
            } catch {
                logger.log(.warning, "cannot start a new journal file for a snapshot: \(error); trying again in a minute")
                nextSnapshotAttempt = time.now().advanced(byMilliseconds: 60_000)
                return
            }
            covered = generation
        }
        snapshotInProgress = true
        let directory = self.directory
        let bootID = SystemClock.bootID
        let events = ring.events, keptAfter = ring.keptAfter
        let started = time.now()
        let epoch = directoryEpoch
        snapshotQueue.async { [self] in
            ThreadName.snapshot.apply()
            let result: Result<Void, StorageError>
            do throws(StorageError) {
                try SnapshotFile.write(
                    image, events: events, eventsKeptAfter: keptAfter, bootID: bootID, journalGeneration: covered, clock: clock, directory: directory
                )
                result = .success(())
            } catch {
                result = .failure(error)
            }
            let count = image.count
            queue.async { [self] in
                ThreadName.state.apply()
                snapshotFinished(result, covering: covered, countdowns: count, started: started, epoch: epoch)
            }
        }
    }

    /// Writes a snapshot now, on the caller's thread, if anything changed since the last one: at a
    /// clean stop, so the next start reads one file and `--dump-state` shows the final state.
    ///
    /// A directory lost since the last look is recreated first, and a recreated one gets its
    /// snapshot whatever changed: a clean stop never leaves an empty directory behind. A snapshot
    /// in progress is waited for (its file is the one this replaces).
    func snapshotAtStop(_ image: CountdownEngine.DurableImage, ring: EventRing, clock: WallClockMapping) {
        dispatchPrecondition(condition: .onQueue(queue))
        // The snapshot queue hands results back with `async`, so this cannot deadlock.
        snapshotQueue.sync {}
        checkDirectory()
        // Ignored on purpose: whether the retry worked is `health`, read on the next line.
        if case .failing = health { _ = retry() }
        let needed = eventsSinceSnapshot || snapshotNeeded || health == .awaitingSnapshot
        guard needed, health == .available || health == .awaitingSnapshot else {
            if case .failing(let error) = health {
                logger.log(.error, "cannot write the state at stop: \(error); what was not stored before is lost (\(error.advice))")
            }
            return
        }
        do throws(StorageError) {
            try SnapshotFile.write(
                image, events: ring.events, eventsKeptAfter: ring.keptAfter, bootID: SystemClock.bootID,
                journalGeneration: generation + 1, clock: clock, directory: directory
            )
            if let files = try? journalFiles() {
                // Ignored on purpose: the snapshot continues with generation + 1, so a file left
                // behind is older than it and skipped (and removed) by the next start.
                for (_, path) in files { _ = unlink(path) }
            }
        } catch {
            if health == .awaitingSnapshot {
                logger.log(.error, "cannot write a snapshot at stop into the recreated state directory: \(error); what was in memory is lost (\(error.advice))")
            } else {
                logger.log(.warning, "cannot write a snapshot at stop: \(error); the journal has everything")
            }
        }
    }

    private func snapshotFinished(
        _ result: Result<Void, StorageError>, covering covered: UInt64, countdowns: Int, started: Instant, epoch: Int
    ) {
        dispatchPrecondition(condition: .onQueue(queue))
        snapshotInProgress = false
        defer { onSnapshotFinished?() }
        if epoch != directoryEpoch || directoryIsLost {
            // Written, or failed, into a directory deleted (or replaced) meanwhile: it counts for
            // nothing, and the recreated directory gets its own snapshot at once, not after the
            // second a failing disk is given (`rm -rf` deletes the files first: the snapshot
            // started for a lost file fails as the directory goes). One that landed in the
            // recreated directory lacks what the lost journal held: removed, so that a stop
            // before the next one lands is refused at start, not started partly. (Snapshots are
            // written one at a time: no newer one can be there.)
            logger.log(.warning, "the state directory \(directory) was lost while a snapshot was written into it; writing another")
            // Ignored on purpose: a snapshot left behind is refused at start (it lacks the lost
            // journal), which is what removing it aims at too; the next one replaces it.
            if case .success = result, epoch != directoryEpoch { _ = unlink(directory + "/" + SnapshotFile.fileName) }
            if !checkDirectory() { nextSnapshotAttempt = Instant(nanoseconds: .min) }
            return
        }
        switch result {
        case .success:
            // Everything before `covered` is in the snapshot now.
            if let files = try? journalFiles() {
                for (fileGeneration, path) in files where fileGeneration < covered {
                    _ = unlink(path)  // As at stop: a file left behind is older than the snapshot.
                }
            }
            hasSnapshotFile = true
            snapshotNeeded = false
            journalChainStart = covered
            lastSnapshot = time.now()
            let milliseconds = lastSnapshot.nanoseconds(since: started) / 1_000_000
            if health == .awaitingSnapshot {
                // The recreated directory's snapshot is there: its journal can follow it now.
                do throws(StorageError) {
                    try openNextFile()
                    try writePending()
                } catch {
                    filesSinceSnapshot = 0
                    bytesSinceSnapshot = 0
                    enterFailing(error)
                    return
                }
                health = .available
                logger.log(.notice, "the state directory \(directory) is whole again (its snapshot of \(countdowns) countdowns written in \(milliseconds) ms); changes are accepted")
            }
            bytesSinceSnapshot = fileLength
            filesSinceSnapshot = 1
            eventsSinceSnapshot = fileLength > headerFrameLength
            logger.log(.info, "snapshot of \(countdowns) countdowns written in \(milliseconds) ms; the journal continues in \(filePath)")
        case .failure(let error):
            logger.log(.warning, "cannot write a snapshot: \(error); the journal keeps everything meanwhile, trying again in \(health == .awaitingSnapshot ? "a second" : "a minute")")
            nextSnapshotAttempt = time.now().advanced(byMilliseconds: health == .awaitingSnapshot ? 1000 : 60_000)
        }
    }
}
