import CountdownCore
import Dispatch
import Glibc

extension Daemon {
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

    /// Reads everything the socket has (up to a fair share), handles each complete line, and
    /// leaves the replies for the end of the batch.
    func readable(_ connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        let now = SystemClock.now()
        var reads = 0
        while reads < 16 && !connection.isClosing {
            let count = readBuffer.withUnsafeMutableBytes { read(connection.descriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                connection.framer.append(readBuffer[0..<count])
                handleLines(of: connection, now: now)
                reads += 1
                if count < readBuffer.count { break }  // Drained: the next read would say EAGAIN.
            } else if count == 0 {
                // The peer closed its sending side: answer what it sent, then close.
                if connection.framer.hasPartialLine {
                    logger.log(.debug, "connection \(connection.id) closed mid-line; the partial request was dropped")
                }
                connection.stopReading()
                break
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                break
            } else {
                close(connection)
                return
            }
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

    /// Sends `ERR overflow` (best effort) and closes a connection that fell too far behind.
    func overflow(_ connection: Connection) {
        logger.log(
            .warning,
            "connection \(connection.id) (uid \(connection.peerUID)) had more than \(configuration.outputHardLimit) bytes unsent; disconnected"
        )
        // A client that received part of a line gets it ended first, so the error is a line of its own.
        var line: [UInt8] = connection.output.isMidLine ? [UInt8(ascii: "\n")] : []
        WireEncoder.appendError(
            ProtocolError(.overflow, "this client fell more than \(configuration.outputHardLimit) bytes behind; reconnect and read faster"),
            to: &line
        )
        _ = line.withUnsafeBytes { send(connection.descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        close(connection)
    }
}
