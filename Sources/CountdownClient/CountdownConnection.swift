import CLinuxShims
import CountdownCore
import Glibc

/// A blocking connection to countdownd, for `cdctl` and the tests.
///
/// Lines are read through an internal buffer. Events that arrive while a reply is awaited are kept
/// in order and handed out by `nextEvent`, so a subscribed connection can still make requests.
public final class CountdownConnection {
    /// The socket path connected to.
    public let path: String
    /// The greeting's protocol version.
    public private(set) var protocolVersion = 0
    /// The greeting's daemon version, when given.
    public private(set) var daemonVersion: String?

    private let descriptor: Int32
    private var buffer: [UInt8] = []
    private var start = 0
    private var pendingEvents: [EventInfo] = []
    private var sawShutdown: String?
    /// Why the connection may no longer carry requests: a reply was owed when reading it failed
    /// (a timeout, most often), so its late answer would be read as the next request's.
    private var brokenBecause: String?

    /// Connects and reads the greeting.
    /// - Parameters:
    ///   - path: the daemon's socket.
    ///   - timeout: seconds to wait for the greeting.
    /// - Throws: `ClientError` saying why, with advice for a person.
    public init(path: String, timeout: Double = 10, uid: UInt32 = getuid()) throws(ClientError) {
        self.path = path
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw .unreachable(path: path, reason: "the path is too long for a Unix socket", advice: "use a shorter --socket path")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        // Close-on-exec from the start: a process spawned meanwhile by another thread must not
        // inherit the connection.
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            throw .connectionLost("socket(): \(String(cString: strerror(errno)))")
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        if result != 0 {
            let code = errno
            countdownd_close(fd)
            if code == EACCES || code == EPERM {
                throw .permissionDenied(path: path)
            }
            throw .unreachable(path: path, reason: String(cString: strerror(code)), advice: SocketPath.startAdvice(uid: uid))
        }
        descriptor = fd
        guard let line = try readLine(timeout: timeout) else {
            throw .connectionLost("closed before greeting")
        }
        switch WireLine.parse(line) {
        case .hello(let version, let daemon):
            protocolVersion = version
            daemonVersion = daemon
        case .error(_, _, let message):
            throw .connectionLost(message)
        default:
            throw .protocolViolation("expected a HELLO greeting, got '\(line)'")
        }
    }

    deinit {
        countdownd_close(descriptor)
    }

    /// Connects to the first of `paths` that answers: a missing, refused or forbidden socket
    /// sends it to the next. With one path its own error is thrown; with several, one that
    /// names every path tried and why, with the fix.
    /// - Throws: `ClientError` saying why, with advice for a person.
    public static func connectFirst(of paths: [String], timeout: Double = 10, uid: UInt32 = getuid()) throws(ClientError) -> CountdownConnection {
        var attempts: [ConnectAttempt] = []
        var last: ClientError?
        for path in paths {
            do {
                return try CountdownConnection(path: path, timeout: timeout, uid: uid)
            } catch {
                switch error {
                case .unreachable(_, let reason, _):
                    attempts.append(ConnectAttempt(path: path, reason: reason, denied: false))
                case .permissionDenied:
                    attempts.append(ConnectAttempt(path: path, reason: "permission denied", denied: true))
                default:
                    throw error  // It answered, then failed: not a question of which socket.
                }
                last = error
            }
        }
        if paths.count == 1, let last { throw last }
        let advice: String
        if let denied = attempts.first(where: \.denied) {
            advice = "The system's daemon is there: \(SocketAccess.advice(for: denied.path)). Or pass --socket PATH."
        } else {
            advice = "Start your own with 'systemctl --user start countdownd.socket' (or run 'countdownd'), ask root to enable the system's ('systemctl enable --now countdownd.socket'), or pass --socket PATH."
        }
        throw .noDaemon(attempts: attempts, advice: advice)
    }

    /// Sends raw text (a line needs its own "\n").
    public func send(_ text: String) throws(ClientError) {
        try sendBytes(Array(text.utf8))
    }

    /// Sends raw bytes, as they are.
    public func sendBytes(_ bytes: [UInt8]) throws(ClientError) {
        if let brokenBecause {
            throw .connectionLost("this connection is closed: \(brokenBecause); connect again")
        }
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes { raw in
                // `bytes` is not empty inside this loop, so its buffer has a base address.
                Glibc.send(descriptor, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
            }
            if sent < 0 {
                if errno == EINTR { continue }
                throw .connectionLost(String(cString: strerror(errno)))
            }
            offset += sent
        }
    }

    /// Half-closes the connection: the daemon answers what was sent, then closes.
    public func finishSending() {
        // Ignored on purpose: it fails only on a connection already gone, which the next read
        // reports as its end.
        _ = shutdown(descriptor, Int32(SHUT_WR))
    }

    /// Reads one line (without its LF).
    /// - Parameter timeout: seconds to wait, or `nil` to wait as long as it takes.
    /// - Returns: the line, or `nil` when the daemon closed the connection.
    /// - Throws: `timedOut` when the time ran out.
    public func readLine(timeout: Double? = nil) throws(ClientError) -> String? {
        let deadline = timeout.map { monotonicSeconds() + $0 }
        while true {
            if let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) {
                var end = newline
                if end > start && buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
                let line = String(decoding: buffer[start..<end], as: UTF8.self)
                start = newline + 1
                if start == buffer.count {
                    buffer.removeAll(keepingCapacity: true)
                    start = 0
                }
                return line
            }
            var waitMs: Int32 = -1
            if let deadline {
                let left = deadline - monotonicSeconds()
                if left <= 0 { throw .timedOut("a line from countdownd") }
                waitMs = Int32(min(left * 1000 + 1, 2_000_000_000))
            }
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, waitMs)
            if ready < 0 {
                if errno == EINTR { continue }
                throw .connectionLost(String(cString: strerror(errno)))
            }
            if ready == 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                if errno == ECONNRESET { return nil }
                throw .connectionLost(String(cString: strerror(errno)))
            }
            if count == 0 {
                return nil
            }
            if start > 0 {
                buffer.removeSubrange(0..<start)
                start = 0
            }
            buffer.append(contentsOf: chunk[0..<count])
        }
    }

    /// Sends one request line and reads its whole reply block. Events read meanwhile are queued.
    /// - Throws: `ClientError` when the connection fails or the daemon says something unreadable.
    public func request(_ line: String, timeout: Double? = 30) throws(ClientError) -> Reply {
        try send(line + "\n")
        return try readReply(timeout: timeout)
    }

    /// Reads the next reply block (for pipelined requests sent with `send`). When it fails (a
    /// timeout, a lost connection), the reply is still owed: the connection is shut down and
    /// later requests on it fail, so that answer can never be read as another request's.
    public func readReply(timeout: Double? = 30) throws(ClientError) -> Reply {
        do {
            return try readWholeReply(timeout: timeout)
        } catch {
            if brokenBecause == nil {
                brokenBecause = "a reply was owed when reading it failed (\(error))"
                // Ignored on purpose: shutdown fails only on a socket the peer already ended,
                // and either way nothing more is read or written on it.
                _ = shutdown(descriptor, Int32(SHUT_RDWR))
            }
            throw error
        }
    }

    private func readWholeReply(timeout: Double?) throws(ClientError) -> Reply {
        if let brokenBecause {
            throw .connectionLost("this connection is closed: \(brokenBecause); connect again")
        }
        var countdowns: [CountdownInfo] = []
        var stats: [StatEntry] = []
        while true {
            guard let line = try readLine(timeout: timeout) else {
                throw .connectionLost(sawShutdown.map { "the daemon is stopping (\($0))" } ?? "the daemon closed the connection")
            }
            switch WireLine.parse(line) {
            case .countdown(let info):
                countdowns.append(info)
            case .stat(let key, let value):
                stats.append(StatEntry(key: key, value: value))
            case .ok(let text):
                return Reply(countdowns: countdowns, outcome: .ok(text), stats: stats)
            case .error(let code, let raw, let text):
                let (message, fields) = ProtocolError.splitFields(text)
                return Reply(countdowns: countdowns, outcome: .error(code: code, rawCode: raw, message: message), stats: stats, errorFields: fields)
            case .event(let event):
                pendingEvents.append(event)
            case .shutdown(let reason):
                sawShutdown = reason
            case .resync:
                resyncCount += 1
            case .hello, .unrecognized:
                continue  // Lines a newer daemon may add; the protocol says to ignore them.
            }
        }
    }

    /// The next event, from those queued during requests or from the socket.
    /// - Returns: the event, or `nil` when the daemon closed the connection.
    public func nextEvent(timeout: Double? = nil) throws(ClientError) -> EventInfo? {
        if !pendingEvents.isEmpty {
            return pendingEvents.removeFirst()
        }
        while let line = try readLine(timeout: timeout) {
            switch WireLine.parse(line) {
            case .event(let event):
                return event
            case .shutdown(let reason):
                sawShutdown = reason
            case .resync:
                resyncCount += 1
            default:
                continue
            }
        }
        return nil
    }

    /// How many `RESYNC` lines arrived: the daemon's copy was read afresh (cluster mode), and
    /// the snapshots after each say how the followed countdowns stand now.
    public private(set) var resyncCount = 0

    /// The reason the daemon gave when it announced it was stopping, if it did.
    public var shutdownReason: String? { sawShutdown }

    /// Whether requests may still be sent: false once reading a reply failed (a timeout, a lost
    /// connection), since that reply is still owed. Connect again then.
    public var isUsable: Bool { brokenBecause == nil }

    /// The raw descriptor, for callers that multiplex (the live `watch` display polls it).
    public var fileDescriptor: Int32 { descriptor }

    /// Whether lines or events are already buffered, so a poll on the descriptor is not needed.
    public var hasBufferedInput: Bool {
        !pendingEvents.isEmpty || buffer[start...].contains(UInt8(ascii: "\n"))
    }
}

/// Seconds on the monotonic clock, for timeouts and local interpolation.
public func monotonicSeconds() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}
