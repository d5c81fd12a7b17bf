import CountdownCore

/// Where the daemon's changes are decided and kept: the one place its two modes differ.
///
/// - `journal`, a daemon of its own: the engine applies a change at once, and the batch's
///   journal commit makes it durable before its reply leaves (`Answer.durable`).
/// - `etcd`, cluster mode (`--cluster`): the change is proposed to etcd, and its reply waits
///   behind a ticket until etcd decides (`Answer.pending`). This host's engine is a replica,
///   changed only by etcd's watch, and its journal keeps a copy of it.
///
/// Either way, a change that cannot be kept is refused with `ERR unavailable`: while the
/// journal cannot store (`Daemon.checkStorageAcceptsChanges`, before the request runs), and in
/// cluster mode also when etcd cannot be asked (`Daemon.proposeInCluster`). `Daemon.decide`
/// hands the store each change; everything else the daemon asks of a mode is here.
enum ChangeStore {
    case journal
    case etcd(ClusterReplica)

    /// What the store answered for one change.
    enum Answer {
        /// Applied: durable with this batch's commit, before its reply (the countdown as it is
        /// now) leaves.
        case durable(CountdownSnapshot)
        /// Sent to etcd: its reply waits behind this ticket, queued when etcd decides.
        case pending(StoreTicket)
    }

    /// The replica, in cluster mode.
    var replica: ClusterReplica? {
        if case .etcd(let replica) = self { return replica }
        return nil
    }

    /// Whether a batch whose journal commit failed is undone. On a daemon of its own, yes: its
    /// changes were never stored. In cluster mode, no: a change's answer is etcd's and the
    /// replica's events are etcd's; they stay noted, written once storage works again.
    var undoesFailedBatches: Bool {
        replica == nil
    }

    /// This host's wall clock was set: in cluster mode, the other hosts' clock offsets are
    /// measured afresh (`ClockHeartbeat.wallClockStepped`).
    func wallClockStepped() {
        replica?.wallClockStepped()
    }

    /// Whether a change can still be in the store's hands after its batch, to be answered at a
    /// stop before the stop's notice: in cluster mode, one sent to etcd may commit whatever the
    /// daemon does. The journal decides every change in its batch.
    var answersAfterTheBatch: Bool {
        replica != nil
    }

    /// The copy a read shows, in cluster mode: the etcd revision it had reached, and whether it
    /// knew it trailed etcd (`ClusterReplica.isBehind`).
    struct ReadCopy {
        let revision: Int64
        let isBehind: Bool
    }

    /// The copy a read shows now (`nil` on a daemon of its own). A listing keeps the one it
    /// began with: its lines are the countdowns as they were then.
    func readCopy(now: Instant) -> ReadCopy? {
        replica.map { ReadCopy(revision: $0.revision, isBehind: $0.isBehind(now: now)) }
    }

    /// The final `OK <count>` of a read. In cluster mode it says which copy answered:
    /// `OK <count> replica <revision>`, this host's copy as of that etcd revision (it may trail
    /// etcd by the watch's delay), followed by `behind` when the copy knew it trailed: what the
    /// read shows may be out of date.
    func appendReadOK(count: Int, copy: ReadCopy?, to buffer: inout [UInt8]) {
        if let copy {
            WireEncoder.appendOK("\(count) replica \(copy.revision)\(copy.isBehind ? " behind" : "")", to: &buffer)
        } else {
            WireEncoder.appendOK(count: count, to: &buffer)
        }
    }

    /// A read's `not-found` of `name` (as the client wrote it). In cluster mode it says which copy
    /// answered, as `appendReadOK` does, in fields: `replica=<revision>`, and `behind=true` when
    /// the copy knows it trails etcd; the message then says the countdown may exist after all,
    /// and to ask again (`advice=ask-again`) rather than to list.
    func notFound(_ error: ProtocolError, name: String, now: Instant) -> ProtocolError {
        guard let replica, error.code == .notFound else { return error }
        guard replica.isBehind(now: now) else {
            return ProtocolError(error.code, error.message, fields: error.fields + [ProtocolError.Field("replica", "\(replica.revision)")])
        }
        return ProtocolError(
            .notFound,
            "no countdown named '\(name)' in this host's copy of the cluster, which trails etcd, so it may exist there; ask again in a moment, or ask another host",
            fields: [.advice(.askAgain), ProtocolError.Field("replica", "\(replica.revision)"), ProtocolError.Field("behind", "true")]
        )
    }

    /// What `STATUS=` says of the store (`nil` on a daemon of its own).
    var statusNote: String? {
        replica.map { "etcd revision \($0.revision)\($0.isWatching ? "" : ", watch reconnecting")" }
    }

    /// The store's lines of `STATS` (none on a daemon of its own).
    var statisticsLines: [(String, String)] {
        replica?.statisticsLines ?? []
    }

    /// Whether the store has work for the next batch at once: a replica catching up on a
    /// backlog from the watch.
    var hasWorkLeft: Bool {
        replica?.isCatchingUp == true
    }

    /// Does a slice of the store's work left (`hasWorkLeft`): once per batch.
    func continueWork() {
        guard let replica, replica.isCatchingUp else { return }
        replica.continueCatchUp()
    }

    /// Sends what the batch proposed, in one etcd transaction (nothing on a daemon of its own).
    func sendPending() {
        replica?.sendPending()
    }

    /// At stop: transfers in flight are cancelled (their clients get the stop's notice).
    func stop() {
        replica?.stop()
    }
}
