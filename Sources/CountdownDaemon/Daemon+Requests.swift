import CountdownCore
import Dispatch
import Glibc

extension Daemon: RequestServer {
    /// The most requests of one connection handled in one batch before other work (the timer,
    /// other clients, the commit and the replies) gets a turn: a burst of thousands of pipelined
    /// requests must not hold due ticks back.
    static let requestsPerTurn = 32

    /// How long one poller batch may spend on requests before it ends (commit, replies, events):
    /// what fell due meanwhile waits at most about this long, however many clients pipeline.
    static let batchTimeBudgetNanoseconds: Int64 = 150_000

    /// The most a batch may spend on requests when commits are slow (`requestTimeBudget`).
    static let longestRequestTimeNanoseconds: Int64 = 2_000_000

    /// How long this batch may spend on requests: `batchTimeBudgetNanoseconds`; under
    /// `--durability power`, as long as the last commit took if that was longer, up to
    /// `longestRequestTimeNanoseconds`. There every batch waits for an `fdatasync` (about a
    /// millisecond here): with 150 µs of requests per sync, pipelining clients got a sync for
    /// every hundred or so `START`s, where Redis's `appendfsync always` syncs once for
    /// everything its loop read. Work and sync then stay in proportion, and what falls due
    /// waits at most about two syncs. (Under `process`, a commit is a `pwrite` to the page
    /// cache, and the budget stays as it is, for the lateness targets.)
    var requestTimeBudget: Int64 {
        guard configuration.durability == .power else { return Self.batchTimeBudgetNanoseconds }
        return min(max(Self.batchTimeBudgetNanoseconds, lastCommitNanoseconds), Self.longestRequestTimeNanoseconds)
    }

    /// However late the batch, this many connections get a turn in it (of one request, or one
    /// read, each past the time budget), so every batch makes progress. Without it, 9,000 clients
    /// hanging up at once livelocked the daemon: going through the connections carried over used
    /// the whole budget before the first one was served, so each was carried over again, every
    /// batch, at 100 % CPU, and nobody was served.
    static let minimumTurnsPerBatch = 64

    /// What one non-root uid's requests may cost in one batch (`BatchRecord.charge`): one per
    /// request and one per event line queued on a subscriber. Past it, that uid's connections
    /// wait for the next batch, whatever time is left: a user whose every change goes out to 250
    /// subscribers of its own cannot make the batch that serves everyone else long. About 1 ms
    /// of work; a request that alone costs more is still served, one per batch.
    static let workPerUserPerBatch = 8192
    /// The most `LIST`s one non-root user may have in progress at once (`listingQuota`).
    static let listsPerUser = 8
    /// What following one name costs, in those units (its subscription, tick interest and
    /// snapshot: about 2 µs, measured as 50 connections followed 10,000 names each in lines of
    /// 300): some 500 names a batch for one user.
    static let workPerSubscribedName = 16

    /// A connection's turn begins (`RequestServer`): what fell due runs first, so its requests
    /// see the engine as of now, and what they change can be undone without touching what time
    /// did. A fair share of `requestsPerTurn` requests, none past the batch's time (but for the
    /// first `minimumTurnsPerBatch` turns, one each), none once the uid had its share.
    func beginTurn(of connection: Connection) -> Int {
        dispatchPrecondition(condition: .onQueue(queue))
        precondition(phase == .serving, "requests are read only while a batch is serving")
        let now = time.now()
        turn = Turn(now: now)
        guard batch.work(of: connection.peerUID) < Self.workPerUserPerBatch else {
            // This uid had its share of the batch; the next batch serves it first. Its turns
            // are not among the `minimumTurnsPerBatch` every batch gives: 50 connections of one
            // user carried over took them all, and root's PING waited 1.2 s.
            return 0
        }
        turnsThisBatch += 1
        let budget = !batchIsOutOfTime ? Self.requestsPerTurn : turnsThisBatch <= Self.minimumTurnsPerBatch ? 1 : 0
        advanceTime(to: now)
        return budget
    }

    /// Whether the current batch has used its time for requests.
    var batchIsOutOfTime: Bool {
        time.now() >= batchDeadline
    }

    /// Serves one framed line of `connection` (`RequestServer`), as of its turn's start. A
    /// `bounded` turn ends past the batch's deadline, or past the uid's share of the batch
    /// (`workPerUserPerBatch`). The deadline is checked after every 16 units of work (a request,
    /// and each event line it queued): every 16 plain requests, but after each one that went out
    /// to 16 subscribers or more, so a user whose changes fan out far overshoots the deadline by
    /// one request, not by sixteen.
    func serve(_ frame: LineFramer.Frame, of connection: Connection, bounded: Bool) -> ServeVerdict {
        let now = turn.now
        replyBuffer.removeAll(keepingCapacity: true)
        events.removeAll(keepingCapacity: true)
        var quit = false
        var names = 0
        switch frame {
        case .tooLong:
            let error = ProtocolError(
                .lineTooLong,
                "request line is longer than \(LineFramer.maximumLineLength) bytes; it was discarded"
            )
            batch.items.append((connection, .failed(error)))
            WireEncoder.appendError(error, to: &replyBuffer)
        case .line(let bytes):
            var parsed = false
            do throws(ProtocolError) {
                guard let request = try RequestParser.parse(bytes) else { return .next }
                if bounded, !connection.lineWasPutBack, case .subscribe(let addresses, _, _, _) = request, !addresses.isEmpty {
                    // Its cost is known before it is served: one that would take a user already
                    // served in this batch past its share waits for the next batch, where it
                    // comes first (served past the share, lines of 300 names made root's
                    // PINGs wait 2-3 ms while 50 connections joined).
                    let used = batch.work(of: connection.peerUID)
                    if used > 0 && used + Self.workPerSubscribedName * addresses.count > Self.workPerUserPerBatch {
                        // The share counts as used: the user's other connections wait too,
                        // without a turn each (nor a parse).
                        batch.charge(connection.peerUID, Self.workPerUserPerBatch - used)
                        warnShareUsed(by: connection.peerUID, now: now)
                        return .notNow
                    }
                }
                parsed = true
                batch.items.append((connection, .request(request)))
                quit = request == .quit
                if case .subscribe(let addresses, _, _, _) = request { names = addresses.count }
                // Read the wall clock once per turn, and only when a request needs it.
                let mapping = turn.clock ?? time.mapping(at: now)
                turn.clock = mapping
                try execute(request, from: connection, phase: .open, now: now, clock: mapping)
            } catch {
                if !parsed {
                    batch.items.append((connection, .failed(error)))
                }
                WireEncoder.appendError(error, to: &replyBuffer)
            }
        }
        appendReply(to: connection)
        // A unit per request, per event line it queued on a subscriber, 8 per name a SUBSCRIBE
        // follows (its subscription, tick interest and snapshot took about 3 µs each; 50 lines
        // of 500 names used to be one batch's work), and one per 64 bytes of its reply (about a
        // line).
        let cost = 1 + publish(events) + Self.workPerSubscribedName * names + replyBuffer.count / 64
        let verdict = afterServing(connection, cost: cost, bounded: bounded, now: now)
        return quit ? .quit : verdict
    }

    /// Logs (at most once per 10 s) that a uid's requests wait for the next batch.
    private func warnShareUsed(by uid: UInt32, now: Instant) {
        shareUsed.warn(
            "uid \(uid)'s requests used their share of a batch (\(Self.workPerUserPerBatch) requests and event lines queued for its subscribers); the rest wait for the next batch, so that other users are served meanwhile",
            now: now
        )
    }

    /// Charges a served request's cost to its uid, and says whether the turn goes on.
    private func afterServing(_ connection: Connection, cost: Int, bounded: Bool, now: Instant) -> ServeVerdict {
        let work = batch.charge(connection.peerUID, cost)
        guard bounded else { return .next }
        if work >= Self.workPerUserPerBatch {
            warnShareUsed(by: connection.peerUID, now: now)
            return .endTurn  // This uid had its share of the batch: the rest wait.
        }
        turn.workSinceTimeCheck += cost
        if turn.workSinceTimeCheck >= 16 {
            turn.workSinceTimeCheck = 0
            if batchIsOutOfTime { return .endTurn }  // This line is served; the rest wait.
        }
        return .next
    }

    /// A closed (or cut off) connection's subscriptions are forgotten (`RequestServer`).
    func connectionClosed(_ connection: Connection) {
        fanOut.unsubscribe(connection)
    }

    /// A drained subscriber takes ticks again (`RequestServer`).
    func outputDrained(_ connection: Connection) {
        fanOut.outputDrained(connection)
    }

    /// Queues `replyBuffer` on the connection, remembering where this batch's output starts (or,
    /// while changes of the connection's are in etcd, after their replies).
    func appendReply(to connection: Connection) {
        clients.send(.reply(replyBuffer), to: connection, batch: batch.number)
    }

    /// Queues `replyBuffer` on the connection's output now, as events are, even while its changes
    /// are in etcd: a subscription's `RESYNC` and snapshots belong with its events, and a
    /// listing's slices (which begin only when no change waits) keep their backpressure.
    func appendBesideEvents(to connection: Connection) {
        clients.send(.besideEvents(replyBuffer), to: connection, batch: batch.number)
    }

    /// Runs one request, encoding its reply into `replyBuffer` and its events into `events`.
    /// A change is refused with `unavailable` while storage cannot take it, and otherwise first
    /// records how to undo it. Names are resolved in the client's namespace (`CountdownAddress`),
    /// and shown to it as it would write them. `phase` is where the connection is
    /// (`ClientTable.state(of:)`; open in its turn), for a reply in slices (`beginListing`).
    func execute(
        _ request: Request, from connection: Connection, phase: ClientTable.ConnectionState.Phase, now: Instant, clock: WallClockMapping
    ) throws(ProtocolError) {
        let uid = connection.peerUID
        if request.isMutation {
            try checkStorageAcceptsChanges()
        }
        do throws(ProtocolError) {
            try execute(request, uid: uid, connection: connection, phase: phase, now: now, clock: clock)
        } catch {
            throw error.shown(to: uid)
        }
    }

    /// Runs one request; `attempt` is the judgement of a change after it lost a race in etcd
    /// (cluster mode; `nil` for the first).
    func execute(
        _ request: Request, uid: UInt32, connection: Connection, phase: ClientTable.ConnectionState.Phase, now: Instant, clock: WallClockMapping,
        attempt: ClusterReplica.Attempt? = nil
    ) throws(ProtocolError) {
        /// A countdown as `uid` sees it.
        func shown(_ snapshot: CountdownSnapshot) -> CountdownSnapshot {
            snapshot.shown(to: uid)
        }
        /// Runs a change of `key` where requests meet the engine (`change`).
        func change(
            _ key: String, _ body: (inout CountdownEngine, inout [CountdownEvent]) throws(ProtocolError) -> CountdownSnapshot
        ) throws(ProtocolError) {
            do throws(ProtocolError) {
                try self.change(key, request: request, uid: uid, connection: connection, now: now, clock: clock, attempt: attempt ?? .first(at: now), body)
            } catch where error.code == .notFound && !error.fields.contains(where: { $0.key == "state" }) {
                // No such countdown in this host's copy (one that finished says `state=`): in
                // cluster mode, with the copy's revision, and "may exist" while it is behind.
                let (owner, _) = CountdownAddress.split(key)
                throw store.notFound(error, name: CountdownAddress.display(key, owner: owner, to: uid), now: now)
            }
        }
        switch request {
        case .start(let address, let milliseconds, let replace, let onSuspend, let cycle):
            let (key, owner) = try CountdownAddress.resolve(address, requester: uid)
            try change(key) { engine, events throws(ProtocolError) in
                try engine.start(
                    key, milliseconds: milliseconds ?? CountdownDuration.defaultMilliseconds, replace: replace, requester: owner,
                    onSuspend: onSuspend, cycle: cycle, keepsCycle: milliseconds == nil, now: now, events: &events
                )
            }
        case .startAt(let address, let unixMilliseconds, let replace):
            let (key, owner) = try CountdownAddress.resolve(address, requester: uid)
            let milliseconds = try Self.milliseconds(until: unixMilliseconds, now: now, clock: clock)
            try change(key) { engine, events throws(ProtocolError) in
                try engine.start(key, milliseconds: milliseconds, replace: replace, requester: owner, pinnedTo: unixMilliseconds, now: now, events: &events)
            }
        case .status(let address):
            let key = try CountdownAddress.resolve(address, requester: uid).key
            let snapshot: CountdownSnapshot
            do throws(ProtocolError) {
                snapshot = try engine.status(of: key, now: now)
            } catch {
                throw store.notFound(error, name: address, now: now)
            }
            WireEncoder.appendCountdown(shown(snapshot), clock: clock, to: &replyBuffer)
            appendReadOK(count: 1)
        case .list(let states, let prefix):
            // In slices across batches, every countdown as of now (`CountdownListing`). The
            // prefix as the viewer's own (`1000/te` from uid 1000 is its `te`).
            let keyPrefix = try CountdownAddress.resolvePrefix(prefix, requester: uid)
            // Each LIST in progress keeps the countdowns as they were when it began: every page
            // changed meanwhile is copied for it. 250 stalled LISTs of one user beside its own
            // changes held 1.3 GB; a few at a time hold a few copies at most.
            // Served again after a failed commit, it replaces the listing it began (`.listing`).
            guard let permit = listingQuota.take(for: uid, replacingOne: phase == .listing) else {
                throw ProtocolError(
                    .limit,
                    "uid \(uid) already has \(listingQuota.limit) LISTs in progress, the most one user may have (each keeps the countdowns as they were when it began); read them to their end, or close the connections that do not"
                )
            }
            let filter = ListFilter(viewer: uid, states: states, prefix: CountdownAddress.display(keyPrefix, owner: uid, to: uid))
            beginListing(engine.listing(filter, frozen: true, now: now), purpose: .list(permit), on: connection, phase: phase, clock: clock, now: now)
        case .cancel(let address):
            let (key, owner) = try CountdownAddress.resolve(address, requester: uid)
            try change(key) { engine, events throws(ProtocolError) in try engine.cancel(key, requester: owner, now: now, events: &events) }
        case .pause(let address):
            let (key, owner) = try CountdownAddress.resolve(address, requester: uid)
            try change(key) { engine, events throws(ProtocolError) in try engine.pause(key, requester: owner, now: now, events: &events) }
        case .resume(let address):
            let (key, owner) = try CountdownAddress.resolve(address, requester: uid)
            try change(key) { engine, events throws(ProtocolError) in try engine.resume(key, requester: owner, now: now, events: &events) }
        case .extend(let address, let milliseconds):
            let (key, owner) = try CountdownAddress.resolve(address, requester: uid)
            try change(key) { engine, events throws(ProtocolError) in
                try engine.extend(key, by: milliseconds, requester: owner, now: now, events: &events)
            }
        case .set(let address, let policy):
            let (key, owner) = try CountdownAddress.resolve(address, requester: uid)
            try change(key) { engine, events throws(ProtocolError) in
                try engine.setSuspendPolicy(key, to: policy, requester: owner, now: now, events: &events)
            }
        case .skip(let address):
            let (key, owner) = try CountdownAddress.resolve(address, requester: uid)
            try change(key) { engine, events throws(ProtocolError) in try engine.skip(key, requester: owner, now: now, events: &events) }
        case .remove(let address):
            let (key, owner) = try CountdownAddress.resolve(address, requester: uid)
            try change(key) { engine, events throws(ProtocolError) in try engine.remove(key, requester: owner, now: now, events: &events) }
        case .subscribe(let addresses, let prefix, let kinds, let since):
            var keys: [String] = []
            for address in addresses {
                keys.append(try CountdownAddress.resolve(address, requester: uid).key)
            }
            let filter: Set<String>? = keys.isEmpty ? nil : Set(keys)
            let keyPrefix = try prefix.map { (prefix) throws(ProtocolError) in try CountdownAddress.resolvePrefix(prefix, requester: uid) }
            // Checked before subscribing, so a refused replay changes nothing.
            let replay = try since.map { (since) throws(ProtocolError) in
                try replayEvents(after: since, keys: filter, keyPrefix: keyPrefix, viewer: uid)
            }
            if let keyPrefix {
                try fanOut.subscribe(connection, toPrefix: keyPrefix, kinds: kinds)
            } else {
                try fanOut.subscribe(connection, to: keys, kinds: kinds)
            }
            let following = fanOut.subscription(of: connection) == .all ? "all" : "\(fanOut.subscriptionCount(connection))"
            let only = kinds == .all ? "" : " events \(kinds.description)"
            WireEncoder.appendOK("subscribed \(following) seq \(engine.lastSequence(seenBy: uid))\(only)", to: &replyBuffer)
            if let replay {
                // What was missed, in order; live events follow with no gap and no repeat.
                for event in replay where kinds.includes(event.kind) {
                    WireEncoder.appendEvent(event, name: CountdownAddress.display(event.name, owner: event.owner, to: uid), seenBy: uid, to: &replyBuffer)
                }
            } else if kinds.includes(.snapshot), let keyPrefix {
                // Like everything's, in slices: a prefix may match a million.
                let shown = CountdownAddress.display(keyPrefix, owner: uid, to: uid)
                beginActiveSnapshots(on: connection, phase: phase, prefix: shown, clock: clock, now: now)
            } else if kinds.includes(.snapshot), keys.isEmpty {
                // The current state right after the OK, so a status bar draws its first frame at
                // once; for everything, in slices (there may be a million).
                beginActiveSnapshots(on: connection, phase: phase, clock: clock, now: now)
            } else if kinds.includes(.snapshot) {
                for snapshot in engine.activeSnapshots(matching: filter, now: now) where uid == 0 || snapshot.owner == uid {
                    WireEncoder.appendSnapshotEvent(sequence: engine.lastSequence(seenBy: uid), shown(snapshot), clock: clock, to: &replyBuffer)
                }
            }
        case .unsubscribe:
            fanOut.unsubscribe(connection)
            WireEncoder.appendOK("unsubscribed", to: &replyBuffer)
        case .ping:
            WireEncoder.appendOK("pong", to: &replyBuffer)
        case .stats:
            let lines = statisticsLines(now: now, uid: connection.peerUID)
            for (key, value) in lines {
                WireEncoder.appendStat(key, value, to: &replyBuffer)
            }
            WireEncoder.appendOK(count: lines.count, to: &replyBuffer)
        case .quit:
            // The client table stops reading the connection (`ServeVerdict.quit`).
            WireEncoder.appendOK("bye", to: &replyBuffer)
        }
    }

    /// The final `OK <count>` of a read of the copy as it is now, as the store words it
    /// (`ChangeStore.appendReadOK`).
    func appendReadOK(count: Int) {
        store.appendReadOK(count: count, copy: store.readCopy(now: time.now()), to: &replyBuffer)
    }

    /// How long until a wall-clock time (`START … AT`).
    /// - Throws: `bad-duration` for a time that is not in the future.
    static func milliseconds(until unixMilliseconds: Int64, now: Instant, clock: WallClockMapping) throws(ProtocolError) -> Int64 {
        let current = clock.unixMilliseconds(of: now)
        let (milliseconds, overflowed) = unixMilliseconds.subtractingReportingOverflow(current)
        guard overflowed ? unixMilliseconds > current : milliseconds > 0 else {
            throw ProtocolError(.badDuration, "\(unixMilliseconds) is not in the future (it is now \(current)); use a later time")
        }
        guard !overflowed, milliseconds <= CountdownDuration.maximumMilliseconds else {
            // Said of the time asked for, not as a duration the client never gave.
            let days = overflowed ? "more than 100 years" : "\(milliseconds / 86_400_000) days"
            throw ProtocolError(
                .badDuration,
                "\(unixMilliseconds) is \(days) away (it is now \(current)); a countdown to a time of day ends at most 366 days from now: use a nearer time"
            )
        }
        return milliseconds
    }

    /// Where a request's change meets the engine, in both modes: the store decides it
    /// (`decide`). A durable change's reply is queued now; a pending one's waits behind its
    /// ticket, and the request is not served again if this batch's commit fails.
    func change(
        _ key: String, request: Request, uid: UInt32, connection: Connection, now: Instant, clock: WallClockMapping,
        attempt: ClusterReplica.Attempt,
        _ body: (inout CountdownEngine, inout [CountdownEvent]) throws(ProtocolError) -> CountdownSnapshot
    ) throws(ProtocolError) {
        switch try decide(key, request: request, uid: uid, connection: connection, now: now, clock: clock, attempt: attempt, body) {
        case .durable(let snapshot):
            WireEncoder.appendOK(snapshot.shown(to: uid), clock: clock, to: &replyBuffer)
        case .pending:
            if attempt.number == 1 {
                batch.markLastRequestHeld(connection)  // Not served again if this batch's commit fails.
            }
        }
    }

    func checkStorageAcceptsChanges() throws(ProtocolError) {
        switch journal.health {
        case .available:
            return
        case .failing(let error):
            throw ProtocolError(
                .unavailable,
                "the change cannot be stored, so it was not made: \(error) (\(error.advice)); reads and events go on; try again once storage works"
            )
        case .awaitingSnapshot:
            throw ProtocolError(
                .unavailable,
                "the state directory is being rewritten after it was lost, so the change was not made; try again in a moment"
            )
        }
    }

    /// The lifecycle events after `sequence` that `viewer` may see: those released (the ring) and
    /// those of this batch not yet released, so that nothing falls between replay and live events.
    /// Numbers are `viewer`'s own (`CountdownEvent.sequence(seenBy:)`).
    private func replayEvents(after sequence: UInt64, keys: Set<String>?, keyPrefix: String?, viewer: UInt32) throws(ProtocolError) -> [CountdownEvent] {
        let last = engine.lastSequence(seenBy: viewer)
        guard sequence <= last else {
            throw ProtocolError(
                .badRequest,
                "SINCE \(sequence) is ahead of the last event (\(last)): this daemon's history never had it; SUBSCRIBE without SINCE for the current state",
                fields: [.init("since", "\(sequence)"), .init("last_seq", "\(last)"), .advice(.subscribeWithoutSince)]
            )
        }
        var replay: [CountdownEvent]
        do throws(EventRing.ReplayError) {
            replay = try ring.events(after: sequence, names: keys, prefix: keyPrefix, viewer: viewer)
        } catch {
            guard case .tooOld(let keptAfter, let owner) = error else { return [] }
            let whose = viewer == 0 && owner != 0 ? "uid \(owner)'s events" : "events"
            throw ProtocolError(
                .gone,
                "\(whose) after \(sequence) are no longer kept: the oldest kept follows seq \(keptAfter) (--replay-events keeps each uid's last \(ring.depth)); SUBSCRIBE without SINCE for the current state",
                fields: [.init("kept_after", "\(keptAfter)"), .advice(.subscribeWithoutSince)]
            )
        }
        for event in batch.lifecycleEvents where (viewer == 0 || event.owner == viewer) && event.sequence(seenBy: viewer) > sequence
            && (keys?.contains(event.name) ?? true) && (keyPrefix.map { event.name.hasPrefix($0) } ?? true)
        {
            replay.append(event)
        }
        return replay
    }
}

extension ProtocolError {
    /// The error as `uid` should read it: the engine names countdowns by key, and a user knows
    /// its own by plain name. The fields (busy's `remaining_ms`) stay.
    func shown(to uid: UInt32) -> ProtocolError {
        guard uid != 0 else { return self }
        var shown = self
        shown.message = message.replacing("'\(uid)/", with: "'")
        return shown
    }
}
