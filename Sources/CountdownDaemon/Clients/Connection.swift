import CLinuxShims
import CountdownCore
import Glibc

/// One client connection. Every property is owned by the daemon's queue.
///
/// Private to the client table in all but name: outside `Clients/`, code reads only `id` and
/// `peerUID` and passes the connection as a handle to `ClientTable` (the fan-out and the daemon
/// queue output, read requests and follow listings through it).
///
/// Descriptor life: registered with the poller at accept, watched for input while requests are
/// read and for room to write only while output is waiting for the socket to drain; unregistered,
/// then closed (a client table's on `DescriptorCloser`'s thread).
final class Connection {
    /// A number unique within this daemon's life, for maps and logs.
    let id: Int
    /// The socket.
    let descriptor: Int32
    /// The uid of the connecting process (`SO_PEERCRED`).
    let peerUID: UInt32
    /// Splits incoming bytes into request lines.
    var framer = LineFramer()
    /// Replies and events waiting to be written. Every event line a subscriber is sent is
    /// appended here, so the run-time exclusivity check (`swift_beginAccess`, a few percent of
    /// the daemon's samples under a fan-out to 250 subscribers) is waived for it: all of a
    /// connection's state is confined to the daemon's queue, and nothing appends to the queue
    /// while it is being written.
    @exclusivity(unchecked) var output = OutputQueue()
    /// The batch in which the client table last put this connection among those to write
    /// (`ClientTable.touch`), or -1 once it was taken out: events touch a subscriber once per
    /// line, and only the first of a batch need reach the table's set.
    var touchedInBatch = -1
    /// Bytes the socket did not take when its output was last written: how far behind the client
    /// was before the current batch (what the batch itself queues does not count).
    var unsentAfterLastWrite = 0
    /// A reply is produced in slices across batches (`LIST`, a new subscriber's snapshots;
    /// `ClientTable.beginListing`). While it is unfinished, the connection's further requests wait.
    var isListing = false
    /// Changes of this connection's that a store decides later (etcd), oldest first, with the
    /// key each changes (`ClientTable.hold`). Until the last is answered, the connection is not
    /// read from its socket; requests already framed are served beside them only if they change
    /// other countdowns (`Daemon.mayServeNext`).
    fileprivate(set) var changesInFlight: [(ticket: StoreTicket, key: String)] = []
    /// Replies in request order while changes are in flight: one waits for its ticket, the
    /// others (of requests served beside them) are ready and wait for those before them.
    fileprivate var repliesInOrder: [(ticket: StoreTicket?, bytes: [UInt8])] = []
    /// A reply is being produced over several batches (a listing, or a change in etcd): the
    /// connection is not read, and not closed, until it is done.
    var isReplyInProgress: Bool { isListing || !changesInFlight.isEmpty }

    /// Whether a change of `key` of this connection's is in flight.
    func isChanging(_ key: String) -> Bool {
        changesInFlight.contains { $0.key == key }
    }
    /// No more requests are read: after `QUIT`, or once the peer closed its sending side.
    /// The connection closes as soon as its output is written.
    private(set) var isClosing = false
    /// Closed: unregistered, descriptor closed, forgotten by the daemon.
    private(set) var isClosed = false
    /// Reading is paused because too many replies wait to be written (backpressure).
    private(set) var isReadingPaused = false

    /// Called when the poller cannot watch the connection as asked (`epoll_ctl` failed): the
    /// client table closes it, since it could otherwise never be read or written again.
    var onPollerFailure: ((Connection, DaemonError) -> Void)?

    /// What the poller watches the connection for now (empty once closed).
    var watchedFor: EventPoller.Interest {
        token.map { poller.interest(of: $0) } ?? []
    }

    private let poller: EventPoller
    private var token: EventPoller.Token?
    private var wantsInput = false
    private var wantsRoom = false
    /// Whether a write may take something now: false from a write the full socket refused until
    /// the poller reports room again. A flush skips the write meanwhile (`ClientTable.flush`): a
    /// subscriber that never reads costs no failing `send` per batch.
    private(set) var mayHaveRoom = true
    /// `stopReading` changed the interest and the poller has not been told yet.
    private var interestIsDeferred = false

    /// Wraps an accepted, non-blocking descriptor.
    init(id: Int, descriptor: Int32, peerUID: UInt32, poller: EventPoller) {
        self.id = id
        self.descriptor = descriptor
        self.peerUID = peerUID
        self.poller = poller
    }

    /// Registers the connection and starts reading. `readable` and `writable` run on the queue,
    /// within a batch, while the socket has input or (while waited for) room.
    ///
    /// The registration holds the connection strongly until `close` removes it: the `readable`
    /// handler may close the connection and drop the daemon's reference to it, and the handler
    /// still looks at it afterwards. (With an unowned reference that was a use after free, and a
    /// crash, whenever a peer hung up: a hang-up reports both readable and writable.)
    func start(readable: @escaping (Connection) -> Void, writable: @escaping (Connection) -> Void) throws(DaemonError) {
        wantsInput = true
        token = try poller.register(descriptor, interest: .readable) { [self] readiness in
            if readiness.readable && wantsInput && !isClosed {
                readable(self)
            }
            if readiness.writable && !isClosed {
                mayHaveRoom = true
                writable(self)
            }
        }
    }

    /// Stops reading for now, keeping the connection open; `resumeReading` reads again.
    func pauseReading() {
        guard wantsInput, !isClosing else { return }
        isReadingPaused = true
        wantsInput = false
        updateInterest()
    }

    /// Reads again after `pauseReading`.
    func resumeReading() {
        guard isReadingPaused, !isClosing else { return }
        isReadingPaused = false
        wantsInput = true
        updateInterest()
    }

    /// Stops reading requests; pending output is still written, then the connection closes.
    /// The poller is told at the batch's flush (`applyDeferredInterest`), which most often closes
    /// the connection instead: a hang-up then costs no `epoll_ctl`. Until then the handler reads
    /// nothing (`wantsInput` is false).
    func stopReading() {
        isClosing = true
        isReadingPaused = false
        wantsInput = false
        interestIsDeferred = true
    }

    /// Tells the poller what `stopReading` changed, if nothing has since.
    func applyDeferredInterest() {
        guard interestIsDeferred else { return }
        updateInterest()
    }

    /// Watches for room to write (a write found the socket full); the `writable` handler runs
    /// when there is.
    func waitUntilWritable() {
        mayHaveRoom = false
        guard !wantsRoom, !isClosed else { return }
        wantsRoom = true
        updateInterest()
    }

    /// Stops watching for room to write (the output drained).
    func stopWaitingForWritable() {
        guard wantsRoom else { return }
        wantsRoom = false
        updateInterest()
    }

    /// Closes the connection: unregisters it and closes the descriptor, on `closer`'s thread when
    /// one is given, else here.
    func close(on closer: DescriptorCloser? = nil) {
        guard !isClosed else { return }
        isClosed = true
        isClosing = true
        wantsInput = false
        wantsRoom = false
        if let token {
            poller.unregister(token)
            self.token = nil
        }
        if let closer {
            closer.close(descriptor)
        } else {
            countdownd_close(descriptor)
        }
    }

    private func updateInterest() {
        interestIsDeferred = false
        guard let token, !isClosed else { return }
        var interest: EventPoller.Interest = []
        if wantsInput { interest.insert(.readable) }
        if wantsRoom { interest.insert(.writable) }
        do throws(DaemonError) {
            try poller.setInterest(interest, for: token)
        } catch {
            onPollerFailure?(self, error)
        }
    }
}

/// A change a store took and will decide later (etcd), for the connection that asked: its
/// replies wait behind it (`ClientTable.hold`, `release`).
struct StoreTicket: Equatable, Sendable {
    let number: Int
}

extension ClientTable {
    /// Holds a change of `key` on `connection` behind a new ticket, its reply in its place in
    /// request order: the connection is not read from its socket until every ticket it holds
    /// is answered, and replies after this one wait for it (`queueReply`).
    func hold(_ connection: Connection, changing key: String) -> StoreTicket {
        precondition(!connection.isListing, "connection \(connection.id) held for a change during a listing")
        precondition(!connection.isChanging(key), "connection \(connection.id) held for a second change of one countdown before the first was answered")
        let ticket = StoreTicket(number: issueTicketNumber())
        connection.changesInFlight.append((ticket, key))
        connection.repliesInOrder.append((ticket, []))
        connection.pauseReading()
        forgetCarriedOver(connection)
        return ticket
    }

    /// Queues a reply of a request handled now: after the replies still waiting for the store,
    /// if any, else straight to the output (marked as `batch`'s).
    func queueReply(_ bytes: [UInt8], on connection: Connection, batch: Int) {
        if connection.repliesInOrder.isEmpty {
            appendNow(bytes, on: connection, batch: batch)
        } else if !bytes.isEmpty {
            connection.repliesInOrder.append((nil, bytes))
        }
    }

    /// Appends output straight to the connection's queue (marked as `batch`'s), beside events and
    /// not behind replies waiting for the store: a listing's slices, a subscriber's snapshots,
    /// `RESYNC`.
    func appendNow(_ bytes: [UInt8], on connection: Connection, batch: Int) {
        touch(connection, batch: batch)
        connection.output.append(bytes)
    }

    /// The store decided `ticket`: its reply takes its place, and the replies now ready at the
    /// front go out (marked as `batch`'s). The connection's framed requests are served in the
    /// next batch, and its socket is read again once the last ticket is answered.
    func answer(_ connection: Connection, ticket: StoreTicket, with bytes: [UInt8], batch: Int) {
        guard let held = connection.changesInFlight.firstIndex(where: { $0.ticket == ticket }),
              let place = connection.repliesInOrder.firstIndex(where: { $0.ticket == ticket }) else {
            preconditionFailure("connection \(connection.id) answered for ticket \(ticket.number), which it does not hold (it holds \(connection.changesInFlight.map { "ticket \($0.ticket.number)" }))")
        }
        connection.changesInFlight.remove(at: held)
        connection.repliesInOrder[place] = (nil, bytes)
        touch(connection, batch: batch)
        while let first = connection.repliesInOrder.first, first.ticket == nil {
            connection.output.append(first.bytes)
            connection.repliesInOrder.removeFirst()
        }
        // Served in the next batch: all of it once the last is answered, else what it has framed
        // (a request that waited for this answer may go now).
        if connection.changesInFlight.isEmpty || connection.framer.hasFrame {
            carryOver(connection)
        }
    }
}
