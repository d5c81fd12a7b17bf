import CLinuxShims
import CountdownCore
import Dispatch
import Glibc

/// The countdown daemon: a batch driver over components that own their state.
///
/// One serial queue, `queue`, owns every piece of mutable state; every handler runs there and
/// the state-touching functions check it with `dispatchPrecondition`. That is why the class can
/// be `@unchecked Sendable`: its state never leaves the queue.
///
/// `Daemon` itself keeps the engine, the batch `phase`, `execute` (the one switch over requests)
/// and `change`, the one place where a request's change meets the engine, in both modes: the
/// store (`ChangeStore`, `decide`) answers it durable or pending. The components:
/// - **client table** (`ClientTable`): the listener and connections, turns, framing, reply
///   order and backpressure;
/// - **fan-out** (`EventFanOut`): subscriptions and encoding each event once;
/// - **journal** (`StateJournal`): everything about durability;
/// - **wake-up scheduler** (`WakeupTimer`): one timerfd (or, for an instant up to 20 ms off
///   armed within a batch, the poll's own timeout) for the earliest of the engine's next due
///   instant and the delayed work (`later`, `laterInBatch`);
/// - **service manager** (`ServiceManager`): sd_notify, the watchdog, `STATUS=`.
///
/// Each wake-up of the poller is one batch, in phases (Redis's `beforeSleep` and sd-event's
/// prepare/dispatch are the models): **serving** (due events, then requests), **sealing** (what
/// fell due meanwhile, then one journal commit; a failed commit undoes the batch's changes and
/// serves its requests again with changes refused), **flushing** (replies and events are written,
/// only now), **idle** (the timer is re-armed, status reported, a snapshot started when due).
public final class Daemon: @unchecked Sendable {
    /// The configuration in force.
    public let configuration: DaemonConfiguration

    /// Where a batch is. Output leaves only in `flushing`; requests are read only in `serving`.
    /// It changes only through `enter`, along the transitions a batch makes.
    enum Phase {
        case idle, serving, sealing, flushing

        /// Whether a batch goes from this phase to `next`: idle → serving → sealing → flushing →
        /// idle, and sealing → serving when a failed commit undoes the batch and serves it again.
        func leads(to next: Phase) -> Bool {
            switch (self, next) {
            case (.idle, .serving), (.serving, .sealing), (.sealing, .flushing), (.flushing, .idle), (.sealing, .serving):
                return true
            default:
                return false
            }
        }
    }

    let queue = DispatchQueue(label: "countdownd.state")
    let logger: Logger

    var engine: CountdownEngine
    /// The durable state of the countdown `name` (looked for first in `hint`, an event's slot),
    /// read where the engine is. `inout` on purpose: a call into the core on the stored `engine`
    /// copied the whole engine value first (every array and table in it retained, then
    /// released: about 430 instructions by callgrind, for each lifecycle event and each change);
    /// an `inout` engine is lent in place.
    static func state(of name: String, hint: Int32 = -1, in engine: inout CountdownEngine) -> Countdown? {
        engine.persistentState(of: name, hint: hint)
    }
    private(set) var phase = Phase.idle
    let journal: StateJournal
    /// Recent lifecycle events that have been released, for `SUBSCRIBE … SINCE`.
    var ring: EventRing
    /// What the current batch did, so it can be undone if its commit fails.
    var batch = BatchRecord()
    let service: ServiceManager
    /// Work done after a batch at a later time (watchdog, retries, graces); the wake-up timer is
    /// armed for it too.
    let later: DelayedWork
    /// Work done at a later time within a batch, while it serves, so that the replies it
    /// queues go out with the batch: cluster mode's retries and housekeeping
    /// (`ClusterReplica`). The same wake-up timer serves it.
    let laterInBatch: DelayedWork
    var timer: WakeupTimer?
    var wallClock: WallClockWatcher?
    /// Notices that the machine slept, at the start of each batch.
    var sleepDetector: SleepDetector
    /// When the last batch ended: the machine was awake until then.
    var lastBatchEnded: Instant
    /// Notices the state directory deleted or moved (`nil` when inotify is not available).
    var stateWatcher: StateDirectoryWatcher?
    var stateCheckScheduled = false
    var poller: EventPoller?
    /// The listening socket until the client table opens with it (in cluster mode, once the
    /// replica holds what etcd holds), so that a stop before then still removes its file.
    var listenerNotYetOpen: ListeningSocket?
    var isStopping = false
    /// Where changes are decided and kept: this host's journal, or etcd (`ChangeStore`).
    var store = ChangeStore.journal
    /// Cluster mode: countdowns this host proposed to create and etcd has not decided yet; they
    /// count against the limits (`CountdownEngine.checkRoom`).
    var creationsInFlight = PendingCreations()

    let clients: ClientTable
    /// The `LIST`s in progress by uid, and the most one non-root user may have.
    let listingQuota = ListingQuota(limit: Daemon.listsPerUser)
    let fanOut: EventFanOut
    /// When the running batch stops taking requests (see `batchTimeBudgetNanoseconds`).
    var batchDeadline = Instant(nanoseconds: .max)
    /// How long the last batch's journal commit took (its `fdatasync` under `--durability
    /// power`): the next batch may take requests about as long (`requestTimeBudget`).
    var lastCommitNanoseconds: Int64 = 0
    /// Connections that had a turn in the running batch (see `minimumTurnsPerBatch`).
    var turnsThisBatch = 0
    /// The connection's turn being served (`beginTurn`).
    var turn = Turn(now: Instant(nanoseconds: 0))
    /// Events by kind and lateness, for `STATS`.
    var statistics: DaemonStatistics

    /// The lifecycle log lines, at most `--log-lifecycle-limit` per 10 s.
    let lifecycleLog: RateLimitedWarning
    /// A user's requests waited for the next batch, having used their share of one
    /// (`workPerUserPerBatch`): once per 10 s, the rest counted.
    let shareUsed: RateLimitedWarning

    /// Reused buffers, so the hot paths do not allocate per request or per event.
    var events: [CountdownEvent] = []
    var replyBuffer: [UInt8] = []

    /// Where the daemon and its components read the time (the system's clocks but in tests).
    let time: DaemonClock

    /// Creates a daemon; nothing happens until `run()`.
    public convenience init(configuration: DaemonConfiguration, environment: [String: String]) {
        self.init(configuration: configuration, environment: environment, time: .system)
    }

    /// Creates a daemon whose components read `time`.
    init(configuration: DaemonConfiguration, environment: [String: String], time: DaemonClock) {
        self.time = time
        lastBatchEnded = time.now()
        statistics = DaemonStatistics(startedAt: lastBatchEnded)
        self.configuration = configuration
        self.engine = CountdownEngine(configuration: configuration.engine)
        let logger = Logger(threshold: configuration.logLevel, environment: environment)
        self.logger = logger
        self.journal = StateJournal(
            directory: configuration.stateDirectory, durability: configuration.durability, logger: logger, queue: queue, time: time
        )
        self.ring = EventRing(depth: configuration.replayEventsPerUser)
        let later = DelayedWork(queue: queue)
        self.later = later
        laterInBatch = DelayedWork(queue: queue)
        self.service = ServiceManager(queue: queue, later: later, statusInterval: configuration.statusIntervalMilliseconds, logger: logger, time: time)
        let clients = ClientTable(queue: queue, later: later, logger: logger, configuration: configuration, time: time)
        self.clients = clients
        lifecycleLog = RateLimitedWarning(
            "lifecycle events", level: .info, burst: configuration.lifecycleLogLimit == 0 ? .max : configuration.lifecycleLogLimit,
            logger: logger, later: later
        )
        shareUsed = RateLimitedWarning("batches a user's requests waited out", level: .info, logger: logger, later: later)
        self.fanOut = EventFanOut(queue: queue, clients: clients, configuration: configuration)
        sleepDetector = SleepDetector(environment: environment)
    }

    /// Starts listening, tells systemd it is ready, and serves until SIGTERM or SIGINT. It blocks
    /// both signals first, so call it before the process starts any thread; the calling thread
    /// becomes the poll thread.
    /// - Throws: `DaemonError` when it cannot start (socket in use, bad path, unreadable state, …).
    public func run() throws(DaemonError) -> Never {
        // Before any thread exists, so that every thread inherits the mask and the signals wait
        // for the signalfd (`TerminationSignals`), however early they come. (Not `dispatchMain`
        // afterwards: it leaves the main thread with no signals blocked, and a SIGTERM sent to
        // the process would kill it there.)
        try TerminationSignals.block()
        signal(SIGPIPE, SIG_IGN)
        let started: Result<EventPoller, DaemonError> = queue.sync {
            do throws(DaemonError) {
                return .success(try start())
            } catch {
                return .failure(error)
            }
        }
        // The first batch runs once `start` (and so READY=1, outside cluster mode) is done.
        try started.get().run { [unowned self] batch in runBatch(batch) }
    }

    /// Wires the fan-out to the engine: the engine learns who follows what. Called once, by
    /// `start`. (The client table learns who serves its requests when it opens.)
    func connectComponents() {
        // Ticks only where someone looks: the fan-out tells the engine who follows what.
        fanOut.tickInterest = EventFanOut.TickInterest(
            everything: { [unowned self] on in engine.setTicksEnabled(on, now: time.now()) },
            owner: { [unowned self] owner, on in
                if on { engine.watchOwner(owner, now: time.now()) } else { engine.unwatchOwner(owner) }
            },
            key: { [unowned self] key, on in
                if on { engine.watch(key, now: time.now()) } else { engine.unwatch(key) }
            }
        )
    }

    /// Sets everything up on the queue; READY=1 is the last step, once connections are accepted.
    /// - Returns: the poller, for the calling thread to run.
    private func start() throws(DaemonError) -> EventPoller {
        dispatchPrecondition(condition: .onQueue(queue))
        raiseDescriptorLimit()
        returnLargeBlocksToTheSystem()
        try recoverState()
        let listener = try SocketActivation.listeningSocket(fallbackPath: configuration.socketPath, mode: configuration.socketMode)
        let connectionLimit = connectionLimit()
        // Closed at a stop that comes before the table takes it (cluster mode's first load).
        listenerNotYetOpen = listener
        connectComponents()
        let poller = try EventPoller(queue: queue)
        self.poller = poller
        timer = try WakeupTimer(poller: poller) { [unowned self] in timerFired() }
        later.onEarlierDeadline = { [unowned self] in armTimer() }
        laterInBatch.onEarlierDeadline = { [unowned self] in armTimer() }
        journal.onSnapshotFinished = { [unowned self] in snapshotLanded() }
        wallClock = try WallClockWatcher(poller: poller) { [unowned self] failure in wallClockStepped(watchFailure: failure) }
        watchStateDirectory(poller: poller)
        try service.watchSignals(on: poller)
        let openForClients = { [unowned self] () throws(DaemonError) in
            listenerNotYetOpen = nil
            try clients.open(listener: listener, connectionLimit: connectionLimit, poller: poller, server: self)
            service.startWatchdog(now: time.now())
            logger.log(.notice, "countdownd \(DaemonConfiguration.version) listening on \(listener.displayPath)\(listener.ownedPath == nil ? " (socket from systemd)" : "")")
            service.ready(status: statusCounts())
        }
        // Clients are let in once the store holds what it must (in cluster mode, what etcd holds).
        try openStore(poller: poller, ready: openForClients)
        // Restored countdowns and work scheduled during recovery (the storage retry, a log
        // window's end) wait for the timer: armed now, before any client wakes the poller.
        armTimer()
        return poller
    }

    func statusCounts() -> StatusCounts {
        var storage: String?
        switch journal.health {
        case .available: storage = nil
        case .failing(let error): storage = "degraded: \(error); changes refused"
        case .awaitingSnapshot: storage = "degraded: rewriting the state directory; changes refused"
        }
        return StatusCounts(
            running: engine.runningCount,
            paused: engine.pausedCount,
            subscribers: fanOut.subscriberCount,
            connections: clients.figures.connections,
            storage: storage,
            cluster: store.statusNote
        )
    }

    /// Lets the daemon hold as many descriptors as its hard limit allows: each client is one.
    private func raiseDescriptorLimit() {
        var limit = rlimit()
        if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            // Ignored on purpose: raising the soft limit up to the hard one is always allowed;
            // were it refused, accept's EMFILE handling serves within the old limit.
            _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        }
    }

    /// Makes every allocation of 128 KiB or more its own mapping, given back to the system when
    /// it is freed. By default glibc raises that threshold after the first such block is freed,
    /// and from then on keeps large blocks in its heap: the engine's pages copied while a
    /// snapshot was written, and the arrays the name index and the scheduler grew out of, stayed
    /// resident as free memory, 157 bytes of RSS per countdown at a million against about 85 in
    /// use (measured after the snapshot had finished, with nothing else running).
    private func returnLargeBlocksToTheSystem() {
        // Ignored on purpose: a tuning; refused, glibc's default only keeps more memory resident.
        _ = countdownd_set_mmap_threshold(128 * 1024)
    }

    /// Descriptors kept free for the daemon's own files: a snapshot's SQLite files, a new journal
    /// file, the lock after a lost directory, sd_notify.
    static let spareDescriptors = 16

    /// How many clients the descriptor limit leaves room for, next to what is open now. With
    /// fewer than `--max-connections`, the clients past it get `ERR limit` at once (an accept
    /// that fails for want of a descriptor leaves them hanging in the backlog), and the start-up
    /// log says so.
    private func connectionLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else {
            return configuration.maximumConnections
        }
        let open = ((try? FileSystem.entries(of: "/proc/self/fd")) ?? []).count
        // Each client needs its descriptor, and one more is needed to accept and refuse it.
        let room = max(0, Int(limit.rlim_cur) - open - Self.spareDescriptors - 1)
        if room < configuration.maximumConnections {
            logger.log(.warning, "the descriptor limit (\(limit.rlim_cur), \(open) in use) leaves room for \(room) clients, fewer than --max-connections \(configuration.maximumConnections); more are refused with ERR limit. Raise LimitNOFILE= (or ulimit -n), or lower --max-connections")
        }
        return min(room, configuration.maximumConnections)
    }

    // MARK: - Time

    /// Runs what is due: called when the timer fires, and before each connection's requests.
    func advanceTime(to now: Instant) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let due = engine.nextWakeup, due <= now else { return }
        publishTimeEvents { engine.advance(to: now, events: &$0) }
        raceDueChanges()
    }

    /// Has `cause` (an engine call) append the events it causes to the batch's own list of
    /// time's events, which stand whatever the batch's commit does, and publishes those: each is
    /// appended once, not copied there from a list of its own.
    @discardableResult
    func publishTimeEvents<Result>(_ cause: (inout [CountdownEvent]) -> Result) -> Result {
        let first = batch.timeEvents.endIndex
        let result = cause(&batch.timeEvents)
        publish(batch.timeEvents[first...])
        return result
    }

    /// The wall clock was set: countdowns to a time of day follow it (plain durations, on the
    /// boot clock, do not move). The batch's end re-arms the timer for the new schedule.
    private func wallClockStepped(watchFailure: DaemonError?) {
        let now = time.now()
        let moved = engine.wallClockChanged(to: time.mapping(at: now), now: now)
        store.wallClockStepped()
        logger.log(.notice, "the wall clock was set\(moved > 0 ? "; \(moved) countdowns to a time of day follow it" : "")")
        if let watchFailure {
            logger.log(.warning, "cannot watch the wall clock any more (\(watchFailure)): countdowns to a time of day will not follow its next steps until countdownd is restarted")
        }
        advanceTime(to: now)
    }

    /// The machine slept (`SleepDetector`): countdowns that pause on suspend stand still for that
    /// time, with a `paused` and a `resumed` each, released with the batch like time's events
    /// (nothing can be refused to time). The others have counted on, and fire late, once.
    private func noticeSleep() {
        let slept = sleepDetector.sleptSinceLastCheck()
        guard slept > 0 else { return }
        let now = time.now()
        timer?.clockMoved()
        let stoodStill = publishTimeEvents { engine.machineSlept(for: slept, now: now, awakeUntil: lastBatchEnded, events: &$0) }
        raceDueChanges()
        logger.log(.notice, "the machine slept for \(CountdownDuration.format(milliseconds: slept / 1_000_000)); \(stoodStill) countdowns that pause on suspend stood still meanwhile, the others counted on")
    }

    private func timerFired() {
        let now = time.now()
        timer?.fired(at: now)
        advanceTime(to: now)
    }

    // MARK: - Batches

    /// One wake-up of the poller: the timer first, so requests never hold a due tick back; then
    /// the store's catching up and the due work of `laterInBatch` (the replica's housekeeping);
    /// then connections with lines left from the last batch and listings; then every client that
    /// is ready; then one commit and one write per connection for all of it.
    /// - Returns: whether work is left over for the next batch (request lines, a listing, or
    ///   cluster mode's catch-up), which then follows at once.
    private func runBatch(_ pollerBatch: EventPoller.Batch) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        beginBatch()
        noticeSleep()
        batchDeadline = time.now().advanced(byNanoseconds: requestTimeBudget)
        pollerBatch.deliverUrgent()
        store.continueWork()  // A slice per batch of a replica's catching up.
        fanOut.continueWork()  // A slice of gone subscribers' names.
        laterInBatch.runDue(now: time.now())
        clients.continueWork(rotation: Self.minimumTurnsPerBatch)
        pollerBatch.deliverOthers()
        batchDeadline = Instant(nanoseconds: .max)
        let clientsHaveWorkLeft = endBatch()
        if let signalNumber = service.stopSignal {
            // Never returns when it stops; else it drained the table, which then serves nothing.
            if mayStopNow(signal: signalNumber) { stop(signal: signalNumber) }
            return store.hasWorkLeft || fanOut.hasWorkLeft
        }
        return clientsHaveWorkLeft || store.hasWorkLeft || fanOut.hasWorkLeft
    }

    /// Moves the batch to its next phase; any other move is a bug, stopped here by name.
    func enter(_ next: Phase) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard phase.leads(to: next) else { preconditionFailure("a batch went from \(phase) to \(next), which no batch does") }
        phase = next
    }

    func beginBatch() {
        enter(.serving)
        turnsThisBatch = 0
        batch.begin()
        journal.beginBatch()
    }

    /// Seals, flushes and goes idle.
    /// - Returns: whether the client table has work for the next batch at once.
    @discardableResult
    func endBatch() -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        // What fell due while the batch ran goes out with it, without waiting for the timer.
        advanceTime(to: time.now())
        // Every change of the batch in one etcd transaction; still serving, since sending may
        // answer a change whose time ran out while it waited.
        store.sendPending()
        enter(.sealing)
        let commitStarted = time.now()
        let committed = journal.commit()
        lastCommitNanoseconds = time.now().nanoseconds(since: commitStarted)
        switch committed {
        case .durable, .deferred:
            release(batch.lifecycleEvents)
        case .failed where !store.undoesFailedBatches:
            // Nothing a client was told depends on this host's copy (`ChangeStore`). The batch
            // stays noted, written once storage works again; changes are refused meanwhile
            // (`checkStorageAcceptsChanges`).
            release(batch.lifecycleEvents)
        case .failed(let error):
            undoBatch(because: error)
        }
        retryStorageWhileFailing()
        statistics.recordTimeEvents(batch.timeEvents, writtenAt: time.now())
        enter(.flushing)
        let clientsHaveWorkLeft = clients.flushTouched()  // The only place output is written while running.
        enter(.idle)
        takeSnapshotIfDue()
        service.report(statusCounts(), now: time.now())
        later.runDue(now: time.now())
        armTimer()
        lastBatchEnded = time.now()
        return clientsHaveWorkLeft
    }

    /// Lifecycle events are released: they join the replay ring and the log, in that order, once.
    /// (Under normal operation they are durable by now; while storage fails, time's events are
    /// released anyway, as nothing can be refused to time.)
    func release(_ lifecycle: [CountdownEvent]) {
        statistics.count(lifecycle)
        let now = time.now()
        for event in lifecycle {
            ring.append(event)
            logLifecycle(event, now: now)
        }
    }

    /// A commit failed: the batch's changes are undone in the engine and in every output queue,
    /// then the batch is served again in failing mode, so each change is answered
    /// `ERR unavailable` and everything else (replies to reads, due events) as before.
    private func undoBatch(because error: StorageError) {
        dispatchPrecondition(condition: .onQueue(queue))
        let now = time.now()
        for (name, previous) in batch.undo.reversed() {
            engine.revert(name, to: previous, now: now)
        }
        journal.rollbackBatch()
        // A connection disconnected for overflow meanwhile has had its output replaced; it gets
        // nothing more.
        let rolledBack = clients.rollback(batch: batch.number)
        var timeEvents = batch.timeEvents
        engine.giveBackOwnerSequences(undone: batch.lifecycleEvents, standing: &timeEvents)
        let items = batch.items
        batch.begin()
        logger.log(.warning, "undid \(items.count) requests of the failed batch; changes among them are answered ERR unavailable")
        enter(.serving)
        batch.timeEvents = timeEvents
        publish(timeEvents)
        let clock = time.mapping(at: now)
        var slicesRedone = 0
        for (connection, item) in items where rolledBack.contains(connection.id) {
            if case .listingSlice(let saved) = item {
                clients.send(.listingSliceAgain(saved), to: connection, batch: batch.number)
                slicesRedone += 1
                continue
            }
            replyBuffer.removeAll(keepingCapacity: true)
            events.removeAll(keepingCapacity: true)
            switch item {
            case .listingSlice, .heldByStore:
                continue  // Produced again above; or answered when etcd decides.
            case .failed(let error):
                WireEncoder.appendError(error, to: &replyBuffer)
            case .storeAnswer(let bytes):
                replyBuffer.append(contentsOf: bytes)
                batch.items.append((connection, item))
            case .request(let request):
                do throws(ProtocolError) {
                    // Where the connection is now: a QUIT or end of input served after this
                    // request in the batch has it closing, and a LIST's reply is then whole.
                    try execute(request, from: connection, phase: clients.state(of: connection).phase, now: now, clock: clock)
                } catch {
                    WireEncoder.appendError(error, to: &replyBuffer)
                }
            }
            appendReply(to: connection)
            publish(events)
        }
        statistics.countUndoneBatch(listingSlicesRedone: slicesRedone)
        enter(.sealing)
        _ = journal.commit()  // Deferred: the journal is failing.
        release(batch.lifecycleEvents)
    }

    /// Tries storage again (once a second while it fails).
    /// - Returns: whether to keep retrying.
    func retryStorage() -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        _ = journal.retry()  // Its answer is the journal's health, read below.
        stateWatcher?.watch()  // A recreated directory is a new inode.
        takeSnapshotIfDue()
        service.report(statusCounts(), now: time.now())
        return journal.health != .available
    }

    func takeSnapshotIfDue() {
        guard journal.snapshotIsDue(now: time.now()) else { return }
        journal.takeSnapshot(engine.durableImage(), ring: ring, clock: time.mapping())
    }

    /// How often the poll thread wakes by itself while the wake-up timer cannot be armed: each
    /// batch catches up on what fell due, so events go out up to this late, never not at all.
    static let fallbackWakeMilliseconds: Int32 = 1

    /// Arms the wake-up timer for the earliest of the engine's next due instant and the delayed
    /// work's (`later`, `laterInBatch`). Should the kernel refuse
    /// (`timerfd_settime` failed), the poller wakes every millisecond instead until it works
    /// again, and the log says so once each way.
    private func armTimer() {
        guard let timer else { return }
        do throws(DaemonError) {
            try timer.arm(at: Self.earliest(Self.earliest(engine.nextWakeup, later.nextDeadline), laterInBatch.nextDeadline))
            if poller?.idleWakeMilliseconds != nil {
                poller?.idleWakeMilliseconds = nil
                logger.log(.notice, "the wake-up timer works again")
            }
        } catch {
            if poller?.idleWakeMilliseconds == nil {
                poller?.idleWakeMilliseconds = Self.fallbackWakeMilliseconds
                logger.log(.error, "cannot arm the wake-up timer (\(error)); waking every \(Self.fallbackWakeMilliseconds) ms instead, so events still go out")
            }
        }
    }

    /// The earlier of two instants, either of which may be absent (compared in place: an array
    /// of the three the timer is armed for cost an allocation every batch).
    private static func earliest(_ first: Instant?, _ second: Instant?) -> Instant? {
        guard let first, let second else { return first ?? second }
        return min(first, second)
    }

    // MARK: - Stopping

    /// How long a stop waits, at most, for etcd's answers to changes already sent (cluster
    /// mode): every change is answered within `changeTimeoutMilliseconds` of its request, and
    /// every one waiting was asked for before the stop, so this covers them all, with room for
    /// the batch that writes the last answer.
    static let drainMilliseconds = Int64(ClusterReplica.changeTimeoutMilliseconds) + 500
    /// Set when a stop waits for etcd's answers first: the instant it stops whatever is left.
    private var drainingUntil: Instant?

    /// Whether the stop asked for by a signal happens at the end of this batch. On a daemon of
    /// its own, at once: every change is decided in its batch. In cluster mode, changes already
    /// sent to etcd may commit whatever the daemon does, so their clients are answered with the
    /// outcome first (within `drainMilliseconds`; issue 38 counted 160 of 192 committed STARTs
    /// answered only with the stop's notice): nothing more is accepted, read or served
    /// meanwhile (`ClientTable.drain`). A second signal stops it at once: whoever sends
    /// it prefers a prompt stop to those answers.
    private func mayStopNow(signal signalNumber: Int32) -> Bool {
        guard store.answersAfterTheBatch else { return true }
        if service.stopRepeated {
            if drainingUntil != nil {
                logger.log(.notice, "received a second stop signal; stopping without waiting for the \(clients.drain()) changes still in etcd's hands (their clients get the stop's notice)")
            }
            return true
        }
        let now = time.now()
        guard let until = drainingUntil else {
            // Nothing more is read or served from here on; with nothing waiting, the stop follows.
            let waiting = clients.drain()
            guard waiting > 0 else { return true }
            drainingUntil = now.advanced(byMilliseconds: Self.drainMilliseconds)
            service.stopping()
            logger.log(.notice, "received \(signalNumber == SIGTERM ? "SIGTERM" : "SIGINT"); answering the \(waiting) changes already sent to etcd before stopping (at most \(Self.drainMilliseconds) ms)")
            // A batch at the bound, should no answer come to wake one.
            laterInBatch.schedule(at: now.advanced(byMilliseconds: Self.drainMilliseconds)) { _ in }
            return false
        }
        return clients.drain() == 0 || now >= until
    }

    private func stop(signal signalNumber: Int32) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !isStopping else { return }
        isStopping = true
        if drainingUntil == nil { service.stopping() }
        logger.log(.notice, "received \(signalNumber == SIGTERM ? "SIGTERM" : "SIGINT"), stopping")
        timer?.cancel()
        var notice: [UInt8] = []
        WireEncoder.appendShutdown("countdownd is stopping", to: &notice)
        clients.closeAll(notice: notice)
        listenerNotYetOpen?.close()
        store.stop()
        journal.snapshotAtStop(engine.durableImage(), ring: ring, clock: time.mapping())
        logger.log(.notice, "stopped with \(engine.runningCount) running and \(engine.pausedCount) paused countdowns")
        exit(0)
    }
}

/// One connection's turn in a batch, as the daemon serves it (`Daemon.beginTurn`).
struct Turn {
    /// Its requests are served as of this instant.
    let now: Instant
    /// The wall clock at `now`, read once a turn, when a request first needs it.
    var clock: WallClockMapping?
    /// Work since the batch's deadline was last checked (`Daemon.serve`).
    var workSinceTimeCheck = 0
}

/// What one batch did, kept until its commit so that a failed commit can undo it.
struct BatchRecord {
    /// One thing a connection asked for in the batch, in order.
    enum Item {
        case request(Request)
        /// A line that failed before it became a request (parse error, too long).
        case failed(ProtocolError)
        /// A slice of a listing, produced from this state of it.
        case listingSlice(ListingInProgress)
        /// A change handed to a store that decides later (etcd): its reply comes with the
        /// ticket, whatever this batch's commit does.
        case heldByStore
        /// A reply the store's decision produced: queued again as it is if the batch is undone.
        case storeAnswer([UInt8])
    }

    /// Numbers batches, so output queues know which marks are current.
    private(set) var number = 0
    /// Each change's countdown as it was before (`nil`: did not exist), in order.
    var undo: [(String, Countdown?)] = []
    /// Every request line handled, by connection, in order.
    var items: [(Connection, Item)] = []
    /// Events time caused (ticks, deadlines): they stand whatever happens to the requests.
    var timeEvents: [CountdownEvent] = []
    /// Every lifecycle event of the batch, released once it is committed.
    var lifecycleEvents: [CountdownEvent] = []
    /// What each non-root uid's requests cost in the batch: one per request, plus one per event
    /// line they had queued on a subscriber (`Daemon.workPerUserPerBatch`).
    private var workByUID: [UInt32: Int] = [:]

    /// Adds `amount` to what `uid`'s requests cost in this batch (root's are not counted).
    /// - Returns: its total so far.
    @discardableResult
    mutating func charge(_ uid: UInt32, _ amount: Int) -> Int {
        guard uid != 0 else { return 0 }
        workByUID[uid, default: 0] += amount
        return workByUID[uid, default: 0]
    }

    /// The last request of `connection` in this batch was handed to a store that decides later.
    mutating func markLastRequestHeld(_ connection: Connection) {
        guard let index = items.lastIndex(where: { $0.0 === connection }), case .request = items[index].1 else { return }
        items[index].1 = .heldByStore
    }

    /// What `uid`'s requests cost in this batch so far.
    func work(of uid: UInt32) -> Int {
        workByUID[uid] ?? 0
    }

    mutating func begin() {
        number += 1
        workByUID.removeAll(keepingCapacity: true)
        undo.removeAll(keepingCapacity: true)
        items.removeAll(keepingCapacity: true)
        timeEvents.removeAll(keepingCapacity: true)
        lifecycleEvents.removeAll(keepingCapacity: true)
    }
}
