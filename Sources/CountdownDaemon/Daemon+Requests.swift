import CountdownCore
import Glibc

extension Daemon {
    /// The most requests of one connection handled in one batch before other work (the timer,
    /// other clients, the commit and the replies) gets a turn: a burst of thousands of pipelined
    /// requests must not hold due ticks back.
    static let requestsPerPass = 32

    /// How long one poller batch may spend on requests before it ends (commit, replies, events):
    /// what fell due meanwhile waits at most about this long, however many clients pipeline.
    static let batchTimeBudgetNanoseconds: Int64 = 150_000

    /// Whether the current batch has used its time for requests.
    var batchIsOutOfTime: Bool {
        SystemClock.now() >= batchDeadline
    }

    /// Handles complete lines the connection has buffered, in order: all of them, or up to
    /// `limit` and (checked every 16 lines) not past the batch's deadline.
    /// - Returns: how many lines were handled, or `limit` when the batch ran out of time.
    @discardableResult
    func handleLines(of connection: Connection, now: Instant, limit: Int? = nil) -> Int {
        let timeBounded = limit != nil
        let limit = limit ?? .max
        var clock: WallClockMapping?
        var handled = 0
        // Backpressure: past the threshold, lines wait in the framer until the replies drain.
        while handled < limit, !connection.isClosing, connection.output.byteCount < configuration.readPauseThreshold,
              let frame = connection.framer.nextFrame() {
            handled += 1
            if timeBounded && handled % 16 == 0 && batchIsOutOfTime {
                // This line is handled; the rest wait for the next batch.
                handled = limit
            }
            replyBuffer.removeAll(keepingCapacity: true)
            events.removeAll(keepingCapacity: true)
            switch frame {
            case .tooLong:
                WireEncoder.appendError(
                    ProtocolError(
                        .lineTooLong,
                        "request line is longer than \(LineFramer.maximumLineLength) bytes; it was discarded"
                    ),
                    to: &replyBuffer
                )
            case .line(let bytes):
                do {
                    guard let request = try RequestParser.parse(bytes) else { continue }
                    // Read the wall clock once per pass, and only when a request needs it.
                    let mapping = clock ?? SystemClock.mapping(at: now)
                    clock = mapping
                    try execute(request, from: connection, now: now, clock: mapping)
                } catch {
                    WireEncoder.appendError(error, to: &replyBuffer)
                }
            }
            connection.output.appendReply(replyBuffer)
            publish(events)
        }
        return handled
    }

    /// Runs one request, encoding its reply into `replyBuffer` and its events into `events`.
    private func execute(
        _ request: Request, from connection: Connection, now: Instant, clock: WallClockMapping
    ) throws(ProtocolError) {
        let uid = connection.peerUID
        switch request {
        case .start(let name, let milliseconds, let replace):
            let snapshot = try engine.start(name, milliseconds: milliseconds, replace: replace, requester: uid, now: now, events: &events)
            WireEncoder.appendOK(snapshot, clock: clock, to: &replyBuffer)
        case .status(let name):
            let snapshot = try engine.status(of: name, now: now)
            WireEncoder.appendCountdown(snapshot, clock: clock, to: &replyBuffer)
            WireEncoder.appendOK(count: 1, to: &replyBuffer)
        case .list:
            let snapshots = engine.list(now: now)
            for snapshot in snapshots {
                WireEncoder.appendCountdown(snapshot, clock: clock, to: &replyBuffer)
            }
            WireEncoder.appendOK(count: snapshots.count, to: &replyBuffer)
        case .cancel(let name):
            let snapshot = try engine.cancel(name, requester: uid, now: now, events: &events)
            WireEncoder.appendOK(snapshot, clock: clock, to: &replyBuffer)
        case .pause(let name):
            let snapshot = try engine.pause(name, requester: uid, now: now, events: &events)
            WireEncoder.appendOK(snapshot, clock: clock, to: &replyBuffer)
        case .resume(let name):
            let snapshot = try engine.resume(name, requester: uid, now: now, events: &events)
            WireEncoder.appendOK(snapshot, clock: clock, to: &replyBuffer)
        case .extend(let name, let milliseconds):
            let snapshot = try engine.extend(name, by: milliseconds, requester: uid, now: now, events: &events)
            WireEncoder.appendOK(snapshot, clock: clock, to: &replyBuffer)
        case .subscribe(let names):
            try subscribe(connection, to: names)
            WireEncoder.appendOK(names.isEmpty || connection.subscription == .all ? "subscribed all" : "subscribed \(subscriptionCount(connection))", to: &replyBuffer)
            // The current state right after the OK, so a status bar draws its first frame at once.
            let filter: Set<String>? = names.isEmpty ? nil : Set(names)
            for snapshot in engine.activeSnapshots(matching: filter, now: now) {
                WireEncoder.appendSnapshotEvent(sequence: engine.lastSequence, snapshot, clock: clock, to: &replyBuffer)
            }
        case .unsubscribe:
            unsubscribe(connection)
            WireEncoder.appendOK("unsubscribed", to: &replyBuffer)
        case .ping:
            WireEncoder.appendOK("pong", to: &replyBuffer)
        case .quit:
            WireEncoder.appendOK("bye", to: &replyBuffer)
            connection.stopReading()
        }
    }
}
