import CountdownCore
import Dispatch
import Glibc

extension Daemon {
    /// Opens the state database, moving an unusable one aside, and restores every countdown.
    /// Runs before the socket is bound, so `READY=1` means the state is loaded.
    func openStoreAndRestore() throws(DaemonError) {
        dispatchPrecondition(condition: .onQueue(queue))
        let directory = configuration.stateDirectory
        try Self.createDirectory(directory)
        let bootID = self.bootID
        var opened: (CountdownStore, CountdownStore.Contents)?
        do throws(SQLiteError) {
            let store = try CountdownStore(directory: directory, durability: configuration.durability)
            opened = (store, try store.load())
        } catch {
            let moved = CountdownStore.moveAside(directory: directory, unixSeconds: SystemClock.unixNanoseconds() / 1_000_000_000)
            logger.log(.error, "state database \(directory)/\(CountdownStore.fileName) is unusable (\(error)); \(moved.map { "moved it to \($0)" } ?? "could not move it aside") and starting with no countdowns")
            do throws(SQLiteError) {
                let store = try CountdownStore(directory: directory, durability: configuration.durability)
                opened = (store, try store.load())
            } catch {
                throw .storage("cannot create a state database in \(directory): \(error); check the directory's permissions or pass --state-dir")
            }
        }
        // `opened` is set on every path that did not throw.
        let (store, contents) = opened!
        self.store = store
        checkpointer = try? WALCheckpointer(path: store.path)
        for name in contents.unreadableRows {
            logger.log(.warning, "skipped an unreadable row for '\(name)' in the state database")
        }

        let now = SystemClock.now()
        let clock = SystemClock.mapping(at: now)
        let sameBoot = bootID != nil && bootID == contents.bootID
        // Nobody is subscribed yet: restored countdowns are scheduled for their deadlines only.
        engine.setTicksEnabled(false, now: now)
        engine.continueSequence(after: contents.lastSequence)
        reservedSequence = contents.lastSequence
        let watermark = doneWatermark(contents, clock: clock, sameBoot: sameBoot)
        let countdowns = contents.rows.map { persisted($0, clock: clock, sameBoot: sameBoot, doneThrough: watermark) }
            .sorted { ($0.deadline ?? $0.finishedAt ?? now) < ($1.deadline ?? $1.finishedAt ?? now) }
        events.removeAll(keepingCapacity: true)
        var forgotten = contents.unreadableRows
        for countdown in countdowns where !engine.restore(countdown, now: now, events: &events) {
            forgotten.append(countdown.name)
        }
        if !sameBoot {
            // The boot-clock deadlines on disk belong to another boot: rewrite every row.
            dirtyNames.formUnion(countdowns.map(\.name))
        }
        pendingDeletions.append(contentsOf: forgotten)
        engine.advance(to: now, events: &events)
        publish(events)
        // Restored countdowns that are done now (late) carry late_ms: store that once. Store the
        // new watermark too, so maintenance can fold every finished row.
        for event in events where event.kind == .done {
            dirtyNames.insert(event.name)
        }
        donePendingCommit = true
        commitBatch()
        maintainStore()
        if storageFailing {
            throw .storage("cannot write the state database \(store.path); check free space and permissions")
        }
        logger.log(.notice, "restored \(engine.runningCount) running, \(engine.pausedCount) paused and \(engine.finishedCount) finished countdowns from \(store.path)")
    }

    /// Writes every countdown changed in this batch in one transaction (group commit). Called at
    /// the end of each batch, before any reply or event of the batch is written to a socket.
    func commitBatch() {
        dispatchPrecondition(condition: .onQueue(queue))
        // Purged countdowns are deleted in bulk by `maintainStore`, not one by one.
        _ = engine.takePurgedNames()
        let needsReservation = engine.lastSequence > reservedSequence
        guard let store, !dirtyNames.isEmpty || !pendingDeletions.isEmpty || donePendingCommit || needsReservation else { return }
        let clock = SystemClock.mapping()
        var upserts: [StoredCountdown] = []
        upserts.reserveCapacity(dirtyNames.count)
        for name in dirtyNames {
            if let state = engine.persistentState(of: name) {
                upserts.append(storedRow(state, clock: clock))
            } else {
                pendingDeletions.append(name)
            }
        }
        do throws(SQLiteError) {
            let reservation = needsReservation ? engine.lastSequence + Self.sequenceReservationBlock : nil
            try store.commit(
                upserts: upserts, deletions: pendingDeletions, sequenceReservation: reservation,
                doneThrough: donePendingCommit
                    ? (engine.advancedThrough.nanoseconds, clock.unixMilliseconds(of: engine.advancedThrough)) : nil,
                bootID: bootIDStored ? nil : bootID
            )
            bootIDStored = true
            if let reservation {
                reservedSequence = reservation
            }
            if donePendingCommit {
                committedDoneThrough = engine.advancedThrough
                donePendingCommit = false
            }
            dirtyNames.removeAll(keepingCapacity: true)
            pendingDeletions.removeAll(keepingCapacity: true)
            if storageFailing {
                storageFailing = false
                logger.log(.notice, "the state database is writable again; all changes are stored")
            }
        } catch {
            // Keep the changes and try again with the next batch; say so loudly, once.
            if !storageFailing {
                logger.log(.error, "cannot write the state database \(store.path): \(error); changes are kept in memory and retried")
            }
            storageFailing = true
        }
    }

    /// How many event numbers one `last_seq` write reserves. Storing the sequence with every commit
    /// would add a write to each; instead a block is reserved ahead, and a restarted daemon
    /// continues after the block (its numbers jump, and never repeat).
    static let sequenceReservationBlock: UInt64 = 1 << 16

    /// How often `maintainStore` folds the done-through watermark into the rows and deletes
    /// finished rows past their retention.
    static let maintenanceInterval = DispatchTimeInterval.seconds(60)

    /// Runs the store's maintenance now, and again every `maintenanceInterval`.
    func maintainStore() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let store, !isStopping else { return }
        commitBatch()
        let clock = SystemClock.mapping()
        do throws(SQLiteError) {
            try store.maintain(
                doneThroughBootNanoseconds: committedDoneThrough.nanoseconds,
                finishedBeforeUnixMilliseconds: clock.unixMilliseconds - configuration.engine.retentionMilliseconds
            )
        } catch {
            logger.log(.warning, "state database maintenance failed: \(error); it is retried in a minute")
        }
        queue.asyncAfter(deadline: .now() + Self.maintenanceInterval) { [self] in maintainStore() }
    }

    /// The done-through watermark of the stored state, on this run's clock.
    private func doneWatermark(_ contents: CountdownStore.Contents, clock: WallClockMapping, sameBoot: Bool) -> Instant? {
        if sameBoot, let boot = contents.doneThroughBootNanoseconds {
            return Instant(nanoseconds: boot)
        }
        return contents.doneThroughUnixMilliseconds.map(clock.instant(ofUnixMilliseconds:))
    }

    /// A countdown's durable state as stored on disk.
    func storedRow(_ countdown: PersistedCountdown, clock: WallClockMapping) -> StoredCountdown {
        StoredCountdown(
            name: countdown.name,
            state: countdown.state,
            totalMilliseconds: countdown.totalMilliseconds,
            deadlineUnixMilliseconds: countdown.deadline.map(clock.unixMilliseconds(of:)),
            deadlineBootNanoseconds: countdown.deadline?.nanoseconds,
            remainingNanoseconds: countdown.remainingNanoseconds,
            finishedUnixMilliseconds: countdown.finishedAt.map(clock.unixMilliseconds(of:)),
            owner: countdown.owner,
            lateMilliseconds: countdown.lateMilliseconds
        )
    }

    /// A stored row on this run's clock. Within the same boot the boot-clock deadline is exact and
    /// immune to wall-clock steps made while the daemon was down; after a reboot the wall-clock
    /// deadline is all there is.
    ///
    /// A running row whose deadline is at or before the done-through watermark was already done
    /// (and reported) before the daemon stopped: it comes back `done`, silently.
    func persisted(_ row: StoredCountdown, clock: WallClockMapping, sameBoot: Bool, doneThrough: Instant?) -> PersistedCountdown {
        var deadline: Instant?
        if row.state == .running {
            if sameBoot, let boot = row.deadlineBootNanoseconds {
                deadline = Instant(nanoseconds: boot)
            } else {
                // A running row always has a wall-clock deadline; without one it is due now.
                deadline = clock.instant(ofUnixMilliseconds: row.deadlineUnixMilliseconds ?? clock.unixMilliseconds)
            }
            if let deadline, let doneThrough, deadline <= doneThrough {
                return PersistedCountdown(
                    name: row.name, state: .done, totalMilliseconds: row.totalMilliseconds, deadline: nil,
                    remainingNanoseconds: 0, finishedAt: deadline, owner: row.owner, lateMilliseconds: row.lateMilliseconds
                )
            }
        }
        return PersistedCountdown(
            name: row.name,
            state: row.state,
            totalMilliseconds: row.totalMilliseconds,
            deadline: deadline,
            remainingNanoseconds: row.remainingNanoseconds,
            finishedAt: row.finishedUnixMilliseconds.map(clock.instant(ofUnixMilliseconds:)),
            owner: row.owner,
            lateMilliseconds: row.lateMilliseconds
        )
    }

    private static func createDirectory(_ path: String) throws(DaemonError) {
        var prefix = ""
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            prefix += "/" + component
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST {
                throw .storage("cannot create the state directory \(path): \(String(cString: strerror(errno))); pass --state-dir")
            }
        }
    }
}
