@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Foundation
import Glibc
import Testing

/// A client table and fan-out on a real listening socket and poller, with a minimal daemon-like
/// request server: record each framed line, answer nothing. Everything but the test's
/// client sockets is touched on `queue`. A poll thread runs for the life of the process, so the
/// harness is held by it (strongly) and `finish` closes everything it watches.
final class TableHarness: @unchecked Sendable, RequestServer {
    let queue = DispatchQueue(label: "client-table-test")
    let scratch = ScratchDirectory()
    let socketPath: String
    let poller: EventPoller
    let clients: ClientTable
    let fanOut: EventFanOut
    /// The table's delayed work; no timer runs it: a test calls `later.runDue` at the instant it
    /// chooses.
    let later: DelayedWork
    /// Complete request lines framed so far, by connection id (on the queue).
    var lines: [Int: [String]] = [:]
    var batchNumber = 1
    /// The batch in which each line was served, in order (on the queue).
    var servedIn: [(line: String, batch: Int, wasPutBack: Bool)] = []
    /// Lines answered `.notNow` the first time they come (as a request past its user's share).
    var waitOnce: Set<String> = []

    /// `socketMode` 0o666 (and a directory others may enter) lets another uid connect.
    init(socketMode: mode_t = 0o600, configure: (inout DaemonConfiguration) -> Void = { _ in }) throws {
        if socketMode != 0o600 { chmod(scratch.path, 0o755) }
        socketPath = scratch.path + "/d.sock"
        var configuration = DaemonConfiguration(socketPath: socketPath, stateDirectory: scratch.path + "/state")
        configure(&configuration)
        let logger = Logger(threshold: .error, environment: [:])
        poller = try EventPoller(queue: queue)
        later = DelayedWork(queue: queue)
        clients = ClientTable(queue: queue, later: later, logger: logger, configuration: configuration)
        fanOut = EventFanOut(queue: queue, clients: clients, configuration: configuration)
        let listener = try ListeningSocket.bind(path: socketPath, mode: socketMode)
        let limit = configuration.maximumConnections
        let started: Bool = queue.sync {
            (try? clients.open(listener: listener, connectionLimit: limit, poller: poller, server: self)) != nil
        }
        try #require(started)
        try poller.start { [self] batch in
            batchNumber += 1
            batch.deliverUrgent()
            clients.continueWork(rotation: 64)  // As the daemon (`Daemon.minimumTurnsPerBatch`).
            batch.deliverOthers()
            clients.flushTouched()
            return clients.hasWorkLeft
        }
    }

    /// Closes the listener and every connection: the poll thread has nothing left to watch.
    func finish() {
        queue.sync { clients.closeAll(notice: []) }
    }

    // MARK: - RequestServer

    /// Every framed line is served at once: no batch budget, no share.
    func beginTurn(of connection: Connection) -> Int { .max }

    /// Records the line; nothing is answered.
    func serve(_ frame: LineFramer.Frame, of connection: Connection, bounded: Bool) -> ServeVerdict {
        if case .line(let bytes) = frame {
            let line = String(decoding: bytes, as: UTF8.self)
            if waitOnce.remove(line) != nil { return .notNow }
            lines[connection.id, default: []].append(line)
            servedIn.append((line, batchNumber, connection.lineWasPutBack))
        }
        return .next
    }

    func connectionClosed(_ connection: Connection) {
        fanOut.unsubscribe(connection)
    }

    func outputDrained(_ connection: Connection) {
        fanOut.outputDrained(connection)
    }

    func continueListing(_ progress: inout ListingInProgress, on connection: Connection) {
        Issue.record("the harness begins no listing")
    }

    /// A connected client socket (blocking, with a receive timeout), its greeting read.
    func connect() throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        try #require(fd >= 0, "socket: \(String(cString: strerror(errno)))")
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        try #require(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size)) == 0)
        let connected = NotifySocket.withAddress(socketPath) { Glibc.connect(fd, $0, $1) }
        try #require(connected == 0, "connect: \(String(cString: strerror(errno)))")
        return fd
    }

    /// Reads lines from a client socket until `count` have come (or the end).
    func readLines(_ fd: Int32, count: Int) -> [String] {
        var text = ""
        var buffer = [UInt8](repeating: 0, count: 65536)
        while text.split(separator: "\n", omittingEmptySubsequences: false).count - 1 < count {
            let got = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard got > 0 else { break }
            text += String(decoding: buffer[0..<got], as: UTF8.self)
        }
        return text.split(separator: "\n").map(String.init)
    }

    /// Polls a condition on the queue until it holds, up to `timeout` seconds.
    func waitOnQueue(timeout: Double = 30, _ condition: @escaping () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !queue.sync(execute: condition) {
            guard Date() < deadline else { return false }
            usleep(5000)
        }
        return true
    }

    /// The daemon-side connection of the only client, or of the newest one.
    var newestConnection: Connection? {
        queue.sync { clients.connections.values.max { $0.id < $1.id } }
    }

    /// A new client, its greeting read, and its connection in the table. The caller closes it.
    func greetedClient() throws -> (client: Int32, connection: Connection) {
        let client = try connect()
        _ = readLines(client, count: 1)
        guard let connection = newestConnection else {
            close(client)
            throw HarnessError.noConnection
        }
        return (client, connection)
    }

    enum HarnessError: Error, CustomStringConvertible {
        case noConnection

        var description: String { "the client's greeting came, yet the table holds no connection" }
    }
}

