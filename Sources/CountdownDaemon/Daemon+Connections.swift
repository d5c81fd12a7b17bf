import CountdownCore
import Dispatch
import Glibc

extension Daemon {
    /// Accepts every pending connection, until none is left: the source may not fire again for
    /// connections already waiting. After a burst it yields to other handlers and continues in a
    /// queued block; out of descriptors, it retries shortly instead of spinning.
    func acceptPending() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let listener else { return }
        for _ in 0..<256 {
            switch listener.acceptOne() {
            case .accepted(let descriptor):
                accept(descriptor)
            case .drained:
                return
            case .retryLater:
                logger.log(.warning, "cannot accept a connection: out of descriptors; retrying in 100 ms")
                queue.asyncAfter(deadline: .now() + .milliseconds(100)) { [self] in acceptPending() }
                return
            }
        }
        queue.async { [self] in acceptPending() }
    }

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
        let connection = Connection(
            id: nextConnectionID,
            descriptor: descriptor,
            peerUID: UnixSocket.peerUID(descriptor) ?? UInt32.max,
            queue: queue,
            outputCoalesceThreshold: configuration.outputCoalesceThreshold
        )
        nextConnectionID += 1
        connections[connection.id] = connection
        var greeting: [UInt8] = []
        WireEncoder.appendGreeting(daemonVersion: DaemonConfiguration.version, to: &greeting)
        connection.output.appendReply(greeting)
        connection.startReading { [unowned self] connection in readable(connection) }
        flush(connection)
    }

    /// Reads what the socket has and handles each complete line, leaving the replies for the end
    /// of the batch.
    ///
    /// It reads until `EAGAIN` or end of file, never less: a Dispatch read source may not fire
    /// again for data (or an EOF) that was already there when it last fired. After a fair share
    /// (`requestsPerPass` requests) it yields to the timer and other clients and continues in a
    /// block queued behind them; lines already read wait in the framer meanwhile.
    func readable(_ connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !connection.isClosed, !connection.isReadingPaused else { return }
        let now = SystemClock.now()
        var budget = Self.requestsPerPass
        var drained = false
        while !connection.isClosing && connection.output.byteCount < configuration.readPauseThreshold {
            budget -= handleLines(of: connection, now: now, limit: budget)
            guard budget > 0 else { break }
            let count = readBuffer.withUnsafeMutableBytes { read(connection.descriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                connection.framer.append(readBuffer[0..<count])
            } else if count == 0 {
                // The peer closed its sending side: answer what it sent, then close.
                handleLines(of: connection, now: now)
                if connection.framer.hasPartialLine {
                    logger.log(.debug, "connection \(connection.id) closed mid-line; the partial request was dropped")
                }
                connection.stopReading()
                drained = true
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                drained = true
                break
            } else {
                close(connection)
                return
            }
        }
        if connection.output.byteCount >= configuration.readPauseThreshold {
            connection.pauseReading()
        } else if !drained && !connection.isClosing {
            let id = connection.id
            queue.async { [self] in
                if let connection = connections[id] { readable(connection) }
            }
        }
        pendingFlush[connection.id] = connection
        scheduleBatchEnd()
    }

    /// After a paused connection's replies drained: handle the lines it already sent, then read
    /// again. Their replies go out with the next batch, after its commit, like any others.
    private func resumeAfterBackpressure(_ connection: Connection) {
        handleLines(of: connection, now: SystemClock.now())
        if connection.output.byteCount < configuration.readPauseThreshold {
            connection.resumeReading()
        }
        pendingFlush[connection.id] = connection
        scheduleBatchEnd()
    }

    /// Writes what the connection has queued; waits for writability when the socket is full.
    func flush(_ connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !connection.isClosed else { return }
        switch connection.output.write(to: connection.descriptor, scratch: &scratch) {
        case .drained:
            connection.stopWaitingForWritable()
            if connection.isClosing {
                close(connection)
            } else if connection.isReadingPaused {
                resumeAfterBackpressure(connection)
            }
        case .wouldBlock:
            connection.waitUntilWritable { [unowned self] connection in flush(connection) }
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
        flush(connection)
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
