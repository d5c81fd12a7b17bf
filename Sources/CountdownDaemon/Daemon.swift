import CSystemd
import CountdownCore
import Dispatch
import Glibc

/// The countdown daemon: the imperative shell around `CountdownEngine`.
///
/// One serial queue, `queue`, owns every piece of mutable state: the engine, the connections, the
/// subscriptions. The poller's batches (sockets, the wake-up timer) and Dispatch sources (signals,
/// the watchdog) run on it; nothing else touches the state, and the places that do check it with
/// `dispatchPrecondition`. That is why the class can be `@unchecked Sendable`: its state never
/// leaves the queue.
///
/// Readiness comes from `EventPoller`: one epoll instance on a thread of its own, which runs each
/// wake-up's batch on the queue (timer first, then clients), after which `endBatch` commits,
/// writes and re-arms. One wake-up timer is armed for the engine's next due instant.
/// A tick travels: timer fires -> read the clock -> `engine.advance(to:)` -> events, each encoded
/// once -> appended to matching subscribers' output queues -> committed, written -> timer re-armed.
public final class Daemon: @unchecked Sendable {
    /// The configuration in force.
    public let configuration: DaemonConfiguration

    let queue = DispatchQueue(label: "countdownd.state")
    let logger: Logger
    let notifier = SystemdNotifier()
    let environment: [String: String]

    var engine: CountdownEngine
    var store: CountdownStore?
    var checkpointer: WALCheckpointer?
    /// Countdowns changed in the current batch, written by `commitBatch`.
    var dirtyNames: Set<String> = []
    /// Countdowns to forget in storage with the next commit.
    var pendingDeletions: [String] = []
    /// The last commit failed; changes are kept and retried.
    var storageFailing = false
    /// What the store last recorded of `engine.advancedThrough`.
    var committedDoneThrough = Instant.zero
    /// A `done` was published since the last commit, so the watermark must be stored first.
    var donePendingCommit = false
    /// The event numbers stored as reserved (`last_seq`); past it, the next commit reserves more.
    var reservedSequence: UInt64 = 0
    /// Whether this run has stored its boot id (once is enough).
    var bootIDStored = false
    /// When the wake-up timer last fired.
    var lastTimerWake = Instant.zero

    /// The least time between two timer wake-ups. With 100,000 countdowns something is due every
    /// few tens of microseconds; waking for each costs more in the kernel (timerfd re-arm, context
    /// switch) than the work itself. Waking at most every 250 µs batches them, adds at most 250 µs
    /// to an event, and changes nothing when events are sparse.
    static let minimumWakeInterval: Int64 = 250_000
    /// This boot's id, read once: boot-clock deadlines in storage are only valid within it.
    let bootID = CountdownStore.currentBootID()
    var listener: ListeningSocket?
    var poller: EventPoller?
    var timer: WakeupTimer?
    var signalSources: [any DispatchSourceSignal] = []
    var watchdog: (any DispatchSourceTimer)?

    var connections: [Int: Connection] = [:]
    var allSubscribers: [Int: Connection] = [:]
    var nameSubscribers: [String: [Int: Connection]] = [:]
    /// Connections with output produced in the current batch, flushed when the batch ends.
    var pendingFlush: [Int: Connection] = [:]
    /// Connections that used their share of a batch with request lines still unread in their
    /// framer: they are served first in the next batch, which the poller runs without waiting.
    var connectionsWithUnreadLines: [Int: Connection] = [:]
    var batchEndScheduled = false
    /// A poller batch is running: it ends with `endBatch`, so nothing needs to schedule one.
    var isInPollerBatch = false
    /// When the running poller batch stops handling requests (see `batchTimeBudgetNanoseconds`);
    /// outside poller batches, never.
    var batchDeadline = Instant(nanoseconds: .max)
    var nextConnectionID = 1
    /// Connections subscribed to anything (all, or some names).
    var subscriberCount = 0
    /// What systemd was last told in `STATUS=`, and when.
    var reportedStatus: StatusCounts?
    var statusReportedAt = Instant(nanoseconds: .min / 2)
    var statusReportScheduled = false
    var isStopping = false

    /// Reused buffers, so the hot paths do not allocate per request or per event.
    var events: [CountdownEvent] = []
    var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
    var replyBuffer: [UInt8] = []
    var eventBuffer: [UInt8] = []
    var scratch: [UInt8] = []

    /// Creates a daemon; nothing happens until `run()`.
    public init(configuration: DaemonConfiguration, environment: [String: String]) {
        self.configuration = configuration
        self.environment = environment
        self.engine = CountdownEngine(configuration: configuration.engine)
        self.logger = Logger(threshold: configuration.logLevel, environment: environment)
    }

    /// Starts listening, tells systemd it is ready, and serves until SIGTERM or SIGINT.
    /// - Throws: `DaemonError` when it cannot start (socket in use, bad path, …).
    public func run() throws(DaemonError) -> Never {
        signal(SIGPIPE, SIG_IGN)
        let started: Result<Void, DaemonError> = queue.sync {
            do throws(DaemonError) {
                try start()
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try started.get()
        dispatchMain()
    }

    /// Sets everything up on the queue; READY=1 is the last step, once connections are accepted.
    private func start() throws(DaemonError) {
        dispatchPrecondition(condition: .onQueue(queue))
        raiseDescriptorLimit()
        try openStoreAndRestore()
        let listener = try SocketActivation.listeningSocket(fallbackPath: configuration.socketPath, mode: configuration.socketMode)
        self.listener = listener
        let poller = try EventPoller(queue: queue)
        self.poller = poller
        timer = try WakeupTimer(poller: poller) { [unowned self] in timerFired() }
        for signalNumber in [SIGTERM, SIGINT] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
            source.setEventHandler { [unowned self] in stop(signal: signalNumber) }
            source.activate()
            signalSources.append(source)
        }
        try listener.startAccepting(with: poller) { [unowned self] in acceptPending() }
        startWatchdog()
        logger.log(.notice, "countdownd \(DaemonConfiguration.version) listening on \(listener.displayPath)\(listener.ownedPath == nil ? " (socket from systemd)" : "")")
        reportedStatus = statusCounts()
        notifier.notify("READY=1\nSTATUS=\(statusText())")
        // Its first batch waits for this block (and so for READY=1) to finish.
        try poller.start { [unowned self] batch in runBatch(batch) }
    }

    /// A short summary for `systemctl status`.
    func statusText() -> String {
        statusCounts().description
    }

    func statusCounts() -> StatusCounts {
        StatusCounts(
            running: engine.runningCount,
            paused: engine.pausedCount,
            subscribers: subscriberCount,
            connections: connections.count
        )
    }

    /// Pings systemd's watchdog at half the interval it asked for, from the daemon's own queue:
    /// if that queue wedges, the pings stop and systemd restarts the daemon.
    private func startWatchdog() {
        guard let interval = notifier.watchdogInterval() else { return }
        let period = DispatchTimeInterval.microseconds(Int(min(interval / 2, UInt64(Int32.max))))
        let source = DispatchSource.makeTimerSource(queue: queue)
        source.schedule(deadline: .now(), repeating: period, leeway: .milliseconds(10))
        source.setEventHandler { [unowned self] in
            dispatchPrecondition(condition: .onQueue(queue))
            notifier.notify("WATCHDOG=1")
        }
        source.activate()
        watchdog = source
        logger.log(.info, "watchdog enabled: pinging every \(interval / 2000) ms")
    }

    /// Lets the daemon hold as many descriptors as its hard limit allows: each client is one.
    private func raiseDescriptorLimit() {
        var limit = rlimit()
        if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        }
    }

    // MARK: - Time

    private func timerFired() {
        dispatchPrecondition(condition: .onQueue(queue))
        let now = SystemClock.now()
        lastTimerWake = now
        events.removeAll(keepingCapacity: true)
        engine.advance(to: now, events: &events)
        publish(events)
    }

    // MARK: - Batches

    /// One wake-up of the poller: the timer first, so requests never hold a due tick back; then
    /// connections with lines left from the last batch; then every client that is ready; then
    /// one commit and one write per connection for all of it.
    /// - Returns: whether request lines are left over for the next batch.
    private func runBatch(_ batch: EventPoller.Batch) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        isInPollerBatch = true
        batchDeadline = SystemClock.now().advanced(byNanoseconds: Self.batchTimeBudgetNanoseconds)
        batch.deliverUrgent()
        let carried = connectionsWithUnreadLines
        connectionsWithUnreadLines.removeAll(keepingCapacity: true)
        for connection in carried.values where !connection.isClosed {
            readable(connection)
        }
        batch.deliverOthers()
        isInPollerBatch = false
        batchDeadline = Instant(nanoseconds: .max)
        endBatch()
        return !connectionsWithUnreadLines.isEmpty
    }

    /// Ends the current batch once the requests already queued have been handled: commit, then
    /// write every connection's output, then re-arm the timer. Within a poller batch that happens
    /// when the batch ends; otherwise in a block queued behind the work already waiting.
    func scheduleBatchEnd() {
        guard !batchEndScheduled else { return }
        batchEndScheduled = true
        guard !isInPollerBatch else { return }
        queue.async { [self] in
            if batchEndScheduled { endBatch() }
        }
    }

    func endBatch() {
        dispatchPrecondition(condition: .onQueue(queue))
        batchEndScheduled = false
        // What fell due while the batch ran goes out with it, without waiting for the timer.
        if let due = engine.nextWakeup, due <= SystemClock.now() {
            timerFired()
        }
        commitBatch()
        for connection in pendingFlush.values {
            flush(connection)
        }
        pendingFlush.removeAll(keepingCapacity: true)
        timer?.arm(at: engine.nextWakeup.map { max($0, lastTimerWake.advanced(byNanoseconds: Self.minimumWakeInterval)) })
        reportStatus()
    }

    // MARK: - Stopping

    private func stop(signal signalNumber: Int32) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !isStopping else { return }
        isStopping = true
        notifier.notify("STOPPING=1")
        logger.log(.notice, "received \(signalNumber == SIGTERM ? "SIGTERM" : "SIGINT"), stopping")
        listener?.close()
        timer?.cancel()
        commitBatch()
        checkpointer?.finish()
        var line: [UInt8] = []
        WireEncoder.appendShutdown("countdownd is stopping", to: &line)
        for connection in connections.values {
            // Queued output first, then the notice; one non-blocking attempt each, never a wait.
            connection.output.appendReply(line)
            _ = connection.output.write(to: connection.descriptor, scratch: &scratch)
            connection.close()
        }
        connections.removeAll()
        logger.log(.notice, "stopped with \(engine.runningCount) running and \(engine.pausedCount) paused countdowns")
        exit(0)
    }
}
