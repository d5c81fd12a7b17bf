import CountdownCore

/// Which host proposes a change that falls due in cluster mode: a countdown's `done` at its
/// deadline, or its removal at the end of its retention.
///
/// The host that wrote the countdown's current value proposes it at once. Another host proposes
/// it only once it is `graceNanoseconds` past due **and** the writer is silent: no heartbeat of
/// its (`ClockHeartbeat`, every second) has come through this host's watch for
/// `silenceNanoseconds`. So a live writer is never overtaken, however long etcd takes to carry
/// its changes (in a burst of 30,000 deadlines the others' take-overs were two changes sent for
/// every `done`, each losing its race and failing the transaction it went in), and a writer
/// whose clock is behind is not finished early by the others. A writer that is gone is taken
/// over within about `silenceNanoseconds` of its last heartbeat. Whichever proposal etcd
/// commits first wins (each is compared on the revision its host holds), so the change is made
/// once whatever this policy decides: it decides only how soon and how many hosts ask.
///
/// Liveness is read on this host's own boot clock (when a heartbeat arrived), never from the
/// wall-clock time a heartbeat carries, so no host's clock offset moves it.
struct TakeOverPolicy {
    /// How long the other hosts leave a due change to the writer at least.
    static let graceNanoseconds: Int64 = 2_000_000_000
    /// How long a host's heartbeats must have been missing for it to count as gone: three
    /// heartbeat intervals, so that one slow commit or a watch behind by a second is no death.
    static let silenceNanoseconds: Int64 = 3 * ClockHeartbeat.intervalNanoseconds

    /// This host's name among the fleet's (`ClusterReplica.hostID`).
    let hostID: String
    /// When each other host's heartbeat last came through the watch, on this host's clock.
    private(set) var heard: [String: Instant] = [:]

    init(hostID: String) {
        self.hostID = hostID
    }

    /// Notes a heartbeat of `host` that the watch brought at `now`.
    mutating func heard(from host: String, at now: Instant) {
        heard[host] = now
    }

    /// Whether `host` has been heard from within `silenceNanoseconds` of `now`.
    func isLive(_ host: String, now: Instant) -> Bool {
        heard[host].map { now.nanoseconds(since: $0) < Self.silenceNanoseconds } ?? false
    }

    /// Whether this host proposes now a change due at `due` of a countdown whose current value
    /// `writer` wrote (`nil`: unknown, as after a fresh read). When not, it is asked again later
    /// (`CountdownEngine.takeDue` hands it back a second later).
    func proposes(dueAt due: Instant, writtenBy writer: String?, now: Instant) -> Bool {
        if writer == hostID { return true }
        guard now.nanoseconds(since: due) >= Self.graceNanoseconds else { return false }
        return writer.map { !isLive($0, now: now) } ?? true
    }
}
