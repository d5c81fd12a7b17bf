import CountdownCore
import Glibc

extension Daemon {
    /// Opens the store; `ready` runs once it holds what it must before clients are let in: at
    /// once on a daemon of its own (its error is this call's), after the first read of etcd in
    /// cluster mode (where its error stops the daemon, logged).
    func openStore(poller: EventPoller, ready: @escaping () throws(DaemonError) -> Void) throws(DaemonError) {
        guard let cluster = configuration.cluster else {
            try ready()
            return
        }
        // In cluster mode the state directory keeps this host's copy, and so the etcd revision
        // it reached (its `seq`): the watch resumes after it.
        let replica = try makeReplica(cluster, poller: poller) { [unowned self] in
            do throws(DaemonError) {
                try ready()
            } catch {
                logger.log(.error, "cannot start: \(error)")
                exit(1)
            }
        }
        // The store is this replica before its first read can call `ready` (and READY=1 go out).
        store = .etcd(replica)
        replica.start()
    }

    /// Hands a request's change of `key` to the store; `body` is the engine's mutation. On a
    /// daemon of its own the engine applies it at once, its previous state kept (`recordUndo`):
    /// the journal makes it durable with the batch's commit, before the reply is written. In
    /// cluster mode the same mutation runs on a scratch copy (`CountdownEngine.proposal`: the
    /// same rules, errors and limits), and etcd decides (`proposeInCluster`).
    /// - Throws: the mutation's refusal; in cluster mode also `limit` or `unavailable` from
    ///   `proposeInCluster`, before anything is sent.
    func decide(
        _ key: String, request: Request, uid: UInt32, connection: Connection, now: Instant, clock: WallClockMapping,
        attempt: ClusterReplica.Attempt,
        _ body: (inout CountdownEngine, inout [CountdownEvent]) throws(ProtocolError) -> CountdownSnapshot
    ) throws(ProtocolError) -> ChangeStore.Answer {
        switch store {
        case .journal:
            recordUndo(key)
            return .durable(try body(&engine, &events))
        case .etcd(let replica):
            let proposal = try engine.proposal(for: key, now: now, pending: creationsInFlight, body)
            let creating = Self.state(of: key, in: &engine) == nil ? proposal.state?.owner : nil
            return .pending(try proposeInCluster(
                key, proposal, creating: creating, request: request, uid: uid, connection: connection, clock: clock, cluster: replica,
                attempt: attempt
            ))
        }
    }

    /// Remembers the countdown's state before a change, so a failed commit can undo it. Reverting
    /// a batch's records in reverse order restores each countdown's state from before the batch.
    private func recordUndo(_ name: String) {
        batch.undo.append((name, Self.state(of: name, in: &engine)))
    }
}
