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
        let began = time.now()
        let clock = time.mapping(at: began)
        // The time every countdown is restored as of: taken before reading, so that no deadline
        // passes between being read as ahead and being scheduled.
        let now = time.now()
        // Nobody is subscribed yet: restored countdowns are scheduled for their deadlines only.
        engine.setTicksEnabled(false, now: now)
        beginBatch()
        events.removeAll(keepingCapacity: true)
        // Those whose deadline passed while the daemon was down wait, then go in deadline order,
        // so their late `done`s come out in the order they were due. The rest go straight into
        // the engine as they are read, in no order (the scheduler orders them): sorting a
        // million took a fifth of the start-up, and gathering them first, a third.
        var late: [(countdown: Countdown, hash: UInt32, fromSnapshot: Bool)] = []
        // A batch of the snapshot's rows, or (`replacing`) of the journal's later states, each
        // of which replaces whatever the snapshot restored under its name.
        func restore(_ batch: inout RestoreBatch, replacing: Bool) {
            if batch.hasLateCountdowns {
                for (countdown, hash) in batch.takeLateCountdowns() {
                    late.append((countdown, hash, !replacing))
                }
            }
            engine.restore(batch, replacing: replacing, events: &events)
        }
        var recovered: StateJournal.Recovered
        do throws(StorageError) {
            recovered = try journal.recover(
                clock: clock, asOf: now, bootID: SystemClock.bootID, replayDepth: configuration.replayEventsPerUser,
                prepare: { engine.reserveCapacity(forAdditional: $0) },
                restore: { restore(&$0, replacing: false) },
                replace: { restore(&$0, replacing: true) }
            )
        } catch {
            throw .storage("cannot start: \(error); \(error.advice)")
        }
        for remark in recovered.remarks {
            logger.log(.warning, remark)
        }
        let restoringLate = time.now()
        // A late one of the snapshot's that the journal changed since is not the one that holds.
        if late.contains(where: \.fromSnapshot) {
            late.removeAll { $0.fromSnapshot && recovered.journalChanged($0.countdown.name, $0.hash) }
        }
        late.sort { ($0.countdown.deadline ?? now) < ($1.countdown.deadline ?? now) }
        // Late `done`s are numbered after everything stored.
        engine.continueSequence(after: recovered.lastSequence)
        engine.continueOwnerSequences(recovered.ownerSequences)
        for (countdown, hash, _) in late {
            engine.restore(countdown, hash: hash, now: now, events: &events)
        }
        ring = recovered.ring
        // Finished ones whose retention ended while the daemon was down are forgotten now (but
        // on a replica), each with its `removed`, stored in this batch like any other.
        engine.settleAfterRestore(now: now, events: &events)
        publish(events)
        journal.startWriting()
        enter(.sealing)
        // Late `done`s are time's doing: released even when storage cannot take them yet.
        _ = journal.commit()
        release(batch.lifecycleEvents)
        retryStorageWhileFailing()
        enter(.flushing)  // Nothing to write: no client is connected yet.
        enter(.idle)
        let milliseconds = time.now().nanoseconds(since: began) / 1_000_000
        let finishing = time.now().nanoseconds(since: restoringLate) / 1_000_000
        logger.log(.notice, "restored \(engine.runningCount) running, \(engine.pausedCount) paused and \(engine.finishedCount) finished countdowns from \(recovered.sources) in \(configuration.stateDirectory), in \(milliseconds) ms (history \(recovered.historyMilliseconds) ms, countdowns \(recovered.countdownsMilliseconds) ms with the journal's \(recovered.journalMilliseconds) ms beside them and \(recovered.waitedForJournalMilliseconds) ms waiting for it, \(late.count) late ones and the first batch \(finishing) ms)")
    }

    /// Watches the state directory with inotify, so a deletion is handled at once. Without
    /// inotify (its limits reached), the daemon runs on and notices at its next commit, as it
    /// would anyway, and says so.
    func watchStateDirectory(poller: EventPoller) {
        do throws(DaemonError) {
            stateWatcher = try StateDirectoryWatcher(directory: journal.directory, poller: poller) { [unowned self] in
                // After the batch, between batches, once per burst of events.
                guard !stateCheckScheduled else { return }
                stateCheckScheduled = true
                later.schedule(at: time.now()) { [unowned self] _ in
                    stateCheckScheduled = false
                    checkStateDirectory()
                }
            }
        } catch {
            logger.log(.warning, "cannot watch the state directory (\(error)); a deleted directory is noticed only at the next change, not at once")
        }
    }

    /// The state directory changed: if it was lost, it is recreated now and a full snapshot of
    /// what is in memory started, so an idle daemon loses nothing at its next stop or kill.
    func checkStateDirectory() {
        dispatchPrecondition(condition: .onQueue(queue))
        journal.checkDirectory()
        retryStorageWhileFailing()
        takeSnapshotIfDue()
        service.report(statusCounts(), now: time.now())
        stateWatcher?.watch()
    }

    /// Starts the once-a-second storage retry whenever storage is failing, whoever noticed
    /// (a commit, the directory watcher, a snapshot); idempotent.
    func retryStorageWhileFailing() {
        guard case .failing = journal.health else { return }
        service.startRetrying(now: time.now()) { [unowned self] in retryStorage() }
    }

    /// A snapshot finished (on its own queue, handed back outside any batch): what it leaves to
    /// do (another snapshot after a lost directory, a retry, the status) is done after a batch,
    /// which the delayed work's timer brings about at once.
    ///
    /// One that failed while the recreated directory awaits it is tried again when the journal
    /// says (a second later), by a wake-up of its own: an idle daemon has nothing else to wake it.
    func snapshotLanded() {
        later.schedule(at: time.now()) { [unowned self] _ in
            retryStorageWhileFailing()
            takeSnapshotIfDue()
            service.report(statusCounts(), now: time.now())
            if let retry = journal.awaitedSnapshotRetry, retry > time.now() {
                later.schedule(at: retry) { [unowned self] _ in
                    takeSnapshotIfDue()
                    service.report(statusCounts(), now: time.now())
                }
            }
        }
    }
}
