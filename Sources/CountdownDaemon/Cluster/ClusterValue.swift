import CountdownCore
import FoundationEssentials

/// One countdown as cluster mode keeps it in etcd, under `<prefix><key>`: its state, with times
/// on the wall clock (each host times the deadline on its own clock, so hosts must be
/// NTP-synced), and the lifecycle event that made it so, which every host announces with the
/// change's etcd revision as its `seq`.
struct ClusterValue: Codable, Equatable {
    var version = 1
    var state: CountdownState
    var totalMilliseconds: Int64
    /// Running: the deadline.
    var deadlineUnixMilliseconds: Int64?
    /// Paused or cancelled: the time left.
    var remainingMilliseconds: Int64?
    /// Done or cancelled: when it finished (its retention runs from there).
    var finishedUnixMilliseconds: Int64?
    var owner: UInt32
    /// Started with `AT`: the deadline is that wall-clock time.
    var pinned: Bool?
    /// Done more than a second after its deadline: how late (the engine's rule).
    var lateMilliseconds: Int64?
    /// The lifecycle event this value announces.
    var event: EventKind
    var eventRemainingMilliseconds: Int64
    /// A `START … REPLACE` of a running or paused countdown: the time the replaced one had left.
    /// The value then announces its `cancelled` first, and takes two numbers (`announcements`).
    var replacedRemainingMilliseconds: Int64?
    /// Which host made the change, and its own count of changes: the operation id.
    var operation: String
    /// The writing host's wall clock when it sent the change. Informational, for an operator
    /// reading the key with `etcdctl`: clock skew is estimated from the hosts' heartbeats
    /// (`ClockHeartbeat`), never from this, since a change can reach a host long after it was
    /// written (history replayed after a restart, an outage's late commits).
    var writtenUnixMilliseconds: Int64?

    enum CodingKeys: String, CodingKey {
        case version = "v", state, totalMilliseconds = "total_ms", deadlineUnixMilliseconds = "deadline_unix_ms"
        case remainingMilliseconds = "remaining_ms", finishedUnixMilliseconds = "finished_unix_ms", owner, pinned, event
        case lateMilliseconds = "late_ms", replacedRemainingMilliseconds = "replaced_remaining_ms"
        case eventRemainingMilliseconds = "event_remaining_ms", operation = "op", writtenUnixMilliseconds = "written_unix_ms"
    }

    /// A value of these fields (`decode`).
    init(
        version: Int, state: CountdownState, totalMilliseconds: Int64, deadlineUnixMilliseconds: Int64?, remainingMilliseconds: Int64?,
        finishedUnixMilliseconds: Int64?, owner: UInt32, pinned: Bool?, lateMilliseconds: Int64?, event: EventKind,
        eventRemainingMilliseconds: Int64, replacedRemainingMilliseconds: Int64?, operation: String, writtenUnixMilliseconds: Int64?
    ) {
        self.version = version
        self.state = state
        self.totalMilliseconds = totalMilliseconds
        self.deadlineUnixMilliseconds = deadlineUnixMilliseconds
        self.remainingMilliseconds = remainingMilliseconds
        self.finishedUnixMilliseconds = finishedUnixMilliseconds
        self.owner = owner
        self.pinned = pinned
        self.lateMilliseconds = lateMilliseconds
        self.event = event
        self.eventRemainingMilliseconds = eventRemainingMilliseconds
        self.replacedRemainingMilliseconds = replacedRemainingMilliseconds
        self.operation = operation
        self.writtenUnixMilliseconds = writtenUnixMilliseconds
    }

    /// A value for `state`, announcing `event` (after a `cancelled` with `replacedRemaining` left).
    init(
        _ countdown: Countdown, event: EventKind, eventRemainingMilliseconds: Int64, replacedRemaining: Int64? = nil,
        operation: String, clock: WallClockMapping
    ) {
        replacedRemainingMilliseconds = replacedRemaining
        state = countdown.state
        totalMilliseconds = countdown.totalMilliseconds
        owner = countdown.owner
        (deadlineUnixMilliseconds, remainingMilliseconds, finishedUnixMilliseconds, pinned, lateMilliseconds) = (nil, nil, nil, nil, nil)
        switch countdown.status {
        case .running(let deadline, let pinnedTo):
            deadlineUnixMilliseconds = clock.unixMilliseconds(of: deadline)
            pinned = pinnedTo != nil ? true : nil
        case .paused(let remaining):
            remainingMilliseconds = remaining / 1_000_000
        case .done(let finishedAt, let late):
            finishedUnixMilliseconds = clock.unixMilliseconds(of: finishedAt)
            lateMilliseconds = late
        case .cancelled(let remaining, let finishedAt):
            remainingMilliseconds = remaining / 1_000_000
            finishedUnixMilliseconds = clock.unixMilliseconds(of: finishedAt)
        }
        self.event = event
        self.eventRemainingMilliseconds = eventRemainingMilliseconds
        self.operation = operation
        // When the mapping was taken: the batch's instant (informational, `writtenUnixMilliseconds`).
        writtenUnixMilliseconds = clock.unixMilliseconds
    }

    /// How many lifecycle events it announces, so how many numbers it takes: two for a replacement.
    var announcements: Int { replacedRemainingMilliseconds == nil ? 1 : 2 }

    /// The host that wrote it, the same across its restarts: the operation id up to its run
    /// (`<host>~<run>-<n>`), or up to its count for an id written before runs were part of it.
    var host: String {
        if let tilde = operation.lastIndex(of: "~") { return String(operation[..<tilde]) }
        guard let dash = operation.lastIndex(of: "-") else { return operation }
        return String(operation[..<dash])
    }

    /// The countdown `key` in this state, on this host's clock.
    func persisted(key: String, clock: WallClockMapping) -> Countdown {
        // Each state's fields are there as `init` writes them; one missing is taken as now, or 0.
        var finishedAt: Instant { clock.instant(ofUnixMilliseconds: finishedUnixMilliseconds ?? clock.unixMilliseconds) }
        let remaining = (remainingMilliseconds ?? 0) * 1_000_000
        let status: Countdown.Status
        switch state {
        case .running:
            let deadline = deadlineUnixMilliseconds ?? clock.unixMilliseconds
            status = .running(deadline: clock.instant(ofUnixMilliseconds: deadline), pinnedUnixMilliseconds: pinned == true ? deadline : nil)
        case .paused: status = .paused(remainingNanoseconds: remaining)
        case .done: status = .done(finishedAt: finishedAt, lateMilliseconds: lateMilliseconds)
        case .cancelled: status = .cancelled(remainingNanoseconds: remaining, finishedAt: finishedAt)
        }
        return Countdown(name: key, owner: owner, totalMilliseconds: totalMilliseconds, status: status)
    }

    /// The JSON stored in etcd, written by hand (`FlatJSONWriter`) with `CodingKeys`' names.
    /// `Codable`'s synthesized form is the reference the tests hold both directions to: the
    /// text differs only in escapes (`JSONEncoder` writes `/` as `\/`, this writer leaves it),
    /// and means the same to either reader.
    var encoded: [UInt8] {
        var writer = FlatJSONWriter()
        writer.member("v", Int64(version))
        writer.member("state", state.rawValue)
        writer.member("total_ms", totalMilliseconds)
        writer.member("deadline_unix_ms", deadlineUnixMilliseconds)
        writer.member("remaining_ms", remainingMilliseconds)
        writer.member("finished_unix_ms", finishedUnixMilliseconds)
        writer.member("owner", Int64(owner))
        writer.member("pinned", pinned)
        writer.member("late_ms", lateMilliseconds)
        writer.member("event", event.rawValue)
        writer.member("event_remaining_ms", eventRemainingMilliseconds)
        writer.member("replaced_remaining_ms", replacedRemainingMilliseconds)
        writer.member("op", operation)
        writer.member("written_unix_ms", writtenUnixMilliseconds)
        return writer.bytes
    }

    /// A stored value, or `nil` for one this version cannot read: read by hand (`JSONReader`),
    /// as `JSONDecoder` reads `Codable`'s form. Every member without `?` must be there, of its
    /// type (a `null` only for optional ones; an integer written as an integer, `60000`, not
    /// `6e4`, as every version writes it); members this version does not know, of any kind, are
    /// passed over; a name given twice counts its last value.
    static func decode(_ bytes: [UInt8]) -> ClusterValue? {
        guard case .object(let members)? = JSONReader.read(bytes[...]) else { return nil }
        var version: Int64?, state: CountdownState?, total: Int64?, owner: Int64?, event: EventKind?, eventRemaining: Int64?
        var operation: String?
        var deadline: Int64?, remaining: Int64?, finished: Int64?, late: Int64?, replaced: Int64?, written: Int64?
        var pinned: Bool?
        /// An optional integer: absent or `null` is `nil`; another kind makes the value unreadable.
        func optional(_ value: JSONValue) -> Int64?? {
            switch value {
            case .integer(let number): return .some(number)
            case .null: return .some(nil)
            default: return nil
            }
        }
        for member in members {
            let (name, value) = (member.name, member.value)
            switch (name, value) {
            case ("v", .integer(let number)): version = number
            case ("state", .string(let text)): guard let known = CountdownState(rawValue: text) else { return nil }; state = known
            case ("total_ms", .integer(let number)): total = number
            case ("owner", .integer(let number)): owner = number
            case ("event", .string(let text)): guard let known = EventKind(rawValue: text) else { return nil }; event = known
            case ("event_remaining_ms", .integer(let number)): eventRemaining = number
            case ("op", .string(let text)): operation = text
            case ("pinned", .boolean(let flag)): pinned = flag
            case ("pinned", .null): pinned = nil
            case ("deadline_unix_ms", _): guard let number = optional(value) else { return nil }; deadline = number
            case ("remaining_ms", _): guard let number = optional(value) else { return nil }; remaining = number
            case ("finished_unix_ms", _): guard let number = optional(value) else { return nil }; finished = number
            case ("late_ms", _): guard let number = optional(value) else { return nil }; late = number
            case ("replaced_remaining_ms", _): guard let number = optional(value) else { return nil }; replaced = number
            case ("written_unix_ms", _): guard let number = optional(value) else { return nil }; written = number
            case ("v", _), ("state", _), ("total_ms", _), ("owner", _), ("event", _), ("event_remaining_ms", _), ("op", _), ("pinned", _):
                return nil  // A known member of the wrong kind.
            default:
                continue  // A later version's.
            }
        }
        guard let version, let versionNumber = Int(exactly: version), let state, let total, let owner, let ownerID = UInt32(exactly: owner),
              let event, let eventRemaining, let operation else { return nil }
        return ClusterValue(
            version: versionNumber, state: state, totalMilliseconds: total, deadlineUnixMilliseconds: deadline, remainingMilliseconds: remaining,
            finishedUnixMilliseconds: finished, owner: ownerID, pinned: pinned, lateMilliseconds: late, event: event,
            eventRemainingMilliseconds: eventRemaining, replacedRemainingMilliseconds: replaced, operation: operation,
            writtenUnixMilliseconds: written
        )
    }
}
