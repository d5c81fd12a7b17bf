import CountdownCore
import Dispatch
import Glibc

/// The counts behind the `STATUS=` line systemd shows in `systemctl status`.
struct StatusCounts: Equatable, CustomStringConvertible {
    var running: Int
    var paused: Int
    var subscribers: Int
    var connections: Int
    /// Set while storage is degraded: what is wrong.
    var storage: String?
    /// Cluster mode: the revision applied, and whether the watch runs.
    var cluster: String?

    var description: String {
        "\(running) running, \(paused) paused, \(subscribers) subscribers, \(connections) connections"
            + (storage.map { "; storage \($0)" } ?? "") + (cluster.map { "; \($0)" } ?? "")
    }
}

/// The daemon's side of its service manager: `READY=1`, `STOPPING=1`, the watchdog, `STATUS=`
/// (rate-limited), the termination signals, and retrying failing storage. All through libsystemd
/// (`SystemdNotifier`), all confined to the daemon's queue (hence `@unchecked Sendable`: its
/// blocks run there and nowhere else). What it does later goes through the daemon's
/// `DelayedWork`, so it runs after a batch and needs no timer of its own.
final class ServiceManager: @unchecked Sendable {
    private let queue: DispatchQueue
    private let later: DelayedWork
    private let notifier: SystemdNotifier
    private let logger: Logger
    private let statusIntervalNanoseconds: Int64
    private var signals: TerminationSignals?
    private var watchdogPeriodNanoseconds: Int64?
    private var watchdogFailing = false
    private var reported: StatusCounts?
    private var reportedAt = Instant(nanoseconds: .min / 2)
    private var reportScheduled = false
    private var latest: StatusCounts?
    private var retryAttempt: (() -> Bool)?
    /// Where report times are read.
    private let time: DaemonClock

    init(
        queue: DispatchQueue, later: DelayedWork, statusInterval milliseconds: Int, logger: Logger,
        notifier: SystemdNotifier = SystemdNotifier(), time: DaemonClock = .system
    ) {
        self.time = time
        self.queue = queue
        self.later = later
        self.logger = logger
        self.notifier = notifier
        statusIntervalNanoseconds = Int64(milliseconds) * 1_000_000
    }

    /// The stop signal received and not yet acted on, if any: the daemon stops once the batch
    /// that read it is written.
    private(set) var stopSignal: Int32?

    /// Whether a second stop signal came: a stop that waits (a cluster host answering the
    /// changes in etcd's hands) then waits no longer.
    private(set) var stopRepeated = false

    /// Watches SIGTERM and SIGINT (blocked since `TerminationSignals.block()`) on `poller`; the
    /// first one received becomes `stopSignal`, and another after it sets `stopRepeated`.
    func watchSignals(on poller: EventPoller) throws(DaemonError) {
        dispatchPrecondition(condition: .onQueue(queue))
        signals = try TerminationSignals(poller: poller) { [unowned self] signalNumber in
            if stopSignal == nil { stopSignal = signalNumber } else { stopRepeated = true }
        }
    }

    /// Pings systemd's watchdog at half the interval it asked for, from the daemon's own queue
    /// after a batch: if the queue or the poll thread wedges, the pings stop and systemd restarts
    /// the daemon.
    func startWatchdog(now: Instant) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard watchdogPeriodNanoseconds == nil, let interval = notifier.watchdogInterval() else { return }
        let period = Int64(min(interval / 2, UInt64(Int32.max))) * 1_000
        watchdogPeriodNanoseconds = period
        logger.log(.info, "watchdog enabled: pinging every \(interval / 2000) ms")
        pingWatchdog(due: now, now: now)
    }

    /// One ping, and the next one a period after this one was due (not after it ran), so a late
    /// batch does not push every later ping back; after a stall longer than a period, a period
    /// from now (one ping for the stall, not one for each period missed).
    private func pingWatchdog(due: Instant, now: Instant) {
        guard let period = watchdogPeriodNanoseconds else { return }
        let sent = notifier.notify("WATCHDOG=1")
        // Said once each way: a ping that cannot be sent ends with systemd killing us.
        if sent < 0 && !watchdogFailing {
            watchdogFailing = true
            logger.log(.error, "cannot send the watchdog ping to systemd (\(String(cString: strerror(-sent)))); systemd will restart the daemon")
        } else if sent > 0 && watchdogFailing {
            watchdogFailing = false
            logger.log(.notice, "watchdog pings reach systemd again")
        }
        let onTime = due.advanced(byNanoseconds: period)
        let next = onTime > now ? onTime : now.advanced(byNanoseconds: period)
        later.schedule(at: next) { [unowned self] now in pingWatchdog(due: next, now: now) }
    }

    /// `READY=1`, with the first status.
    func ready(status: StatusCounts) {
        reported = status
        reportedAt = time.now()
        let sent = notifier.notify("READY=1\nSTATUS=\(status.description)")
        if sent < 0 {
            logger.log(.error, "cannot tell systemd READY=1 (\(String(cString: strerror(-sent)))); under Type=notify the start will time out")
        }
    }

    /// `STOPPING=1`.
    func stopping() {
        // Ignored on purpose: the daemon stops either way, and systemd sees the exit.
        _ = notifier.notify("STOPPING=1")
    }

    /// Tells systemd the new status if it changed, at most once per `--status-interval` (250 ms
    /// by default: cheap for systemd, fresh enough for a person); a change inside the quiet
    /// period is sent when it ends, so the last word is always the truth.
    func report(_ counts: StatusCounts, now: Instant) {
        dispatchPrecondition(condition: .onQueue(queue))
        latest = counts
        guard counts != reported, !reportScheduled else { return }
        let sinceLast = now.nanoseconds(since: reportedAt)
        if sinceLast >= statusIntervalNanoseconds {
            reported = counts
            reportedAt = now
            notifier.updateStatus(counts.description)
        } else {
            reportScheduled = true
            let due = reportedAt.advanced(byNanoseconds: statusIntervalNanoseconds)
            later.schedule(at: due) { [unowned self] now in
                reportScheduled = false
                if let latest { report(latest, now: now) }
            }
        }
    }

    /// Runs `attempt` on the queue once a second until it returns `false`. Idempotent.
    func startRetrying(now: Instant, _ attempt: @escaping () -> Bool) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard retryAttempt == nil else { return }
        retryAttempt = attempt
        scheduleRetry(after: now)
    }

    private func scheduleRetry(after now: Instant) {
        later.schedule(at: now.advanced(byNanoseconds: 1_000_000_000)) { [unowned self] now in
            if retryAttempt?() == true {
                scheduleRetry(after: now)
            } else {
                retryAttempt = nil
            }
        }
    }
}
