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
        var highestGeneration: UInt64 = 0
        /// The files the repair moves aside.
        var journalPaths: [String] = []
        var snapshotExists = false

        /// The countdowns that would be kept.
        var intactCountdowns: [StoredCountdown] { states.values.compactMap { $0 } }
    }

    /// Reads `directory` without changing it.
    static func inspect(_ directory: String) throws(StorageError) -> Inspection {
        var inspection = Inspection()
        var snapshotGeneration: UInt64?
        let snapshotPath = directory + "/" + SnapshotFile.fileName
        inspection.snapshotExists = access(snapshotPath, F_OK) == 0
        do throws(StorageError) {
            if let snapshot = try SnapshotFile.read(directory: directory) {
                snapshotGeneration = snapshot.journalGeneration
                inspection.lastSequence = snapshot.lastSequence
                inspection.snapshotRows = snapshot.rows.count
                for row in snapshot.rows { inspection.states[row.key] = row }
                inspection.findings.append("\(SnapshotFile.fileName): \(snapshot.rows.count) countdowns, continued by journal files from \(snapshot.journalGeneration) on")
                if !snapshot.unreadableRows.isEmpty {
                    inspection.problems.append("\(SnapshotFile.fileName): \(snapshot.unreadableRows.count) unreadable rows")
                }
            } else {
                inspection.findings.append("\(SnapshotFile.fileName): none")
            }
        } catch {
            inspection.problems.append("\(snapshotPath): \(error)")
        }
        var previous: (UInt64, String)?
        let files = try StateJournal.journalFiles(in: directory)
        for (generation, path) in files {
            inspection.journalPaths.append(path)
            inspection.highestGeneration = max(inspection.highestGeneration, generation)
            if let snapshotGeneration, generation < snapshotGeneration {
                inspection.findings.append("\(path): older than the snapshot, ignored (the next start removes it)")
                continue
            }
            // A damaged snapshot says nothing about where the journal starts: no gap is judged then.
            if !(inspection.snapshotExists && snapshotGeneration == nil),
               let problem = StateJournal.continuityProblem(of: generation, after: previous, snapshotGeneration: snapshotGeneration, directory: directory) {
                inspection.problems.append("\(path): \(problem)")
            }
            previous = (generation, path)
            let bytes = try FileSystem.readAll(path)
            if bytes.isEmpty {
                inspection.problems.append("\(path): \(StateJournal.emptyFileProblem(isNewest: generation == files.last?.0))")
                continue
            }
            inspection.findings.append(scanFile(bytes, path: path, into: &inspection))
        }
        return inspection
    }

    /// Scans one journal file, past damage, applying every intact record; returns its finding.
    private static func scanFile(_ bytes: [UInt8], path: String, into inspection: inout Inspection) -> String {
        var offset = 0
        var events = 0
        var notes: [String] = []
        while offset < bytes.count {
            let part = offset == 0 ? bytes : Array(bytes[offset...])
            let scan = JournalFormat.scan(part) { record in
                inspection.states[record.event.name] = record.state
                inspection.lastSequence = max(inspection.lastSequence, record.event.sequence)
                events += 1
            }
            if let damage = scan.damage {
                let at = offset + damage.offset
                inspection.problems.append("\(path): damaged at byte \(at): \(damage.reason)")
                guard let next = JournalFormat.nextValidFrame(in: part, after: damage.offset) else { break }
                notes.append("bytes \(at) to \(offset + next) are damaged; whole frames resume after them")
                offset += next
                continue
            }
            if let torn = scan.tornTail {
                notes.append("a torn write at byte \(offset + scan.validLength) (\(torn)), cut off at the next start")
            }
            break
        }
        return "\(path): \(events) intact events" + (notes.isEmpty ? "" : "; " + notes.joined(separator: "; "))
    }

    /// `--check-state`: prints what is intact; exit status 0 when the directory starts whole, 1
    /// when something is damaged or missing.
    public static func check(_ directory: String, print: (String) -> Void) -> Int32 {
        let inspection: Inspection
        do throws(StorageError) {
            inspection = try inspect(directory)
        } catch {
            print("cannot read \(directory): \(error)")
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
            if inspection.snapshotExists { moved.append(directory + "/" + SnapshotFile.fileName) }
            for path in moved {
                let name = path.split(separator: "/").last.map(String.init) ?? path
                guard link(path, aside + "/" + name) == 0 else { throw .system(what: "cannot link \(path) into \(aside)", errno: errno) }
            }
            try FileSystem.sync(path: aside)
            // The journal files stay older than the new snapshot: skipped (and removed) at the next
            // start should this stop before removing them below.
            var contents = SnapshotFile.Contents(
                lastSequence: inspection.lastSequence, bootID: nil, journalGeneration: inspection.highestGeneration + 1,
                events: [], eventsKeptAfter: inspection.lastSequence
            )
            contents.rows = inspection.intactCountdowns.sorted { $0.key < $1.key }
            try SnapshotFile.write(contents, directory: directory)
            for path in inspection.journalPaths {
                // Ignored on purpose: a journal file left behind is older than the new snapshot.
                _ = unlink(path)
            }
            try FileSystem.sync(path: directory)
            print("repaired \(directory): kept the \(contents.rows.count) countdowns found intact in a new snapshot; the old files are in \(aside). Replay history (SUBSCRIBE ... SINCE) starts after seq \(inspection.lastSequence)")
            return 0
        } catch {
            print("cannot repair \(directory): \(error); \(error.advice)")
            return 1
        }
    }
}
