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
        for row in countdowns { line(row) }
        if !inspection.problems.isEmpty {
            printError("countdownd: \(directory) is damaged, so only what is intact was printed: \(inspection.problems.joined(separator: "; ")); see countdownd --check-state \(directory)")
            return 1
        }
        return 0
    }
}

extension StoredCountdown: Encodable {
    private enum DumpKey: String, CodingKey {
        case type, owner, name, state, totalMs, deadlineUnixMs, deadlineBootNs, remainingNs, finishedUnixMs, lateMs, pinnedUnixMs
        case onSuspend, cycle, phase, rounds, round
    }

    /// The row as `--dump-state` prints it (`StateDump`): its fields as stored, a paused one's
    /// time left, and a cycle's phases as `CYCLE` reads them (`25m:work,5m:break`) with where it is.
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: DumpKey.self)
        try container.encode("countdown", forKey: .type)
        try container.encode(owner, forKey: .owner)
        try container.encode(name, forKey: .name)
        try container.encode(state.rawValue, forKey: .state)
        try container.encode(totalMilliseconds, forKey: .totalMs)
        try container.encodeIfPresent(deadlineUnixMilliseconds, forKey: .deadlineUnixMs)
        try container.encodeIfPresent(deadlineBootNanoseconds, forKey: .deadlineBootNs)
        try container.encodeIfPresent(state == .paused ? remainingNanoseconds : nil, forKey: .remainingNs)
        try container.encodeIfPresent(finishedUnixMilliseconds, forKey: .finishedUnixMs)
        try container.encodeIfPresent(lateMilliseconds, forKey: .lateMs)
        try container.encodeIfPresent(pinnedUnixMilliseconds, forKey: .pinnedUnixMs)
        try container.encodeIfPresent(pausesOnSuspend ? SuspendPolicy.pause.rawValue : nil, forKey: .onSuspend)
        if let cycle {
            try container.encode(cycle.phaseList, forKey: .cycle)
            try container.encode(Int(cycle.phaseIndex) + 1, forKey: .phase)
            try container.encode(Int(cycle.rounds), forKey: .rounds)
            try container.encode(Int(cycle.round) + 1, forKey: .round)
        }
    }
}
