/// One parsed client request of protocol v1.
public enum Request: Equatable, Sendable {
    /// `START <name> [<duration>] [REPLACE] [ON-SUSPEND pause|count]`; the duration defaults to
    /// 60 s. Without `ON-SUSPEND` (`nil`), a name started again keeps its setting; a new one
    /// counts on while the machine sleeps. With `CYCLE <phases> [REPEAT [<rounds>]]` in place of
    /// the duration, a cycle of phases (`cycle`; `milliseconds` is its first phase's).
    /// `milliseconds` is `nil` when none was given: 60 s, or a cycle started again runs its
    /// phases again.
    case start(name: String, milliseconds: Int64?, replace: Bool, onSuspend: SuspendPolicy? = nil, cycle: CountdownCycle? = nil)
    /// `START <name> AT <time> [REPLACE]`: until a wall-clock time (Unix ms), and pinned to it.
    case startAt(name: String, unixMilliseconds: Int64, replace: Bool)
    /// `STATUS <name>`
    case status(name: String)
    /// `LIST [STATE <state>[,<state>…]] [PREFIX <prefix>]`: no states means every state.
    case list(states: Set<CountdownState>, prefix: String)
    /// `CANCEL <name>`
    case cancel(name: String)
    /// `PAUSE <name>`
    case pause(name: String)
    /// `RESUME <name>`
    case resume(name: String)
    /// `EXTEND <name> <duration>`
    case extend(name: String, milliseconds: Int64)
    /// `REMOVE <name>`: forget a finished countdown now.
    case remove(name: String)
    /// `SKIP <name>`: end a cycle's running phase now and start the next.
    case skip(name: String)
    /// `SET <name> ON-SUSPEND pause|count`: change what a running or paused countdown does while
    /// the machine sleeps, without restarting it.
    case set(name: String, onSuspend: SuspendPolicy)
    /// `SUBSCRIBE [<name> … | PREFIX <prefix>] [EVENTS <kinds>] [SINCE <seq>]`; no names means
    /// every countdown, present and future; a prefix, every countdown whose name starts with it,
    /// present and future; no `EVENTS` means every kind.
    case subscribe(names: [String], prefix: String? = nil, kinds: EventKindSet, since: UInt64?)
    /// `UNSUBSCRIBE`
    case unsubscribe
    /// `PING`
    case ping
    /// `STATS`: counts, event rates, lateness, storage.
    case stats
    /// `QUIT`
    case quit

    /// Whether the request changes countdowns, and so must be durable before its reply is sent.
    public var isMutation: Bool {
        switch self {
        case .start, .startAt, .cancel, .pause, .resume, .extend, .remove, .skip, .set: return true
        case .status, .list, .subscribe, .unsubscribe, .ping, .stats, .quit: return false
        }
    }

    /// The countdown a change changes, as the client wrote it (`nil` for anything else).
    public var changedName: String? {
        switch self {
        case .start(let name, _, _, _, _), .startAt(let name, _, _), .cancel(let name), .pause(let name), .resume(let name),
             .extend(let name, _), .remove(let name), .skip(let name), .set(let name, _):
            return name
        case .status, .list, .subscribe, .unsubscribe, .ping, .stats, .quit: return nil
        }
    }
}

/// Parses request lines. Pure and allocation-light: fields are byte ranges of the line.
///
/// Fields are separated by spaces (runs of spaces are tolerated). Verbs and the `REPLACE` keyword
/// are case-insensitive. Every grammar element is ASCII, so any other byte (invalid UTF-8, NUL, a
/// control character) fails the field it appears in, with that field's error code.
public enum RequestParser {
    /// The verbs, for `unknown-command` messages and completion.
    public static let verbs = [
        "START", "STATUS", "LIST", "CANCEL", "PAUSE", "RESUME", "EXTEND", "REMOVE", "SKIP", "SET", "SUBSCRIBE", "UNSUBSCRIBE",
        "PING", "STATS", "QUIT",
    ]

    /// Parses one line, without its line terminator (a trailing CR is ignored).
    ///
    /// The daemon's entry point: a concrete type, so the generic parser below is specialized
    /// inside this module. Called across modules, the generic version would look up type metadata
    /// for every field of every request.
    /// - Returns: the request, or `nil` for a blank line, which is not a request and gets no reply.
    /// - Throws: `ProtocolError` with the code the protocol fixes for the problem.
    public static func parse(_ line: ArraySlice<UInt8>) throws(ProtocolError) -> Request? {
        try parse(bytes: line)
    }

    /// Parses one line held in any byte collection; see `parse(_:)`.
    /// - Returns: the request, or `nil` for a blank line.
    /// - Throws: `ProtocolError` with the code the protocol fixes for the problem.
    public static func parse<Bytes: RandomAccessCollection<UInt8>>(_ line: Bytes) throws(ProtocolError) -> Request? {
        try parse(bytes: line)
    }

    private static func parse<Bytes: RandomAccessCollection<UInt8>>(bytes line: Bytes) throws(ProtocolError) -> Request? {
        var fields: [Bytes.SubSequence] = []
        var index = line.startIndex
        var end = line.endIndex
        if end != index, line[line.index(before: end)] == UInt8(ascii: "\r") {
            end = line.index(before: end)
        }
        while index != end {
            if line[index] == UInt8(ascii: " ") {
                index = line.index(after: index)
                continue
            }
            let fieldStart = index
            while index != end, line[index] != UInt8(ascii: " ") {
                index = line.index(after: index)
            }
            fields.append(line[fieldStart..<index])
        }
        guard let verb = fields.first else {
            return nil
        }
        let arguments = fields.dropFirst()

        if keyword(verb, is: "START") {
            guard (1...8).contains(arguments.count) else {
                throw usage("START <name> [<duration> | AT <time> | CYCLE <phases> [REPEAT [<rounds>]]] [REPLACE] [ON-SUSPEND pause|count]", got: arguments.count)
            }
            let name = try CountdownAddress.validate(bytes: arguments[arguments.startIndex])
            let rest = Array(arguments.dropFirst())
            if let first = rest.first, keyword(first, is: "AT") {
                guard rest.count >= 2 else {
                    throw ProtocolError(.badRequest, "AT needs a time: \(WallClockTime.acceptedForms); usage: START <name> AT <time> [REPLACE]")
                }
                let time = try WallClockTime.parse(bytes: rest[1])
                if rest.dropFirst(2).contains(where: { keyword($0, is: "ON-SUSPEND") }) {
                    throw ProtocolError(
                        .badRequest,
                        "ON-SUSPEND does not go with AT: a countdown to a time of day always counts on, since that time comes whether the machine sleeps or not; give a duration to use ON-SUSPEND pause"
                    )
                }
                guard rest.count == 2 || (rest.count == 3 && keyword(rest[2], is: "REPLACE")) else {
                    throw ProtocolError(
                        .badRequest,
                        "unexpected '\(ProtocolText.sanitized(rest[rest.count - 1]))' after the time; the only option is REPLACE"
                    )
                }
                return .startAt(name: name, unixMilliseconds: time, replace: rest.count == 3)
            }
            var milliseconds: Int64?
            var replace = false
            var onSuspend: SuspendPolicy?
            var cycle: CountdownCycle?
            var fields = rest[...]
            var offset = 0
            while let field = fields.popFirst() {
                defer { offset += 1 }
                if offset == 0 && keyword(field, is: "CYCLE") {
                    guard let phases = fields.popFirst() else {
                        throw ProtocolError(.badRequest, "CYCLE needs its phases: <duration>[:<label>] separated by commas, such as 25m:work,5m:break")
                    }
                    var parsed = CountdownCycle(phases: try CountdownCycle.parsePhases(bytes: phases))
                    if let word = fields.first, keyword(word, is: "REPEAT") {
                        fields.removeFirst()
                        parsed.rounds = 0
                        if let count = fields.first, let first = count.first, first >= UInt8(ascii: "0") && first <= UInt8(ascii: "9") {
                            fields.removeFirst()
                            guard count.count <= 7, count.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                                  let rounds = UInt32(String(decoding: count, as: UTF8.self)), rounds >= 1, rounds <= CountdownCycle.maximumRounds
                            else {
                                throw ProtocolError(
                                    .badRequest,
                                    "REPEAT takes a number of rounds from 1 to \(CountdownCycle.maximumRounds), not '\(ProtocolText.sanitized(count))'; without one the cycle repeats until it is cancelled"
                                )
                            }
                            parsed.rounds = rounds
                        }
                    }
                    milliseconds = parsed.phases[0].milliseconds
                    cycle = parsed
                } else if keyword(field, is: "REPLACE") && !replace {
                    replace = true
                } else if keyword(field, is: "ON-SUSPEND") && onSuspend == nil {
                    guard let word = fields.popFirst() else {
                        throw ProtocolError(.badRequest, "ON-SUSPEND needs a policy: pause (stand still while the machine sleeps) or count (count on through it)")
                    }
                    guard let policy = SuspendPolicy(rawValue: String(decoding: word, as: UTF8.self).lowercased()) else {
                        throw ProtocolError(
                            .badRequest,
                            "unknown ON-SUSPEND policy '\(ProtocolText.sanitized(word))'; it is pause (stand still while the machine sleeps) or count (count on through it)"
                        )
                    }
                    onSuspend = policy
                } else if offset == 0 {
                    milliseconds = try CountdownDuration.parse(bytes: field)
                } else {
                    throw ProtocolError(
                        .badRequest,
                        "unexpected '\(ProtocolText.sanitized(field))' after the duration; the options are REPLACE and ON-SUSPEND pause|count, once each (REPEAT follows CYCLE's phases)"
                    )
                }
            }
            return .start(name: name, milliseconds: milliseconds, replace: replace, onSuspend: onSuspend, cycle: cycle)
        }
        if keyword(verb, is: "STATUS") {
            return .status(name: try oneName(arguments, usage: "STATUS <name>"))
        }
        if keyword(verb, is: "LIST") {
            return try listRequest(Array(arguments))
        }
        if keyword(verb, is: "CANCEL") {
            return .cancel(name: try oneName(arguments, usage: "CANCEL <name>"))
        }
        if keyword(verb, is: "PAUSE") {
            return .pause(name: try oneName(arguments, usage: "PAUSE <name>"))
        }
        if keyword(verb, is: "SET") {
            let usage = "SET <name> ON-SUSPEND pause|count"
            guard arguments.count == 3 else { throw Self.usage(usage, got: arguments.count) }
            let name = try CountdownAddress.validate(bytes: arguments[arguments.startIndex])
            let setting = arguments[arguments.startIndex + 1], value = arguments[arguments.startIndex + 2]
            guard keyword(setting, is: "ON-SUSPEND") else {
                throw ProtocolError(.badRequest, "unknown setting '\(ProtocolText.sanitized(setting))'; SET changes ON-SUSPEND only; usage: \(usage)")
            }
            guard let policy = SuspendPolicy(rawValue: String(decoding: value, as: UTF8.self).lowercased()) else {
                throw ProtocolError(
                    .badRequest,
                    "unknown ON-SUSPEND policy '\(ProtocolText.sanitized(value))'; it is pause (stand still while the machine sleeps) or count (count on through it)"
                )
            }
            return .set(name: name, onSuspend: policy)
        }
        if keyword(verb, is: "SKIP") {
            return .skip(name: try oneName(arguments, usage: "SKIP <name>"))
        }
        if keyword(verb, is: "REMOVE") {
            return .remove(name: try oneName(arguments, usage: "REMOVE <name>"))
        }
        if keyword(verb, is: "STATS") {
            try noArguments(arguments, usage: "STATS")
            return .stats
        }
        if keyword(verb, is: "RESUME") {
            return .resume(name: try oneName(arguments, usage: "RESUME <name>"))
        }
        if keyword(verb, is: "EXTEND") {
            guard arguments.count == 2 else {
                throw usage("EXTEND <name> <duration>", got: arguments.count)
            }
            let name = try CountdownAddress.validate(bytes: arguments[arguments.startIndex])
            let milliseconds = try CountdownDuration.parse(bytes: arguments[arguments.index(after: arguments.startIndex)])
            return .extend(name: name, milliseconds: milliseconds)
        }
        if keyword(verb, is: "SUBSCRIBE") {
            // `SINCE <seq>` at the end asks for a replay of what happened after `seq`.
            var fields = Array(arguments)
            var since: UInt64?
            if fields.count >= 2, keyword(fields[fields.count - 2], is: "SINCE") {
                guard let sequence = Self.sequenceNumber(fields[fields.count - 1]) else {
                    throw ProtocolError(
                        .badRequest,
                        "SINCE takes an event number (the seq of the last event you saw, 0 for everything kept); usage: \(subscribeUsage)"
                    )
                }
                since = sequence
                fields.removeLast(2)
            }
            // `EVENTS <kinds>` just before (a name spelled EVENTS is the keyword there).
            var kinds = EventKindSet.all
            if fields.count >= 2, keyword(fields[fields.count - 2], is: "EVENTS") {
                kinds = try EventKindSet.parse(bytes: fields[fields.count - 1])
                fields.removeLast(2)
            } else if let last = fields.last, keyword(last, is: "EVENTS") {
                throw ProtocolError(.badRequest, "EVENTS needs kinds, such as lifecycle or done,cancelled; usage: \(subscribeUsage)")
            }
            // `PREFIX <prefix>` first (a name spelled PREFIX may follow other names).
            if let first = fields.first, keyword(first, is: "PREFIX") {
                guard fields.count == 2 else {
                    throw ProtocolError(.badRequest, "PREFIX takes one prefix, such as otp:, and no names; usage: \(subscribeUsage)")
                }
                return .subscribe(names: [], prefix: try CountdownAddress.validatePrefix(bytes: fields[1]), kinds: kinds, since: since)
            }
            var names: [String] = []
            names.reserveCapacity(fields.count)
            for field in fields {
                names.append(try CountdownAddress.validate(bytes: field))
            }
            return .subscribe(names: names, kinds: kinds, since: since)
        }
        if keyword(verb, is: "UNSUBSCRIBE") {
            try noArguments(arguments, usage: "UNSUBSCRIBE")
            return .unsubscribe
        }
        if keyword(verb, is: "PING") {
            try noArguments(arguments, usage: "PING")
            return .ping
        }
        if keyword(verb, is: "QUIT") {
            try noArguments(arguments, usage: "QUIT")
            return .quit
        }
        throw ProtocolError(
            .unknownCommand,
            "unknown command '\(ProtocolText.sanitized(verb))'; known: \(verbs.joined(separator: " "))"
        )
    }

    static let subscribeUsage = "SUBSCRIBE [<name> ... | PREFIX <prefix>] [EVENTS <kind>[,<kind>...]] [SINCE <seq>]"
    static let listUsage = "LIST [STATE <state>[,<state>...]] [PREFIX <prefix>]"

    /// `LIST`'s options, in any order, each at most once.
    private static func listRequest<Field: Collection<UInt8>>(_ arguments: [Field]) throws(ProtocolError) -> Request {
        var states: Set<CountdownState>?
        var prefix: String?
        var index = 0
        while index < arguments.count {
            let option = arguments[index]
            guard index + 1 < arguments.count else {
                throw ProtocolError(.badRequest, "'\(ProtocolText.sanitized(option))' needs a value; usage: \(listUsage)")
            }
            let value = arguments[index + 1]
            if keyword(option, is: "STATE"), states == nil {
                var chosen = Set<CountdownState>()
                for word in value.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
                    guard let state = CountdownState(rawValue: String(decoding: word, as: UTF8.self).lowercased()) else {
                        throw ProtocolError(
                            .badRequest,
                            "unknown state '\(ProtocolText.sanitized(word))'; STATE takes a comma-separated list of: \(CountdownState.allCases.map(\.rawValue).joined(separator: " "))"
                        )
                    }
                    chosen.insert(state)
                }
                states = chosen
            } else if keyword(option, is: "PREFIX"), prefix == nil {
                prefix = try CountdownAddress.validatePrefix(bytes: value)
            } else {
                throw ProtocolError(.badRequest, "unexpected '\(ProtocolText.sanitized(option))'; usage: \(listUsage)")
            }
            index += 2
        }
        return .list(states: states ?? [], prefix: prefix ?? "")
    }

    /// Whether `field` spells `upperCaseKeyword`, ignoring ASCII case.
    static func keyword<Field: Collection<UInt8>>(_ field: Field, is upperCaseKeyword: StaticString) -> Bool {
        guard field.count == upperCaseKeyword.utf8CodeUnitCount else { return false }
        var expected = upperCaseKeyword.utf8Start
        for byte in field {
            // Clearing bit 5 upper-cases ASCII letters; the keywords are letters and `-`, which it leaves alone.
            let folded = (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) ? byte & 0xDF : byte
            guard folded == expected.pointee else { return false }
            expected += 1
        }
        return true
    }

    /// A decimal event number (no sign, no spaces), or `nil`.
    private static func sequenceNumber<Field: Collection<UInt8>>(_ field: Field) -> UInt64? {
        guard !field.isEmpty, field.count <= 20 else { return nil }
        var value: UInt64 = 0
        for byte in field {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
            guard !overflow1, !overflow2 else { return nil }
            value = sum
        }
        return value
    }

    private static func oneName<Fields: Collection>(_ arguments: Fields, usage text: String) throws(ProtocolError) -> String
    where Fields.Element: Collection<UInt8> {
        guard arguments.count == 1, let field = arguments.first else {
            throw usage(text, got: arguments.count)
        }
        return try CountdownAddress.validate(bytes: field)
    }

    private static func noArguments<Fields: Collection>(_ arguments: Fields, usage text: String) throws(ProtocolError) {
        guard arguments.isEmpty else {
            throw usage(text, got: arguments.count)
        }
    }

    private static func usage(_ text: String, got count: Int) -> ProtocolError {
        ProtocolError(.badRequest, "wrong number of arguments (\(count)); usage: \(text)")
    }
}
