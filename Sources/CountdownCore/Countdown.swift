/// One countdown: the one value of its state that the engine hands out, storage keeps, the
/// cluster replica shares and replies are made from.
///
/// What each state holds is its `Status`'s payload, so a field that has no meaning in a state
/// (a paused countdown's deadline, a running one's finishing time) cannot be set. Instants are on
/// the engine's monotonic clock; the shell converts them to and from what it stores and shares
/// (a wall-clock deadline, and the boot-clock one while the machine has not rebooted). Ticks
/// are derived, never kept.
public struct Countdown: Equatable, Sendable {
    /// Where a countdown is in its life, with what that state holds.
    public enum Status: Equatable, Sendable {
        /// Counting down to `deadline`; to a wall-clock time (`START … AT`), that time in Unix
        /// milliseconds, which the deadline follows when the wall clock is set.
        case running(deadline: Instant, pinnedUnixMilliseconds: Int64?)
        /// Stopped with time left; `RESUME` continues it.
        case paused(remainingNanoseconds: Int64)
        /// Reached its deadline at `finishedAt` (its retention runs from there); `lateMilliseconds`
        /// when its `done` came more than a second after the deadline (the daemon was not running).
        case done(finishedAt: Instant, lateMilliseconds: Int64?)
        /// Stopped by `CANCEL` (or replaced) at `finishedAt`, with the time it had left.
        case cancelled(remainingNanoseconds: Int64, finishedAt: Instant)
    }

    /// The countdown's name (the daemon's key: its owner's namespace and the plain name).
    public var name: String
    /// The uid of the client that started it.
    public var owner: UInt32
    /// Total duration, in milliseconds, including any `EXTEND`.
    public var totalMilliseconds: Int64
    /// Whether it stands still while the machine sleeps (`START … ON-SUSPEND pause`).
    public var pausesOnSuspend: Bool
    /// For a cycle of phases (`START … CYCLE`): its phases and the running one; the other fields
    /// are the running phase's. `nil` for a plain countdown.
    public var cycle: CountdownCycle?
    /// Its state, and what that state holds.
    public var status: Status

    /// Creates a countdown.
    public init(
        name: String, owner: UInt32, totalMilliseconds: Int64, status: Status, pausesOnSuspend: Bool = false,
        cycle: CountdownCycle? = nil
    ) {
        self.name = name
        self.owner = owner
        self.totalMilliseconds = totalMilliseconds
        self.status = status
        self.pausesOnSuspend = pausesOnSuspend
        self.cycle = cycle
    }

    /// Its state, as on the wire.
    public var state: CountdownState {
        switch status {
        case .running: return .running
        case .paused: return .paused
        case .done: return .done
        case .cancelled: return .cancelled
        }
    }

    /// The deadline, while running.
    public var deadline: Instant? {
        if case .running(let deadline, _) = status { return deadline }
        return nil
    }

    /// Time left while paused, and when it was cancelled; 0 otherwise (a running countdown's is
    /// its deadline's business: `remainingMilliseconds(at:)`).
    public var remainingNanoseconds: Int64 {
        switch status {
        case .paused(let remaining), .cancelled(let remaining, _): return remaining
        case .running, .done: return 0
        }
    }

    /// When it finished, once done or cancelled.
    public var finishedAt: Instant? {
        switch status {
        case .done(let finishedAt, _), .cancelled(_, let finishedAt): return finishedAt
        case .running, .paused: return nil
        }
    }

    /// How late its `done` came, when the daemon was not running at the deadline.
    public var lateMilliseconds: Int64? {
        if case .done(_, let late) = status { return late }
        return nil
    }

    /// For a running countdown to a wall-clock time: that time, in Unix milliseconds.
    public var pinnedUnixMilliseconds: Int64? {
        if case .running(_, let pinned) = status { return pinned }
        return nil
    }

    /// Time left at `now`, in milliseconds, rounded up: to the deadline while running, what was
    /// left when paused or cancelled, 0 once done.
    public func remainingMilliseconds(at now: Instant) -> Int64 {
        switch status {
        case .running(let deadline, _): return deadline.nanoseconds(since: now).ceilingMillisecondsOfNanoseconds
        case .paused(let remaining), .cancelled(let remaining, _): return remaining.ceilingMillisecondsOfNanoseconds
        case .done: return 0
        }
    }
}

extension CountdownEngine {
    /// The durable state of the countdown named `name`, or `nil` when there is none (it was never
    /// started, or it has been purged after its retention period).
    public func persistentState(of name: String) -> Countdown? {
        record(named: name).map(persisted)
    }

    /// The same, looking first in `slot` (an event's `slotHint`): no name is hashed when the
    /// countdown is still there, as it is right after the event.
    public func persistentState(of name: String, hint slot: Int32) -> Countdown? {
        if slot >= 0, Int(slot) < records.count, let record = records[Int(slot)], record.name == name {
            return persisted(record)
        }
        return persistentState(of: name)
    }
}

extension CountdownEngine.Record {
    /// This record as the one value of a countdown (`Countdown`); `cycle` is the engine's
    /// (`CountdownEngine.persisted(_:)`).
    func persisted(cycle: CountdownCycle?) -> Countdown {
        let status: Countdown.Status
        switch state {
        case .running: status = .running(deadline: deadline, pinnedUnixMilliseconds: pinned == CountdownEngine.notPinned ? nil : pinned)
        case .paused: status = .paused(remainingNanoseconds: remainingNanoseconds)
        case .done: status = .done(finishedAt: finishedAt, lateMilliseconds: lateMilliseconds)
        case .cancelled: status = .cancelled(remainingNanoseconds: remainingNanoseconds, finishedAt: finishedAt)
        }
        return Countdown(
            name: name, owner: owner, totalMilliseconds: totalMilliseconds, status: status, pausesOnSuspend: pausesOnSuspend,
            cycle: isCycle ? cycle : nil
        )
    }
}
