import CountdownCore
import CLinuxShims
import Dispatch
import Glibc

/// Cluster mode's link to etcd: the local replica of every countdown under the prefix, fed by one
/// watch resumed from the last applied revision, and the transactions that change countdowns.
///
/// The replica changes only through the watch, in revision order (`apply`), on every host alike;
/// a host that made a change answers its client once its replica has reached the change's
/// revision (`afterRevision`), so the client's next read on that host sees it.
///
/// Confined to the daemon's queue (hence `@unchecked Sendable`: its retries run there too).
final class ClusterReplica: @unchecked Sendable {
    /// What a change needs to find in etcd to go through.
    enum Expectation {
        /// No countdown of that key.
        case absent
        /// The countdown as last changed at this revision.
        case unchangedSince(Int64)
    }

    /// One judgement of a client's change: judged again after each race it lost, up to
    /// `Daemon.clusterAttempts` times, all within one answer deadline.
    struct Attempt {
        /// 1 for the first judgement.
        let number: Int
        /// When the client is answered, whatever etcd has done: `changeTimeoutMilliseconds`
        /// after the request, the bound CLUSTER.md promises.
        let answerBy: Instant
        /// The place of the client's reply among its connection's (`ClientTable.hold`), once
        /// the first judgement took one: the reply to a change judged again keeps it.
        var ticket: StoreTicket?

        /// The first judgement of a request that arrived at `now`.
        static func first(at now: Instant) -> Attempt {
            Attempt(number: 1, answerBy: now.advanced(byMilliseconds: Int64(ClusterReplica.changeTimeoutMilliseconds)))
        }

        /// The next judgement, after a lost race, within the same deadline and reply place.
        var next: Attempt { Attempt(number: number + 1, answerBy: answerBy, ticket: ticket) }
    }

    /// How a change went.
    enum ChangeOutcome {
        /// Committed at this revision.
        case committed(Int64)
        /// Someone changed the countdown first: this is what etcd has now (`nil`: it is gone).
        case conflict(ClusterValue?, revision: Int64)
        /// etcd could not be asked, or did not answer.
        case failed(EtcdError)

        /// Whether the change was made.
        var isCommitted: Bool {
            if case .committed = self { return true }
            return false
        }
    }

    let configuration: ClusterConfiguration
    let client: any EtcdTransport
    /// libcurl's driver under `client` (`nil` with a test's store).
    private let driver: CurlDriver?
    private let queue: DispatchQueue
    private let logger: Logger
    /// The last revision applied to the replica.
    private(set) var revision: Int64 = 0
    /// The revision of the change this replica holds for each countdown: what a transaction
    /// compares on. Set only when the replica applies a change (the watch, a full read), never
    /// from a revision read afresh: a host that compared a `done` on a revision it fetched after
    /// another host's `done` made a second one.
    private(set) var appliedAt: [String: Int64] = [:]
    /// Which host wrote each countdown's current value (`ClusterValue.host`): that host
    /// proposes its `done`; the others wait for it while it lives (`takeOver`).
    private(set) var writers: [String: String] = [:]
    /// Who proposes a change that falls due.
    private(set) var takeOver: TakeOverPolicy
    private var watch: EtcdWatch?
    /// Whether the watch is running (for STATUS and STATS).
    private(set) var isWatching = false
    /// Who waits for the watch to reach a revision, until `giveUpAt`.
    private var waiters: [(revision: Int64, giveUpAt: Instant, resume: (Bool) -> Void)] = []
    /// Revisions this host committed, and when the watch is taken to be stuck if it has not
    /// brought them (whether or not anyone still waits for them).
    private var expected: [(revision: Int64, suspectWatchAt: Instant)] = []
    /// Where retries and the housekeeping wait: the daemon's schedule of work run while a batch
    /// serves (`Daemon.laterInBatch`), on its one wake-up timer, so that they run within the
    /// daemon's batches (and their replies are written) like everything else.
    private let later: DelayedWork
    /// How often the housekeeping runs (`housekeeping`): timeouts, the heartbeat, a stuck watch.
    static let housekeepingNanoseconds: Int64 = 200_000_000
    /// Set by `stop`: the housekeeping is not scheduled again.
    private var isStopped = false
    /// Changes on their way to etcd, sent together.
    private let commits: GroupCommit
    /// This host's heartbeat, and the clock offsets of the others (`STATS`).
    private let heartbeat: ClockHeartbeat
    /// The fleet's quota slots as etcd holds them, and those this host claimed for creations in
    /// flight (`claimSlots`): what makes `--max-countdowns` and the per-user quota exact.
    private var quota: QuotaSlots
    /// The revision of the last slot change applied (or of the read of them all); `nil` until
    /// the slots were read, and a creation cannot be judged against the limits.
    private var slotsAppliedAt: Int64?
    /// Slot changes the watch brought before the slots were read, applied after the read.
    private var slotChangesBeforeRead: [EtcdWatchEvent] = []
    /// Countdowns the watch deleted in the slice being applied: checked for slots left behind.
    private var removedInSlice: [String] = []
    /// Picks free quota slots at random, so that hosts claiming at once rarely pick the same one.
    private var randomness = SystemRandomNumberGenerator()
    /// The most a change takes, its retry included: the bound CLUSTER.md promises.
    static let changeTimeoutMilliseconds = 3000
    /// A retry is sent only with at least this much of the change's time left.
    static let minimumRetryMilliseconds: Int64 = 250
    /// How long a host waits for its watch to bring a change it committed before it suspects
    /// the watch (a member stopped or cut off holds it silently) and answers anyway.
    static let catchUpTimeoutNanoseconds: Int64 = 2_000_000_000
    /// This host, the same across its restarts: `<hostname>:<state directory>` (two daemons on
    /// one machine have different ones). It proposes the `done`s of the countdowns it wrote.
    let hostID: String
    /// This run of it: operation ids (`<hostID>~<run>-<n>`) never repeat across restarts, even
    /// with the pid of a container's first process, so a lost answer's retry can never mistake
    /// an earlier run's change for its own.
    private let runID = String(UInt32.random(in: 0...UInt32.max), radix: 16)
    /// How long this host's own changes took from commit to its watch (the last one), in µs;
    /// the whole wait when one did not come back in time.
    private(set) var lastLagMicroseconds: Int64 = 0
    private var operationCount = 0

    /// Applies one change from etcd to the engine, numbered `sequence` (`Self.sequence`):
    /// `value` `nil` means the key was deleted.
    var apply: (_ key: String, _ value: ClusterValue?, _ sequence: UInt64) -> Void = { _, _, _ in }
    /// Loads a whole state (the first read, and a resync after compaction): every countdown and
    /// the sequence number of the read (`sequenceOfRead`).
    var load: (_ countdowns: [(key: String, value: ClusterValue)], _ sequence: UInt64) -> Void = { _, _ in }

    // MARK: - Numbering

    /// A transaction takes one etcd revision for all its changes, so events are numbered
    /// `revision × eventsPerRevision + place`: the event's place among that revision's events,
    /// in the order etcd's watch gives them (the transaction's order), the same on every host.
    static let eventsPerRevision: Int64 = 1000

    /// The number of the `place`th event at `revision`.
    static func sequence(revision: Int64, place: Int) -> UInt64 {
        UInt64(max(0, revision)) * UInt64(eventsPerRevision) + UInt64(place)
    }

    /// The number of a full read at `revision`: after every event of that revision.
    static func sequenceOfRead(at revision: Int64) -> UInt64 {
        sequence(revision: revision, place: Int(eventsPerRevision) - 1)
    }

    /// The revision an event (or a read) numbered `sequence` belongs to.
    static func revision(ofSequence sequence: UInt64) -> Int64 {
        Int64(sequence / UInt64(eventsPerRevision))
    }

    /// The number of the last event applied (or of the last full read): the watch skips what
    /// is not after it, so a watch resumed at a revision already partly applied repeats nothing.
    private var appliedSequence: UInt64 = 0
    /// The watch's revision being numbered, and how many of its changes were seen so far.
    private var placed: (revision: Int64, count: Int) = (0, 0)
    /// What the watch brought, in order, and the next to apply.
    private var backlog: [(event: EtcdWatchEvent, sentAt: Int64, arrivedAt: Instant)] = []
    private var backlogNext = 0
    /// Called once, after the first full read.
    var onFirstLoad: () -> Void = {}
    /// Where deadlines, schedules and lag are measured.
    private let time: DaemonClock

    /// The replica on a real etcd, through libcurl on the daemon's poller; `stateDirectory`
    /// names this host among others on the same machine.
    convenience init(
        configuration: ClusterConfiguration, limits: EngineConfiguration, stateDirectory: String, poller: EventPoller,
        later: DelayedWork, queue: DispatchQueue, logger: Logger, time: DaemonClock = .system
    ) throws(DaemonError) {
        let driver = try CurlDriver(poller: poller, queue: queue)
        var credentials: (user: String, password: String)?
        if let user = configuration.user, let file = configuration.passwordFile {
            guard let bytes = try? FileSystem.readAll(file), let password = String(validating: bytes, as: UTF8.self) else {
                throw .storage("cannot read the etcd password from \(file); check the path and its permissions")
            }
            var trimmed = password
            while let last = trimmed.last, last.isNewline { trimmed.removeLast() }  // A file ends in one.
            credentials = (user, trimmed)
        }
        let client = EtcdClient(endpoints: configuration.endpoints, tls: configuration.tls, credentials: credentials, driver: driver, queue: queue, time: time)
        self.init(
            configuration: configuration, limits: limits, client: client, driver: driver, later: later, queue: queue, logger: logger,
            stateDirectory: stateDirectory, time: time
        )
    }

    /// The replica on `client`: an `EtcdClient` on `driver`, or a test's store (no driver);
    /// `limits` are the engine's, made exact across the fleet by the quota slots. Its retries
    /// and housekeeping wait in `later` (a test runs it by moving time).
    init(
        configuration: ClusterConfiguration, limits: EngineConfiguration = EngineConfiguration(), client: any EtcdTransport,
        driver: CurlDriver?, later: DelayedWork, queue: DispatchQueue, logger: Logger, stateDirectory: String = "",
        time: DaemonClock = .system
    ) {
        self.configuration = configuration
        self.time = time
        quota = QuotaSlots(limits: limits)
        self.queue = queue
        self.logger = logger
        self.client = client
        self.driver = driver
        commits = GroupCommit(client: client, time: time)
        var name = [CChar](repeating: 0, count: 256)
        // A name that does not fit is cut (and then not NUL-terminated): the last byte stays 0,
        // and the state directory tells hosts with one name apart.
        _ = gethostname(&name, name.count - 1)
        let hostName = name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        hostID = String(decoding: hostName, as: UTF8.self) + ":" + Self.canonical(stateDirectory)
        takeOver = TakeOverPolicy(hostID: hostID)
        heartbeat = ClockHeartbeat(client: client, prefix: configuration.prefix, hostID: hostID, logger: logger, time: time)
        self.later = later
        heartbeat.committed = { [unowned self] revision in expectFromWatch(revision) }
        heartbeat.answeredAgain = { [unowned self] since, revision in heartbeatAnsweredAgain(unansweredSince: since, at: revision) }
        scheduleHousekeeping()
    }

    /// The state directory as one name however it was written (`state`, `state/`,
    /// `./state`, `a//b`): a host's id must stay the same across its restarts, or it no longer
    /// knows which countdowns it wrote. Lexical only, relative to the working directory: links
    /// are not resolved, since that would change the id of every host whose directory is
    /// reached through one (systemd's `DynamicUser=` puts `/var/lib/countdownd` behind a link to
    /// `/var/lib/private/countdownd`) the first time it ran a version that resolved them.
    static func canonical(_ path: String) -> String {
        guard !path.isEmpty else { return path }
        var absolute = path
        if !path.hasPrefix("/") {
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            if getcwd(&buffer, buffer.count) != nil {
                absolute = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) + "/" + path
            }
        }
        var parts: [Substring] = []
        for part in absolute.split(separator: "/", omittingEmptySubsequences: true) where part != "." {
            if part == ".." {
                if !parts.isEmpty { parts.removeLast() }
            } else {
                parts.append(part)
            }
        }
        return "/" + parts.joined(separator: "/")
    }

    /// The replica's lines of `STATS` (PROTOCOL.md, *Statistics*).
    var statisticsLines: [(String, String)] {
        [
            ("cluster_revision", "\(revision)"),
            ("cluster_watching", isWatching ? "1" : "0"),
            ("cluster_member", client.endpoints[client.currentEndpoint]),
            ("cluster_members", "\(client.endpoints.count)"),
            ("cluster_lag_us", "\(lastLagMicroseconds)"),
            ("cluster_hosts_seen", "\(skews.count)"),
            ("cluster_skew_max_ms", "\(largestSkewMilliseconds)"),
            ("cluster_transactions", "\(transactionCounts.transactions)"),
            ("cluster_changes_sent", "\(transactionCounts.changes)"),
            ("cluster_due_proposed", "\(dueProposals.own)"),
            ("cluster_due_taken_over", "\(dueProposals.takenOver)"),
        ]
    }

    /// Whether this host proposes now the change of `key` due at `due` (`TakeOverPolicy`), as
    /// this host's clock reads the due instant. One whose copy is behind its watch takes over
    /// nobody's: the heartbeats it has not applied yet may be the writer's, and its compare
    /// would fail on a revision already moved on. Taking over, the due instant is moved by the
    /// writer's clock offset when the heartbeats say the writer's clock is behind this one's
    /// (`ClockHeartbeat.offsetBehind`): its deadlines, written on its clock, read early on this
    /// one, and a host whose clock is ahead would otherwise finish a gone writer's countdowns
    /// early. A writer never measured (or not known) is allowed how far this host's clock is
    /// ahead of the fleet's. With no host measured recently, this host cannot tell: it leaves
    /// the change to the writer until it has measured for `ClockHeartbeat.measuringNanoseconds`
    /// (then nobody else is there to measure), or until the cap.
    func proposes(_ key: String, dueAt due: Instant, now: Instant) -> Bool {
        let writer = writers[key]
        if writer == hostID { return true }
        guard !isCatchingUp else { return false }
        let behind = heartbeat.offsetBehind(of: writer ?? "", now: now)
        return takeOver.proposes(dueAt: due.advanced(byMilliseconds: behind ?? 0), writtenBy: writer, now: now, clockKnown: behind != nil)
    }

    /// This host's wall clock was set (a step): the clock offsets measured so far are forgotten.
    func wallClockStepped() {
        heartbeat.wallClockStepped(at: time.now())
    }

    /// Runs `action` within a batch, `seconds` from now.
    private func schedule(after seconds: Double, _ action: @escaping () -> Void) {
        later.schedule(at: time.now().advanced(byNanoseconds: Int64(seconds * 1e9))) { [weak self] _ in
            guard let self, !isStopped else { return }
            action()
        }
    }

    /// Schedules the next housekeeping, `housekeepingNanoseconds` from now.
    private func scheduleHousekeeping() {
        later.schedule(at: time.now().advanced(byNanoseconds: Self.housekeepingNanoseconds)) { [weak self] now in
            guard let self, !isStopped else { return }
            housekeeping(now: now)
            scheduleHousekeeping()
        }
    }

    /// Five times a second: changes whose time ran out are failed, those held for want of a
    /// leader are asked again, the heartbeat is written, a watch that did not bring a committed
    /// change is moved, and waiters past their time are answered.
    func housekeeping(now: Instant) {
        commits.send()
        if isWatching { heartbeat.beat(now: now) }
        moveWatchThatDoesNotReach(now: now)
        // A watch whose changes wait in the backlog is not stuck: this host is behind it. (Nor
        // is one not running: it is being started again.)
        if isWatching, !isCatchingUp, expected.contains(where: { $0.suspectWatchAt <= now }) {
            expected.removeAll()
            lastLagMicroseconds = Self.catchUpTimeoutNanoseconds / 1000
            logger.log(.warning, "cluster: the watch did not bring a committed change within 2 s (it is at revision \(revision)); moving it to another member")
            restartWatchElsewhere()
        }
        let expired = waiters.filter { $0.giveUpAt <= now }
        guard !expired.isEmpty else { return }
        waiters.removeAll { $0.giveUpAt <= now }
        for waiter in expired { waiter.resume(false) }
    }

    /// A fresh operation id.
    func nextOperation() -> String {
        operationCount += 1
        return "\(hostID)~\(runID)-\(operationCount)"
    }

    // MARK: - Reading

    /// The last event this host's copy applied (kept in its state directory); 0 for none.
    private var resumeSequence: UInt64 = 0

    /// Starts from a copy kept from an earlier run, whose last event was numbered `sequence`.
    func resume(from sequence: UInt64) {
        resumeSequence = sequence
    }

    /// Logs in (with etcd's own users, if configured), then resumes the watch after the copy
    /// kept locally, or, with none, reads every countdown and watches for changes after that.
    /// (A copy older than etcd's history is read afresh: the watch reports the compaction.)
    func start() {
        client.authenticate { [self] error in
            if let error {
                logger.log(.warning, "cluster: cannot log in to etcd (\(error)); trying again in a second")
                schedule(after: 1) { [self] in start() }
            } else if resumeSequence > 0 {
                appliedSequence = resumeSequence
                revision = Self.revision(ofSequence: resumeSequence)
                logger.log(.notice, "cluster: resuming after revision \(revision), from the copy in the state directory")
                startWatch()
                onFirstLoad()
                // The copy keeps countdowns, not the quota slots nor which host wrote each: both
                // are read now, in one read (`readAfterResume`).
                readAfterResume()
            } else {
                readEverything(first: true)
            }
        }
    }

    /// Runs `body` with the revision of the change the replica holds for `key`: known from the
    /// watch, or (after a restart from the local copy, which does not keep it) asked of etcd, and
    /// then used only if the replica has applied that revision already, so it is the change the
    /// replica holds. A newer one is waited for: the watch brings it, and with it the revision.
    /// `nil` when etcd has no such key, cannot be asked, or the watch did not catch up.
    /// etcd is asked with what is left until `deadline` (3 s without one).
    func withRevision(of key: String, by deadline: Instant? = nil, _ body: @escaping (Int64?) -> Void) {
        if let known = appliedAt[key] {
            body(known)
            return
        }
        let fullKey = configuration.prefix + key
        let timeout = deadline.map { Int($0.nanoseconds(since: time.now()) / 1_000_000) } ?? Self.changeTimeoutMilliseconds
        guard timeout > 0 else {
            body(nil)
            return
        }
        client.transaction(if: [], then: [.get(fullKey)], else: [], timeoutMilliseconds: timeout) { [self] result in
            guard case .success(let outcome) = result, let current = outcome.ranges.first?.first else {
                body(appliedAt[key])
                return
            }
            if let known = appliedAt[key] {
                body(known)  // The watch brought it meanwhile.
            } else if current.modRevision <= revision {
                appliedAt[key] = current.modRevision
                body(current.modRevision)
            } else {
                afterRevision(current.modRevision, answerBy: deadline) { [self] _ in body(appliedAt[key]) }
            }
        }
    }

    /// How long after the slots were read the leaked ones are swept (`sweepLeakedSlots`).
    static let sweepDelaySeconds = 5.0

    /// After a restart from the local copy, which keeps neither the quota slots nor which host
    /// wrote each countdown: one read of the prefix (in pages, `EtcdClient.range`) gives both.
    /// Tried again each second until etcd answers.
    ///
    /// - The slots etcd holds replace the claims noted so far, and the slot changes the watch
    ///   brought meanwhile that are newer are applied (`slotChangesBeforeRead`). Until then,
    ///   creations are refused as unavailable (`claimSlots`).
    /// - Each countdown the watch has not brought since gets the writer of etcd's value, the host
    ///   that proposes its next due change (a value newer than this host's copy only makes this
    ///   host's proposal fail its compare, as any proposal from a copy behind). Until then the
    ///   writers are unknown (`TakeOverPolicy`: the grace, for everyone), so without the read a
    ///   restarted host would wait it out for its own countdowns.
    private func readAfterResume() {
        client.range(prefix: configuration.prefix) { [self] result in
            switch result {
            case .failure(let error):
                logger.log(.warning, "cluster: cannot read \(configuration.prefix) from etcd to learn its quota slots and which host wrote each countdown (\(error)); trying again in a second")
                schedule(after: 1) { [self] in readAfterResume() }
            case .success(let (keyValues, readAt)):
                let read = sortRead(keyValues)
                for countdown in read.countdowns where writers[countdown.key] == nil {
                    writers[countdown.key] = countdown.value.host
                }
                guard slotsAppliedAt == nil else { return }  // A full read came first, and holds them.
                quota.replaceHeld(with: read.slots)
                slotsAppliedAt = readAt
                let waiting = slotChangesBeforeRead
                slotChangesBeforeRead.removeAll()
                for event in waiting { applySlotChange(event) }
                schedule(after: Self.sweepDelaySeconds) { [self] in sweepLeakedSlots() }
            }
        }
    }

    /// What a read of the prefix holds, sorted: the countdowns (with the revision each was
    /// changed at) and the quota slots; heartbeats and values this version cannot read are
    /// left out (the latter logged, by revision: a key holds a countdown's name, which can be
    /// personal data).
    private func sortRead(_ keyValues: [EtcdKeyValue]) -> (countdowns: [(key: String, value: ClusterValue, changedAt: Int64)], slots: [(slot: QuotaSlots.Slot, holder: String)]) {
        var countdowns: [(key: String, value: ClusterValue, changedAt: Int64)] = []
        var slots: [(slot: QuotaSlots.Slot, holder: String)] = []
        countdowns.reserveCapacity(keyValues.count)
        for keyValue in keyValues {
            let key = String(keyValue.key.dropFirst(configuration.prefix.count))
            guard !ClockHeartbeat.isHeartbeat(key) else { continue }
            if QuotaSlots.isSlotKey(key) {
                if let held = slotHeld(keyValue) { slots.append(held) }
                continue
            }
            guard Self.isCountdownKey(key), let value = ClusterValue.decode(keyValue.value) else {
                logger.log(.warning, "cluster: skipped a key under \(configuration.prefix) (revision \(keyValue.modRevision)): not a countdown this version reads")
                continue
            }
            countdowns.append((key, value, keyValue.modRevision))
        }
        return (countdowns, slots)
    }

    /// Whether `key` (under the prefix) names a countdown as daemons write them: a name, or
    /// `<uid>/<name>` (`CountdownAddress`). A key put there by other hands that does not (a
    /// newline in it, say) is not a countdown this version reads: skipped, never shown to a
    /// client, where it would split a line.
    static func isCountdownKey(_ key: String) -> Bool {
        (try? CountdownAddress.validate(bytes: key.utf8)) != nil
    }

    /// The slot a key-value under the prefix is, and the countdown that holds it.
    private func slotHeld(_ keyValue: EtcdKeyValue) -> (slot: QuotaSlots.Slot, holder: String)? {
        let key = String(keyValue.key.dropFirst(configuration.prefix.count))
        guard let slot = QuotaSlots.Slot(key: key) else { return nil }
        return (slot, String(decoding: keyValue.value, as: UTF8.self))
    }

    /// One quota slot's change from the watch. A slot is written in the same transaction as
    /// its countdown, and takes no number. Changes the slots' read held already are skipped;
    /// one revision's come again after a resumed watch, and noting them twice changes nothing.
    private func applySlotChange(_ event: EtcdWatchEvent) {
        guard let known = slotsAppliedAt else {
            slotChangesBeforeRead.append(event)
            return
        }
        guard let (slot, holder) = slotHeld(event.keyValue), event.keyValue.modRevision >= known else { return }
        slotsAppliedAt = event.keyValue.modRevision
        switch event.kind {
        case .put: quota.noteHeld(slot, by: holder)
        case .delete: quota.noteFreed(slot)  // A deletion's value is empty: the slot names it.
        }
    }

    private func readEverything(first: Bool) {
        client.range(prefix: configuration.prefix) { [self] result in
            switch result {
            case .failure(let error):
                logger.log(.warning, "cluster: cannot read \(configuration.prefix) from etcd (\(error)); trying again in a second")
                schedule(after: 1) { [self] in readEverything(first: first) }
            case .success(let (keyValues, readAt)):
                let read = sortRead(keyValues)
                appliedAt.removeAll(keepingCapacity: true)
                writers.removeAll(keepingCapacity: true)
                dueInFlight.removeAll()  // What was on its way is in this read, or lost its race.
                for countdown in read.countdowns {
                    appliedAt[countdown.key] = countdown.changedAt
                    writers[countdown.key] = countdown.value.host
                }
                revision = readAt
                appliedSequence = Self.sequenceOfRead(at: readAt)
                quota.replaceHeld(with: read.slots)
                slotsAppliedAt = readAt
                slotChangesBeforeRead.removeAll()
                schedule(after: Self.sweepDelaySeconds) { [self] in sweepLeakedSlots() }
                load(read.countdowns.map { ($0.key, $0.value) }, appliedSequence)
                logger.log(.notice, "cluster: read \(read.countdowns.count) countdowns at revision \(readAt) from etcd")
                startWatch()
                releaseWaiters()
                if first { onFirstLoad() }
            }
        }
    }

    private func startWatch() {
        isWatching = true
        takeOver.startListening(at: time.now())
        // From the revision last applied, inclusive: a transaction's events could have come in
        // two answers, and the numbering skips those applied already.
        placed = (0, 0)
        backlog.removeAll()
        backlogNext = 0
        giveWatchTime()  // A new watch has its own 2 s for what was expected of the last.
        lastWatchDelivery = time.now()
        watchIsLive = false
        watchOpenedAt = nil
        watch = client.watch(prefix: configuration.prefix, from: max(revision, 1), onEvents: { [self] events, sentAt in
            // It answers: a long history streaming in is progress, not a stuck watch.
            giveWatchTime()
            let arrivedAt = time.now()
            lastWatchDelivery = arrivedAt
            // etcd's first answer says it made the watch, with its revision then: what the copy
            // missed is replayed up to it before anything newer.
            if watchOpenedAt == nil { watchOpenedAt = sentAt }
            backlog.append(contentsOf: events.map { ($0, sentAt, arrivedAt) })
            continueCatchUp()
        }, onEnd: { [self] end in
            isWatching = false
            // What it brought and was not applied yet comes again from the next watch, which
            // starts at the last revision applied.
            backlog.removeAll()
            backlogNext = 0
            switch end {
            case .compacted(let at):
                logger.log(.warning, "cluster: etcd compacted its history past revision \(revision) (to \(at)); reading everything again")
                readEverything(first: false)
            case .failed(let error):
                logger.log(.warning, "cluster: the watch on etcd ended (\(error)); resuming after revision \(revision)")
                schedule(after: 0.2) { [self] in startWatch() }
            }
        })
    }

    /// How many of the watch's changes one batch applies: a backlog (a host catching up after a
    /// restart, a stop or a leader change) is applied in slices, with clients served between
    /// them, never in one long batch.
    static let changesPerSlice = 256

    /// Whether changes the watch brought wait to be applied (`continueCatchUp`, next batch).
    var isCatchingUp: Bool { backlogNext < backlog.count }

    /// Applies the next slice of what the watch brought, in order, and releases the waiters it
    /// satisfies (called when the watch delivers, and at the start of each batch while catching up).
    func continueCatchUp() {
        var end = min(backlog.count, backlogNext + Self.changesPerSlice)
        // A slice ends between revisions, never inside a transaction's changes: `revision` then
        // always means a revision wholly applied, also in the state directory's copy.
        while end < backlog.count, backlog[end].event.keyValue.modRevision == backlog[end - 1].event.keyValue.modRevision {
            end += 1
        }
        while backlogNext < end {
            let (event, sentAt, arrivedAt) = backlog[backlogNext]
            backlogNext += 1
            applyWatched(event, sentAt: sentAt, arrivedAt: arrivedAt)
        }
        if backlogNext == backlog.count {
            backlog.removeAll(keepingCapacity: backlog.count <= 4096)
            backlogNext = 0
        }
        if !removedInSlice.isEmpty {
            // The slice ended between revisions: a removal's slots, deleted in its transaction,
            // are freed by now. Slots still held were left behind.
            sweepLeakedSlots(of: removedInSlice)
            removedInSlice.removeAll()
        }
        releaseWaiters()
    }

    /// One change from the watch, numbered by its revision and its place among the revision's
    /// changes (`placed`): applied unless it was already. `arrivedAt` is when the watch brought
    /// it, which a backlog applies later (slices of a restarted host's catch-up came tens of
    /// seconds after: read as the time a heartbeat came, that made other hosts' clocks look
    /// 71 s off and gone hosts look live).
    private func applyWatched(_ event: EtcdWatchEvent, sentAt: Int64, arrivedAt: Instant) {
        let key = String(event.keyValue.key.dropFirst(configuration.prefix.count))
        let changedAt = event.keyValue.modRevision
        if changedAt == sentAt || changedAt >= watchOpenedAt ?? .max { watchIsLive = true }
        if QuotaSlots.isSlotKey(key) {
            applySlotChange(event)
            return
        }
        placed = placed.revision == changedAt ? (changedAt, placed.count + 1) : (changedAt, 0)
        let sequence = Self.sequence(revision: changedAt, place: placed.count)
        let isHeartbeat = ClockHeartbeat.isHeartbeat(key)
        let value = event.kind == .put && !isHeartbeat && Self.isCountdownKey(key) ? ClusterValue.decode(event.keyValue.value) : nil
        // A replacement takes the next place too (its `cancelled` comes first), whether it is
        // applied now or was already: the places after it are numbered alike either way.
        placed.count += (value?.announcements ?? 1) - 1
        guard sequence > appliedSequence else { return }
        if isHeartbeat {
            if event.kind == .put {
                let host = String(key.dropFirst(ClockHeartbeat.keyInfix.count))
                heartbeat.received(from: host, value: event.keyValue.value, live: changedAt == sentAt, arrivedAt: arrivedAt)
                takeOver.heard(from: host, at: arrivedAt)
            }
            appliedSequence = sequence
            revision = changedAt
            return
        }
        if !dueInFlight.isEmpty { dueInFlight[key] = nil }  // Decided, by whichever host: the copy has it now.
        switch event.kind {
        case .put:
            guard let value else { return }  // Not a countdown this version reads.
            appliedAt[key] = changedAt
            writers[key] = value.host
            apply(key, value, sequence)
        case .delete:
            appliedAt[key] = nil
            writers[key] = nil
            apply(key, nil, sequence)
            removedInSlice.append(key)
        }
        appliedSequence = Self.sequence(revision: changedAt, place: placed.count)
        revision = changedAt
    }

    /// Other hosts' clock offsets from this one, from their heartbeats (`ClockHeartbeat`).
    var skews: [String: (estimate: Int64, samples: [Int64], warnedAt: Instant?)] { heartbeat.skews }

    /// The largest clock offset estimated from another host, in ms (0 with none seen).
    var largestSkewMilliseconds: Int64 { heartbeat.largestSkewMilliseconds }

    /// Runs `resume(true)` once the replica has applied `revision`. If the watch has not
    /// brought it within `catchUpTimeout`, the watch is moved to another member and
    /// `resume(false)` runs: the change is in etcd, this host's copy is behind. With an
    /// `answerBy` before that, `resume(false)` runs then, and the watch is left as it is.
    func afterRevision(_ wanted: Int64, answerBy: Instant? = nil, _ resume: @escaping (Bool) -> Void) {
        if revision >= wanted {
            lastLagMicroseconds = 0
            resume(true)
            return
        }
        let committed = time.now()
        let suspectWatchAt = expectFromWatch(wanted)
        waiters.append((wanted, min(suspectWatchAt, answerBy ?? suspectWatchAt), { [self] caughtUp in
            if caughtUp { lastLagMicroseconds = time.now().nanoseconds(since: committed) / 1000 }
            resume(caughtUp)
        }))
    }

    /// A revision the copy must reach before reads stop saying it is behind: that of a change
    /// a client was told had committed before the copy held it (its watch did not bring it in
    /// the change's time: a read would not show that client its own change), or the one etcd
    /// answered at after an outage (`heartbeatAnsweredAgain`).
    private var mustReach: Int64 = 0 {
        didSet { if mustReach > revision, mustReachSince == nil { mustReachSince = (time.now(), revision) } }
    }
    /// Since when the copy has been short of `mustReach` without moving on, and where it stood.
    private var mustReachSince: (instant: Instant, revision: Int64)?

    /// A change committed at `revision` was answered before the copy held it.
    func noteAnsweredAhead(of revision: Int64) {
        mustReach = max(mustReach, revision)
    }

    /// How long the copy may stay short of `mustReach` before its watch is moved: a heartbeat's
    /// interval (a working watch brings this host's next heartbeat, made after that revision)
    /// and the 2 s a watch is given to bring a committed change.
    static let reachNanoseconds = catchUpTimeoutNanoseconds + ClockHeartbeat.intervalNanoseconds

    /// Moves a watch that leaves the copy short of `mustReach`, and not moving on, for
    /// `reachNanoseconds`, unless changes it brought wait in the backlog. It catches a watch
    /// that trickles: a stream TCP kept alive through short heals of a flapping link brought a
    /// little now and then (so no other rule moved it), while the copy stood still 4-12 s behind
    /// for half a minute. A watch that is moving the copy on (a burst's, seconds behind etcd) is
    /// left.
    private func moveWatchThatDoesNotReach(now: Instant) {
        guard revision < mustReach else {
            mustReachSince = nil
            return
        }
        guard let since = mustReachSince else { return }
        if revision > since.revision {
            mustReachSince = (now, revision)  // Moving on: its time starts again.
            return
        }
        guard isWatching, !isCatchingUp, now.nanoseconds(since: since.instant) >= Self.reachNanoseconds else { return }
        mustReachSince = (now, revision)  // The next watch has its own time.
        logger.log(.warning, "cluster: the watch has not brought etcd's revision \(mustReach) within \(Self.reachNanoseconds / 1_000_000_000) s (it is at revision \(revision)); moving it to another member")
        restartWatchElsewhere()
    }

    /// How long a change etcd committed (this host's own, or its heartbeat) may be missing from
    /// the copy before reads say the copy is behind (`isBehind`).
    static let behindAfterNanoseconds: Int64 = 1_000_000_000

    /// Whether this host's copy knows it trails etcd, or cannot know it does not:
    /// - its watch is not running, or has not brought a change live since it started (it may be
    ///   replaying what the copy missed, or not be connected yet);
    /// - the watch brought changes not applied yet (`isCatchingUp`);
    /// - the copy has not reached `mustReach` (a client was told of a change the copy does not
    ///   hold yet, or etcd answered again after an outage at a revision the copy has not reached);
    /// - a change etcd committed for this host (its own, or its heartbeat, one a second) has been
    ///   missing for `behindAfterNanoseconds`;
    /// - etcd has answered no heartbeat for 2.5 s (`ClockHeartbeat.isOutOfTouch`: cut off, the
    ///   host cannot tell what it misses).
    ///
    /// Reads then say so (`ChangeStore.appendReadOK`, `ChangeStore.notFound`): a finished
    /// countdown may still show as running with 0 left, a new one as not found.
    func isBehind(now: Instant) -> Bool {
        guard isWatching, watchIsLive, !isCatchingUp, revision >= mustReach, !heartbeat.isOutOfTouch(now: now) else { return true }
        let overdueAfter = Self.behindAfterNanoseconds - Self.catchUpTimeoutNanoseconds
        return expected.contains { $0.revision > revision && now >= $0.suspectWatchAt.advanced(byNanoseconds: overdueAfter) }
    }

    /// Notes that etcd committed `revision` under the prefix, so the watch must bring it: if it
    /// has not within `catchUpTimeout` (and no backlog explains it), the housekeeping moves the
    /// watch to another member. Called for this host's changes and for its heartbeats, every
    /// second: without them a host nobody sent changes to kept a silent watch for as long as TCP
    /// took to give up (25-95 s after a healed partition; for as long as a stopped member
    /// stayed stopped). Returns the instant the watch is suspected.
    @discardableResult
    func expectFromWatch(_ revision: Int64) -> Instant {
        let suspectWatchAt = time.now().advanced(byNanoseconds: Self.catchUpTimeoutNanoseconds)
        if revision > self.revision {
            expected.append((revision, suspectWatchAt))
        }
        return suspectWatchAt
    }

    /// When the watch last brought anything (or was started).
    private var lastWatchDelivery: Instant?

    /// Whether the watch, since it was last started, has brought a change live (the newest in
    /// etcd when it was sent, or made after the watch was: this host's heartbeat is, each
    /// second) and the copy applied it: until then a new watch may still be replaying what the
    /// copy missed, or not be connected.
    private var watchIsLive = false

    /// etcd's revision when it made the watch (its first answer's): a change at or past it
    /// was not missed before the watch started, so the copy is current once it applied one.
    private var watchOpenedAt: Int64?

    /// etcd answers again after leaving this host's heartbeats unanswered since
    /// `unansweredSince`. A watch that has brought nothing since then is moved to another
    /// member at once: every host's heartbeats (this one's included, each second) come through
    /// a working watch, so a watch silent through the whole outage streams from a member cut off
    /// from this host, or from a connection that TCP's back-off will keep silent long after a
    /// partition heals (25-95 s, measured). Waiting for a heartbeat to commit and then go missing
    /// (`expectFromWatch`) took 4-5 s more. A watch whose changes wait in the backlog is not
    /// stuck: this host is behind it (moving it would throw the backlog away and fetch it
    /// again). Moving a watch at the first unanswered heartbeat instead moved busy watches
    /// in a burst of 30,000 deadlines, where etcd left both a heartbeat and the watch waiting
    /// for over a second, and kept a restarted host from ever catching up.
    ///
    /// Either way the copy counts as behind until it reaches the revision etcd answered at: a
    /// watch that was left may still be bringing what the outage held back.
    private func heartbeatAnsweredAgain(unansweredSince: Instant, at etcdRevision: Int64) {
        mustReach = max(mustReach, etcdRevision)
        guard isWatching, !isCatchingUp, let lastWatchDelivery, lastWatchDelivery < unansweredSince else { return }
        logger.log(.warning, "cluster: etcd answers again after an outage, and the watch has brought nothing since it began (it is at revision \(revision)); moving it to another member")
        restartWatchElsewhere()
    }

    /// The watch answered (or starts): what it is expected to bring is suspected only 2 s
    /// from now. So a silent watch is moved, and one that streams a long history is not.
    private func giveWatchTime() {
        guard !expected.isEmpty else { return }
        let suspectWatchAt = time.now().advanced(byNanoseconds: Self.catchUpTimeoutNanoseconds)
        for index in expected.indices where expected[index].suspectWatchAt < suspectWatchAt {
            expected[index].suspectWatchAt = suspectWatchAt
        }
    }

    private func releaseWaiters() {
        expected.removeAll { $0.revision <= revision }
        guard !waiters.isEmpty else { return }
        let ready = waiters.filter { $0.revision <= revision }
        waiters.removeAll { $0.revision <= revision }
        for waiter in ready {
            waiter.resume(true)
        }
    }

    /// Ends the watch on a member that seems stuck; it resumes on another one (the member
    /// calls go to, unless that is the watch's own).
    private func restartWatchElsewhere() {
        guard let watch, isWatching else { return }
        client.rotateAfterFailure(of: watch.endpoint)
        client.cancel(watch)
    }

    // MARK: - Changing

    /// Writes `value` (or deletes the key, for `nil`) if etcd still has what `expectation` says,
    /// in the next group transaction (`GroupCommit`, sent by `sendPending` at the end of the
    /// batch, with every other change of the batch). `completion` runs on the queue.
    ///
    /// A transaction whose answer was lost (a member stopped or cut off after the request went
    /// out) is sent once more to the next member with the same operation ids. Whichever of the
    /// two commits first wins, the other fails its comparison; a conflict that shows this very
    /// operation's value is the first one having committed, so it counts as committed.
    ///
    /// Every attempt shares one deadline, `changeTimeoutMilliseconds` from now unless given (the
    /// first gets half of what is left): a change is answered within it, whichever members are
    /// stopped.
    ///
    /// A creation carries the quota slots claimed for it (`claimSlots`): each is created with
    /// it, on the condition that it does not exist, and stays claimed until the change is
    /// decided and, if made, this host's copy holds it. A removal frees the countdown's slots.
    func change(
        _ key: String, to value: ClusterValue?, expecting expectation: Expectation, claiming claimed: [QuotaSlots.Slot] = [],
        deadline: Instant? = nil, isDueChange: Bool = false, completion: @escaping (ChangeOutcome) -> Void
    ) {
        let prefix = configuration.prefix
        guard value != nil || slotsAppliedAt != nil else {
            // Which slots a removal frees is known only once they were read: removing the
            // countdown without them would leave them held forever.
            completion(.failed(.unreachable("this host has not yet read the fleet's quota slots from etcd, so it cannot free the countdown's")))
            return
        }
        let freed = value == nil ? quota.slots(heldBy: key).map { prefix + $0.key } : []
        commits.propose(
            prefix + key, to: value, expecting: expectation, claiming: claimed.map { prefix + $0.key }, freeing: freed,
            holder: Array(key.utf8),
            deadline: deadline ?? time.now().advanced(byMilliseconds: Int64(Self.changeTimeoutMilliseconds)), isDueChange: isDueChange
        ) { [self] outcome in
            if !claimed.isEmpty {
                if case .committed(let revision) = outcome {
                    afterRevision(revision) { [self] _ in quota.release(claimed) }
                } else {
                    quota.release(claimed)
                }
            }
            completion(outcome)
        }
    }

    /// Claims the quota slots a new countdown of `owner` needs (`QuotaSlots.claim`), for its
    /// `change`. Counted from etcd's slots and this host's claims in flight; etcd's compare
    /// then settles a race for the last one.
    /// - Throws: `limit` when a pool is full; `unavailable` before the slots were read.
    func claimSlots(for owner: UInt32) throws(ProtocolError) -> [QuotaSlots.Slot] {
        guard slotsAppliedAt != nil else {
            throw ProtocolError(
                .unavailable,
                "this host has not yet read the fleet's quota slots from etcd, so it cannot tell whether a new countdown fits the limits; try again in a moment"
            )
        }
        return try quota.claim(for: owner, using: &randomness)
    }

    /// Slots held in etcd fleet-wide, and those claimed by this host (tests).
    var quotaCounts: (heldFleetWide: Int, claimed: Int) {
        (quota.heldCount(owner: nil), quota.claimedCount)
    }

    /// Whether this host's copy holds the countdown `key` (set by the daemon, from its engine).
    var holdsCountdown: (String) -> Bool = { _ in true }

    /// The most leaked slots one sweep deletes.
    static let slotsPerSweep = 256

    /// Deletes quota slots whose countdown is gone, as etcd holds them at that moment: each
    /// in a transaction that holds only if the slot still names that countdown and the countdown
    /// does not exist. A slot and its countdown are written and deleted together, so such a
    /// slot was left by a countdown deleted some other way (by hand with `etcdctl`, or by a host
    /// of a version without slots); without the sweep, its place would be lost for good.
    ///
    /// Run for the countdowns `removed` whose deletion the watch brought without their slots'
    /// (checked between revisions, when a revision's changes are all applied), and for every
    /// held slot a few seconds after the slots were read (`removed` `nil`: the copy has caught
    /// up by then; a countdown it does not hold yet only costs its slot a failed compare).
    private func sweepLeakedSlots(of removed: [String]? = nil) {
        let candidates: [(slot: QuotaSlots.Slot, holder: String)]
        if let removed {
            candidates = removed.filter { !holdsCountdown($0) }.flatMap { holder in quota.slots(heldBy: holder).map { ($0, holder) } }
        } else {
            candidates = quota.heldSlots.filter { !holdsCountdown($0.holder) }
        }
        guard !candidates.isEmpty else { return }
        let prefix = configuration.prefix
        for (slot, holder) in candidates.prefix(Self.slotsPerSweep) {
            client.transaction(
                if: [.valueEquals(prefix + slot.key, Array(holder.utf8)), .absent(prefix + holder)], then: [.delete(prefix + slot.key)],
                else: []
            ) { [self] result in
                if case .success(let outcome) = result, outcome.succeeded {
                    logger.log(.notice, "cluster: deleted quota slot \(prefix)\(slot.key), left by a countdown deleted without it")
                }
            }
        }
    }

    /// The due changes (a `done`, a removal) this host proposed that its copy has not yet
    /// seen decided, each with its operation id: not proposed again meanwhile. The engine hands
    /// a due countdown back every second until its copy changes (`CountdownEngine.takeDue`);
    /// in a burst that etcd takes longer than that to carry, each would be sent again and
    /// again (3.3 changes sent per `done` at 30,000 deadlines), and a second proposal that
    /// fails its compare fails the whole transaction it went in.
    private var dueInFlight: [String: String] = [:]

    /// How long a due change may wait to be sent and decided.
    static let dueChangeTimeoutMilliseconds: Int64 = 30_000

    /// Due changes this host proposed as their writer, and for others (`STATS`).
    private(set) var dueProposals = (own: 0, takenOver: 0)

    /// Whether this host has a due change of `key` on its way (`proposeDue`).
    func isProposingDue(_ key: String) -> Bool {
        dueInFlight[key] != nil
    }

    /// Proposes a due change of `key` (a `done`, or `nil`: its removal), compared on `revision`,
    /// the change this host's copy holds, unless one is on its way already. It counts as on its
    /// way until the copy applies a change of `key` (the watch brings etcd's decision, whoever
    /// made it), or until it fails or loses its race.
    func proposeDue(_ key: String, to value: ClusterValue?, comparedOn revision: Int64) {
        guard dueInFlight[key] == nil else { return }
        let operation = value?.operation ?? nextOperation()
        dueInFlight[key] = operation
        if writers[key] == hostID { dueProposals.own += 1 } else { dueProposals.takenOver += 1 }
        // No client waits for it: it may wait its turn in a burst for longer than a client's
        // 3 s, instead of expiring unsent and being proposed again (at 100,000 deadlines five
        // proposals were made for each one sent).
        let deadline = time.now().advanced(byMilliseconds: Self.dueChangeTimeoutMilliseconds)
        change(key, to: value, expecting: .unchangedSince(revision), deadline: deadline, isDueChange: true) { [self] outcome in
            // Committed: on its way until the watch brings it (`applyWatched`).
            guard !outcome.isCommitted, dueInFlight[key] == operation else { return }
            dueInFlight[key] = nil
        }
    }

    /// Sends the changes proposed so far (at the end of each batch).
    func sendPending() {
        if commits.hasPending { commits.send() }
    }

    /// Transactions sent to etcd, and the changes they carried (`STATS`).
    var transactionCounts: (transactions: Int, changes: Int) {
        (commits.transactionsSent, commits.changesSent)
    }

    /// Stops the watch and every transfer.
    func stop() {
        if let watch { client.cancel(watch) }
        driver?.close()
        isStopped = true
    }
}
