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

/// What a client is told about one countdown (the fields of `OK`, `COUNTDOWN` and snapshot
/// lines): the countdown, and the time it had left at the instant it was taken.
public struct CountdownSnapshot: Sendable, Equatable {
    /// The countdown.
    public var countdown: Countdown
    /// Time left, in milliseconds, rounded up, at the instant it was taken (0 once done).
    public var remainingMilliseconds: Int64

    /// `countdown` as of `now`.
    public init(_ countdown: Countdown, at now: Instant) {
        self.init(countdown, remainingMilliseconds: countdown.remainingMilliseconds(at: now))
    }

    /// `countdown`, with `remainingMilliseconds` left.
    public init(_ countdown: Countdown, remainingMilliseconds: Int64) {
        self.countdown = countdown
        self.remainingMilliseconds = remainingMilliseconds
    }

    /// The countdown's name.
    public var name: String {
        get { countdown.name }
        set { countdown.name = newValue }
    }
    /// Its state.
    public var state: CountdownState { countdown.state }
    /// Total duration, in milliseconds, including any `EXTEND`.
    public var totalMilliseconds: Int64 { countdown.totalMilliseconds }
    /// The deadline on the daemon's monotonic clock, while running; `nil` otherwise.
    public var deadline: Instant? { countdown.deadline }
    /// The uid of the client that started it.
    public var owner: UInt32 { countdown.owner }
    /// For a countdown that finished while the daemon was not running: how late its `done` came.
    public var lateMilliseconds: Int64? { countdown.lateMilliseconds }
    /// For a running countdown to a wall-clock time: that time, in Unix milliseconds.
    public var pinnedUnixMilliseconds: Int64? { countdown.pinnedUnixMilliseconds }
    /// Whether it stands still while the machine sleeps (`START … ON-SUSPEND pause`).
    public var pausesOnSuspend: Bool { countdown.pausesOnSuspend }
    /// For a cycle of phases: its phases and the running one (the fields above are that phase's).
    public var cycle: CountdownCycle? {
        get { countdown.cycle }
        set { countdown.cycle = newValue }
    }
}

/// What a countdown does while the machine is suspended (`START … ON-SUSPEND <policy>`).
public enum SuspendPolicy: String, Sendable, CaseIterable, Equatable {
    /// It counts on: the time asleep is time passed (a cooldown, an egg). The default.
    case count
    /// It stands still: the time asleep is added to its deadline, as if it had been paused (a
    /// pomodoro, an exam timer), with a `paused` and a `resumed` event marked `suspend`.
    case pause
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
    /// A cycle's next phase began (the phase before it ended, or `SKIP`): `remaining_ms` is the
    /// new phase's duration, and the event names the phase (`CountdownEvent.cycle`).
    case phase
    /// A setting of a running or paused countdown changed (`SET … ON-SUSPEND`); it keeps its
    /// state and time. The event says the new setting (`CountdownEvent.suspendPolicy`).
    case changed

    /// Whether losing this event would lose a state change. Ticks are not: a newer tick supersedes
    /// an older one, so a slow subscriber may skip ticks but never lifecycle events.
    public var isLifecycle: Bool {
        self != .tick && self != .snapshot
    }
}

/// One event emitted by the engine.
public struct CountdownEvent: Sendable, Equatable {
    /// The daemon-wide sequence number: one more for each emitted event. A snapshot carries the
    /// number of the last emitted event instead, since it does not change anything. Root sees it.
    public var sequence: UInt64
    /// The same as the owner sees it, counting only the owner's own lifecycle events
    /// (`OwnerSequences`): what every user but root sees. For root's countdowns, and in cluster
    /// mode, the daemon-wide number.
    public var ownerSequence: UInt64
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
    /// A `paused` or `resumed` that the machine's sleep caused, not a request: the countdown
    /// pauses on suspend (`START … ON-SUSPEND pause`). On the wire as a last field, `suspend`.
    public var causedBySuspend = false
    /// Where the engine held the countdown when it emitted the event (-1: unknown): a hint that
    /// spares the daemon a name lookup (`CountdownEngine.persistentState(of:hint:)`). Not on the
    /// wire, not compared.
    public var slotHint: Int32 = -1
    /// For a cycle's countdown: its phases and the running one, as of the event (on the wire as
    /// `phase=<n>/<count>`, `label=` and `round=` fields).
    public var cycle: CountdownCycle?
    /// For a `changed`: what the countdown now does while the machine sleeps (on the wire as
    /// `pause-on-suspend` or `count-on-suspend`).
    public var suspendPolicy: SuspendPolicy?

    /// Creates an event.
    public init(
        sequence: UInt64,
        kind: EventKind,
        name: String,
        remainingMilliseconds: Int64,
        totalMilliseconds: Int64,
        lateMilliseconds: Int64? = nil,
        owner: UInt32 = 0,
        ownerSequence: UInt64? = nil
    ) {
        self.owner = owner
        self.sequence = sequence
        self.ownerSequence = ownerSequence ?? sequence
        self.kind = kind
        self.name = name
        self.remainingMilliseconds = remainingMilliseconds
        self.totalMilliseconds = totalMilliseconds
        self.lateMilliseconds = lateMilliseconds
    }

    /// The event's number as `viewer` sees it: root, the daemon-wide one; its owner, its own.
    /// (No other user ever receives it.)
    public func sequence(seenBy viewer: UInt32) -> UInt64 {
        viewer == 0 ? sequence : ownerSequence
    }
}

/// A set of event kinds: what a subscriber asked to receive (`SUBSCRIBE … EVENTS <kinds>`).
public struct EventKindSet: OptionSet, Sendable, Hashable {
    public let rawValue: UInt16

    /// Creates a set from its bits (one per `EventKind`: `init(_:)` says which).
    public init(rawValue: UInt16) {
        self.rawValue = rawValue
    }

    /// The set holding one kind. A switch, not a search of `allCases`: the fan-out asks for every
    /// event and subscriber (callgrind: 75 instructions an event that way).
    public init(_ kind: EventKind) {
        let bit: UInt16
        switch kind {
        case .started: bit = 0
        case .tick: bit = 1
        case .paused: bit = 2
        case .resumed: bit = 3
        case .extended: bit = 4
        case .done: bit = 5
        case .cancelled: bit = 6
        case .snapshot: bit = 7
        case .removed: bit = 8
        case .phase: bit = 9
        case .changed: bit = 10
        }
        rawValue = 1 << bit
    }

    /// Every kind: what a subscriber gets without `EVENTS`.
    public static let all = EventKindSet(EventKind.allCases.map { EventKindSet($0) })
    /// The changes: every kind but `tick` and `snapshot`.
    public static let lifecycle = EventKindSet(EventKind.allCases.filter(\.isLifecycle).map { EventKindSet($0) })

    /// Whether `kind` is in the set.
    public func includes(_ kind: EventKind) -> Bool {
        contains(EventKindSet(kind))
    }

    /// The spellings `parse` accepts, for messages and completion.
    public static let spellings = ["all", "lifecycle"] + EventKind.allCases.map(\.rawValue)

    /// Parses a comma-separated list of kinds and groups (`lifecycle`, `all`), case-insensitively:
    /// `done,cancelled`, `lifecycle,tick`.
    /// - Throws: `bad-request` naming the word it does not know and the ones it does.
    public static func parse<Bytes: Collection<UInt8>>(bytes: Bytes) throws(ProtocolError) -> EventKindSet {
        var kinds: EventKindSet = []
        for word in bytes.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
            let spelled = String(decoding: word, as: UTF8.self).lowercased()
            switch spelled {
            case "all": kinds.formUnion(.all)
            case "lifecycle": kinds.formUnion(.lifecycle)
            default:
                guard let kind = EventKind(rawValue: spelled) else {
                    throw ProtocolError(
                        .badRequest,
                        "unknown event kind '\(ProtocolText.sanitized(word))'; EVENTS takes a comma-separated list of: \(spellings.joined(separator: " "))"
                    )
                }
                kinds.insert(EventKindSet(kind))
            }
        }
        return kinds
    }

    /// The set in the words `parse` reads (`all`, `lifecycle`, or kinds), for replies.
    public var description: String {
        if self == .all { return "all" }
        var words: [String] = []
        var rest = self
        if rest.isSuperset(of: .lifecycle) {
            words.append("lifecycle")
            rest.subtract(.lifecycle)
        }
        words += EventKind.allCases.filter { rest.includes($0) }.map(\.rawValue)
        return words.joined(separator: ",")
    }
}

extension CountdownEvent {
    /// Equal in everything but `slotHint`, which is where the event came from, not what it says.
    public static func == (left: CountdownEvent, right: CountdownEvent) -> Bool {
        left.sequence == right.sequence && left.ownerSequence == right.ownerSequence && left.kind == right.kind && left.name == right.name
            && left.remainingMilliseconds == right.remainingMilliseconds && left.totalMilliseconds == right.totalMilliseconds
            && left.lateMilliseconds == right.lateMilliseconds && left.due == right.due && left.owner == right.owner
            && left.causedBySuspend == right.causedBySuspend && left.cycle == right.cycle && left.suspendPolicy == right.suspendPolicy
    }
}
