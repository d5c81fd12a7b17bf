import CountdownCore

/// Which host proposes a change that falls due in cluster mode: a countdown's `done` at its
/// deadline, or its removal at the end of its retention. The host that wrote the countdown's
/// current value proposes it at once; any other host waits `graceNanoseconds` past the due instant for it,
/// since that host may be gone, and then proposes it too. Whichever proposal etcd commits first
/// wins (each is compared on the revision its host holds), so the change is made once.
struct TakeOverPolicy {
    /// How long the other hosts leave a due change to the writer.
    static let graceNanoseconds: Int64 = 2_000_000_000

    /// This host's name among the fleet's (`ClusterReplica.hostID`).
    let hostID: String

    /// Whether this host proposes now a change due at `due` of a countdown whose current value
    /// `writer` wrote (`nil`: unknown, as after a fresh read). When not, it is asked again later
    /// (`CountdownEngine.takeDue` hands it back a second later).
    func proposes(dueAt due: Instant, writtenBy writer: String?, now: Instant) -> Bool {
        writer == hostID || now.nanoseconds(since: due) >= Self.graceNanoseconds
    }
}
