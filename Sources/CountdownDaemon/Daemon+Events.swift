import CountdownCore
import Dispatch

extension Daemon {
    /// Where the engine's events go: each lifecycle event is noted by the journal with the
    /// countdown's new state and kept for release after the commit; every event goes to the
    /// fan-out. Nothing is written to a socket before the batch's commit.
    /// - Returns: how many event lines were queued on subscribers.
    @discardableResult
    func publish(_ events: [CountdownEvent]) -> Int {
        publish(events[...])
    }

    /// The same for a part of an array (the batch's events time caused, published where the
    /// engine appended them).
    @discardableResult
    func publish(_ events: ArraySlice<CountdownEvent>) -> Int {
        dispatchPrecondition(condition: .onQueue(queue))
        // Events belong to a batch: noted before its commit, written after it.
        precondition(phase == .serving || phase == .sealing, "events published outside a batch")
        var clock: WallClockMapping?
        // By index: a tick is only looked at, not copied out.
        for index in events.indices where events[index].kind.isLifecycle {
            let event = events[index]
            let mapping = clock ?? time.mapping()
            clock = mapping
            journal.note(event, state: Self.state(of: event.name, hint: event.slotHint, in: &engine), clock: mapping)
            batch.lifecycleEvents.append(event)
        }
        return fanOut.deliver(events, batch: batch.number)
    }

    /// Logs a lifecycle event once it is released (after its commit), with `--log-lifecycle`
    /// (or `--log-level debug`): one line, with fields.
    /// The countdown is named only with `--log-names` (or `--log-level debug`); otherwise the
    /// line and the fields say its `seq` and owner, which `SUBSCRIBE … SINCE` and the snapshot's
    /// `events` table also carry, and no name.
    ///
    /// At most `--log-lifecycle-limit` lines per 10 s: one user's 70,000 events a second must not
    /// flood the journal (and trip journald's own limit, which would hide everyone's lines); the
    /// rest are counted in one line.
    func logLifecycle(_ event: CountdownEvent, now: Instant) {
        guard configuration.logsLifecycle, lifecycleLog.isEnabled else { return }
        var fields = [
            ("COUNTDOWN_OWNER_UID", "\(event.owner)"),
            ("COUNTDOWN_EVENT", event.kind.rawValue),
            ("COUNTDOWN_REMAINING_MS", "\(event.remainingMilliseconds)"),
            ("COUNTDOWN_TOTAL_MS", "\(event.totalMilliseconds)"),
            ("COUNTDOWN_SEQ", "\(event.sequence)"),
        ]
        if configuration.logsNames {
            fields.insert(("COUNTDOWN_NAME", event.name), at: 0)
            lifecycleLog.warn("\(event.name): \(describe(event))", fields: fields, now: now)
        } else {
            lifecycleLog.warn("seq \(event.sequence) (uid \(event.owner)): \(describe(event))", fields: fields, now: now)
        }
    }

    /// What happened, without saying to which countdown.
    private func describe(_ event: CountdownEvent) -> String {
        let total = CountdownDuration.format(milliseconds: event.totalMilliseconds)
        switch event.kind {
        case .started: return "started, \(total)"
        case .done:
            if let late = event.lateMilliseconds { return "done, \(late) ms late" }
            return "done after \(total)"
        default:
            let cause = event.causedBySuspend ? " (the machine \(event.kind == .paused ? "fell asleep" : "woke"))" : ""
            return "\(event.kind.rawValue)\(cause), \(CountdownDuration.clock(milliseconds: event.remainingMilliseconds)) left of \(total)"
        }
    }
}
