import CountdownCore
import Glibc

/// Reads the journal files that continue a snapshot, in order, into the last state of every
/// countdown they changed, the replay history after the snapshot's, and the numbers they used.
///
/// Recovery runs it on a thread of its own while the snapshot's countdowns go into the engine
/// (`StateJournal.recover`): the two were a quarter and three quarters of a launch, one after
/// the other. It owns everything it touches: only reads files, and changes nothing in the
/// directory but removing files older than the snapshot (which no recovery reads); torn tails
/// are reported for the caller to cut once everything verifies.
struct JournalChainReader: Sendable {
    /// The last state of one countdown the journal changed.
    struct Change: Sendable {
        /// Its key (`StoredCountdown.key`) and the key's `NameIndex.hash`.
        var key: String
        var hash: UInt32
        /// `nil`: removed (a tombstone, which still overrides the snapshot's row).
        var state: StoredCountdown?
        /// Written in this boot, so its boot-clock deadline holds.
        var sameBoot: Bool
    }

    // What it reads.
    private let files: [(UInt64, String)]
    private let firstGeneration: UInt64
    private let snapshotGeneration: UInt64?
    private let snapshotIsDatabase: Bool
    private let bootID: String?
    private let directory: String
    private let clock: WallClockMapping
    /// The instant the countdowns are restored as of (`RestoreBatch.now`).
    private let now: Instant

    /// Every countdown the journal changed, in the order its last record came, while reading.
    private var changes: [Change] = []
    /// The same, once read: on the daemon's clock, ready for the engine (a removal where the
    /// journal removed the countdown).
    private(set) var changed: RestoreBatch
    /// From each change's hash to its place in `changes` and `changed`.
    private var latest = NameIndex()
    /// The snapshot's history with the journal's events after it.
    private(set) var ring: EventRing
    private(set) var lastSequence: UInt64
    private(set) var ownerSequences: OwnerSequences
    private var phaseLists: CyclePhaseInterner
    /// The newest file's generation and the oldest's (`.max` with none).
    private(set) var highest: UInt64
    private(set) var chainStart = UInt64.max
    private(set) var lastFrame: JournalFormat.FrameMark?
    private(set) var tornTails: [(path: String, length: Int, what: String)] = []
    /// Each file read, with its count of events, for the log.
    private(set) var sources: [String] = []
    private(set) var filesRead = 0
    private(set) var bytesRead: Int64 = 0
    private(set) var sawEvents = false

    /// A reader of `files` (by generation, as `StateJournal.journalFiles` lists them), which
    /// continue a snapshot of journal generation `firstGeneration` (`snapshotGeneration`, `nil`
    /// without a snapshot), whose history, numbers and phase lists it goes on from. The
    /// countdowns it changed are put on the daemon's `clock`, to be restored as of `now`.
    init(
        files: [(UInt64, String)], firstGeneration: UInt64, snapshotGeneration: UInt64?, snapshotIsDatabase: Bool,
        bootID: String?, directory: String, clock: WallClockMapping, now: Instant, ring: EventRing, lastSequence: UInt64, ownerSequences: OwnerSequences,
        phaseLists: CyclePhaseInterner
    ) {
        self.files = files
        self.firstGeneration = firstGeneration
        self.snapshotGeneration = snapshotGeneration
        self.snapshotIsDatabase = snapshotIsDatabase
        self.bootID = bootID
        self.directory = directory
        self.clock = clock
        self.now = now
        self.changed = RestoreBatch(capacity: 0, now: now)
        self.ring = ring
        self.lastSequence = lastSequence
        self.ownerSequences = ownerSequences
        self.phaseLists = phaseLists
        self.highest = firstGeneration
    }

    /// Whether the journal changed the countdown `key` (whose `NameIndex.hash` is `hash`); once
    /// `read` has returned.
    func changed(_ key: String, hash: UInt32) -> Bool {
        latest.find(hash: hash, matches: { changed.name(at: Int($0)) == key }) != nil
    }

    /// Reads every file, checking that each continues the one before it (or the snapshot) and
    /// verifies to its end but for a torn tail of the newest.
    /// - Throws: `StorageError`: an unreadable, missing or damaged file.
    mutating func read() throws(StorageError) {
        var previous: (UInt64, String)?
        var previousEnd: (path: String, last: JournalFormat.FrameMark?)?
        let newest = files.last?.0
        for (fileGeneration, path) in files {
            guard fileGeneration >= firstGeneration else {
                // Left by a crash between a snapshot landing and the old files being removed,
                // if its header agrees.
                if let problem = StateJournal.olderFileProblem(at: path, generation: fileGeneration) {
                    throw .damaged(path: path, reason: problem)
                }
                // Ignored on purpose if it cannot be removed: older than the snapshot, it is
                // skipped by every recovery, and tried again at the next start.
                _ = unlink(path)
                continue
            }
            if let problem = StateJournal.continuityProblem(
                of: fileGeneration, after: previous, snapshotGeneration: snapshotGeneration,
                snapshotIsDatabase: snapshotIsDatabase, directory: directory
            ) {
                throw .damaged(path: path, reason: problem)
            }
            let bytes = try FileSystem.readStateFile(path)
            if bytes.isEmpty {
                throw .damaged(path: path, reason: StateJournal.emptyFileProblem(isNewest: fileGeneration == newest))
            }
            highest = max(highest, fileGeneration)
            chainStart = min(chainStart, fileGeneration)
            // A record is about 90 bytes: room for this file's names at once, no rehashing.
            latest.reserveCapacity(latest.count + bytes.count / 80)
            changes.reserveCapacity(changes.count + bytes.count / 80)
            let sameBoot = bootID != nil && JournalFormat.header(of: bytes)?.bootID == bootID
            var eventCount = 0
            let scan = JournalFormat.scan(bytes) { record in
                var record = record
                phaseLists.intern(&record.event.cycle)
                if var state = record.state {
                    phaseLists.intern(&state.cycle)
                    record.state = state
                }
                let key = record.event.name
                let hash = NameIndex.hash(key)
                if let index = latest.find(hash: hash, matches: { changes[Int($0)].key == key }) {
                    changes[Int(index)].state = record.state
                    changes[Int(index)].sameBoot = sameBoot
                } else {
                    latest.insert(hash: hash, slot: Int32(changes.count))
                    changes.append(Change(key: key, hash: hash, state: record.state, sameBoot: sameBoot))
                }
                lastSequence = max(lastSequence, record.event.sequence)
                ownerSequences.take(record)
                ring.append(record.event)  // Lifecycle events only: not `snapshot` records.
                eventCount += 1
            }
            if let problem = StateJournal.fileProblem(scan, after: previousEnd) {
                throw .damaged(path: path, reason: problem)
            }
            previous = (fileGeneration, path)
            previousEnd = (path, scan.lastFrame)
            lastFrame = scan.lastFrame
            if let torn = scan.tornTail {
                tornTails.append((path, scan.validLength, torn))
            }
            sources.append("\(path.split(separator: "/").last.map(String.init) ?? path) (\(eventCount) events)")
            filesRead += 1
            bytesRead += Int64(scan.validLength)
            sawEvents = sawEvents || eventCount > 0
        }
        // On this thread, not the one that fills the engine: the states on the daemon's clock.
        changed = RestoreBatch(capacity: changes.count, now: now)
        for change in changes {
            changed.append(
                name: change.key, hash: change.hash, countdown: change.state?.persisted(clock: clock, sameBoot: change.sameBoot, key: change.key)
            )
        }
        changes = []
    }
}
