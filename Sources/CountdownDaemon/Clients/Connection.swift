import CountdownCore
import Glibc

/// What a connection has subscribed to.
enum Subscription: Equatable {
    /// Nothing: request/reply only.
    case none
    /// Every countdown, present and future.
    case all
    /// The named countdowns.
    case names(Set<String>)
    /// Every countdown, present and future, whose key starts with this.
    case prefix(String)
}

/// One client connection. Every property is owned by the daemon's queue.
///
/// Descriptor life: registered with the poller at accept, watched for input while requests are
/// read and for room to write only while output is waiting for the socket to drain; unregistered
/// and closed together.
final class Connection {
    /// A number unique within this daemon's life, for maps and logs.
    let id: Int
    /// The socket.
    let descriptor: Int32
    /// The uid of the connecting process (`SO_PEERCRED`).
    let peerUID: UInt32
    /// Splits incoming bytes into request lines.
    var framer = LineFramer()
    /// Replies and events waiting to be written.
    var output = OutputQueue()
    /// What this connection receives events for.
    var subscription = Subscription.none
    /// Which kinds of events it receives (`SUBSCRIBE … EVENTS`).
    var eventKinds = EventKindSet.all
    /// It is sent no ticks for now: it fell behind (`EventFanOut`), until its output drains.
    var areTicksHeld = false
    /// Bytes the socket did not take when its output was last written: how far behind the client
    /// was before the current batch (what the batch itself queues does not count).
    var unsentAfterLastWrite = 0
    /// A reply produced in slices across batches (`LIST`, a new subscriber's snapshots). While
    /// it is unfinished, the connection's further requests wait.
    var listing: ListingInProgress?
    /// A change of this connection's is being decided by a store that answers later (etcd): its
    /// reply and further requests wait until the table releases this ticket.
    fileprivate(set) var heldFor: StoreTicket?
    /// A reply is being produced over several batches (a listing, or a change in etcd): the
    /// connection is not read, and not closed, until it is done.
    var isReplyInProgress: Bool { listing != nil || heldFor != nil }
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
    func stopReading() {
        isClosing = true
        isReadingPaused = false
        wantsInput = false
        updateInterest()
    }

    /// Watches for room to write; the `writable` handler runs when there is.
    func waitUntilWritable() {
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

    /// Closes the connection: unregisters it and closes the descriptor.
    func close() {
        guard !isClosed else { return }
        isClosed = true
        isClosing = true
        wantsInput = false
        wantsRoom = false
        if let token {
            poller.unregister(token)
            self.token = nil
        }
        // Ignored on purpose: the descriptor is released either way (Linux closes it even when
        // close reports EINTR or EIO), and a socket has no unwritten data to report.
        _ = Glibc.close(descriptor)
    }

    private func updateInterest() {
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
    /// Holds `connection` behind a new ticket: it is not read, and its replies wait, until
    /// `release` with that ticket.
    func hold(_ connection: Connection) -> StoreTicket {
        precondition(connection.heldFor == nil, "connection \(connection.id) held for a second change before ticket \(connection.heldFor?.number ?? 0) was released")
        let ticket = StoreTicket(number: issueTicketNumber())
        connection.heldFor = ticket
        connection.pauseReading()
        forgetCarriedOver(connection)
        return ticket
    }

    /// The store decided `ticket` (its reply is queued): the connection's framed requests are
    /// served in the next batch.
    func release(_ connection: Connection, ticket: StoreTicket) {
        precondition(connection.heldFor == ticket, "connection \(connection.id) released with ticket \(ticket.number), but it is held for \(connection.heldFor.map { "ticket \($0.number)" } ?? "nothing")")
        connection.heldFor = nil
        carryOver(connection)
    }
}
