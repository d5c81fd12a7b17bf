import CountdownCore
import Dispatch

extension Daemon {
    /// Adds names to a connection's subscription; no names subscribes it to everything.
    /// - Throws: `limit` when the connection would follow more names than allowed.
    func subscribe(_ connection: Connection, to names: [String]) throws(ProtocolError) {
        dispatchPrecondition(condition: .onQueue(queue))
        if names.isEmpty {
            // Not counted as a moment without subscribers: ticks stay on.
            unsubscribe(connection, updatingTicks: false)
            subscriberCount += 1
            connection.subscription = .all
            allSubscribers[connection.id] = connection
            updateTickInterest()
            return
        }
        var followed: Set<String>
        switch connection.subscription {
        case .all:
            return  // Already receives everything.
        case .none:
            followed = []
        case .names(let existing):
            followed = existing
        }
        let wanted = followed.union(names)
        guard wanted.count <= configuration.maximumSubscriptionsPerConnection else {
            throw ProtocolError(
                .limit,
                "a connection may follow at most \(configuration.maximumSubscriptionsPerConnection) names; SUBSCRIBE with no names follows all"
            )
        }
        for name in wanted.subtracting(followed) {
            nameSubscribers[name, default: [:]][connection.id] = connection
        }
        if connection.subscription == .none {
            subscriberCount += 1
        }
        connection.subscription = .names(wanted)
        updateTickInterest()
    }

    /// Ticks are computed only while someone is subscribed (see `CountdownEngine.ticksEnabled`).
    func updateTickInterest() {
        dispatchPrecondition(condition: .onQueue(queue))
        engine.setTicksEnabled(subscriberCount > 0, now: SystemClock.now())
    }

    /// How many names a connection follows (0 when it follows all or none).
    func subscriptionCount(_ connection: Connection) -> Int {
        if case .names(let names) = connection.subscription { return names.count }
        return 0
    }

    /// Stops all events to a connection.
    func unsubscribe(_ connection: Connection, updatingTicks: Bool = true) {
        switch connection.subscription {
        case .none:
            return
        case .all:
            allSubscribers[connection.id] = nil
        case .names(let names):
            for name in names {
                nameSubscribers[name]?[connection.id] = nil
                if nameSubscribers[name]?.isEmpty == true {
                    nameSubscribers[name] = nil
                }
            }
        }
        connection.subscription = .none
        subscriberCount -= 1
        if updatingTicks {
            updateTickInterest()
        }
    }

    /// Hands events to their subscribers: each encoded once, the same bytes queued on every
    /// matching connection. Lifecycle events are noted by the journal with the countdown's new
    /// state. Nothing is written before the batch's commit.
    func publish(_ events: [CountdownEvent]) {
        dispatchPrecondition(condition: .onQueue(queue))
        var clock: WallClockMapping?
        for event in events {
            if event.kind.isLifecycle {
                let mapping = clock ?? SystemClock.mapping()
                clock = mapping
                journal.note(event, state: engine.persistentState(of: event.name), clock: mapping)
                batch.lifecycleEvents.append(event)
            }
            // Most daemons have no per-name subscriber; then no name is hashed per event.
            let byName = nameSubscribers.isEmpty ? nil : nameSubscribers[event.name]
            if allSubscribers.isEmpty && byName == nil { continue }
            // Encoded once into a reused buffer; each subscriber's queue copies the bytes.
            eventBuffer.removeAll(keepingCapacity: true)
            WireEncoder.appendEvent(event, to: &eventBuffer)
            let tickName = event.kind == .tick ? event.name : nil
            for connection in allSubscribers.values {
                deliver(eventBuffer, tickName: tickName, to: connection)
            }
            if let byName {
                for connection in byName.values {
                    deliver(eventBuffer, tickName: tickName, to: connection)
                }
            }
        }
    }

    /// Logs a lifecycle event once it is released (after its commit): one line, with fields.
    func logLifecycle(_ event: CountdownEvent) {
        guard logger.threshold >= .info else { return }
        logger.log(.info, describe(event), fields: [
            "COUNTDOWN_NAME": event.name,
            "COUNTDOWN_EVENT": event.kind.rawValue,
            "COUNTDOWN_REMAINING_MS": "\(event.remainingMilliseconds)",
            "COUNTDOWN_TOTAL_MS": "\(event.totalMilliseconds)",
            "COUNTDOWN_SEQ": "\(event.sequence)",
        ])
    }

    private func deliver(_ line: [UInt8], tickName: String?, to connection: Connection) {
        guard !connection.isClosing else { return }
        connection.output.mark(batch: batch.number)
        connection.output.appendEvent(line, tickName: tickName)
        if connection.output.byteCount > configuration.outputHardLimit {
            overflow(connection)
        } else {
            pendingFlush[connection.id] = connection
        }
    }

    private func describe(_ event: CountdownEvent) -> String {
        let total = CountdownDuration.format(milliseconds: event.totalMilliseconds)
        switch event.kind {
        case .started: return "\(event.name): started, \(total)"
        case .done:
            if let late = event.lateMilliseconds { return "\(event.name): done, \(late) ms late" }
            return "\(event.name): done after \(total)"
        default:
            return "\(event.name): \(event.kind.rawValue), \(CountdownDuration.clock(milliseconds: event.remainingMilliseconds)) left of \(total)"
        }
    }
}
