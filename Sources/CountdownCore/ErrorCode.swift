/// The fixed error codes of protocol v1, as they appear on the wire after `ERR`.
public enum ErrorCode: String, Sendable, CaseIterable, Equatable {
    /// The request is malformed: wrong number of fields, a bad keyword.
    case badRequest = "bad-request"
    /// The verb is not one the daemon knows.
    case unknownCommand = "unknown-command"
    /// The countdown name breaks the naming rules.
    case badName = "bad-name"
    /// The duration is zero, negative, malformed or too long.
    case badDuration = "bad-duration"
    /// No countdown has that name.
    case notFound = "not-found"
    /// The countdown is running or paused and the request needs it finished (or in another state).
    case busy
    /// The requesting user does not own the countdown.
    case forbidden
    /// A configured limit would be exceeded.
    case limit
    /// The request line is longer than the protocol allows.
    case lineTooLong = "line-too-long"
    /// The connection fell too far behind and is being closed.
    case overflow
    /// The change cannot be stored right now (disk full, state directory gone or read-only, I/O
    /// error); nothing was changed. Reads and events go on.
    case unavailable
    /// `SUBSCRIBE … SINCE` asked for events older than the daemon keeps.
    case gone
}

/// An error the daemon reports to a client as `ERR <code> <message>[ <key>=<value>…]`.
public struct ProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A machine-readable detail, written after the message as `key=value`: `remaining_ms=58000`.
    public struct Field: Equatable, Sendable {
        /// Lower-case letters and `_`.
        public var key: String
        /// No spaces.
        public var value: String

        /// Creates a field.
        public init(_ key: String, _ value: String) {
            self.key = key
            self.value = value
        }

        /// `advice=<token>`: the message's last clause (after its last `; `) is this advice, in
        /// protocol terms; a client with commands of its own (cdctl) words it in those instead.
        public static func advice(_ advice: Advice) -> Field {
            Field("advice", advice.rawValue)
        }
    }

    /// What to do next, as the `advice` field names it (PROTOCOL.md, *Errors*).
    public enum Advice: String, Sendable, CaseIterable {
        /// A `START` on a running or paused name: wait for it, `CANCEL` it, or `START … REPLACE`.
        case waitCancelOrReplace = "wait-cancel-or-replace"
        /// No such countdown: `LIST` shows the existing ones.
        case list
        /// Already paused: `RESUME` it.
        case resume
        /// Already finished: `START` it again to reuse the name.
        case startAgain = "start-again"
        /// Still running or paused: `CANCEL` it first.
        case cancelFirst = "cancel-first"
        /// A limit of countdowns: `REMOVE` finished ones.
        case removeFinished = "remove-finished"
        /// A replay that cannot be had: `SUBSCRIBE` without `SINCE` for the current state.
        case subscribeWithoutSince = "subscribe-without-since"
        /// Too many names on one connection: `SUBSCRIBE` with no names follows all.
        case subscribeEverything = "subscribe-everything"
        /// A cluster host's copy trails etcd: ask again in a moment, or ask another host.
        case askAgain = "ask-again"
    }

    /// The machine-readable code.
    public var code: ErrorCode
    /// What went wrong and what to do, for a person.
    public var message: String
    /// Details for programs (`busy`: `remaining_ms` and `state`), after the message.
    public var fields: [Field]

    /// Creates an error with a code, a human-readable message, and details for programs.
    public init(_ code: ErrorCode, _ message: String, fields: [Field] = []) {
        self.code = code
        self.message = message
        self.fields = fields
    }

    public var description: String {
        "\(code.rawValue): \(message)"
    }

    /// Splits the text after an `ERR <code>` into the message and its fields: the trailing
    /// `key=value` words (a message never ends in one).
    public static func splitFields(_ text: String) -> (message: String, fields: [String: String]) {
        var words = text.split(separator: " ", omittingEmptySubsequences: false)
        var fields: [String: String] = [:]
        while let last = words.last, let equals = last.firstIndex(of: "="), equals != last.startIndex,
              last[..<equals].allSatisfy({ $0 == "_" || ("a"..."z").contains($0) }) {
            fields[String(last[..<equals])] = String(last[last.index(after: equals)...])
            words.removeLast()
        }
        return (words.joined(separator: " "), fields)
    }
}
