import CountdownCore
import Dispatch

extension Daemon {
    /// Locks the state directory and brings back every countdown and the replay ring from the
    /// snapshot and the journal. Runs before the socket is bound, so `READY=1` means the state
    /// is loaded. Countdowns that finished while the daemon was down are `done` now (late), and
    /// that is stored before anything else happens, so it is never announced twice.
    ///
    /// A state that cannot be read stops the start-up: an unreadable or damaged file never
    /// becomes an empty start. A state that can be read but not written starts the daemon with
    /// changes refused until storage works again.
    func recoverState() throws(DaemonError) {
        dispatchPrecondition(condition: .onQueue(queue))
        let now = SystemClock.now()
        let clock = SystemClock.mapping(at: now)
        let recovered: StateJournal.Recovered
        do throws(StorageError) {
            recovered = try journal.recover(clock: clock, bootID: SystemClock.bootID)
        } catch {
            throw .storage("cannot start: \(error); \(error.advice)")
        }
        for remark in recovered.remarks {
            logger.log(.warning, remark)
        }
        // Nobody is subscribed yet: restored countdowns are scheduled for their deadlines only.
        engine.setTicksEnabled(false, now: now)
        engine.continueSequence(after: recovered.lastSequence)
        ring = EventRing(capacity: configuration.replayEventCapacity, keptAfter: recovered.eventsKeptAfter)
        for event in recovered.events {
            ring.append(event)
        }
        // In deadline order, so late `done`s come out in the order they were due.
        let countdowns = recovered.countdowns.sorted {
            ($0.deadline ?? $0.finishedAt ?? now) < ($1.deadline ?? $1.finishedAt ?? now)
        }
        beginBatch()
        events.removeAll(keepingCapacity: true)
        for countdown in countdowns {
            engine.restore(countdown, now: now, events: &events)
        }
        publish(events)
        journal.startWriting()
        // Late `done`s are time's doing: released even when storage cannot take them yet.
        _ = journal.commit()
        release(batch.lifecycleEvents)
        if !journal.acceptsChanges {
            service.startRetrying { [unowned self] in retryStorage() }
        }
        phase = .idle
        logger.log(.notice, "restored \(engine.runningCount) running, \(engine.pausedCount) paused and \(engine.finishedCount) finished countdowns from \(recovered.sources) in \(configuration.stateDirectory)")
    }
}
