/// The states of a countdown, as they appear on the wire.
public enum CountdownState: String, Sendable, CaseIterable, Equatable {
    /// Counting down towards its deadline.
    case running
    /// Stopped with some time left; `RESUME` continues it.
    case paused
    /// Reached its deadline.
    case done
    /// Stopped by `CANCEL` (or replaced by `START … REPLACE`).
    case cancelled

    /// Whether the countdown is still counting or could count again without a new `START`.
    /// A `START` on an active name answers `busy`.
    public var isActive: Bool {
        self == .running || self == .paused
    }
}

/// What a client is told about one countdown: the fields of `OK`, `COUNTDOWN` and snapshot lines.
public struct CountdownSnapshot: Sendable, Equatable {
    /// The countdown's name.
    public var name: String
    /// Its state.
    public var state: CountdownState
    /// Time left, in milliseconds, rounded up (0 once finished).
    public var remainingMilliseconds: Int64
    /// Total duration, in milliseconds, including any `EXTEND`.
    public var totalMilliseconds: Int64
    /// The deadline on the daemon's monotonic clock, while running; `nil` otherwise.
    public var deadline: Instant?
    /// The uid of the client that started it.
    public var owner: UInt32
    /// For a countdown that finished while the daemon was not running: how late its `done` came.
    public var lateMilliseconds: Int64?
    /// For a running countdown to a wall-clock time: that time, in Unix milliseconds.
    public var pinnedUnixMilliseconds: Int64?

    /// Creates a snapshot.
    public init(
        name: String,
        state: CountdownState,
        remainingMilliseconds: Int64,
        totalMilliseconds: Int64,
        deadline: Instant?,
        owner: UInt32,
        lateMilliseconds: Int64? = nil,
        pinnedUnixMilliseconds: Int64? = nil
    ) {
        self.pinnedUnixMilliseconds = pinnedUnixMilliseconds
        self.name = name
        self.state = state
        self.remainingMilliseconds = remainingMilliseconds
        self.totalMilliseconds = totalMilliseconds
        self.deadline = deadline
        self.owner = owner
        self.lateMilliseconds = lateMilliseconds
    }
}

/// The kinds of events a subscriber receives.
public enum EventKind: String, Sendable, CaseIterable, Equatable {
    /// A countdown was started (its `remaining_ms` is the full duration).
    case started
    /// One whole second of remaining time passed; `remaining_ms` is the exact multiple of 1000.
    case tick
    /// A countdown was paused.
    case paused
    /// A paused countdown was resumed.
    case resumed
    /// Time was added to a countdown.
    case extended
    /// A countdown reached its deadline; `remaining_ms` is 0.
    case done
    /// A countdown was cancelled or replaced.
    case cancelled
    /// Not a change: the current state of a countdown, sent to a new subscriber right after its `OK`.
    case snapshot
    /// A finished countdown was forgotten: by `REMOVE`, or at the end of its retention. Its name is
    /// free; a status bar following it blanks out.
    case removed

    /// Whether losing this event would lose a state change. Ticks are not: a newer tick supersedes
    /// an older one, so a slow subscriber may skip ticks but never lifecycle events.
    public var isLifecycle: Bool {
        self != .tick && self != .snapshot
    }
}

/// One event emitted by the engine.
public struct CountdownEvent: Sendable, Equatable {
    /// The daemon-wide sequence number: one more for each emitted event. A snapshot carries the
    /// number of the last emitted event instead, since it does not change anything.
    public var sequence: UInt64
    /// What happened.
    public var kind: EventKind
    /// The countdown's name.
    public var name: String
    /// Time left, in milliseconds: the nominal value for a tick, 0 for done.
    public var remainingMilliseconds: Int64
    /// The countdown's total duration, in milliseconds.
    public var totalMilliseconds: Int64
    /// For a `done` delivered after the deadline passed while the daemon was not running.
    public var lateMilliseconds: Int64?
    /// For a tick or a `done` that time caused: the instant it was due (`deadline - k s`), so the
    /// shell can measure how late it went out. Not on the wire.
    public var due: Instant?
    /// The uid whose namespace the countdown is in: who may see this event.
    public var owner: UInt32

    /// Creates an event.
    public init(
        sequence: UInt64,
        kind: EventKind,
        name: String,
        remainingMilliseconds: Int64,
        totalMilliseconds: Int64,
        lateMilliseconds: Int64? = nil,
        owner: UInt32 = 0
    ) {
        self.owner = owner
        self.sequence = sequence
        self.kind = kind
        self.name = name
        self.remainingMilliseconds = remainingMilliseconds
        self.totalMilliseconds = totalMilliseconds
        self.lateMilliseconds = lateMilliseconds
    }
}
