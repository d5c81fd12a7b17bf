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

/// An error the daemon reports to a client as `ERR <code> <message>`.
public struct ProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The machine-readable code.
    public var code: ErrorCode
    /// What went wrong and what to do, for a person.
    public var message: String

    /// Creates an error with a code and a human-readable message.
    public init(_ code: ErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String {
        "\(code.rawValue): \(message)"
    }
}
