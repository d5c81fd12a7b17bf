/// A countdown's durable state: what storage keeps so a restarted daemon can carry on.
///
/// Instants are on the engine's monotonic clock; the shell converts them to and from what it
/// stores (a wall-clock deadline, and the boot-clock one while the machine has not rebooted).
/// Ticks are derived, never stored.
public struct PersistedCountdown: Equatable, Sendable {
    /// The countdown's name.
    public var name: String
    /// Its state.
    public var state: CountdownState
    /// Total duration, in milliseconds.
    public var totalMilliseconds: Int64
    /// The deadline, while running.
    public var deadline: Instant?
    /// Time left, while paused (and at the moment it was cancelled).
    public var remainingNanoseconds: Int64
    /// When it finished, once done or cancelled.
    public var finishedAt: Instant?
    /// The uid of the client that started it.
    public var owner: UInt32
    /// How late its `done` was delivered, when the daemon was not running at the deadline.
    public var lateMilliseconds: Int64?
    /// For a countdown to a wall-clock time (`START … AT`): that time, in Unix milliseconds. Its
    /// deadline follows the wall clock when it is set; `nil` for a plain duration.
    public var pinnedUnixMilliseconds: Int64?
    /// Whether it stands still while the machine sleeps (`START … ON-SUSPEND pause`).
    public var pausesOnSuspend: Bool
    /// For a cycle of phases (`START … CYCLE`): its phases and the running one; the fields above
    /// are the running phase's. `nil` for a plain countdown.
    public var cycle: CountdownCycle?

    /// Creates a persisted countdown.
    public init(
        name: String, state: CountdownState, totalMilliseconds: Int64, deadline: Instant?,
        remainingNanoseconds: Int64, finishedAt: Instant?, owner: UInt32, lateMilliseconds: Int64? = nil,
        pinnedUnixMilliseconds: Int64? = nil, pausesOnSuspend: Bool = false, cycle: CountdownCycle? = nil
    ) {
        self.cycle = cycle
        self.pinnedUnixMilliseconds = pinnedUnixMilliseconds
        self.pausesOnSuspend = pausesOnSuspend
        self.name = name
        self.state = state
        self.totalMilliseconds = totalMilliseconds
        self.deadline = deadline
        self.remainingNanoseconds = remainingNanoseconds
        self.finishedAt = finishedAt
        self.owner = owner
        self.lateMilliseconds = lateMilliseconds
    }
}

extension CountdownEngine {
    /// The durable state of the countdown named `name`, or `nil` when there is none (it was never
    /// started, or it has been purged after its retention period).
    public func persistentState(of name: String) -> PersistedCountdown? {
        record(named: name).map(persisted)
    }

    /// The same, looking first in `slot` (an event's `slotHint`): no name is hashed when the
    /// countdown is still there, as it is right after the event.
    public func persistentState(of name: String, hint slot: Int32) -> PersistedCountdown? {
        if slot >= 0, Int(slot) < records.count, let record = records[Int(slot)], record.name == name {
            return persisted(record)
        }
        return persistentState(of: name)
    }
}

extension CountdownEngine.Record {
    /// What storage keeps of this record: only the fields valid in its state; `cycle` is the
    /// engine's (`CountdownEngine.persisted(_:)`).
    func persisted(cycle: CountdownCycle?) -> PersistedCountdown {
        PersistedCountdown(
            name: name,
            state: state,
            totalMilliseconds: totalMilliseconds,
            deadline: state == .running ? deadline : nil,
            remainingNanoseconds: state == .running || state == .done ? 0 : remainingNanoseconds,
            finishedAt: state.isActive ? nil : finishedAt,
            owner: owner,
            lateMilliseconds: lateMilliseconds,
            pinnedUnixMilliseconds: state == .running && pinned != CountdownEngine.notPinned ? pinned : nil,
            pausesOnSuspend: pausesOnSuspend,
            cycle: isCycle ? cycle : nil
        )
    }
}
