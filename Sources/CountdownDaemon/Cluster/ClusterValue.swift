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

    /// A value for `state`, announcing `event` (after a `cancelled` with `replacedRemaining` left).
    init(
        _ state: PersistedCountdown, event: EventKind, eventRemainingMilliseconds: Int64, replacedRemaining: Int64? = nil,
        operation: String, clock: WallClockMapping
    ) {
        replacedRemainingMilliseconds = replacedRemaining
        self.state = state.state
        totalMilliseconds = state.totalMilliseconds
        deadlineUnixMilliseconds = state.state == .running ? state.deadline.map { clock.unixMilliseconds(of: $0) } : nil
        remainingMilliseconds = state.state == .paused || state.state == .cancelled ? state.remainingNanoseconds / 1_000_000 : nil
        finishedUnixMilliseconds = state.state.isActive ? nil : state.finishedAt.map { clock.unixMilliseconds(of: $0) }
        owner = state.owner
        pinned = state.pinnedUnixMilliseconds != nil ? true : nil
        lateMilliseconds = state.state == .done ? state.lateMilliseconds : nil
        self.event = event
        self.eventRemainingMilliseconds = eventRemainingMilliseconds
        self.operation = operation
        writtenUnixMilliseconds = clock.unixMilliseconds(of: SystemClock.now())
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
    func persisted(key: String, clock: WallClockMapping) -> PersistedCountdown {
        let deadline = deadlineUnixMilliseconds.map { clock.instant(ofUnixMilliseconds: $0) }
        return PersistedCountdown(
            name: key, state: state, totalMilliseconds: totalMilliseconds, deadline: deadline,
            remainingNanoseconds: (remainingMilliseconds ?? 0) * 1_000_000,
            finishedAt: finishedUnixMilliseconds.map { clock.instant(ofUnixMilliseconds: $0) }, owner: owner,
            lateMilliseconds: state == .done ? lateMilliseconds : nil,
            pinnedUnixMilliseconds: pinned == true ? deadlineUnixMilliseconds : nil
        )
    }

    /// The JSON stored in etcd.
    var encoded: [UInt8] {
        // Encoding a struct of numbers and strings cannot fail.
        (try? Array(JSONEncoder().encode(self))) ?? []
    }

    /// A stored value, or `nil` for one this version cannot read.
    static func decode(_ bytes: [UInt8]) -> ClusterValue? {
        try? JSONDecoder().decode(ClusterValue.self, from: Data(bytes))
    }
}
