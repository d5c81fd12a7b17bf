/// A countdown as a client reads it from `OK`, `COUNTDOWN` and snapshot lines.
public struct CountdownInfo: Sendable, Equatable, Codable {
    /// The countdown's name.
    public var name: String
    /// Its state (`running`, `paused`, `done`, `cancelled`).
    public var state: CountdownState
    /// Time left, in milliseconds.
    public var remainingMilliseconds: Int64
    /// Total duration, in milliseconds.
    public var totalMilliseconds: Int64
    /// The wall-clock deadline in Unix milliseconds, while running.
    public var deadlineUnixMilliseconds: Int64?
    /// The uid of the client that started it, when the daemon reports it.
    public var owner: UInt32?
    /// How late its `done` was delivered, when it finished while the daemon was not running.
    public var lateMilliseconds: Int64?
    /// `true` for a countdown to a wall-clock time (`START … AT`), whose deadline follows the
    /// wall clock; absent for a plain duration. In JSON: `"at": true`.
    public var isPinned: Bool?
    /// `true` for a countdown that stands still while the machine sleeps (`START … ON-SUSPEND
    /// pause`); absent otherwise. In JSON: `"pause_on_suspend": true`.
    public var pausesOnSuspend: Bool?
    /// For a cycle of phases (`START … CYCLE`): where it is; absent otherwise. In JSON:
    /// `"phase"`, `"phases"`, `"label"`, `"round"`, `"rounds"`.
    public var cycle: CyclePosition?

    /// Creates a countdown description.
    public init(
        name: String, state: CountdownState, remainingMilliseconds: Int64, totalMilliseconds: Int64,
        deadlineUnixMilliseconds: Int64? = nil, owner: UInt32? = nil, lateMilliseconds: Int64? = nil,
        isPinned: Bool = false, pausesOnSuspend: Bool = false, cycle: CyclePosition? = nil
    ) {
        self.cycle = cycle
        self.isPinned = isPinned ? true : nil
        self.pausesOnSuspend = pausesOnSuspend ? true : nil
        self.name = name
        self.state = state
        self.remainingMilliseconds = remainingMilliseconds
        self.totalMilliseconds = totalMilliseconds
        self.deadlineUnixMilliseconds = deadlineUnixMilliseconds
        self.owner = owner
        self.lateMilliseconds = lateMilliseconds
    }

    enum CodingKeys: String, CodingKey {
        case name, state
        case remainingMilliseconds = "remaining_ms"
        case totalMilliseconds = "total_ms"
        case deadlineUnixMilliseconds = "deadline_unix_ms"
        case owner = "owner_uid"
        case lateMilliseconds = "late_ms"
        case isPinned = "at"
        case pausesOnSuspend = "pause_on_suspend"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        state = try container.decode(CountdownState.self, forKey: .state)
        remainingMilliseconds = try container.decode(Int64.self, forKey: .remainingMilliseconds)
        totalMilliseconds = try container.decode(Int64.self, forKey: .totalMilliseconds)
        deadlineUnixMilliseconds = try container.decodeIfPresent(Int64.self, forKey: .deadlineUnixMilliseconds)
        owner = try container.decodeIfPresent(UInt32.self, forKey: .owner)
        lateMilliseconds = try container.decodeIfPresent(Int64.self, forKey: .lateMilliseconds)
        isPinned = try container.decodeIfPresent(Bool.self, forKey: .isPinned)
        pausesOnSuspend = try container.decodeIfPresent(Bool.self, forKey: .pausesOnSuspend)
        cycle = try CyclePosition.decodeFlat(from: decoder)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(name, forKey: .name)
        try container.encode(state, forKey: .state)
        try container.encode(remainingMilliseconds, forKey: .remainingMilliseconds)
        try container.encode(totalMilliseconds, forKey: .totalMilliseconds)
        try container.encodeIfPresent(deadlineUnixMilliseconds, forKey: .deadlineUnixMilliseconds)
        try container.encodeIfPresent(owner, forKey: .owner)
        try container.encodeIfPresent(lateMilliseconds, forKey: .lateMilliseconds)
        try container.encodeIfPresent(isPinned, forKey: .isPinned)
        try container.encodeIfPresent(pausesOnSuspend, forKey: .pausesOnSuspend)
        try cycle?.encodeFlat(to: encoder)
    }
}

/// Where a cycle of phases is, as a client reads it from the `phase=`, `label=` and `round=`
/// fields at the end of a countdown or event line.
public struct CyclePosition: Sendable, Equatable {
    /// The running phase, from 1.
    public var phase: Int
    /// How many phases a round has.
    public var phases: Int
    /// The running phase's label, if it has one.
    public var label: String?
    /// The running round, from 1, when the cycle repeats.
    public var round: Int?
    /// How many rounds, when it repeats a number of times (`nil` with `round`: for ever).
    public var rounds: Int?

    /// Creates a position.
    public init(phase: Int, phases: Int, label: String? = nil, round: Int? = nil, rounds: Int? = nil) {
        self.phase = phase
        self.phases = phases
        self.label = label
        self.round = round
        self.rounds = rounds
    }

    /// Reads the `phase=<n>/<count>`, `label=<label>` and `round=<n>[/<rounds>]` fields among
    /// `fields`; `nil` without `phase=`.
    public static func parse(_ fields: some Sequence<String>) -> CyclePosition? {
        var position: CyclePosition?
        var label: String?
        var round: (Int, Int?)?
        for field in fields {
            if field.hasPrefix("phase=") {
                let parts = field.dropFirst(6).split(separator: "/")
                guard parts.count == 2, let phase = Int(parts[0]), let phases = Int(parts[1]) else { continue }
                position = CyclePosition(phase: phase, phases: phases)
            } else if field.hasPrefix("label=") {
                label = String(field.dropFirst(6))
            } else if field.hasPrefix("round=") {
                let parts = field.dropFirst(6).split(separator: "/")
                guard let first = parts.first, let current = Int(first) else { continue }
                round = (current, parts.count > 1 ? Int(parts[1]) : nil)
            }
        }
        position?.label = label
        position?.round = round?.0
        position?.rounds = round?.1
        return position
    }

    /// Decodes from the keys of the object it is part of (`nil` without `phase`).
    static func decodeFlat(from decoder: any Decoder) throws -> CyclePosition? {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard let phase = try container.decodeIfPresent(Int.self, forKey: .phase) else { return nil }
        return CyclePosition(
            phase: phase, phases: try container.decode(Int.self, forKey: .phases),
            label: try container.decodeIfPresent(String.self, forKey: .label),
            round: try container.decodeIfPresent(Int.self, forKey: .round),
            rounds: try container.decodeIfPresent(Int.self, forKey: .rounds)
        )
    }

    /// Encodes into the object it is part of: flat keys beside the countdown's own.
    func encodeFlat(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(phase, forKey: .phase)
        try container.encode(phases, forKey: .phases)
        try container.encodeIfPresent(label, forKey: .label)
        try container.encodeIfPresent(round, forKey: .round)
        try container.encodeIfPresent(rounds, forKey: .rounds)
    }

    enum CodingKeys: String, CodingKey {
        case phase, phases, label, round, rounds
    }
}

extension CountdownState: Codable {}
extension EventKind: Codable {}

extension EventInfo {
    /// The number a subscriber that has read this event resumes after (`SUBSCRIBE … SINCE`),
    /// given the one it would have resumed after before (`last`): a lifecycle event's own. A
    /// tick or a snapshot carries the number of the last change instead, which need not have
    /// reached this subscriber yet, so it moves nothing: resuming after it could skip that change.
    public func resumePoint(after last: UInt64?) -> UInt64? {
        kind.isLifecycle ? max(last ?? 0, sequence) : last
    }
}

/// An event as a client reads it from an `EVENT` line.
public struct EventInfo: Sendable, Equatable, Codable {
    /// The daemon's sequence number.
    public var sequence: UInt64
    /// What happened.
    public var kind: EventKind
    /// The countdown's name.
    public var name: String
    /// Time left, in milliseconds.
    public var remainingMilliseconds: Int64
    /// Total duration, in milliseconds.
    public var totalMilliseconds: Int64
    /// For `done` and `phase`: how late it was delivered, when the daemon was not running (or
    /// the machine was asleep) when it was due.
    public var lateMilliseconds: Int64?
    /// For `snapshot`: the countdown's state.
    public var state: CountdownState?
    /// For `snapshot` of a running countdown: its wall-clock deadline.
    public var deadlineUnixMilliseconds: Int64?
    /// For `snapshot`: `true` when it counts down to a wall-clock time.
    public var isPinned: Bool?
    /// For `snapshot`: `true` when it stands still while the machine sleeps; for `changed`,
    /// whether it now does (`false`: it now counts on).
    public var pausesOnSuspend: Bool?
    /// For `paused` and `resumed`: `true` when the machine's sleep caused it, not a request. In
    /// JSON: `"suspend": true`.
    public var causedBySuspend: Bool?
    /// For a cycle's countdown: where it is (for `phase`: the phase that began).
    public var cycle: CyclePosition?

    /// Creates an event description.
    public init(
        sequence: UInt64, kind: EventKind, name: String, remainingMilliseconds: Int64, totalMilliseconds: Int64,
        lateMilliseconds: Int64? = nil, state: CountdownState? = nil, deadlineUnixMilliseconds: Int64? = nil
    ) {
        self.sequence = sequence
        self.kind = kind
        self.name = name
        self.remainingMilliseconds = remainingMilliseconds
        self.totalMilliseconds = totalMilliseconds
        self.lateMilliseconds = lateMilliseconds
        self.state = state
        self.deadlineUnixMilliseconds = deadlineUnixMilliseconds
    }

    enum CodingKeys: String, CodingKey {
        case sequence = "seq"
        case kind, name, state
        case remainingMilliseconds = "remaining_ms"
        case totalMilliseconds = "total_ms"
        case lateMilliseconds = "late_ms"
        case deadlineUnixMilliseconds = "deadline_unix_ms"
        case isPinned = "at"
        case pausesOnSuspend = "pause_on_suspend"
        case causedBySuspend = "suspend"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        sequence = try container.decode(UInt64.self, forKey: .sequence)
        kind = try container.decode(EventKind.self, forKey: .kind)
        name = try container.decode(String.self, forKey: .name)
        remainingMilliseconds = try container.decode(Int64.self, forKey: .remainingMilliseconds)
        totalMilliseconds = try container.decode(Int64.self, forKey: .totalMilliseconds)
        lateMilliseconds = try container.decodeIfPresent(Int64.self, forKey: .lateMilliseconds)
        state = try container.decodeIfPresent(CountdownState.self, forKey: .state)
        deadlineUnixMilliseconds = try container.decodeIfPresent(Int64.self, forKey: .deadlineUnixMilliseconds)
        isPinned = try container.decodeIfPresent(Bool.self, forKey: .isPinned)
        pausesOnSuspend = try container.decodeIfPresent(Bool.self, forKey: .pausesOnSuspend)
        causedBySuspend = try container.decodeIfPresent(Bool.self, forKey: .causedBySuspend)
        cycle = try CyclePosition.decodeFlat(from: decoder)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(sequence, forKey: .sequence)
        try container.encode(kind, forKey: .kind)
        try container.encode(name, forKey: .name)
        try container.encode(remainingMilliseconds, forKey: .remainingMilliseconds)
        try container.encode(totalMilliseconds, forKey: .totalMilliseconds)
        try container.encodeIfPresent(lateMilliseconds, forKey: .lateMilliseconds)
        try container.encodeIfPresent(state, forKey: .state)
        try container.encodeIfPresent(deadlineUnixMilliseconds, forKey: .deadlineUnixMilliseconds)
        try container.encodeIfPresent(isPinned, forKey: .isPinned)
        try container.encodeIfPresent(pausesOnSuspend, forKey: .pausesOnSuspend)
        try container.encodeIfPresent(causedBySuspend, forKey: .causedBySuspend)
        try cycle?.encodeFlat(to: encoder)
    }
}

/// One line from the server, classified. Unknown trailing fields are ignored, as the protocol asks.
public enum WireLine: Sendable, Equatable {
    /// `HELLO countdownd <protocol> [<daemon version>]`
    case hello(protocolVersion: Int, daemonVersion: String?)
    /// `OK <text>`
    case ok(String)
    /// `ERR <code> <message>`; `code` is `nil` for a code this client does not know.
    case error(code: ErrorCode?, rawCode: String, message: String)
    /// `COUNTDOWN <fields>`
    case countdown(CountdownInfo)
    /// `EVENT <fields>`
    case event(EventInfo)
    /// `SHUTDOWN <reason>`: the daemon is stopping and will close the connection.
    case shutdown(String)
    /// `STAT <key> <value>`: one line of a `STATS` reply.
    case stat(key: String, value: String)
    /// `RESYNC <seq>`: the daemon's copy was read afresh (cluster mode); forget what you knew of
    /// the countdowns you follow: snapshots of them follow, numbered `seq`.
    case resync(sequence: UInt64)
    /// A line this client cannot read.
    case unrecognized(String)

    /// Classifies one line (without its LF).
    public static func parse(_ line: String) -> WireLine {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard let head = fields.first else { return .unrecognized(line) }
        let rest = fields.dropFirst().map(String.init)
        switch head {
        case "OK":
            return .ok(rest.joined(separator: " "))
        case "ERR":
            guard let code = rest.first else { return .unrecognized(line) }
            return .error(code: ErrorCode(rawValue: code), rawCode: code, message: rest.dropFirst().joined(separator: " "))
        case "COUNTDOWN":
            return countdownInfo(rest).map(WireLine.countdown) ?? .unrecognized(line)
        case "EVENT":
            return eventInfo(rest).map(WireLine.event) ?? .unrecognized(line)
        case "HELLO":
            guard rest.count >= 2, rest[0] == "countdownd", let version = Int(rest[1]) else { return .unrecognized(line) }
            return .hello(protocolVersion: version, daemonVersion: rest.count > 2 ? rest[2] : nil)
        case "SHUTDOWN":
            return .shutdown(rest.joined(separator: " "))
        case "RESYNC":
            guard let sequence = rest.first.flatMap({ UInt64($0) }) else { return .unrecognized(line) }
            return .resync(sequence: sequence)
        case "STAT":
            guard let key = rest.first else { return .unrecognized(line) }
            return .stat(key: key, value: rest.dropFirst().joined(separator: " "))
        default:
            return .unrecognized(line)
        }
    }

    /// Reads `<name> <state> <remaining_ms> <total_ms> <deadline_unix_ms|-> [<owner_uid> [<late_ms>|-
    /// [at|pause-on-suspend]]]`, the fields of `OK` after a mutation and of `COUNTDOWN`.
    public static func countdownInfo(_ f: [String]) -> CountdownInfo? {
        guard f.count >= 5, let state = CountdownState(rawValue: f[1]),
              let remaining = Int64(f[2]), let total = Int64(f[3]) else { return nil }
        return CountdownInfo(
            name: f[0],
            state: state,
            remainingMilliseconds: remaining,
            totalMilliseconds: total,
            deadlineUnixMilliseconds: Int64(f[4]),
            owner: f.count > 5 ? UInt32(f[5]) : nil,
            lateMilliseconds: f.count > 6 ? Int64(f[6]) : nil,
            isPinned: f.count > 7 && f[7] == "at",
            pausesOnSuspend: f.count > 7 && f[7] == "pause-on-suspend",
            cycle: f.count > 8 ? CyclePosition.parse(f[8...]) : nil
        )
    }

    private static func eventInfo(_ f: [String]) -> EventInfo? {
        guard f.count >= 5, let sequence = UInt64(f[0]), let kind = EventKind(rawValue: f[1]),
              let remaining = Int64(f[3]), let total = Int64(f[4]) else { return nil }
        var event = EventInfo(
            sequence: sequence, kind: kind, name: f[2], remainingMilliseconds: remaining, totalMilliseconds: total
        )
        if kind == .snapshot {
            event.state = f.count > 5 ? CountdownState(rawValue: f[5]) : nil
            event.deadlineUnixMilliseconds = f.count > 6 ? Int64(f[6]) : nil
            event.isPinned = f.count > 8 && f[8] == "at" ? true : nil
            event.pausesOnSuspend = f.count > 8 && f[8] == "pause-on-suspend" ? true : nil
            event.cycle = f.count > 9 ? CyclePosition.parse(f[9...]) : nil
            return event
        } else if kind == .done || kind == .phase, f.count > 5 {
            event.lateMilliseconds = Int64(f[5])
        } else if kind == .paused || kind == .resumed {
            event.causedBySuspend = f.count > 5 && f[5] == "suspend" ? true : nil
        } else if kind == .changed, f.count > 5 {
            event.pausesOnSuspend = f[5] == "pause-on-suspend" ? true : f[5] == "count-on-suspend" ? false : nil
        }
        event.cycle = f.count > 6 ? CyclePosition.parse(f[6...]) : nil
        return event
    }
}
