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
/// (rate-limited), signals, and the timer that retries failing storage. All through libsystemd
/// (`SystemdNotifier`), all confined to the daemon's queue (hence `@unchecked Sendable`: its
/// blocks run there and nowhere else).
final class ServiceManager: @unchecked Sendable {
    private let queue: DispatchQueue
    private let notifier: SystemdNotifier
    private let logger: Logger
    private let statusIntervalNanoseconds: Int64
    private var signalSources: [any DispatchSourceSignal] = []
    private var watchdog: (any DispatchSourceTimer)?
    private var reported: StatusCounts?
    private var reportedAt = Instant(nanoseconds: .min / 2)
    private var reportScheduled = false
    private var latest: StatusCounts?
    private var retryAttempt: (() -> Bool)?

    init(queue: DispatchQueue, statusInterval milliseconds: Int, logger: Logger, notifier: SystemdNotifier = SystemdNotifier()) {
        self.queue = queue
        self.logger = logger
        self.notifier = notifier
        statusIntervalNanoseconds = Int64(milliseconds) * 1_000_000
    }

    /// Runs `handler` on the queue for SIGTERM and SIGINT.
    func handleSignals(_ handler: @escaping (Int32) -> Void) {
        for signalNumber in [SIGTERM, SIGINT] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
            source.setEventHandler { handler(signalNumber) }
            source.activate()
            signalSources.append(source)
        }
    }

    /// Pings systemd's watchdog at half the interval it asked for, from the daemon's own queue:
    /// if that queue wedges, the pings stop and systemd restarts the daemon.
    func startWatchdog() {
        guard let interval = notifier.watchdogInterval() else { return }
        let period = DispatchTimeInterval.microseconds(Int(min(interval / 2, UInt64(Int32.max))))
        let source = DispatchSource.makeTimerSource(queue: queue)
        source.schedule(deadline: .now(), repeating: period, leeway: .milliseconds(10))
        var failing = false
        source.setEventHandler { [notifier, queue, logger] in
            dispatchPrecondition(condition: .onQueue(queue))
            let sent = notifier.notify("WATCHDOG=1")
            // Said once each way: a ping that cannot be sent ends with systemd killing us.
            if sent < 0 && !failing {
                failing = true
                logger.log(.error, "cannot send the watchdog ping to systemd (\(String(cString: strerror(-sent)))); systemd will restart the daemon")
            } else if sent > 0 && failing {
                failing = false
                logger.log(.notice, "watchdog pings reach systemd again")
            }
        }
        source.activate()
        watchdog = source
        logger.log(.info, "watchdog enabled: pinging every \(interval / 2000) ms")
    }

    /// `READY=1`, with the first status.
    func ready(status: StatusCounts) {
        reported = status
        reportedAt = SystemClock.now()
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
    func report(_ counts: StatusCounts) {
        dispatchPrecondition(condition: .onQueue(queue))
        latest = counts
        guard counts != reported, !reportScheduled else { return }
        let now = SystemClock.now()
        let sinceLast = now.nanoseconds(since: reportedAt)
        if sinceLast >= statusIntervalNanoseconds {
            reported = counts
            reportedAt = now
            notifier.updateStatus(counts.description)
        } else {
            reportScheduled = true
            queue.asyncAfter(deadline: .now() + .nanoseconds(Int(statusIntervalNanoseconds - sinceLast))) { [self] in
                reportScheduled = false
                if let latest { report(latest) }
            }
        }
    }

    /// Runs `attempt` on the queue once a second until it returns `false`. Idempotent.
    func startRetrying(_ attempt: @escaping () -> Bool) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard retryAttempt == nil else { return }
        retryAttempt = attempt
        scheduleRetry()
    }

    private func scheduleRetry() {
        queue.asyncAfter(deadline: .now() + .seconds(1)) { [self] in
            if retryAttempt?() == true {
                scheduleRetry()
            } else {
                retryAttempt = nil
            }
        }
    }
}
