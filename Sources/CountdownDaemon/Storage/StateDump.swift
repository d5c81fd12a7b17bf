import CountdownCore
import FoundationEssentials

/// `countdownd --dump-state DIR`: the state a start would restore from `DIR`, the snapshot with
/// the journal applied, as JSON lines for people and scripts (`jq`), changing nothing. It takes
/// the place of reading the snapshot with `sqlite3`, now that the snapshot is a flat image.
///
/// The first line describes the directory; then one line per countdown, in name order:
///
///     {"type":"state","directory":"…","countdowns":2,"last_seq":41,"damaged":[]}
///     {"type":"countdown","owner":1000,"name":"tea","state":"running","total_ms":180000,
///      "deadline_unix_ms":1764860000000,…}
///
/// Times are as stored: wall-clock milliseconds since the epoch (`*_unix_ms`), the deadline on
/// the boot clock of the boot that wrote it (`deadline_boot_ns`), the time left of a paused one
/// (`remaining_ns`). Absent values are left out.
public enum StateDump {
    struct Header: Encodable {
        var type = "state"
        var directory: String
        var countdowns: Int
        var lastSeq: UInt64
        /// What `--check-state` calls damaged: the countdowns listed are then those intact.
        var damaged: [String]
    }

    struct Countdown: Encodable {
        var type = "countdown"
        var owner: UInt32
        var name: String
        var state: String
        var totalMs: Int64
        var deadlineUnixMs: Int64?
        var deadlineBootNs: Int64?
        var remainingNs: Int64?
        var finishedUnixMs: Int64?
        var lateMs: Int64?
        var pinnedUnixMs: Int64?
        var onSuspend: String?
        /// A cycle's phases as `CYCLE` reads them (`25m:work,5m:break`), and where it is.
        var cycle: String?
        var phase: Int?
        var rounds: Int?
        var round: Int?

        init(_ row: StoredCountdown) {
            owner = row.owner
            name = row.name
            state = row.state.rawValue
            totalMs = row.totalMilliseconds
            deadlineUnixMs = row.deadlineUnixMilliseconds
            deadlineBootNs = row.deadlineBootNanoseconds
            remainingNs = row.state == .paused ? row.remainingNanoseconds : nil
            finishedUnixMs = row.finishedUnixMilliseconds
            lateMs = row.lateMilliseconds
            pinnedUnixMs = row.pinnedUnixMilliseconds
            onSuspend = row.pausesOnSuspend ? SuspendPolicy.pause.rawValue : nil
            if let cycle = row.cycle {
                self.cycle = cycle.phaseList
                phase = Int(cycle.phaseIndex) + 1
                rounds = Int(cycle.rounds)
                round = Int(cycle.round) + 1
            }
        }
    }

    /// Prints the lines; exit status 0, or 1 when the directory is damaged (what is intact is
    /// still printed, and the damage named on the first line) or cannot be read.
    public static func dump(_ directory: String, print: (String) -> Void, printError: (String) -> Void) -> Int32 {
        let inspection: StateRepair.Inspection
        do throws(StorageError) {
            inspection = try StateRepair.inspect(directory)
        } catch {
            printError("countdownd: cannot read \(directory): \(error); \(error.advice)")
            return 1
        }
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        func line(_ value: some Encodable) {
            // Ignored on purpose: these plain structs of strings and numbers always encode.
            if let data = try? encoder.encode(value) { print(String(decoding: data, as: UTF8.self)) }
        }
        let countdowns = inspection.intactCountdowns.sorted { ($0.owner, $0.name) < ($1.owner, $1.name) }
        line(Header(directory: directory, countdowns: countdowns.count, lastSeq: inspection.lastSequence, damaged: inspection.problems))
        for row in countdowns { line(Countdown(row)) }
        if !inspection.problems.isEmpty {
            printError("countdownd: \(directory) is damaged, so only what is intact was printed: \(inspection.problems.joined(separator: "; ")); see countdownd --check-state \(directory)")
            return 1
        }
        return 0
    }
}
