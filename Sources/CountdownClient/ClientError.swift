import CountdownCore
import Glibc

/// Why talking to the daemon failed, worded so a person knows what to do.
public enum ClientError: Error, CustomStringConvertible, Equatable {
    /// Nothing listens at the socket path (missing file, or refused: a stale socket).
    case unreachable(path: String, reason: String, advice: String)
    /// The socket exists but this user may not connect to it.
    case permissionDenied(path: String)
    /// The daemon closed the connection or it failed mid-conversation.
    case connectionLost(String)
    /// The daemon said something this client cannot read.
    case protocolViolation(String)
    /// No answer within the allowed time.
    case timedOut(String)
    /// None of the sockets tried (the user's own daemon's, then the system's) could be used.
    case noDaemon(attempts: [ConnectAttempt], advice: String)

    public var description: String {
        switch self {
        case .unreachable(let path, let reason, let advice):
            return "cannot connect to countdownd at \(path): \(reason); is the daemon running? \(advice)"
        case .permissionDenied(let path):
            return "permission denied on \(path); \(SocketAccess.advice(for: path))"
        case .noDaemon(let attempts, let advice):
            let tried = attempts.map { "\($0.path) (\($0.reason))" }.joined(separator: ", then ")
            return "cannot reach countdownd: tried \(tried). \(advice)"
        case .connectionLost(let why):
            return "lost the connection to countdownd: \(why)"
        case .protocolViolation(let why):
            return "countdownd sent something unexpected: \(why)"
        case .timedOut(let what):
            return "timed out waiting for \(what)"
        }
    }
}

/// One socket a client tried, and why it could not be used.
public struct ConnectAttempt: Equatable, Sendable {
    /// The socket's path.
    public var path: String
    /// Why not, in a few words (`No such file or directory`, `permission denied`).
    public var reason: String
    /// Whether the socket was there and refused this user.
    public var denied: Bool

    /// Creates an attempt.
    public init(path: String, reason: String, denied: Bool) {
        self.path = path
        self.reason = reason
        self.denied = denied
    }
}

/// The daemon's final line for one request: its `OK` text or its `ERR`.
public enum ReplyOutcome: Equatable, Sendable {
    /// `OK <text>`
    case ok(String)
    /// `ERR <code> <message>`
    case error(code: ErrorCode?, rawCode: String, message: String)
}

/// A whole reply block: any `COUNTDOWN` lines, then the final line.
public struct Reply: Equatable, Sendable {
    /// The `COUNTDOWN` lines, in order.
    public var countdowns: [CountdownInfo]
    /// The final `OK` or `ERR`.
    public var outcome: ReplyOutcome
    /// The `STAT <key> <value>` lines of a `STATS` reply, in order.
    public var stats: [StatEntry] = []
    /// An `ERR`'s fields for programs (`remaining_ms` of a `busy` START); the message in
    /// `outcome` is without them.
    public var errorFields: [String: String] = [:]

    /// Creates a reply.
    public init(countdowns: [CountdownInfo], outcome: ReplyOutcome, stats: [StatEntry] = [], errorFields: [String: String] = [:]) {
        self.countdowns = countdowns
        self.outcome = outcome
        self.stats = stats
        self.errorFields = errorFields
    }

    /// For a mutation's `OK <countdown fields>`: the countdown it describes.
    public var countdown: CountdownInfo? {
        guard case .ok(let text) = outcome else { return nil }
        return WireLine.countdownInfo(text.split(separator: " ").map(String.init))
    }
}

/// One `STAT <key> <value>` line.
public struct StatEntry: Equatable, Sendable {
    /// A lower-case word with underscores.
    public var key: String
    /// The value, as sent (a number or a word).
    public var value: String

    /// Creates an entry.
    public init(key: String, value: String) {
        self.key = key
        self.value = value
    }
}
