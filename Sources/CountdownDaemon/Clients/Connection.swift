import CLinuxShims
import CountdownCore
import Glibc

/// One client connection, private to the client table: outside `Clients/`, code reads only `id`
/// and `peerUID`, and passes the connection to `ClientTable` as a handle. Every property is owned
/// by the daemon's queue.
///
/// Its life is `Lifecycle`, changed only along the transitions it names (as swift-nio's channel
/// states). Descriptor life: registered with the poller at accept, watched for input while
/// `reading` and for room to write only while output waits for the socket to drain;
/// unregistered, then closed (by the client table's `DescriptorCloser`, off the queue).
final class Connection {
    /// Where a connection is in its life.
    enum Lifecycle {
        /// Its socket is read, and its requests served.
        case reading
        /// Its socket is not read for now: too many replies wait to be written (backpressure),
        /// or a change of its waits for the store (`replies`). Requests already framed are served
        /// beside a change in flight (`ClientTable.mayServeNext`).
        case paused
        /// A reply in slices is in progress (`LIST`, a new subscriber's snapshots): neither read
        /// nor served until it ends, and not closed meanwhile (but for an overflow).
        case listing(ListingInProgress)
        /// No more requests (after `QUIT`, its peer's end of input, or an overflow): its output is
        /// written, then it closes.
        case closing
        /// Unregistered, descriptor closed, forgotten by the table.
        case closed

        /// Whether a connection may go from this state to `next`: reading ⇄ paused, reading or
        /// paused → listing → paused, listing → listing (its progress), any open state →
        /// closing, anything → closed.
        func leads(to next: Lifecycle) -> Bool {
            switch (self, next) {
            case (.reading, .paused), (.paused, .reading), (.reading, .listing), (.paused, .listing), (.listing, .paused),
                 (.listing, .listing), (.reading, .closing), (.paused, .closing), (.listing, .closing), (_, .closed):
                return true
            default:
                return false
            }
        }

        /// Its name, for a failed transition's message.
        var name: String {
            switch self {
            case .reading: "reading"
            case .paused: "paused"
            case .listing: "listing"
            case .closing: "closing"
            case .closed: "closed"
            }
        }
    }

    /// A number unique within this daemon's life, for maps and logs.
    let id: Int
    /// The socket.
    let descriptor: Int32
    /// The uid of the connecting process (`SO_PEERCRED`).
    let peerUID: UInt32
    /// Where it is in its life; changed only by `move(to:)`.
    private(set) var lifecycle = Lifecycle.reading
    /// Splits incoming bytes into request lines.
    var framer = LineFramer()
    /// Replies and events waiting to be written.
    var output = OutputQueue()
    /// Its replies in request order behind changes the store decides later (etcd).
    var replies = ReplyOrder()
    /// The batch in which the client table last put this connection among those to write
    /// (`ClientTable.touch`), or -1 once it was taken out: events touch a subscriber once per
    /// line, and only the first of a batch need reach the table's set.
    var touchedInBatch = -1
    /// Bytes the socket did not take when its output was last written: how far behind the client
    /// was before the current batch (what the batch itself queues does not count).
    var unsentAfterLastWrite = 0
    /// The line the framer gives next was put back (`ServeVerdict.notNow`): it is served the
    /// next time whatever its user's share, so it cannot be put back for ever.
    var lineWasPutBack = false
    /// Sent `ERR overflow` and closing: not cut off again (a connection closing after `QUIT`
    /// that never reads is still cut off, for its user's limit).
    var isCutOff = false
    /// Its uid's output sum (`--output-limit-per-user`); nil for root, who is not limited.
    var userOutput: UserOutput?
    /// The footprint of its output as its user's sum last counted it (`ClientTable.count`).
    var countedOutput = 0

    /// A listing is in progress on it.
    var isListing: Bool {
        if case .listing = lifecycle { return true }
        return false
    }

    /// A reply is being produced over several batches (a listing, or a change in etcd): the
    /// connection is not read, and not closed, until it is done.
    var isReplyInProgress: Bool { isListing || replies.isHeld }

    /// Whether a change of `key` of this connection's is in flight.
    func isChanging(_ key: String) -> Bool { replies.isChanging(key) }

    /// No more requests are read (closing or closed).
    var isClosing: Bool {
        switch lifecycle {
        case .closing, .closed: true
        default: false
        }
    }

    /// Closed: unregistered, descriptor closed, forgotten by the table.
    var isClosed: Bool {
        if case .closed = lifecycle { return true }
        return false
    }

    /// Its socket is not read for now, but it is open and will be again: backpressure, a change
    /// in flight, or a listing.
    var isReadingPaused: Bool {
        switch lifecycle {
        case .paused, .listing: true
        default: false
        }
    }

    /// Called when the poller cannot watch the connection as asked (`epoll_ctl` failed): the
    /// client table closes it, since it could otherwise never be read or written again.
    var onPollerFailure: ((Connection, DaemonError) -> Void)?

    /// What the poller watches the connection for now (empty once closed).
    var watchedFor: EventPoller.Interest {
        token.map { poller.interest(of: $0) } ?? []
    }

    private let poller: EventPoller
    private var token: EventPoller.Token?
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

    /// Moves to `next`; any move `Lifecycle.leads(to:)` does not name is a bug, stopped here. A
    /// `LIST` that stops being this connection's listing (it ended, the connection closes, or
    /// another replaces it) gives its place in its user's count back now (`ListingQuota`), not
    /// when the last copy of it goes (a failed commit's record of its slices keeps one until the
    /// next batch).
    private func move(to next: Lifecycle) {
        guard lifecycle.leads(to: next) else {
            preconditionFailure("connection \(id) went from \(lifecycle.name) to \(next.name), which no connection does")
        }
        if case .listing(let current) = lifecycle, let permit = current.permit {
            let goesOn = if case .listing(let progress) = next { progress.permit === permit } else { false }
            if !goesOn { permit.giveBack() }
        }
        lifecycle = next
    }

    /// Registers the connection and starts reading. `readable` and `writable` run on the queue,
    /// within a batch, while the socket has input or (while waited for) room.
    ///
    /// The registration holds the connection strongly until `close` removes it: the `readable`
    /// handler may close the connection and drop the table's reference to it, and the handler
    /// still looks at it afterwards. (With an unowned reference that was a use after free, and a
    /// crash, whenever a peer hung up: a hang-up reports both readable and writable.)
    func start(readable: @escaping (Connection) -> Void, writable: @escaping (Connection) -> Void) throws(DaemonError) {
        token = try poller.register(descriptor, interest: .readable) { [self] readiness in
            if readiness.readable, case .reading = lifecycle {
                readable(self)
            }
            if readiness.writable && !isClosed {
                mayHaveRoom = true
                writable(self)
            }
        }
    }

    /// Stops reading for now, keeping the connection open; `resumeReading` reads again. Only a
    /// connection that is reading pauses (a listing or a closing one is not read anyway).
    func pauseReading() {
        guard case .reading = lifecycle else { return }
        move(to: .paused)
        updateInterest()
    }

    /// Reads again after `pauseReading`.
    func resumeReading() {
        guard case .paused = lifecycle else { return }
        move(to: .reading)
        updateInterest()
    }

    /// A listing begins (or goes on from `progress`): the connection is not read meanwhile.
    func list(_ progress: ListingInProgress) {
        let wasReading = if case .reading = lifecycle { true } else { false }
        move(to: .listing(progress))
        if wasReading { updateInterest() }
    }

    /// The listing ended: paused, to be read again once its framed requests are served.
    func endListing() {
        guard isListing else { return }
        move(to: .paused)
    }

    /// Stops reading requests; pending output is still written, then the connection closes (a
    /// listing in progress ends). The poller is told at the batch's flush
    /// (`applyDeferredInterest`), which most often closes the connection instead: a hang-up then
    /// costs no `epoll_ctl`. Until then the handler reads nothing (it reads only while `reading`).
    func stopReading() {
        guard !isClosing else { return }
        move(to: .closing)
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
        move(to: .closed)
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
        if case .reading = lifecycle { interest.insert(.readable) }
        if wantsRoom { interest.insert(.writable) }
        do throws(DaemonError) {
            try poller.setInterest(interest, for: token)
        } catch {
            onPollerFailure?(self, error)
        }
    }
}
