import CountdownCore
import Glibc

/// `countdownd --check-state DIR` and `--repair-state DIR`, in the spirit of `redis-check-aof`:
/// say what in a state directory is intact, and on request keep exactly that.
///
/// The check reads everything and changes nothing. Unlike a start, it goes on past damage: the
/// snapshot if it reads, every journal file in order, and within a damaged file every whole
/// frame after the damage too (found by its magic and checksum). What it finds is each
/// countdown's last intact state.
///
/// The repair takes the directory's lock (no daemon may run on it), links every journal file and
/// the old snapshot into `DIR/damaged-<time>/`, writes a new snapshot of what is intact (which
/// the journal files no longer continue), then removes the journal files from `DIR`. Each step
/// leaves a directory that starts: before the new snapshot lands, the old files are all still
/// in place; after it, the old journal files are older than it and skipped.
public enum StateRepair {
    /// What a check found.
    struct Inspection {
        /// One line per file: what it holds.
        var findings: [String] = []
        /// What is damaged or missing; empty when the directory starts whole.
        var problems: [String] = []
        /// Every countdown's last intact state, by key (`nil`: removed).
        var states: [String: StoredCountdown?] = [:]
        var snapshotRows = 0
        var lastSequence: UInt64 = 0
        /// Each user's last own number among the intact records.
        var ownerSequences = OwnerSequences()
        var highestGeneration: UInt64 = 0
        /// The files the repair moves aside.
        var journalPaths: [String] = []
        var snapshotExists = false
        /// The snapshot's file: the image, or an earlier countdownd's database.
        var snapshotPath = ""

        /// The countdowns that would be kept.
        var intactCountdowns: [StoredCountdown] { states.values.compactMap { $0 } }
    }

    /// Reads `directory` without changing it. A daemon may be running on it (`--dump-state`):
    /// the files are read again, up to `attempts` times, until the snapshot and the list of
    /// journal files stayed the same while they were read, so a snapshot landing meanwhile
    /// (which removes the journal files it covers) is never read half before and half after.
    /// - Throws: `keptChanging` when they changed at every attempt: never a view of two moments.
    static func inspect(_ directory: String, attempts: Int = 20) throws(StorageError) -> Inspection {
        for _ in 0..<attempts {
            let before = FilesInView(directory)
            do throws(StorageError) {
                let inspection = try inspectOnce(directory)
                if FilesInView(directory) == before { return inspection }
            } catch {
                if FilesInView(directory) == before { throw error }
            }
        }
        throw .keptChanging(directory: directory)
    }

    /// What says the state directory changed under a reader: the snapshot files' identity and
    /// the journal files' names (the newest journal growing is not a change: it is read up to
    /// its last whole frame).
    private struct FilesInView: Equatable {
        var snapshots: [[Int]]
        var journals: [String]

        init(_ directory: String) {
            snapshots = [SnapshotFile.fileName, SnapshotDatabase.fileName].map { name in
                var info = stat()
                guard stat(directory + "/" + name, &info) == 0 else { return [] }
                return [Int(info.st_ino), Int(info.st_size), info.st_mtim.tv_sec, info.st_mtim.tv_nsec]
            }
            journals = ((try? StateJournal.journalFiles(in: directory)) ?? []).map(\.1)
        }
    }

    private static func inspectOnce(_ directory: String) throws(StorageError) -> Inspection {
        var inspection = Inspection()
        var snapshotGeneration: UInt64?
        let snapshotPath = SnapshotFile.path(in: directory) ?? directory + "/" + SnapshotFile.fileName
        let snapshotName = snapshotPath.split(separator: "/").last.map(String.init) ?? snapshotPath
        inspection.snapshotExists = access(snapshotPath, F_OK) == 0
        inspection.snapshotPath = snapshotPath
        do throws(StorageError) {
            if let snapshot = try SnapshotFile.read(directory: directory) {
                snapshotGeneration = snapshot.journalGeneration
                inspection.lastSequence = snapshot.lastSequence
                inspection.ownerSequences = OwnerSequences(startingFrom: snapshot)
                inspection.snapshotRows = snapshot.rows.count
                for row in snapshot.rows { inspection.states[row.key] = row }
                inspection.findings.append("\(snapshotName): \(snapshot.rows.count) countdowns, continued by journal files from \(snapshot.journalGeneration) on")
                if !snapshot.problems.isEmpty {
                    // The daemon's own verdict, from the same list: it refuses to start on any.
                    inspection.problems.append("\(snapshotPath): \(snapshot.problems.joined(separator: "; "))")
                }
            } else {
                inspection.findings.append("\(SnapshotFile.fileName): none")
            }
        } catch {
            inspection.problems.append("\(snapshotPath): \(error)")
        }
        var previous: (UInt64, String)?
        var previousEnd: (path: String, last: JournalFormat.FrameMark?)?
        let files = try StateJournal.journalFiles(in: directory)
        for (generation, path) in files {
            inspection.journalPaths.append(path)
            inspection.highestGeneration = max(inspection.highestGeneration, generation)
            if let snapshotGeneration, generation < snapshotGeneration {
                if let problem = StateJournal.olderFileProblem(at: path, generation: generation) {
                    inspection.problems.append("\(path): \(problem)")
                } else {
                    inspection.findings.append("\(path): older than the snapshot, ignored (the next start removes it)")
                }
                continue
            }
            // A damaged snapshot says nothing about where the journal starts: no gap is judged then.
            if !(inspection.snapshotExists && snapshotGeneration == nil),
               let problem = StateJournal.continuityProblem(
                   of: generation, after: previous, snapshotGeneration: snapshotGeneration,
                   snapshotIsDatabase: inspection.snapshotPath.hasSuffix("/" + SnapshotDatabase.fileName), directory: directory
               ) {
                inspection.problems.append("\(path): \(problem)")
            }
            previous = (generation, path)
            let bytes = try FileSystem.readStateFile(path)
            if bytes.isEmpty {
                inspection.problems.append("\(path): \(StateJournal.emptyFileProblem(isNewest: generation == files.last?.0))")
                previousEnd = nil
                continue
            }
            let scan = JournalFormat.scan(bytes)
            // The daemon's own verdict on the file, word for word.
            if let problem = StateJournal.fileProblem(scan, after: previousEnd) {
                inspection.problems.append("\(path): \(problem)")
            }
            previousEnd = (path, scan.lastFrame)
            inspection.findings.append(apply(scan, bytes, path: path, into: &inspection))
        }
        return inspection
    }

    /// Applies one journal file's intact records to the inspection; returns its finding. A file
    /// without damage is applied as a start would; in a damaged one, every whole frame is kept,
    /// past the damage, and a numbered file's frames are put back in the order of their indexes
    /// (each once), with the indexes that are missing named.
    private static func apply(_ scan: JournalFormat.Scan, _ bytes: [UInt8], path: String, into inspection: inout Inspection) -> String {
        var events = 0
        func take(_ record: JournalFormat.EventRecord) {
            inspection.states[record.event.name] = record.state
            inspection.lastSequence = max(inspection.lastSequence, record.event.sequence)
            inspection.ownerSequences.take(record)
            events += 1
        }
        guard scan.damage != nil else {
            scan.events.forEach(take)
            let torn = scan.tornTail.map { "; a torn write at byte \(scan.validLength) (\($0)), cut off at the next start" } ?? ""
            return "\(path): \(events) intact events" + torn
        }
        var frames = JournalFormat.wholeFrames(in: bytes)
        var notes: [String] = []
        if scan.layout == .ordered {
            frames.sort { $0.index < $1.index }
            var kept: [JournalFormat.Frame] = []
            for frame in frames where kept.last?.index != frame.index { kept.append(frame) }
            if kept.count < frames.count { notes.append("\(frames.count - kept.count) repeated frames taken once") }
            var missing: [String] = []
            var expected: UInt64 = 0
            for frame in kept {
                if frame.index > expected {
                    missing.append(frame.index - 1 == expected ? "\(expected)" : "\(expected)-\(frame.index - 1)")
                }
                expected = frame.index + 1
            }
            if !missing.isEmpty { notes.append("frames \(missing.joined(separator: ", ")) are missing or damaged") }
            frames = kept
        }
        var position: UInt64 = 0
        for frame in frames {
            var part = JournalFormat.Scan()
            // A frame's own records that do not decode are skipped, and said.
            if JournalFormat.decodeFrame(frame, in: bytes, position: scan.layout == .ordered ? frame.index : position, into: &part, visit: take) != nil {
                notes.append("the frame at byte \(frame.offset) does not decode and is skipped")
            }
            position += 1
        }
        return "\(path): \(events) intact events, taken from every whole frame" + (notes.isEmpty ? "" : "; " + notes.joined(separator: "; "))
    }

    /// `--check-state`: prints what is intact; exit status 0 when the directory starts whole, 1
    /// when something is damaged or missing.
    public static func check(_ directory: String, print: (String) -> Void) -> Int32 {
        let inspection: Inspection
        do throws(StorageError) {
            inspection = try inspect(directory)
        } catch {
            print("cannot read \(directory): \(error); \(error.advice)")
            return 1
        }
        for finding in inspection.findings { print(finding) }
        let count = inspection.intactCountdowns.count
        guard !inspection.problems.isEmpty else {
            print("intact: \(count) countdowns; nothing is damaged, countdownd starts with all of them")
            return 0
        }
        for problem in inspection.problems { print("damaged: \(problem)") }
        print("intact: \(count) countdowns. countdownd will not start on this directory: restore it from a backup, or keep exactly what is intact with countdownd --repair-state \(directory)")
        return 1
    }

    /// How far a repair moves every number on (`repair`): more than a journal file's records.
    static let numbersSkipped: UInt64 = 1 << 20

    /// `--repair-state`: keeps what is intact, moves the old files aside; exit status 0 when the
    /// directory starts now.
    public static func repair(_ directory: String, print: (String) -> Void) -> Int32 {
        do throws(StorageError) {
            let lock = try StateDirectoryLock(directory: directory)
            defer { withExtendedLifetime(lock) {} }
            let inspection = try inspect(directory)
            guard !inspection.problems.isEmpty else {
                print("nothing to repair in \(directory): it starts whole with \(inspection.intactCountdowns.count) countdowns")
                return 0
            }
            for problem in inspection.problems { print("damaged: \(problem)") }
            let aside = directory + "/damaged-\(SystemClock.unixNanoseconds() / 1_000_000_000)"
            guard mkdir(aside, 0o700) == 0 else { throw .system(what: "cannot create \(aside)", errno: errno) }
            var moved = inspection.journalPaths
            if inspection.snapshotExists { moved.append(inspection.snapshotPath) }
            for path in moved {
                let name = path.split(separator: "/").last.map(String.init) ?? path
                guard link(path, aside + "/" + name) == 0 else { throw .system(what: "cannot link \(path) into \(aside)", errno: errno) }
            }
            try FileSystem.sync(path: aside)
            // The journal files stay older than the new snapshot: skipped (and removed) at the next
            // start should this stop before removing them below.
            // Numbers go on past every one that a lost record may have had: a journal file holds
            // some 170,000 records at most (16 MiB), so nobody, root or user, is given a number
            // again that it saw before the damage.
            let lastSequence = inspection.lastSequence + Self.numbersSkipped
            var contents = SnapshotFile.Contents(
                lastSequence: lastSequence, bootID: nil, journalGeneration: inspection.highestGeneration + 1,
                events: [], eventsKeptAfter: lastSequence
            )
            contents.rows = inspection.intactCountdowns.sorted { $0.key < $1.key }
            // Each user's from its own last intact one, as root's from the daemon-wide one: a
            // user is never shown the daemon-wide number.
            contents.ownerSequences = inspection.ownerSequences.skipped(by: Self.numbersSkipped)
            try SnapshotFile.write(contents, directory: directory)
            for path in inspection.journalPaths {
                // Ignored on purpose: a journal file left behind is older than the new snapshot.
                _ = unlink(path)
            }
            try FileSystem.sync(path: directory)
            print("repaired \(directory): kept the \(contents.rows.count) countdowns found intact in a new snapshot; the old files are in \(aside). Replay history (SUBSCRIBE ... SINCE) starts afresh: every number goes on \(Self.numbersSkipped) past the last intact one")
            return 0
        } catch {
            print("cannot repair \(directory): \(error); \(error.advice)")
            return 1
        }
    }
}
