import CountdownCore
import Dispatch

extension Daemon {
    /// Where the engine's events go: each lifecycle event is noted by the journal with the
    /// countdown's new state and kept for release after the commit; every event goes to the
    /// fan-out. Nothing is written to a socket before the batch's commit.
    func publish(_ events: [CountdownEvent]) {
        dispatchPrecondition(condition: .onQueue(queue))
        // Events belong to a batch: noted before its commit, written after it.
        precondition(phase == .serving || phase == .sealing, "events published outside a batch")
        var clock: WallClockMapping?
        for event in events where event.kind.isLifecycle {
            let mapping = clock ?? SystemClock.mapping()
            clock = mapping
            journal.note(event, state: engine.persistentState(of: event.name, hint: event.slotHint), clock: mapping)
            batch.lifecycleEvents.append(event)
        }
        fanOut.deliver(events, batch: batch.number)
    }

    /// Logs a lifecycle event once it is released (after its commit): one line, with fields.
    func logLifecycle(_ event: CountdownEvent) {
        guard logger.threshold >= .info else { return }
        logger.log(.info, describe(event), fields: [
            "COUNTDOWN_NAME": event.name,
            "COUNTDOWN_OWNER_UID": "\(event.owner)",
            "COUNTDOWN_EVENT": event.kind.rawValue,
            "COUNTDOWN_REMAINING_MS": "\(event.remainingMilliseconds)",
            "COUNTDOWN_TOTAL_MS": "\(event.totalMilliseconds)",
            "COUNTDOWN_SEQ": "\(event.sequence)",
        ])
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
