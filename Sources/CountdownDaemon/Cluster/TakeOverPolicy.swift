import CountdownCore

/// Which host proposes a change that falls due in cluster mode: a countdown's `done` at its
/// deadline, or its removal at the end of its retention.
///
/// The host that wrote the countdown's current value proposes it at once. Another host proposes
/// it once it is `graceNanoseconds` past due **and** the writer is silent: no heartbeat of its
/// (`ClockHeartbeat`, every second) has come through this host's watch for
/// `silenceNanoseconds`. So a live writer is not overtaken while etcd takes its time with a
/// burst of its changes (in a burst of 30,000 deadlines the others' take-overs were two changes
/// sent for every `done`, each losing its race and failing the transaction it went in), and a
/// writer whose clock is behind is not finished early by the others. A writer that is gone is
/// taken over within about `silenceNanoseconds` of its last heartbeat; one that lives but does
/// not get its change made (its proposals keep failing) is taken over `maximumWaitNanoseconds`
/// past due whatever its heartbeats say. (The due instant is the one the writer meant: the
/// replica allows for the writer's clock offset before asking, `ClusterReplica.proposes`.)
/// Whichever proposal etcd commits first wins (each is compared on the revision its host
/// holds), so the change is made once whatever this policy decides: it decides only how soon,
/// and how many hosts ask.
///
/// Liveness is read on this host's own boot clock (when a heartbeat arrived), never from the
/// wall-clock time a heartbeat carries, so no host's clock offset moves it. Until this host has
/// had `silenceNanoseconds` to hear from the others (`startListening`), every writer counts as
/// live: a host that has just started has heard nobody yet. A host that cannot tell yet how its
/// own clock stands (`ClusterReplica.proposes`: no host's clock measured recently) takes over
/// nobody's either, before the cap.
struct TakeOverPolicy {
    /// How long the other hosts leave a due change to the writer at least.
    static let graceNanoseconds: Int64 = 2_000_000_000
    /// How long a host's heartbeats must have been missing for it to count as gone: four
    /// heartbeat intervals, so that a heartbeat that timed out (the next one is then a read
    /// first, about 3.2 s between puts) or a watch behind by a second is no death.
    static let silenceNanoseconds: Int64 = 4 * ClockHeartbeat.intervalNanoseconds
    /// How long past due a change is left to a writer that lives, at most.
    static let maximumWaitNanoseconds: Int64 = 30_000_000_000

    /// This host's name among the fleet's (`ClusterReplica.hostID`).
    let hostID: String
    /// When each other host's heartbeat last came through the watch, on this host's clock.
    private(set) var heard: [String: Instant] = [:]
    /// Since when this host has been listening for heartbeats (`nil`: not yet).
    private(set) var listeningSince: Instant?

    init(hostID: String) {
        self.hostID = hostID
    }

    /// Notes that this host's watch runs from `now`, bringing heartbeats (the first time only).
    mutating func startListening(at now: Instant) {
        if listeningSince == nil { listeningSince = now }
    }

    /// Notes a heartbeat of `host` that the watch brought at `now`.
    mutating func heard(from host: String, at now: Instant) {
        heard[host] = max(heard[host] ?? now, now)
    }

    /// Whether `host` counts as live at `now`: heard from within `silenceNanoseconds`, or not
    /// yet listened for that long.
    func isLive(_ host: String, now: Instant) -> Bool {
        guard let since = heard[host] ?? listeningSince else { return true }
        return now.nanoseconds(since: since) < Self.silenceNanoseconds
    }

    /// Whether this host leaves a due change of a countdown `writer` wrote to that writer for
    /// now, before the cap: the writer is another host that lives.
    func leavesToWriter(_ writer: String?, now: Instant) -> Bool {
        guard let writer, writer != hostID else { return false }
        return isLive(writer, now: now)
    }

    /// Whether this host proposes now a change due at `due` of a countdown whose current value
    /// `writer` wrote (`nil`: unknown). When not, it is asked again later (`CountdownEngine.takeDue`
    /// hands it back a second later). Without `clockKnown` (this host cannot tell how its clock
    /// stands against the writer's: `ClusterReplica.proposes`), a gone writer's change waits for
    /// the cap too: later, rather than early.
    func proposes(dueAt due: Instant, writtenBy writer: String?, now: Instant, clockKnown: Bool = true) -> Bool {
        if writer == hostID { return true }
        let late = now.nanoseconds(since: due)
        guard late >= Self.graceNanoseconds else { return false }
        return late >= Self.maximumWaitNanoseconds || (clockKnown && !leavesToWriter(writer, now: now))
    }
}
