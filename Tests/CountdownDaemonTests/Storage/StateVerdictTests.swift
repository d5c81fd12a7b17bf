@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Foundation
import Glibc
import Testing

/// The daemon's recovery and `countdownd --check-state` judge one directory by the same rules:
/// over a generated corpus of damaged copies of one healthy state directory (every single fault
/// of every kind the storage issue lists, at every frame and across the snapshot), the two always
/// agree, nothing damaged is started on unless it is the torn tail of the newest journal, and
/// what a start keeps is exactly what the check calls intact.
@Suite("One verdict: recovery and --check-state agree on every damaged directory")
struct StateVerdictTests {
    let queue = DispatchQueue(label: "verdict-test")
    let logger = Logger(threshold: .error, environment: [:])

    /// A healthy directory: a snapshot of five countdowns (with replay history), continued by
    /// three journal files of four single-START frames each, as three runs ended by a kill leave.
    func healthyDirectory(in scratch: ScratchDirectory) throws -> String {
        let directory = scratch.path + "/healthy"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var contents = SnapshotFile.Contents(lastSequence: 5, bootID: nil, journalGeneration: 1, events: [], eventsKeptAfter: 0)
        for index in 0..<5 {
            contents.rows.append(StoredCountdown(
                name: "snap\(index)", state: index == 4 ? .paused : .running, totalMilliseconds: 3_600_000,
                deadlineUnixMilliseconds: index == 4 ? nil : 4_102_444_800_000, deadlineBootNanoseconds: nil,
                remainingNanoseconds: index == 4 ? 1_000_000_000 : 0, finishedUnixMilliseconds: nil,
                owner: 1000, lateMilliseconds: nil
            ))
            contents.events.append(CountdownEvent(
                sequence: UInt64(index + 1), kind: .started, name: "1000/snap\(index)", remainingMilliseconds: 3_600_000,
                totalMilliseconds: 3_600_000, owner: 1000
            ))
        }
        try SnapshotFile.write(contents, directory: directory)
        var sequence: UInt64 = 6
        for run in 0..<3 {
            let journal = StateJournal(directory: directory, durability: .process, logger: logger, queue: queue)
            _ = try recover(journal)
            for index in 0..<4 {
                let name = "run\(run)-\(index)"
                let deadline = SystemClock.now().advanced(byMilliseconds: 3_600_000)
                let event = CountdownEvent(sequence: sequence, kind: .started, name: name, remainingMilliseconds: 3_600_000, totalMilliseconds: 3_600_000)
                let state = Countdown(name: name, owner: 0, totalMilliseconds: 3_600_000, status: .running(deadline: deadline, pinnedUnixMilliseconds: nil))
                let outcome = queue.sync {
                    journal.beginBatch()
                    journal.note(event, state: state, clock: DaemonClock.system.mapping())
                    return journal.commit()
                }
                #expect(outcome == .durable)
                sequence += 1
            }
        }
        return directory
    }

    func recover(_ journal: StateJournal) throws(StorageError) -> StateJournal.Recovered {
        try journal.recoverForTest(on: queue)
    }

    /// Recovers `directory` with a fresh journal (waiting out a lock another test's spawned
    /// process may hold a copy of for a moment: `recoverForTest`); `nil` when refused.
    func start(_ directory: String) throws -> (Set<String>?, String) {
        do throws(StorageError) {
            let recovered = try recover(StateJournal(directory: directory, durability: .process, logger: logger, queue: queue))
            return (Set(recovered.countdowns.map { "\($0.name) \($0.state) \($0.totalMilliseconds) \($0.remainingNanoseconds)" }), "")
        } catch {
            return (nil, "\(error)")
        }
    }

    /// One damaged copy: its name, how to damage it, and whether a start on it is allowed (only
    /// the newest journal's tail may be lost, as a stop in the middle of a write loses it).
    struct Fault {
        var what: String
        var file: String
        var damage: ([UInt8]) -> [UInt8]
        var mayStart: Bool
        /// The file is deleted instead.
        var removes = false
        /// The file is renamed to this instead.
        var renamedTo: String?
    }

    func frames(_ bytes: [UInt8]) -> [[UInt8]] {
        var frames: [[UInt8]] = []
        var offset = 0
        while offset + 20 <= bytes.count {
            let length = Int(UInt32(bytes[offset + 4]) | UInt32(bytes[offset + 5]) << 8 | UInt32(bytes[offset + 6]) << 16 | UInt32(bytes[offset + 7]) << 24)
            frames.append(Array(bytes[offset..<(offset + 20 + length)]))
            offset += 20 + length
        }
        return frames
    }

    func faults(journals: [String], snapshotPath: String) throws -> [Fault] {
        var faults: [Fault] = []
        for (position, file) in journals.enumerated() {
            let newest = position == journals.count - 1
            let parts = frames([UInt8](try Data(contentsOf: URL(fileURLWithPath: file))))
            let last = parts.count - 1
            let name = (file as NSString).lastPathComponent
            faults.append(Fault(what: "\(name) emptied", file: file, damage: { _ in [] }, mayStart: false))
            // Nothing names the newest file: its loss cannot be told from a stop before it was made.
            faults.append(Fault(what: "\(name) removed", file: file, damage: { $0 }, mayStart: newest, removes: true))
            // Renamed to a name older than the snapshot's first file: a start would remove it as
            // older, with what it holds, and say nothing; its header says which file it is.
            faults.append(Fault(what: "\(name) renamed to journal.000000000000", file: file, damage: { $0 }, mayStart: false, renamedTo: "journal.000000000000"))
            for index in 1...last {
                faults.append(Fault(what: "\(name) frame \(index) removed", file: file, damage: { _ in parts.enumerated().filter { $0.offset != index }.flatMap(\.element) }, mayStart: newest && index == last))
                faults.append(Fault(what: "\(name) frame \(index) repeated", file: file, damage: { _ in parts.prefix(index + 1).flatMap { $0 } + parts[index] + parts.dropFirst(index + 1).flatMap { $0 } }, mayStart: false))
                if index < last {
                    faults.append(Fault(what: "\(name) frames \(index) and \(index + 1) swapped", file: file, damage: { _ in
                        var swapped = parts
                        swapped.swapAt(index, index + 1)
                        return swapped.flatMap { $0 }
                    }, mayStart: false))
                }
            }
            for index in 0...last {
                let start = parts.prefix(index).reduce(0) { $0 + $1.count }
                for (label, offset) in [("its frame header", 6), ("its payload", parts[index].count / 2), ("its last byte", parts[index].count - 1)] {
                    faults.append(Fault(what: "\(name) frame \(index): a bit flipped in \(label)", file: file, damage: { bytes in
                        var bytes = bytes
                        bytes[start + offset] ^= 0x04
                        return bytes
                    }, mayStart: newest && index == last && index > 0))
                }
                // Cut in the middle of the frame, and right after it.
                faults.append(Fault(what: "\(name) cut inside frame \(index)", file: file, damage: { Array($0.prefix(start + parts[index].count / 2)) }, mayStart: newest && index > 0))
                if index < last {
                    faults.append(Fault(what: "\(name) cut after frame \(index)", file: file, damage: { Array($0.prefix(start + parts[index].count)) }, mayStart: newest))
                }
            }
        }
        // Every byte of the snapshot, a different bit each time: a flat image in checksummed
        // frames, so any flipped bit is damage. And its frames removed, repeated, swapped, cut.
        let snapshot = [UInt8](try Data(contentsOf: URL(fileURLWithPath: snapshotPath)))
        for offset in snapshot.indices {
            faults.append(Fault(what: "snapshot byte \(offset), bit \(offset % 8)", file: SnapshotFile.fileName, damage: { bytes in
                var bytes = bytes
                bytes[offset] ^= UInt8(1 << (offset % 8))
                return bytes
            }, mayStart: false))
        }
        let parts = frames(snapshot)
        faults.append(Fault(what: "snapshot emptied", file: SnapshotFile.fileName, damage: { _ in [] }, mayStart: false))
        for index in parts.indices {
            faults.append(Fault(what: "snapshot frame \(index) removed", file: SnapshotFile.fileName, damage: { _ in parts.enumerated().filter { $0.offset != index }.flatMap(\.element) }, mayStart: false))
            faults.append(Fault(what: "snapshot frame \(index) repeated", file: SnapshotFile.fileName, damage: { _ in parts.prefix(index + 1).flatMap { $0 } + parts[index] + parts.dropFirst(index + 1).flatMap { $0 } }, mayStart: false))
            faults.append(Fault(what: "snapshot cut before frame \(index)", file: SnapshotFile.fileName, damage: { _ in parts.prefix(index).flatMap { $0 } }, mayStart: false))
            if index + 1 < parts.count {
                faults.append(Fault(what: "snapshot frames \(index) and \(index + 1) swapped", file: SnapshotFile.fileName, damage: { _ in
                    var swapped = parts
                    swapped.swapAt(index, index + 1)
                    return swapped.flatMap { $0 }
                }, mayStart: false))
            }
        }
        return faults
    }

    @Test("over every single fault (frames removed, repeated, swapped, altered; files emptied or cut; any bit of the snapshot): the start and the check agree, only the newest journal's tail is ever given up, and a start keeps exactly what the check calls intact")
    func agreement() throws {
        let scratch = ScratchDirectory()
        let healthy = try healthyDirectory(in: scratch)
        let journals = try StateJournal.journalFiles(in: healthy).map(\.1)
        try #require(journals.count == 3, "\(journals)")
        let (baseline, _) = try start(try copy(healthy, to: scratch.path + "/baseline"))
        let whole = try #require(baseline)
        #expect(whole.count == 17, "5 from the snapshot, 12 from the journals: \(whole.sorted())")
        var counts = (cases: 0, refused: 0, startedWhole: 0, startedShort: 0, snapshotCases: 0, snapshotRefused: 0)
        for (number, fault) in try faults(journals: journals, snapshotPath: healthy + "/" + SnapshotFile.fileName).enumerated() {
            let directory = try copy(healthy, to: scratch.path + "/case\(number)")
            let target = fault.file.hasPrefix("/") ? directory + "/" + (fault.file as NSString).lastPathComponent : directory + "/" + fault.file
            let original = [UInt8](try Data(contentsOf: URL(fileURLWithPath: target)))
            if fault.removes {
                try FileManager.default.removeItem(atPath: target)
            } else if let renamed = fault.renamedTo {
                try FileManager.default.moveItem(atPath: target, toPath: directory + "/" + renamed)
            } else {
                try Data(fault.damage(original)).write(to: URL(fileURLWithPath: target))
            }
            // The check first: recovery cuts a torn tail, the check changes nothing.
            let inspection = try StateRepair.inspect(directory)
            let (started, refusal) = try start(directory)
            counts.cases += 1
            if fault.file == SnapshotFile.fileName {
                counts.snapshotCases += 1
                if started == nil { counts.snapshotRefused += 1 }
            }
            #expect((started == nil) == !inspection.problems.isEmpty, "\(fault.what): the start \(started == nil ? "refused (\(refusal))" : "went ahead"), the check found \(inspection.problems)")
            guard let started else {
                counts.refused += 1
                continue
            }
            #expect(fault.mayStart, "\(fault.what): started on silently with \(started.count) countdowns")
            let intact = Set(inspection.intactCountdowns.map(\.key))
            #expect(Set(started.map { String($0.split(separator: " ")[0]) }) == intact, "\(fault.what): the start kept what the check calls intact")
            #expect(started.isSubset(of: whole), "\(fault.what): nothing altered: \(started.subtracting(whole))")
            if started == whole { counts.startedWhole += 1 } else { counts.startedShort += 1 }
        }
        #expect(counts.cases > 200 && counts.refused > 100 && counts.snapshotCases > 100, "the corpus is large enough to mean something: \(counts)")
        #expect(counts.snapshotRefused == counts.snapshotCases, "every fault of the snapshot is refused: \(counts)")
        print("verdict corpus: \(counts.cases) damaged directories, \(counts.refused) refused, \(counts.startedWhole) started whole, \(counts.startedShort) started without the newest journal's torn tail; snapshot faults: \(counts.snapshotRefused) of \(counts.snapshotCases) refused")
    }

    func copy(_ source: String, to destination: String) throws -> String {
        try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: true)
        for name in try FileManager.default.contentsOfDirectory(atPath: source) where name != "countdownd.lock" {
            try FileManager.default.copyItem(atPath: source + "/" + name, toPath: destination + "/" + name)
        }
        return destination
    }
}
