import CLinuxShims
import CountdownCore
import Dispatch
import Glibc

/// The client table: the listening socket, every connection, framing (each connection's
/// `LineFramer`), turns, reply order, listings in progress, output and backpressure.
///
/// Its interface to the daemon is narrow. The daemon opens it (`open`), and each batch asks it
/// to serve the connections carried over and to continue listings (`continueWork`); it runs
/// every connection's turn itself, handing complete requests to the daemon one at a time
/// (`RequestServer.serve`), and takes replies, events and store answers back (`send`), holding
/// replies behind a change the store decides later (`hold`). Output is written only when the
/// daemon's batch flushes (`flushTouched`, which also says whether the next batch has work at
/// once), or taken back when its commit failed (`rollback`). `Connection` is private to it.
///
/// Confined to the daemon's queue (hence `@unchecked Sendable`: its deferred blocks run there).
final class ClientTable: @unchecked Sendable {
    /// How a read from a connection went.
    enum ReadOutcome {
        /// This many bytes went into the framer; fewer than a buffer's worth emptied the socket.
        case read(Int, socketEmptied: Bool)
        /// The peer closed its sending side.
        case endOfInput
        /// Nothing to read now.
        case wouldBlock
        /// The socket failed; the connection is closed.
        case failed
    }

    /// The most connections accepted in one batch.
    static let acceptsPerBatch = 256

    private let queue: DispatchQueue
    /// Where the retry of accepting and the end of an overflow's grace wait.
    private let later: DelayedWork
    private let logger: Logger
    private let configuration: DaemonConfiguration
    private var listener: ListeningSocket?
    /// Who serves the requests (the daemon); set by `open` (a test without a listener sets it
    /// directly).
    weak var server: (any RequestServer)?
    private(set) var connections: [Int: Connection] = [:]
    /// Connections with output produced in the current batch, written when it flushes.
    private var touched: [Int: Connection] = [:]
    /// The touched connections in the order `flushTouched` writes them (kept between batches,
    /// empty, so that a batch allocates nothing for it).
    private var flushOrder: [Connection] = []
    /// Connections with a listing in progress (the listing itself is in each one's lifecycle).
    private var listing: [Int: Connection] = [:]
    /// Connections served first in the next batch: they used their share of this one with lines
    /// still framed, or they just left backpressure.
    private var carried: [Int: Connection] = [:]
    /// The id the last turn of carried-over connections ended at (`takeCarriedOver`).
    private var carriedTurn = 0
    private var nextConnectionID = 1
    /// Store tickets handed out (`hold`).
    private var ticketsIssued = 0
    private var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
    private var scratch: [UInt8] = []
    /// Set once the daemon stops: nothing more is accepted.
    var isStopping = false
    /// The most clients at once: `--max-connections`, or fewer if the descriptor limit says so.
    var connectionLimit: Int
    /// Whether running out of descriptors was logged (once, until a client is accepted again).
    private var outOfDescriptorsLogged = false
    /// Connections by uid, for `--max-connections-per-user` (root is not limited by it).
    private var connectionsByUID: [UInt32: Int] = [:]
    /// The output each non-root uid's connections hold together, for `--output-limit-per-user`
    /// (shared with its connections: `Connection.userOutput`); and the uids found over it by the
    /// flush in progress.
    private var userOutputs: [UInt32: UserOutput] = [:]
    /// The largest `UserOutput.footprint` seen since start, once a count's cut-offs were made
    /// (`Figures.userOutputPeak`).
    private var userOutputPeak = 0
    private var usersOverOutputLimit: Set<UInt32> = []
    /// Whether giving freed memory back to the system is already scheduled (`releaseMemorySoon`).
    private var memoryReleaseScheduled = false
    /// Warnings a client can cause at any rate, logged at most once per 10 s each.
    private let refusedForLimit: RateLimitedWarning
    private let refusedForUserLimit: RateLimitedWarning
    private let overflowed: RateLimitedWarning
    /// Closes hung-up clients' descriptors off the queue.
    private let closer = DescriptorCloser()

    /// Where the times of warnings and delayed closes are read.
    private let time: DaemonClock

    init(queue: DispatchQueue, later: DelayedWork, logger: Logger, configuration: DaemonConfiguration, time: DaemonClock = .system) {
        self.time = time
        self.queue = queue
        self.later = later
        self.logger = logger
        refusedForLimit = RateLimitedWarning("connections refused at the connection limit", logger: logger, later: later)
        refusedForUserLimit = RateLimitedWarning("connections refused at a user's connection limit", logger: logger, later: later)
        overflowed = RateLimitedWarning("clients disconnected for falling behind", logger: logger, later: later)
        self.configuration = configuration
        connectionLimit = configuration.maximumConnections
    }

    /// What the table holds, for `STATS` and the service status.
    struct Figures {
        /// Clients connected.
        let connections: Int
        /// Clients connected, by uid (absent: none).
        let connectionsByUID: [UInt32: Int]
        /// Replies in slices in progress.
        let listingsInProgress: Int
        /// The most output any one non-root uid's connections held together since start
        /// (`queuedOutput(of:)` at its highest, after the cut-offs of `--output-limit-per-user`).
        let userOutputPeak: Int
    }

    /// What the table holds now.
    var figures: Figures {
        Figures(connections: connections.count, connectionsByUID: connectionsByUID, listingsInProgress: listing.count, userOutputPeak: userOutputPeak)
    }

    /// Opens the table for clients: `server` serves their requests, and new connections on
    /// `listener` are accepted, up to `connectionLimit` at once.
    func open(listener: ListeningSocket, connectionLimit: Int, poller: EventPoller, server: any RequestServer) throws(DaemonError) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.listener = listener
        self.connectionLimit = connectionLimit
        self.server = server
        try listener.startAccepting(with: poller) { [unowned self] in acceptPending(poller: poller) }
    }

    /// What the daemon may know of a connection: where it is in its life (`Connection.Lifecycle`,
    /// without what only the table needs), and how far behind its output is.
    struct ConnectionState {
        enum Phase {
            /// Reading, or paused (backpressure, or changes waiting for the store).
            case open
            /// A reply in slices is in progress.
            case listing
            /// Takes no more requests; closes once its output is written.
            case closing
            /// Closed and forgotten.
            case closed
        }

        let phase: Phase
        /// The bytes its socket did not take at the last write (before this batch).
        let unsent: Int
        /// The bytes queued now.
        let queued: Int

        /// Whether it takes output (events, slices): open or listing.
        var takesOutput: Bool { phase == .open || phase == .listing }
    }

    /// Where `connection` is in its life, and how far behind (for the fan-out's rules).
    func state(of connection: Connection) -> ConnectionState {
        let phase: ConnectionState.Phase
        switch connection.lifecycle {
        case .reading, .paused: phase = .open
        case .listing: phase = .listing
        case .closing: phase = .closing
        case .closed: phase = .closed
        }
        return ConnectionState(phase: phase, unsent: connection.unsentAfterLastWrite, queued: connection.output.byteCount)
    }

    /// Whether the next batch has work at once: connections carried over, or a listing with
    /// room to go on.
    var hasWorkLeft: Bool {
        guard !isDraining else { return false }
        return !carried.isEmpty || listing.values.contains { $0.output.byteCount < Self.listingOutputThreshold }
    }

    // MARK: - Draining

    /// A stop that waits for the store's answers (`drain`): nothing more is accepted, read or
    /// served, and replies, store answers and events still go out.
    private(set) var isDraining = false

    /// A stop that first answers the changes the store holds: the first call closes the
    /// listening socket (new clients are not greeted and left waiting: they are refused, or,
    /// under socket activation, wait in systemd's queue for the next start), and no connection
    /// is read or served again. What a client sent and was not served is never acknowledged: it
    /// gets the stop's notice with everyone else. Each call after it only counts.
    /// - Returns: how many changes still wait for the store's decision, across every connection.
    @discardableResult
    func drain() -> Int {
        if !isDraining {
            isDraining = true
            listener?.close()
            listener = nil
            carried.removeAll()
            // Not watched for input any more, so that a client that sends meanwhile does not
            // wake every batch for nothing (one that hangs up is closed: `turn`).
            for connection in connections.values { connection.pauseReading() }
        }
        return connections.values.reduce(0) { $0 + $1.replies.changesInFlight.count }
    }

    // MARK: - Accepting

    /// Accepts pending connections, up to a fair share per batch: the poller reports the
    /// listening socket again while more wait. Out of descriptors, it stops watching the socket
    /// for 100 ms instead of spinning on it. Each new connection is greeted.
    func acceptPending(poller: EventPoller) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let listener else { return }
        for _ in 0..<Self.acceptsPerBatch {
            if connections.count + closer.outstanding >= connectionLimit, closer.outstanding > 0 {
                // The descriptors the closer still holds are the ones this accept needs: a moment.
                closer.waitUntilClosed()
            }
            switch listener.acceptOne() {
            case .accepted(let descriptor):
                accept(descriptor, poller: poller)
            case .drained:
                return
            case .retryLater:
                if !outOfDescriptorsLogged {
                    outOfDescriptorsLogged = true
                    logger.log(.warning, "cannot accept a connection: out of descriptors (\(connections.count) clients); retrying every 100 ms; raise LimitNOFILE= or lower --max-connections")
                }
                // If the poller cannot stop watching it, the socket is reported again at once:
                // accepting goes on being tried, which costs CPU but loses nothing.
                try? listener.setAccepting(false)
                later.schedule(at: time.now().advanced(byNanoseconds: 100_000_000)) { [self] _ in
                    guard !isStopping else { return }
                    do throws(DaemonError) {
                        try self.listener?.setAccepting(true)
                    } catch {
                        logger.log(.error, "cannot watch the listening socket again (\(error)); new clients wait until a restart")
                    }
                }
                return
            }
        }
    }

    /// A new client: greet it, or turn it away when the connection limit is reached.
    private func accept(_ descriptor: Int32, poller: EventPoller) {
        guard !isStopping else {
            _ = Glibc.close(descriptor)  // Released whatever close reports.
            return
        }
        outOfDescriptorsLogged = false
        let peerUID = UnixSocket.peerUID(descriptor) ?? UInt32.max
        guard connections.count < RootReserve.usable(of: connectionLimit, by: peerUID) else {
            let reserve = connections.count < connectionLimit
                ? "; the last \(RootReserve.share(of: connectionLimit)) are kept for root" : ""
            let why = connectionLimit < configuration.maximumConnections
                ? "the daemon's descriptor limit allows \(connectionLimit)\(reserve)); close idle clients, or raise its LimitNOFILE="
                : "\(connectionLimit)\(reserve)); close idle clients or raise --max-connections"
            var line: [UInt8] = []
            WireEncoder.appendError(ProtocolError(.limit, "too many connections (\(why)"), to: &line)
            refuse(descriptor, with: line)
            refusedForLimit.warn("refused a connection of uid \(peerUID): \(connections.count) of \(connectionLimit) connections in use\(reserve)", now: time.now())
            return
        }
        guard peerUID == 0 || connectionsByUID[peerUID, default: 0] < configuration.maximumConnectionsPerUser else {
            var line: [UInt8] = []
            WireEncoder.appendError(
                ProtocolError(.limit, "uid \(peerUID) already has \(configuration.maximumConnectionsPerUser) connections (--max-connections-per-user); close idle ones"),
                to: &line
            )
            refuse(descriptor, with: line)
            refusedForUserLimit.warn("refused a connection of uid \(peerUID): its limit of \(configuration.maximumConnectionsPerUser) reached", now: time.now())
            return
        }
        let connection = Connection(
            id: nextConnectionID,
            descriptor: descriptor,
            peerUID: peerUID,
            poller: poller
        )
        nextConnectionID += 1
        connection.onPollerFailure = { [unowned self] connection, error in
            logger.log(.warning, "cannot change what connection \(connection.id) is watched for (\(error)); closing it")
            close(connection)
        }
        do throws(DaemonError) {
            try connection.start(
                readable: { [unowned self] connection in turn(connection) },
                // Room to write: written in this batch's flushing phase, after its commit.
                writable: { [unowned self] connection in touched[connection.id] = connection }
            )
        } catch {
            logger.log(.warning, "cannot watch a new connection: \(error); closing it")
            connection.close()
            return
        }
        connections[connection.id] = connection
        connectionsByUID[peerUID, default: 0] += 1
        if peerUID != 0 {
            let user = userOutputs[peerUID] ?? UserOutput()
            userOutputs[peerUID] = user
            connection.userOutput = user
        }
        var greeting: [UInt8] = []
        WireEncoder.appendGreeting(daemonVersion: DaemonConfiguration.version, to: &greeting)
        // Before any mark of the batch: a failed commit takes back what the batch produced, never
        // the greeting (which no request produced, and which nothing would produce again).
        connection.output.append(greeting)
        count(connection)
        touched[connection.id] = connection
    }

    /// Tells a client it is not taken, in one non-blocking send, and closes it.
    private func refuse(_ descriptor: Int32, with line: [UInt8]) {
        // Ignored on purpose: one attempt, never a wait; a client that cannot take one short line
        // into an empty socket buffer has gone, and is closed either way.
        _ = line.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        _ = Glibc.close(descriptor)  // Released whatever close reports.
    }

    // MARK: - Turns

    /// How many of one connection's changes may be in etcd at once (cluster mode).
    static let changesInFlightPerConnection = 64

    /// A connection's turn in a batch (when the poller reports input, or when it was carried
    /// over): serves what its framer holds and reads more, up to what the server allows
    /// (`RequestServer.beginTurn`), leaving the replies for the end of the batch. A read shorter
    /// than the buffer emptied the socket; the poller reports it again when more arrives (or at
    /// end of file).
    func turn(_ connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !isDraining else {
            // No connection is watched for input while draining: what the poller still reports
            // is a hang-up or an error (epoll always reports those), and, level-triggered, it
            // would report it at every wait until the stop. The peer is gone: closed now.
            close(connection)
            return
        }
        // While a listing is produced, its connection's next requests wait (they come after it).
        // One with changes in etcd is not read from its socket (reading is paused), but its
        // framed requests are served as far as `mayServeNext` allows.
        guard mayServe(connection), let server else { return }
        var budget = server.beginTurn(of: connection)
        let skipped = budget == 0
        budget -= serveFramed(connection, limit: budget, server: server)
        reading: while budget > 0 && mayRead(connection) {
            switch read(connection) {
            case .read(_, let socketEmptied):
                budget -= serveFramed(connection, limit: budget, server: server)
                if socketEmptied { break reading }
            case .endOfInput:
                // The peer closed its sending side: answer what it sent, then close.
                serveFramed(connection, limit: nil, server: server)
                // A reply in progress holds the rest back; the end of input is read again after it.
                if connection.isReplyInProgress { break reading }
                endOfInput(connection)
            case .wouldBlock:
                break reading
            case .failed:
                return
            }
        }
        endTurn(connection, budgetUsed: budget <= 0, skipped: skipped)
    }

    /// What the table does first in a batch: serves the connections carried over from the last
    /// one (see `takeCarriedOver` for `rotation`), then continues every listing whose connection
    /// has room (fewer than `listingOutputThreshold` bytes waiting) by a slice.
    func continueWork(rotation: Int) {
        guard !isDraining else { return }
        for connection in takeCarriedOver(rotation: rotation) {
            turn(connection)
        }
        for connection in listing.values where connection.output.byteCount < Self.listingOutputThreshold {
            // Ended meanwhile: cut off for overflow by the events of a slice before it.
            guard case .listing(let progress) = connection.lifecycle else { continue }
            continueListing(connection, from: progress)
        }
    }

    /// Serves the complete lines the connection has framed, in order: all of them, or up to
    /// `limit` until the server ends the turn.
    /// - Returns: how many were served, or `limit` when the server ended the turn.
    @discardableResult
    private func serveFramed(_ connection: Connection, limit: Int?, server: any RequestServer) -> Int {
        let bounded = limit != nil
        let limit = limit ?? .max
        var served = 0
        // Backpressure: past the threshold, lines wait in the framer until the replies drain.
        while served < limit, mayServeNext(connection), let frame = nextRequest(of: connection) {
            served += 1
            let verdict = server.serve(frame, of: connection, bounded: bounded)
            connection.lineWasPutBack = verdict == .notNow
            switch verdict {
            case .next:
                continue
            case .endTurn:
                served = limit  // This line is served; the rest wait.
            case .notNow:
                connection.framer.putBack(frame)
                served = limit  // Carried over with its lines (`endTurn`), this one first.
            case .quit:
                connection.stopReading()
            }
        }
        return served
    }

    /// Reads what the socket has (up to 64 KiB) into the connection's framer.
    func read(_ connection: Connection) -> ReadOutcome {
        while true {
            let count = readBuffer.withUnsafeMutableBytes { buffer in
                let count = Glibc.read(connection.descriptor, buffer.baseAddress, buffer.count)
                if count > 0 {
                    connection.framer.append(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                }
                return count
            }
            if count > 0 {
                return .read(count, socketEmptied: count < readBuffer.count)
            } else if count == 0 {
                return .endOfInput
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                return .wouldBlock
            } else {
                close(connection)
                return .failed
            }
        }
    }

    /// Whether a connection's turn may serve requests now: the table is not draining, the
    /// connection is open, no listing is in progress on it, and it is read (or, with changes in
    /// etcd, holds framed requests to serve beside them).
    func mayServe(_ connection: Connection) -> Bool {
        guard !isDraining else { return false }
        return switch connection.lifecycle {
        case .reading, .closing: true
        case .paused: connection.replies.isHeld
        case .listing, .closed: false
        }
    }

    /// Whether more may be read from a connection's socket in this turn: the table is not
    /// draining, the connection is reading, no reply is in progress, and fewer than
    /// `readPauseThreshold` bytes of replies wait.
    func mayRead(_ connection: Connection) -> Bool {
        guard !isDraining, case .reading = connection.lifecycle else { return false }
        return !connection.replies.isHeld && connection.output.byteCount < configuration.readPauseThreshold
    }

    /// Whether the connection's next framed request is served now. A listing holds everything
    /// after it. While changes of the connection's are in etcd, the next request is served beside
    /// them only if it changes another countdown: pipelined changes then wait in parallel (and
    /// go in one transaction), while a read, or a second change of one countdown, waits for the
    /// answers before it, so it sees them.
    func mayServeNext(_ connection: Connection) -> Bool {
        guard !connection.isListing else { return false }
        let inFlight = connection.replies.changesInFlight.count
        guard inFlight > 0 else { return true }
        guard inFlight < Self.changesInFlightPerConnection else { return false }
        var ahead = connection.framer  // A copy of the framer shares its buffer, never copies it.
        guard case .line(let bytes)? = ahead.nextFrame(), let request = try? RequestParser.parse(bytes),
              let name = request.changedName, let (key, _) = try? CountdownAddress.resolve(name, requester: connection.peerUID) else {
            return false
        }
        return !connection.replies.isChanging(key)
    }

    /// The connection's next framed request, taken from its framer; `nil` when none is complete,
    /// when it is closing, or while `readPauseThreshold` bytes of replies wait (backpressure: the
    /// lines wait in the framer until the replies drain).
    private func nextRequest(of connection: Connection) -> LineFramer.Frame? {
        guard !connection.isClosing, connection.output.byteCount < configuration.readPauseThreshold else { return nil }
        return connection.framer.nextFrame()
    }

    /// The peer closed its sending side: nothing more is read, and the connection closes once
    /// its output is written. A partial last line is dropped (logged at debug level).
    private func endOfInput(_ connection: Connection) {
        if connection.framer.hasPartialLine {
            logger.log(.debug, "connection \(connection.id) closed mid-line; the partial request was dropped")
        }
        connection.stopReading()
    }

    /// Applies backpressure after a connection's turn: with `readPauseThreshold` (4 MiB) of output
    /// unsent it is not read until that drains; one that used its whole budget with lines left
    /// is carried to the next batch. One `skipped` whole (the batch had no budget left for it)
    /// is carried only if it has a complete line framed: otherwise the poller reports its socket
    /// again (level-triggered), and the carried-over set stays as small as what was served.
    func endTurn(_ connection: Connection, budgetUsed: Bool, skipped: Bool) {
        let linesLeft = budgetUsed && !(skipped && !connection.framer.hasFrame)
        if connection.output.byteCount >= configuration.readPauseThreshold {
            connection.pauseReading()
        } else if linesLeft && !connection.isClosing && !connection.isListing {
            // Also with changes in etcd: the lines left may change other countdowns.
            carried[connection.id] = connection
        }
        touched[connection.id] = connection
    }

    /// The connections carried over from the last batch, to be served first; reading resumes for
    /// those that left backpressure.
    ///
    /// In turns: by connection id, starting after where the last batch's first `rotation`
    /// connections ended, so that a batch out of time (which serves only its first turns) never
    /// serves the same connections every time; and with no more than `rotation` of them, after
    /// the last batch's first, so that no connection comes first every time (one that did, with
    /// requests past its user's share, left its user's other connections no share in any batch:
    /// their PING waited for ever).
    func takeCarriedOver(rotation: Int) -> [Connection] {
        defer { carried = [:] }
        var waiting = carried.values.filter { !$0.isClosed && !$0.isListing }
        guard !waiting.isEmpty else { return [] }
        waiting.sort { $0.id < $1.id }
        if let first = waiting.firstIndex(where: { $0.id > carriedTurn }) {
            waiting = Array(waiting[first...] + waiting[..<first])
        }
        carriedTurn = waiting[waiting.count <= rotation ? 0 : rotation - 1].id
        // One with changes in etcd is served its framed lines; its socket waits for their answers.
        for connection in waiting where !connection.replies.isHeld { connection.resumeReading() }
        return waiting
    }

    // MARK: - Listings

    /// A listing is continued while less than this is waiting to be written to its connection:
    /// a client that reads slowly holds a few hundred KiB in the daemon, never the whole reply.
    static let listingOutputThreshold = 256 * 1024

    /// A listing begins on `connection` (its first slice was part of the request's reply): it is
    /// not read until the listing ends (its requests are answered in order, after it), and it is
    /// not closed while the listing goes on. `progress` is kept in its lifecycle.
    private func beginListing(_ progress: ListingInProgress, on connection: Connection) {
        precondition(!connection.isClosing, "connection \(connection.id) began a listing after it stopped reading")
        guard !progress.isFinished else {
            // Whole in its first slice, in place of the listing its request began before a
            // failed commit (`ClientOutput.listing`): that one ends, and nothing of it follows.
            if connection.isListing { endListing(connection) }
            return
        }
        carried[connection.id] = nil
        connection.list(progress)
        // Telling the poller may have failed, and closed it.
        if !connection.isClosed { listing[connection.id] = connection }
    }

    /// Continues the listing on `connection` by a slice (`RequestServer.continueListing`). The
    /// listing ends after its last slice, and its connection's framed requests are served in the
    /// next batch.
    private func continueListing(_ connection: Connection, from progress: ListingInProgress) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let server else { return }
        var progress = progress
        server.continueListing(&progress, on: connection)
        // Cut off meanwhile (for overflow, by what fell due first): its listing ended with it.
        guard !connection.isClosing else { return }
        if progress.isFinished {
            endListing(connection)
        } else {
            connection.list(progress)
            if !connection.isClosed { listing[connection.id] = connection }
        }
    }

    /// The listing on `connection` ended: its framed requests are served in the next batch.
    private func endListing(_ connection: Connection) {
        connection.endListing()
        listing[connection.id] = nil
        carried[connection.id] = connection
    }

    // MARK: - Reply order

    /// Holds a change of `key` on `connection` behind a new ticket, its reply in its place in
    /// request order: the connection is not read from its socket until every ticket it holds
    /// is answered, and replies after this one wait for it (`send(.reply)`).
    func hold(_ connection: Connection, changing key: String) -> StoreTicket {
        precondition(!connection.isListing, "connection \(connection.id) held for a change during a listing")
        precondition(!connection.isChanging(key), "connection \(connection.id) held for a second change of one countdown before the first was answered")
        ticketsIssued += 1
        let ticket = StoreTicket(number: ticketsIssued)
        connection.replies.hold(ticket, changing: key)
        connection.pauseReading()
        carried[connection.id] = nil
        return ticket
    }

    /// Queues output on `connection`, as `batch`'s (a failed commit takes it back). A store's
    /// answer for a connection closed meanwhile is dropped; other output queued on a closed
    /// connection is never written.
    func send(_ output: ClientOutput, to connection: Connection, batch: Int) {
        switch output {
        case .reply(let bytes):
            queueReply(bytes, on: connection, batch: batch)
        case .besideEvents(let bytes):
            appendNow(bytes, on: connection, batch: batch)
        case .event(let line):
            queueEvent(line, on: connection, batch: batch)
        case .sharedEvents(let bytes):
            queueSharedEvents(bytes, on: connection, batch: batch)
        case .answer(let ticket, let bytes):
            guard !connection.isClosed else { return }
            answer(connection, ticket: ticket, with: bytes, batch: batch)
        case .listing(let progress):
            beginListing(progress, on: connection)
        case .listingSliceAgain(let progress):
            guard !connection.isClosing else { return }
            continueListing(connection, from: progress)
        }
    }

    /// Queues a reply of a request handled now: after the replies still waiting for the store,
    /// if any, else straight to the output (marked as `batch`'s).
    func queueReply(_ bytes: [UInt8], on connection: Connection, batch: Int) {
        if connection.replies.take(bytes) {
            appendNow(bytes, on: connection, batch: batch)
        }
    }

    /// Appends output straight to the connection's queue (marked as `batch`'s), beside events and
    /// not behind replies waiting for the store.
    private func appendNow(_ bytes: [UInt8], on connection: Connection, batch: Int) {
        touch(connection, batch: batch)
        connection.output.append(bytes)
        count(connection)
    }

    /// The store decided `ticket`: its reply takes its place, and the replies now ready at the
    /// front go out (marked as `batch`'s). The connection's framed requests are served in the
    /// next batch, and its socket is read again once the last ticket is answered.
    func answer(_ connection: Connection, ticket: StoreTicket, with bytes: [UInt8], batch: Int) {
        guard let ready = connection.replies.answer(ticket, with: bytes) else {
            preconditionFailure("connection \(connection.id) answered for ticket \(ticket.number), which it does not hold (it holds \(connection.replies.changesInFlight.map { "ticket \($0.ticket.number)" }))")
        }
        touch(connection, batch: batch)
        for reply in ready {
            connection.output.append(reply)
        }
        count(connection)
        // Served in the next batch: all of it once the last is answered, else what it has framed
        // (a request that waited for this answer may go now).
        if (!connection.replies.isHeld || connection.framer.hasFrame) && !connection.isClosed {
            carried[connection.id] = connection
        }
    }

    // MARK: - Output

    /// Marks a connection as having output in `batch` (remembering where that output starts, so
    /// `rollback` can take it back) and to be written when the batch flushes.
    func touch(_ connection: Connection, batch: Int) {
        connection.output.mark(batch: batch)
        // The fan-out touches a subscriber for every line: hash it into the set once a batch.
        // (Whatever takes a connection out of the set resets `touchedInBatch`.)
        guard connection.touchedInBatch != batch else { return }
        connection.touchedInBatch = batch
        touched[connection.id] = connection
    }

    /// Queues one event line on a subscriber as output of `batch`; past the hard output limit
    /// (`--output-limit`) the client gets `ERR overflow` instead, and is disconnected.
    func queueEvent(_ line: [UInt8], on connection: Connection, batch: Int) {
        touch(connection, batch: batch)
        connection.output.append(line)
        if connection.output.byteCount > configuration.outputHardLimit {
            overflow(connection)
        } else {
            count(connection)
        }
    }

    /// Queues a delivery's stream of event lines on a subscriber, sharing the bytes with every
    /// other queue that takes them (`OutputQueue.appendShared`); the hard limit as `queueEvent`.
    func queueSharedEvents(_ bytes: [UInt8], on connection: Connection, batch: Int) {
        touch(connection, batch: batch)
        connection.output.appendShared(bytes)
        if connection.output.byteCount > configuration.outputHardLimit {
            overflow(connection)
        } else {
            count(connection)
        }
    }

    /// Takes back every connection's output of `batch`.
    /// - Returns: the ids of the open connections whose output was taken back (not those
    ///   replaced meanwhile by an overflow notice).
    func rollback(batch: Int) -> Set<Int> {
        var rolledBack = Set<Int>()
        for connection in touched.values where !connection.isClosed && connection.output.rollback(batch: batch) {
            count(connection, enforcing: false)
            rolledBack.insert(connection.id)
        }
        return rolledBack
    }

    /// Writes every touched connection: only after the batch's commit. A user whose clients
    /// are then too far behind together loses the ones furthest behind (`--output-limit-per-user`),
    /// whose `ERR overflow` is written at once.
    ///
    /// The least queued goes first: a reply or a single event is not written after a fan-out
    /// of thousands of lines to hundreds of other sockets.
    /// - Returns: whether the next batch has work at once (`hasWorkLeft`, as the writes left it).
    @discardableResult
    func flushTouched() -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        writeTouched()
        if !usersOverOutputLimit.isEmpty {
            for uid in usersOverOutputLimit {
                disconnectFurthestBehind(of: uid)
            }
            usersOverOutputLimit.removeAll()
            writeTouched()  // The ERR overflow lines of those cut off.
        }
        return hasWorkLeft
    }

    /// Writes the touched connections, least queued first, and forgets them.
    private func writeTouched() {
        flushOrder.append(contentsOf: touched.values)
        flushOrder.sort { $0.output.byteCount < $1.output.byteCount }
        for connection in flushOrder {
            connection.touchedInBatch = -1
            flush(connection)
        }
        flushOrder.removeAll(keepingCapacity: true)
        touched.removeAll(keepingCapacity: true)
    }

    /// The memory `uid`'s connections' output holds together (`OutputQueue.footprint`): what
    /// `--output-limit-per-user` bounds. 0 for root, who is not limited.
    func queuedOutput(of uid: UInt32) -> Int {
        userOutputs[uid]?.footprint ?? 0
    }

    /// Counts the connection's output, as it is now, in its user's sum. Past
    /// `--output-limit-per-user` (when `enforcing`), the user's connections furthest behind are
    /// cut off at once, mid-batch: counted only at the flush, 400 subscribers of one user took a
    /// batch's events (up to 8,192 lines each) past the limit before any was cut off.
    private func count(_ connection: Connection, enforcing: Bool = true) {
        // A closed one was taken out of its user's sum (`close`) and stays out.
        guard let user = connection.userOutput, !connection.isClosed else { return }
        let footprint = connection.output.footprint
        user.footprint += footprint - connection.countedOutput
        connection.countedOutput = footprint
        if configuration.outputLimitPerUser > 0 && user.footprint > configuration.outputLimitPerUser {
            if enforcing {
                disconnectFurthestBehind(of: connection.peerUID)
            } else {
                usersOverOutputLimit.insert(connection.peerUID)
            }
        }
        userOutputPeak = max(userOutputPeak, user.footprint)
    }

    /// Writes what the connection has queued; waits for writability when the socket is full.
    private func flush(_ connection: Connection) {
        guard !connection.isClosed else { return }
        // One that stopped reading and stays open (output still to write, a reply in progress)
        // tells the poller now; one closed below never needs to.
        defer { if !connection.isClosed { connection.applyDeferredInterest() } }
        guard connection.mayHaveRoom else {
            // Its socket was full at the last write and the poller has reported no room since:
            // a write now could only fail again. What waits is still counted.
            recordUnsent(connection)
            return
        }
        let outcome = connection.output.write(to: connection.descriptor, scratch: &scratch)
        recordUnsent(connection)
        switch outcome {
        case .drained:
            connection.stopWaitingForWritable()
            server?.outputDrained(connection)
            if connection.isReplyInProgress {
                return  // Continued by a later batch (`hasWorkLeft`, or etcd's answer).
            } else if connection.isClosing {
                close(connection)
            } else if connection.isReadingPaused {
                // Its framed lines are served first in the next batch, never during a flush: a
                // flush comes after the commit, and their changes belong to the next one.
                carried[connection.id] = connection
            }
        case .wouldBlock:
            connection.waitUntilWritable()
        case .failed:
            close(connection)
        }
    }

    /// Records what a write left unsent, in the connection (how far behind it is) and in its
    /// user's sum (found over the limit, it is cut back at the end of the flush).
    private func recordUnsent(_ connection: Connection) {
        connection.unsentAfterLastWrite = connection.output.byteCount
        count(connection, enforcing: false)
    }

    /// `uid`'s clients hold more than `--output-limit-per-user` of output together: the ones
    /// furthest behind (holding the most) are disconnected with `ERR overflow` until the rest
    /// fit. O(connections), only when a user is over its limit.
    private func disconnectFurthestBehind(of uid: UInt32) {
        let limit = configuration.outputLimitPerUser
        guard queuedOutput(of: uid) > limit else { return }
        // Furthest behind: the most left unsent at the last write (what it failed to read),
        // then the most held (this batch's output, for clients that were not behind).
        // Not one that holds less than its `ERR overflow` line would: cutting it off frees
        // nothing (900 readers of one line each were all cut off by one START, the sum rising
        // with each). So the sum may stay past the limit by at most that much a connection.
        let behind = connections.values.filter { $0.peerUID == uid && !$0.isCutOff && !$0.isClosed && $0.countedOutput > Self.notWorthCuttingOff }
            .sorted { ($0.unsentAfterLastWrite, $0.countedOutput) > ($1.unsentAfterLastWrite, $1.countedOutput) }
        for connection in behind where queuedOutput(of: uid) > limit {
            overflow(
                connection,
                because: "uid \(uid)'s clients together had more than \(limit) bytes of output waiting (--output-limit-per-user), and this one was furthest behind",
                advice: "this client is disconnected; reconnect and read faster, or follow with fewer connections"
            )
        }
    }

    /// A connection holding no more output than this (an `ERR overflow` line's chunk, about) is
    /// never cut off for its user's limit.
    static let notWorthCuttingOff = 1024

    /// Returns once the descriptors of every connection closed so far are closed (they are closed
    /// off the queue, by `DescriptorCloser`). Not on the queue.
    func waitUntilDescriptorsClosed() {
        dispatchPrecondition(condition: .notOnQueue(queue))
        closer.waitUntilClosed()
    }

    /// Forgets a connection (its listing, and through the server its subscriptions), and closes it: its
    /// descriptor off the queue (`DescriptorCloser`).
    func close(_ connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        noteDropped(connection.output.byteCount)
        connection.unsentAfterLastWrite = 0
        if let user = connection.userOutput {
            user.footprint -= connection.countedOutput
            connection.countedOutput = 0
        }
        server?.connectionClosed(connection)
        listing[connection.id] = nil
        if connections.removeValue(forKey: connection.id) != nil {
            connectionsByUID[connection.peerUID, default: 1] -= 1
            if connectionsByUID[connection.peerUID] == 0 {
                connectionsByUID[connection.peerUID] = nil
                userOutputs[connection.peerUID] = nil
            }
        }
        touched[connection.id] = nil
        connection.touchedInBatch = -1
        carried[connection.id] = nil
        // Off the queue only while clients and descriptors not yet closed fit the connection
        // limit together: that limit is what the descriptor limit leaves room for, so a
        // descriptor waiting for the closer never takes an accept's (nor the daemon's own files').
        connection.close(on: connections.count + closer.outstanding < connectionLimit ? closer : nil)
    }

    /// Disconnects a connection that fell too far behind: its unsent output is dropped (except
    /// the rest of a half-sent line) and replaced by `ERR overflow`, written when the batch
    /// flushes; then the connection closes. A client that never reads again is closed after a
    /// short grace period, so it holds nothing but a descriptor until then.
    func overflow(_ connection: Connection) {
        overflow(
            connection,
            because: "this client fell more than \(configuration.outputHardLimit) bytes behind (--output-limit)",
            advice: "it is disconnected; reconnect and read faster"
        )
    }

    /// The same, saying why (`--output-limit`, or its user's `--output-limit-per-user`).
    private func overflow(_ connection: Connection, because reason: String, advice: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        connection.isCutOff = true
        overflowed.warn("connection \(connection.id) (uid \(connection.peerUID)): \(reason); disconnecting it", now: time.now())
        server?.connectionClosed(connection)
        // Its listing, if any, ends as it stops reading: nothing follows the ERR line, and the
        // connection closes as soon as that is written.
        listing[connection.id] = nil
        connection.stopReading()
        noteDropped(connection.output.byteCount)
        connection.output.discardAllButCurrentLine()
        var line: [UInt8] = []
        WireEncoder.appendError(ProtocolError(.overflow, "\(reason); \(advice)"), to: &line)
        connection.output.append(line)
        count(connection, enforcing: false)
        touched[connection.id] = connection
        let id = connection.id
        let grace = Int64(configuration.overflowGraceMilliseconds) * 1_000_000
        later.schedule(at: time.now().advanced(byNanoseconds: grace)) { [self] _ in
            if let connection = connections[id] {
                close(connection)
            }
        }
    }

    /// Output this large, dropped (at once, or by many connections since memory was last given
    /// back: 150 subscribers that never read may hold 100 KiB each), is worth giving back to the
    /// system.
    static let largeOutput = 1024 * 1024

    /// Output dropped with closed or cut-off connections since memory was last given back.
    private var droppedOutput = 0

    /// Counts `bytes` of output dropped, and gives memory back once they add up to `largeOutput`.
    private func noteDropped(_ bytes: Int) {
        droppedOutput += bytes
        guard droppedOutput >= Self.largeOutput else { return }
        droppedOutput = 0
        releaseMemorySoon()
    }

    /// Gives freed memory back to the system, at most once a second: output queues are made of
    /// 16 KiB chunks, below the size glibc maps on its own, so what a dropped client held would
    /// otherwise stay in the daemon's heap, free but resident.
    private func releaseMemorySoon() {
        guard !memoryReleaseScheduled else { return }
        memoryReleaseScheduled = true
        later.schedule(at: time.now().advanced(byNanoseconds: 1_000_000_000)) { [self] _ in
            memoryReleaseScheduled = false
            // Returns whether any memory was released: either way is fine.
            _ = countdownd_release_free_memory()
        }
    }

    /// At stop: every client gets its queued output and `notice`, one non-blocking attempt each
    /// (never a wait), and is closed.
    func closeAll(notice: [UInt8]) {
        isStopping = true
        listener?.close()
        for connection in connections.values {
            connection.output.append(notice)
            // Ignored on purpose: one non-blocking attempt at stop; a client that cannot take
            // it is closed all the same.
            _ = connection.output.write(to: connection.descriptor, scratch: &scratch)
            connection.close()
        }
        connections.removeAll()
    }
}
