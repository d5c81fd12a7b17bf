import CountdownCore
import Dispatch

/// Cluster mode (`--cluster`): the engine is a replica of the countdowns in etcd. Changes are
/// proposed with the engine's own rules (`CountdownEngine.proposal`, from `Daemon.change`) and
/// written with the batch's others in one etcd transaction (`GroupCommit`), each compared on
/// the revision of the change the replica holds; the replica changes only through the watch, so
/// every host announces every change once, numbered from its etcd revision and its place. At a
/// deadline or the end of retention, the host that wrote the countdown proposes the `done` (or
/// the removal), the others after a grace (`raceDueChanges`); it commits once, and all hosts
/// announce it.
extension Daemon {
    /// How many times a change is judged, against the newer state after each race it lost, all
    /// within its 3 s: each round some host wins, so many racers on one name still get answers
    /// (three left a third of unconditional REPLACEs under contention `busy`).
    static let clusterAttempts = 10

    /// Makes the replica (`ChangeStore.etcd`), wired to this daemon but not yet started, so the
    /// caller can hold it as the store before its first read can run `ready` (the first read
    /// may be applied inside `ClusterReplica.start`).
    func makeReplica(_ configuration: ClusterConfiguration, poller: EventPoller, ready: @escaping () -> Void) throws(DaemonError) -> ClusterReplica {
        engine.setTicksEnabled(false, now: time.now())
        let replica = try ClusterReplica(
            configuration: configuration, limits: self.configuration.engine, stateDirectory: self.configuration.stateDirectory,
            poller: poller, later: laterInBatch, queue: queue, logger: logger, time: time
        )
        replica.resume(from: engine.lastSequence)
        replica.load = { [unowned self] countdowns, sequence in loadReplica(countdowns, sequence: sequence) }
        replica.apply = { [unowned self] key, value, sequence in applyReplicated(key, value, sequence: sequence) }
        replica.holdsCountdown = { [unowned self] key in engine.persistentState(of: key) != nil }
        replica.onFirstLoad = ready
        return replica
    }

    /// A whole state read from etcd: at start, and again after etcd compacted away the history
    /// the watch needed. Countdowns no longer there are dropped; numbering continues after
    /// the read's `sequence`, and events before it can no longer be replayed.
    private func loadReplica(_ countdowns: [(key: String, value: ClusterValue)], sequence: UInt64) {
        let now = time.now()
        let clock = time.mapping(at: now)
        let present = Set(countdowns.map(\.key))
        // Each is also noted in the journal (a `snapshot` record numbered with the read), so the
        // copy kept in the state directory is whole after a restart.
        for name in engine.names where !present.contains(name) {
            if let gone = engine.persistentState(of: name) {
                journal.note(CountdownEvent(sequence: sequence, kind: .removed, name: name, remainingMilliseconds: 0, totalMilliseconds: gone.totalMilliseconds, owner: gone.owner), state: nil, clock: clock)
            }
            engine.revert(name, to: nil, now: now)
        }
        for (key, value) in countdowns {
            let state = value.persisted(key: key, clock: clock)
            journal.note(CountdownEvent(sequence: sequence, kind: .snapshot, name: key, remainingMilliseconds: 0, totalMilliseconds: state.totalMilliseconds, owner: state.owner), state: state, clock: clock)
            engine.revert(key, to: state, now: now)
        }
        engine.continueSequence(after: sequence)
        ring = EventRing(depth: configuration.replayEventsPerUser, keptAfter: engine.lastSequence)
        announceResync(now: now, clock: clock)
    }

    /// After a fresh read, what subscribers knew may be out of date (changes in the history etcd
    /// compacted away were never announced): each gets `RESYNC <seq>`, then snapshots of what it
    /// follows (by name: finished ones too, so a waiter learns of a `done` it missed).
    private func announceResync(now: Instant, clock: WallClockMapping) {
        for (connection, following, kinds) in fanOut.subscriptions {
            let state = clients.state(of: connection)
            guard state.takesOutput else { continue }
            let phase = state.phase
            let viewer = connection.peerUID
            replyBuffer.removeAll(keepingCapacity: true)
            WireEncoder.appendResync(sequence: engine.lastSequence, to: &replyBuffer)
            if kinds.includes(.snapshot) {
                switch following {
                case .all where phase != .listing:
                    beginActiveSnapshots(on: connection, phase: phase, clock: clock, now: now)
                case .prefix(let keyPrefix) where phase != .listing:
                    // The prefix as its user writes it.
                    let prefix = CountdownAddress.display(keyPrefix, owner: viewer, to: viewer)
                    beginActiveSnapshots(on: connection, phase: phase, prefix: prefix, clock: clock, now: now)
                case .names(let keys):
                    for key in keys.sorted() {
                        guard let snapshot = try? engine.status(of: key, now: now) else { continue }
                        WireEncoder.appendSnapshotEvent(sequence: engine.lastSequence, snapshot.shown(to: viewer), clock: clock, to: &replyBuffer)
                    }
                default:
                    break
                }
            }
            appendBesideEvents(to: connection)
        }
    }

    /// One change from the watch: applied, and announced numbered `sequence` (its revision and
    /// its place in its transaction).
    private func applyReplicated(_ key: String, _ value: ClusterValue?, sequence: UInt64) {
        let now = time.now()
        let state = value?.persisted(key: key, clock: time.mapping(at: now))
        // Like time's events, they stand whatever this batch's commit does (they are etcd's), and
        // each `done`'s lateness is measured when it is written, as on a daemon of its own.
        publishTimeEvents { changes in
            engine.applyReplicated(
                key, state: state, event: value?.event ?? .removed,
                eventRemainingMilliseconds: value?.eventRemainingMilliseconds ?? 0,
                replacedRemainingMilliseconds: value?.replacedRemainingMilliseconds, sequence: sequence, now: now, events: &changes
            )
        }
    }

    /// A change asked for by a client, computed against the replica (`Daemon.decide`), goes to
    /// etcd: its reply waits in its place behind a ticket until it is decided, and it is
    /// answered once the replica holds the change, or judged again after a lost race against
    /// the newer state (keeping its ticket).
    ///
    /// A new countdown (`creating`, its owner) first claims its quota slots, so that the limits
    /// hold across the fleet, not only on this host's count.
    /// - Returns: the ticket its reply waits behind.
    /// - Throws: `limit` or `unavailable` from the claim, before anything is held or sent.
    func proposeInCluster(
        _ key: String, _ proposal: CountdownProposal, creating: UInt32?, request: Request, uid: UInt32, connection: Connection,
        clock: WallClockMapping, cluster: ClusterReplica, attempt: ClusterReplica.Attempt
    ) throws(ProtocolError) -> StoreTicket {
        let claimed = try creating.map { owner throws(ProtocolError) in try cluster.claimSlots(for: owner) } ?? []
        let value = proposal.state.map { state in
            ClusterValue(
                state, event: proposal.event?.kind ?? .started, eventRemainingMilliseconds: proposal.event?.remainingMilliseconds ?? 0,
                replacedRemaining: proposal.replaced?.remainingMilliseconds, operation: cluster.nextOperation(), clock: clock
            )
        }
        let ticket = attempt.ticket ?? clients.hold(connection, changing: key)
        var attempt = attempt
        attempt.ticket = ticket
        // A new countdown holds its place against the limits until etcd has decided it.
        if let creating { creationsInFlight.add(creating) }
        // Compared on the change the replica holds (`.absent` when it holds none): after a
        // restart from the local copy that revision may have to be asked for first.
        let commit = { [unowned self] (expectation: ClusterReplica.Expectation) in
            commitInCluster(
                key, value, expecting: expectation, claiming: claimed, proposal: proposal, request: request, uid: uid,
                connection: connection, cluster: cluster, attempt: attempt, creating: creating
            )
        }
        guard engine.persistentState(of: key) != nil else {
            commit(.absent)
            return ticket
        }
        precondition(claimed.isEmpty, "only a new countdown claims quota slots")
        cluster.withRevision(of: key, by: attempt.answerBy) { [unowned self] revision in
            guard let revision else {
                // etcd could not be asked, or no longer has it while this host's copy does: the
                // copy is behind. Comparing on "absent" could bring back a deleted countdown.
                answer(connection, ticket: ticket) { out in
                    WireEncoder.appendError(
                        ProtocolError(.unavailable, "this host could not learn from etcd which change of '\(key)' it holds (etcd is unreachable, or this host's copy is behind), so the change was not made; try again in a moment").shown(to: uid),
                        to: &out
                    )
                }
                return
            }
            commit(.unchangedSince(revision))
        }
        return ticket
    }

    /// Sends a proposed change to etcd; answers the connection once it is decided, or judges the
    /// request again after a lost race.
    private func commitInCluster(
        _ key: String, _ value: ClusterValue?, expecting expectation: ClusterReplica.Expectation, claiming claimed: [QuotaSlots.Slot],
        proposal: CountdownProposal, request: Request, uid: UInt32, connection: Connection, cluster: ClusterReplica,
        attempt: ClusterReplica.Attempt, creating: UInt32?
    ) {
        guard let ticket = attempt.ticket else { preconditionFailure("a change is committed only once its reply has a place") }
        cluster.change(key, to: value, expecting: expectation, claiming: claimed, deadline: attempt.answerBy) { [unowned self] outcome in
            // A creation refused or failed no longer counts; one made counts until the replica
            // holds it (below).
            if let creating, !outcome.isCommitted { creationsInFlight.remove(creating) }
            switch outcome {
            case .committed(let revision):
                cluster.afterRevision(revision, answerBy: attempt.answerBy) { [unowned self] caughtUp in
                    if let creating { creationsInFlight.remove(creating) }
                    // Answered ahead of the copy: this client's next read says the copy is behind.
                    if !caughtUp { cluster.noteAnsweredAhead(of: revision) }
                    answer(connection, ticket: ticket) { out in
                        let now = time.now()
                        // Committed either way; from the replica once it has it, else as proposed.
                        let snapshot = (caughtUp ? try? engine.status(of: key, now: now) : nil) ?? proposal.reply
                        WireEncoder.appendOK(snapshot.shown(to: uid), clock: time.mapping(at: now), to: &out)
                    }
                }
            case .conflict(_, let revision):
                // Another host changed it first: once the replica has that change, the request
                // is judged again against it (a START then finds it running: busy).
                cluster.afterRevision(revision, answerBy: attempt.answerBy) { [unowned self] _ in
                    let now = time.now()
                    do throws(ProtocolError) {
                        let timeLeft = attempt.answerBy.nanoseconds(since: now) / 1_000_000
                        guard attempt.number < Self.clusterAttempts, timeLeft >= ClusterReplica.minimumRetryMilliseconds else {
                            throw ProtocolError(.busy, "'\(key)' was changed by other clients at the same moment (or, for a new countdown, the quota slots it claimed were taken by other hosts' creations), \(attempt.number) times in a row; try again")
                        }
                        try checkStorageAcceptsChanges()
                        // Only a change is judged again, and a change begins no reply in slices:
                        // where the connection is does not matter to it.
                        try execute(request, uid: uid, connection: connection, phase: .open, now: now, clock: time.mapping(at: now), attempt: attempt.next)
                    } catch {
                        answer(connection, ticket: ticket) { out in WireEncoder.appendError(error.shown(to: uid), to: &out) }
                    }
                }
            case .failed(let error):
                let what: String
                if case .ambiguous = error {
                    what = "etcd did not confirm the change, so it may or may not have been made (\(error)); check with STATUS, then try again"
                } else {
                    what = "the change could not be stored in etcd, so it was not made (\(error)); reads go on from this host's copy; try again once etcd is reachable"
                }
                answer(connection, ticket: ticket) { out in WireEncoder.appendError(ProtocolError(.unavailable, what), to: &out) }
            }
        }
    }

    /// Queues a reply that was waiting for etcd in its place (`ClientOutput.answer`): replies
    /// after it that were ready go out with it.
    private func answer(_ connection: Connection, ticket: StoreTicket, _ build: (inout [UInt8]) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        // At stop, closing the etcd transfers fails those in flight: their clients get the
        // SHUTDOWN line instead.
        guard !isStopping else { return }
        precondition(phase == .serving, "cluster replies are queued within a batch")
        guard clients.state(of: connection).phase != .closed else { return }
        var out: [UInt8] = []
        build(&out)
        batch.items.append((connection, .storeAnswer(out)))
        clients.send(.answer(ticket, out), to: connection, batch: batch.number)
    }

    /// Countdowns the replica found due. The `done` (or the removal at the end of retention) is
    /// made by the engine's own rules on a scratch copy (`late_ms` and all) and proposed in a
    /// transaction compared on the revision of the change the replica holds: the `started`,
    /// `resumed` or `extended` it finishes, never a revision read afresh. So it commits at most
    /// once: a host whose copy is behind fails its comparison and learns the outcome from the
    /// watch. Who proposes, and when, is `TakeOverPolicy`'s (`ClusterReplica.proposes`).
    func raceDueChanges() {
        guard let cluster = store.replica else { return }
        let due = engine.takeDue()
        guard !due.finish.isEmpty || !due.forget.isEmpty else { return }
        let now = time.now()
        let clock = time.mapping(at: now)
        // Most of a burst's due countdowns are on their way, or left to another live host: passed
        // over on the due instant the engine gave, before the engine is asked anything (they
        // come back every second).
        for change in due.finish where !cluster.isProposingDue(change.name) && cluster.proposes(change.name, dueAt: change.due, now: now) {
            let key = change.name
            guard engine.persistentState(of: key)?.state == .running else { continue }
            guard let finished = engine.dueDone(for: key, now: now), let state = finished.state else { continue }
            let value = ClusterValue(state, event: .done, eventRemainingMilliseconds: 0, operation: cluster.nextOperation(), clock: clock)
            cluster.withRevision(of: key) { [unowned self] revision in
                // Still running in the replica, at the revision it finishes: else someone was first.
                guard let revision, engine.persistentState(of: key)?.state == .running else { return }
                cluster.proposeDue(key, to: value, comparedOn: revision)
            }
        }
        for change in due.forget where !cluster.isProposingDue(change.name) && cluster.proposes(change.name, dueAt: change.due, now: now) {
            let key = change.name
            guard let state = engine.persistentState(of: key), !state.state.isActive else { continue }
            cluster.withRevision(of: key) { [unowned self] revision in
                guard let revision, engine.persistentState(of: key).map({ !$0.state.isActive }) == true else { return }
                cluster.proposeDue(key, to: nil, comparedOn: revision)
            }
        }
    }
}
