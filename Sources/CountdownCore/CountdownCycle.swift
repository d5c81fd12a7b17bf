/// A countdown of phases (`START <name> CYCLE 25m:work,5m:break … [REPEAT [<rounds>]]`), and
/// where it is in them: a pomodoro that runs work, break, work… by itself.
///
/// The engine keeps the phases; the countdown's own deadline, total and time left are those of
/// the running phase. At the end of a phase the next begins on that deadline (no drift across
/// phases), with a `phase` event; `done` comes once, after the last phase of the last round
/// (never, repeated for ever).
public struct CountdownCycle: Sendable, Equatable {
    /// One phase: how long, and what it is called (may be empty).
    public struct Phase: Sendable, Hashable {
        /// Its duration, in milliseconds (more than 0, at most 366 days).
        public var milliseconds: Int64
        /// Its label (`work`, `break`), or empty.
        public var label: String

        /// Creates a phase.
        public init(milliseconds: Int64, label: String = "") {
            self.milliseconds = milliseconds
            self.label = label
        }
    }

    /// The phases, in order (1 to `maximumPhases`).
    public var phases: [Phase]
    /// How many rounds of all the phases: 0 for ever (`REPEAT`), 1 without `REPEAT`.
    public var rounds: UInt32
    /// The running phase, from 0.
    public var phaseIndex: UInt16
    /// The running round, from 0.
    public var round: UInt32

    /// Creates a cycle at its first phase.
    public init(phases: [Phase], rounds: UInt32 = 1, phaseIndex: UInt16 = 0, round: UInt32 = 0) {
        self.phases = phases
        self.rounds = rounds
        self.phaseIndex = phaseIndex
        self.round = round
    }

    /// The most phases a cycle may have.
    public static let maximumPhases = 64
    /// The most rounds `REPEAT <rounds>` may ask for.
    public static let maximumRounds: UInt32 = 1_000_000
    /// The longest label.
    public static let maximumLabelLength = 32
    /// The shortest phase, 100 ms: a cycle that repeats fires at every phase for ever, and a
    /// phase shorter than that is no use to a person.
    public static let minimumPhaseMilliseconds: Int64 = 100

    /// The running phase.
    public var phase: Phase { phases[Int(phaseIndex)] }

    /// Whether the running phase is the last one: after it comes `done`.
    public var isLastPhase: Bool {
        Int(phaseIndex) == phases.count - 1 && rounds != 0 && round + 1 >= rounds
    }

    /// The cycle moved on to its next phase (the caller checks `isLastPhase` first).
    public var next: CountdownCycle {
        var next = self
        if Int(phaseIndex) + 1 < phases.count {
            next.phaseIndex += 1
        } else {
            next.phaseIndex = 0
            next.round &+= 1
        }
        return next
    }

    /// The duration of one whole round, in milliseconds.
    public var roundMilliseconds: Int64 { phases.reduce(0) { $0 + $1.milliseconds } }

    /// Whether every field is within its limits: what storage checks before it believes a
    /// stored cycle.
    public var isValid: Bool {
        (1...Self.maximumPhases).contains(phases.count) && Int(phaseIndex) < phases.count && rounds <= Self.maximumRounds
            && (rounds == 0 || round < rounds)
            && phases.allSatisfy { phase in
                phase.milliseconds >= Self.minimumPhaseMilliseconds && phase.milliseconds <= CountdownDuration.maximumMilliseconds
                    && phase.label.utf8.count <= Self.maximumLabelLength && phase.label.utf8.allSatisfy(Self.isAllowedInLabel)
            }
    }

    /// The bytes a label may hold.
    public static func isAllowedInLabel(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    /// The phases as `CYCLE` reads them: `25m:work,5m:break` (durations in their shortest form).
    public var phaseList: String {
        phases.map { phase in
            let duration = CountdownDuration.format(milliseconds: phase.milliseconds)
            return phase.label.isEmpty ? duration : "\(duration):\(phase.label)"
        }.joined(separator: ",")
    }

    /// The phases of a `CYCLE`: `<duration>[:<label>]`, comma-separated.
    /// - Throws: `bad-duration` for a duration, `bad-request` for anything else, naming the phase.
    public static func parsePhases<Bytes: Collection<UInt8>>(bytes: Bytes) throws(ProtocolError) -> [Phase] {
        var phases: [Phase] = []
        for (index, part) in bytes.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false).enumerated() {
            guard phases.count < maximumPhases else {
                throw ProtocolError(.badRequest, "a cycle has at most \(maximumPhases) phases; this one has more")
            }
            let pieces = part.split(separator: UInt8(ascii: ":"), maxSplits: 1, omittingEmptySubsequences: false)
            guard let durationBytes = pieces.first, !durationBytes.isEmpty else {
                throw ProtocolError(
                    .badRequest,
                    "phase \(index + 1) of the cycle is empty; CYCLE takes <duration>[:<label>] phases separated by commas, such as 25m:work,5m:break"
                )
            }
            let milliseconds: Int64
            do throws(ProtocolError) {
                milliseconds = try CountdownDuration.parse(bytes: durationBytes)
            } catch {
                throw ProtocolError(.badDuration, "phase \(index + 1) of the cycle: \(error.message)")
            }
            guard milliseconds >= minimumPhaseMilliseconds else {
                throw ProtocolError(
                    .badDuration,
                    "phase \(index + 1) of the cycle lasts \(milliseconds) ms; a phase lasts at least \(minimumPhaseMilliseconds) ms"
                )
            }
            let labelBytes = pieces.count > 1 ? pieces[1] : part[part.endIndex...]
            guard labelBytes.count <= maximumLabelLength, labelBytes.allSatisfy(isAllowedInLabel) else {
                throw ProtocolError(
                    .badRequest,
                    "phase \(index + 1)'s label '\(ProtocolText.sanitized(labelBytes))' is not a label: one is at most \(maximumLabelLength) characters of A-Z a-z 0-9 . _ -"
                )
            }
            phases.append(Phase(milliseconds: milliseconds, label: String(decoding: labelBytes, as: UTF8.self)))
        }
        return phases
    }
}
