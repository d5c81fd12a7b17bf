import CountdownCore
import Dispatch
import Glibc

extension Daemon {
    /// Accepts pending connections, up to a fair share per batch: the poller reports the
    /// listening socket again while more wait. Out of descriptors, it stops watching the socket
    /// for 100 ms instead of spinning on it.
    func acceptPending() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let listener else { return }
        for _ in 0..<Self.acceptsPerBatch {
            switch listener.acceptOne() {
            case .accepted(let descriptor):
                accept(descriptor)
            case .drained:
                return
            case .retryLater:
                logger.log(.warning, "cannot accept a connection: out of descriptors; retrying in 100 ms")
                listener.setAccepting(false)
                queue.asyncAfter(deadline: .now() + .milliseconds(100)) { [self] in
                    if !isStopping { self.listener?.setAccepting(true) }
                }
                return
            }
        }
    }

    /// The most connections accepted in one batch.
    static let acceptsPerBatch = 256

    /// A new client: greet it, or turn it away when the connection limit is reached.
    func accept(_ descriptor: Int32) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !isStopping else {
            Glibc.close(descriptor)
            return
        }
        guard connections.count < configuration.maximumConnections else {
            var line: [UInt8] = []
            WireEncoder.appendError(
                ProtocolError(.limit, "too many connections (\(configuration.maximumConnections)); close idle clients or raise --max-connections"),
                to: &line
            )
            _ = line.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            Glibc.close(descriptor)
            logger.log(.warning, "refused a connection: limit of \(configuration.maximumConnections) reached")
            return
        }
        // The poller exists from start-up on; connections are only accepted after that.
        guard let poller else {
            Glibc.close(descriptor)
            return
        }
        let connection = Connection(
            id: nextConnectionID,
            descriptor: descriptor,
            peerUID: UnixSocket.peerUID(descriptor) ?? UInt32.max,
            poller: poller,
            outputCoalesceThreshold: configuration.outputCoalesceThreshold
        )
        nextConnectionID += 1
        do throws(DaemonError) {
            try connection.start(
                readable: { [unowned self] connection in readable(connection) },
                // Room to write: written in this batch's flushing phase, after its commit.
                writable: { [unowned self] connection in pendingFlush[connection.id] = connection }
            )
        } catch {
            logger.log(.warning, "cannot watch a new connection: \(error); closing it")
            connection.close()
            return
        }
        connections[connection.id] = connection
        var greeting: [UInt8] = []
        WireEncoder.appendGreeting(daemonVersion: DaemonConfiguration.version, to: &greeting)
        connection.output.mark(batch: batch.number)
        connection.output.appendReply(greeting)
        pendingFlush[connection.id] = connection
    }

    /// Reads what the socket has and handles each complete line, up to a fair share of
    /// `requestsPerPass` requests, leaving the replies for the end of the batch.
    ///
    /// A read shorter than the buffer emptied the socket; the poller reports it again when more
    /// arrives (or at end of file). A connection that used its share with lines still framed is
    /// served first in the next batch, after the timer and the commit of this one.
    func readable(_ connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !connection.isClosed, !connection.isReadingPaused else { return }
        let now = SystemClock.now()
        var budget = batchIsOutOfTime ? 0 : Self.requestsPerPass
        budget -= handleLines(of: connection, now: now, limit: budget)
        while budget > 0 && !connection.isClosing && connection.output.byteCount < configuration.readPauseThreshold {
            let count = readBuffer.withUnsafeMutableBytes { buffer in
                let count = read(connection.descriptor, buffer.baseAddress, buffer.count)
                if count > 0 {
                    connection.framer.append(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                }
                return count
            }
            if count > 0 {
                budget -= handleLines(of: connection, now: now, limit: budget)
                if count < readBuffer.count { break }
            } else if count == 0 {
                // The peer closed its sending side: answer what it sent, then close.
                handleLines(of: connection, now: now)
                if connection.framer.hasPartialLine {
                    logger.log(.debug, "connection \(connection.id) closed mid-line; the partial request was dropped")
                }
                connection.stopReading()
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                break
            } else {
                close(connection)
                return
            }
        }
        if connection.output.byteCount >= configuration.readPauseThreshold {
            connection.pauseReading()
        } else if budget <= 0 && !connection.isClosing {
            connectionsWithUnreadLines[connection.id] = connection
        }
        pendingFlush[connection.id] = connection
    }

    /// Writes what the connection has queued; waits for writability when the socket is full.
    /// Only in a batch's flushing phase (after its commit) or while stopping: output never leaves
    /// before the changes it reports are durable.
    func flush(_ connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        precondition(phase == .flushing || isStopping, "output written outside the flushing phase")
        guard !connection.isClosed else { return }
        switch connection.output.write(to: connection.descriptor, scratch: &scratch) {
        case .drained:
            connection.stopWaitingForWritable()
            if connection.isClosing {
                close(connection)
            } else if connection.isReadingPaused {
                // Its framed lines are served first in the next batch, never during a flush: a
                // flush comes after the commit, and their changes belong to the next one.
                connectionsWithUnreadLines[connection.id] = connection
            }
        case .wouldBlock:
            connection.waitUntilWritable()
        case .failed:
            close(connection)
        }
    }

    /// Forgets a connection and its subscriptions, and closes it.
    func close(_ connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        unsubscribe(connection)
        connections[connection.id] = nil
        pendingFlush[connection.id] = nil
        connectionsWithUnreadLines[connection.id] = nil
        connection.close()
    }

    /// Disconnects a connection that fell too far behind: its unsent output is dropped (except
    /// the rest of a half-sent line) and replaced by `ERR overflow`, which is written as soon as
    /// the socket has room; then the connection closes. A client that never reads again is closed
    /// after a short grace period, so it holds nothing but a descriptor until then.
    func overflow(_ connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        logger.log(
            .warning,
            "connection \(connection.id) (uid \(connection.peerUID)) had more than \(configuration.outputHardLimit) bytes unsent; disconnecting it"
        )
        unsubscribe(connection)
        connection.stopReading()
        connection.output.discardAllButCurrentLine()
        var line: [UInt8] = []
        WireEncoder.appendError(
            ProtocolError(.overflow, "this client fell more than \(configuration.outputHardLimit) bytes behind and is disconnected; reconnect and read faster"),
            to: &line
        )
        connection.output.appendReply(line)
        pendingFlush[connection.id] = connection
        let id = connection.id
        queue.asyncAfter(deadline: .now() + Self.overflowGracePeriod) { [self] in
            if let connection = connections[id] {
                close(connection)
            }
        }
    }

    /// How long an overflowed connection gets to read its `ERR overflow` before it is closed.
    static let overflowGracePeriod = DispatchTimeInterval.seconds(2)
}
