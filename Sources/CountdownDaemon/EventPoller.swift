import CLinuxShims
import Dispatch
import Glibc

/// The daemon's descriptors (the listening socket, every connection, the wake-up timer) watched
/// by one epoll instance on a thread of its own, and handed to the daemon's queue a batch at a time.
///
/// Why not one Dispatch source per descriptor: measured at 100,000 countdowns, every wake-up
/// through libdispatch cost about eleven system calls and two context switches (its manager thread
/// polls, then wakes a worker to run the handler), and each client's readiness arrived as a
/// separate handler, so requests from several clients were rarely committed together. Here the
/// poll thread blocks in `epoll_wait` (`epoll_pwait2` where the kernel has it, whose timeout also
/// serves the wake-up timer's near instants) and runs the whole batch with `queue.sync`, which libdispatch
/// executes on the calling thread when the queue is idle: one wake-up, no hand-off, and every
/// ready client's requests in one storage commit.
///
/// The queue still owns all state: registrations are changed, and handlers run, only on it.
/// Interest is level-triggered, so a descriptor that still has input (or still has room) is
/// reported again by the next `epoll_wait`; nothing depends on draining to `EAGAIN`.
final class EventPoller: @unchecked Sendable {
    /// What a registration waits for.
    struct Interest: OptionSet, Sendable {
        let rawValue: UInt32
        /// Input (or end of file, or a pending connection).
        static let readable = Interest(rawValue: UInt32(COUNTDOWND_POLL_IN))
        /// Room to write.
        static let writable = Interest(rawValue: UInt32(COUNTDOWND_POLL_OUT))
    }

    /// What a descriptor was found ready for. Errors and hang-ups count as both, so that the
    /// handler's next read or write meets them.
    struct Readiness: Sendable {
        /// Reading will not block.
        let readable: Bool
        /// Writing will not block.
        let writable: Bool

        /// What `events` says, limited to what the registration wants now: an event read just
        /// before its interest changed is not delivered as if it were still wanted.
        init(events: UInt32, interest: Interest) {
            let failed = events & UInt32(COUNTDOWND_POLL_ERR | COUNTDOWND_POLL_HUP) != 0
            readable = failed || (events & UInt32(COUNTDOWND_POLL_IN) != 0 && interest.contains(.readable))
            writable = failed || (events & UInt32(COUNTDOWND_POLL_OUT) != 0 && interest.contains(.writable))
        }
    }

    /// A registration: never reused, so an event read just before a descriptor was closed (and
    /// its number reused) finds nothing instead of the wrong connection.
    struct Token: Hashable, Sendable {
        fileprivate let value: UInt64
    }

    /// One wake-up's ready descriptors, delivered by the daemon in the order it chooses.
    struct Batch {
        fileprivate let tokens: UnsafeMutablePointer<UInt64>
        fileprivate let events: UnsafeMutablePointer<UInt32>
        fileprivate let count: Int
        fileprivate let poller: EventPoller

        /// Runs the handlers of the ready urgent registrations (the wake-up timer), the poll's own
        /// wake-up first once its instant has come (`setPollWakeup`).
        func deliverUrgent() {
            dispatchPrecondition(condition: .onQueue(poller.queue))
            if let instant = poller.pollWakeup, poller.kernelBootNow() >= instant {
                poller.pollWakeup = nil
                poller.pollWakeupHandler?()
            }
            deliver(urgent: true)
        }

        /// Runs the handlers of the other ready registrations. A registration removed by an
        /// earlier handler of the same batch is skipped.
        func deliverOthers() {
            deliver(urgent: false)
        }

        private func deliver(urgent: Bool) {
            dispatchPrecondition(condition: .onQueue(poller.queue))
            for index in 0..<count {
                guard let registration = poller.registrations[tokens[index]], registration.isUrgent == urgent else { continue }
                let readiness = Readiness(events: events[index], interest: registration.interest)
                if readiness.readable || readiness.writable {
                    registration.handler(readiness)
                }
            }
        }
    }

    private struct Registration {
        let descriptor: Int32
        var interest: Interest
        let isUrgent: Bool
        let handler: (Readiness) -> Void
    }

    /// The most descriptors taken from one wait (`COUNTDOWND_POLL_BATCH_MAX`, 256). When 10,000
    /// clients hang up at once, a client that connects then waits behind them (epoll reports in
    /// the order things became ready). Past the batch's time budget only
    /// `Daemon.minimumTurnsPerBatch` connections get a turn, about 65 hang-ups closed a batch
    /// whatever this is; the others are reported again by the next wait. Taking 1,024 a wait
    /// (which this said from d5bf8fc on, while the C shim still read 256) only read each
    /// hung-up socket about 15 times instead of 4: with 9,800 clients hanging up at once, seven
    /// runs each, the hang-ups took 228-410 ms to clear instead of 97-194, and a fresh client's
    /// first PING 117-295 ms instead of 40-102 (a helper's attack on d94d0b3).
    static let batchCapacity = Int(COUNTDOWND_POLL_BATCH_MAX)

    private let epollDescriptor: Int32
    private let queue: DispatchQueue
    private var registrations: [UInt64: Registration] = [:]
    private var nextToken: UInt64 = 1

    /// Whether the poll can wait to the nanosecond (`epoll_pwait2`, Linux 5.11), and so serve
    /// near wake-ups itself (`setPollWakeup`). Asked once, at creation.
    let servesPollWakeups: Bool

    /// The instant of the poll's own wake-up, in kernel `CLOCK_BOOTTIME` nanoseconds (`nil`:
    /// none): the poll waits no longer than until then, and the batch that follows runs
    /// `pollWakeupHandler` first. Changed only on the queue.
    private var pollWakeup: Int64?
    private var pollWakeupHandler: (() -> Void)?

    /// The kernel's boot clock, in nanoseconds, that the poll's wake-up is on (`setPollWakeup`):
    /// the one clock a relative wait must be measured against, injected like the daemon's.
    private let kernelBootNow: () -> Int64

    /// Creates the epoll instance; nothing is watched until `register` and `start`.
    init(queue: DispatchQueue, kernelBootNow: @escaping () -> Int64 = SystemClock.kernelBootNow) throws(DaemonError) {
        let fd = countdownd_epoll_create()
        guard fd >= 0 else { throw .system("epoll_create1", errno) }
        epollDescriptor = fd
        self.queue = queue
        self.kernelBootNow = kernelBootNow
        // A wait that returns at once: 0 (nothing is watched yet), or -1 where the kernel or a
        // seccomp filter has no epoll_pwait2 (ENOSYS); the wake-up timer then uses its timerfd
        // for every instant.
        var token: UInt64 = 0
        var events: UInt32 = 0
        servesPollWakeups = countdownd_epoll_wait_nanoseconds(fd, &token, &events, 1, 0) >= 0
    }

    /// Whether a batch is running: the poll's next wait is still to come, and will see a poll
    /// wake-up set now. (Work the queue runs between batches does not wake the waiting poll.)
    private(set) var isRunningBatch = false

    /// What runs first in the batch after a poll wake-up (`setPollWakeup`): the wake-up timer's
    /// handler, set once by the timer.
    func handlePollWakeups(with handler: @escaping () -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        pollWakeupHandler = handler
    }

    /// Has the poll itself wake up at `kernelBootNanoseconds` (a `CLOCK_BOOTTIME` reading), or
    /// not (`nil`), and run the handler of `handlePollWakeups` first in the batch that follows.
    /// For `WakeupTimer`'s near instants: waiting for them costs no timer re-arm or read. Only
    /// where `servesPollWakeups`, and (for an instant) within a batch.
    func setPollWakeup(_ kernelBootNanoseconds: Int64?) {
        dispatchPrecondition(condition: .onQueue(queue))
        precondition(kernelBootNanoseconds == nil || (servesPollWakeups && isRunningBatch),
                     "a poll wake-up the poll would not see")
        pollWakeup = kernelBootNanoseconds
    }

    /// Watches `descriptor`; `handler` runs on the queue, within a batch, while it is ready.
    /// - Parameter urgent: delivered before everything else in a batch (the wake-up timer).
    func register(
        _ descriptor: Int32, interest: Interest, urgent: Bool = false, handler: @escaping (Readiness) -> Void
    ) throws(DaemonError) -> Token {
        dispatchPrecondition(condition: .onQueue(queue))
        let token = nextToken
        nextToken += 1
        guard countdownd_epoll_control(epollDescriptor, Int32(COUNTDOWND_POLL_ADD), descriptor, interest.rawValue, token) == 0 else {
            throw .system("epoll_ctl(EPOLL_CTL_ADD)", errno)
        }
        registrations[token] = Registration(descriptor: descriptor, interest: interest, isUrgent: urgent, handler: handler)
        return Token(value: token)
    }

    /// Changes what a registered descriptor is watched for; an empty interest still reports
    /// errors and hang-ups.
    /// - Throws: `DaemonError.system` when the kernel refused (`epoll_ctl` failed, ENOMEM): the
    ///   registration keeps its old interest, and the caller should give the descriptor up.
    func setInterest(_ interest: Interest, for token: Token) throws(DaemonError) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard var registration = registrations[token.value], registration.interest != interest else { return }
        guard countdownd_epoll_control(epollDescriptor, Int32(COUNTDOWND_POLL_MODIFY), registration.descriptor, interest.rawValue, token.value) == 0 else {
            throw .system("epoll_ctl(EPOLL_CTL_MOD)", errno)
        }
        registration.interest = interest
        registrations[token.value] = registration
    }

    /// The interest a registration has now (empty once removed).
    func interest(of token: Token) -> Interest {
        registrations[token.value]?.interest ?? []
    }

    /// Stops watching a descriptor. Call before closing it.
    func unregister(_ token: Token) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let registration = registrations.removeValue(forKey: token.value) else { return }
        // Ignored on purpose: it fails only for a descriptor not in the set, and the caller closes
        // the descriptor next (here or on `DescriptorCloser`'s thread), which removes it anyway.
        // Until then it is not reported: an event already read finds no registration and is skipped.
        _ = countdownd_epoll_control(epollDescriptor, Int32(COUNTDOWND_POLL_DELETE), registration.descriptor, 0, 0)
    }

    /// How long the poll thread waits when nothing is ready and no work is left, in
    /// milliseconds (`nil`: until something is ready). Set while the wake-up timer cannot be
    /// armed, so that due events are still served, by every batch's catch-up.
    var idleWakeMilliseconds: Int32?

    /// Starts the poll thread. `runBatch` runs on the queue for each wake-up with what is ready;
    /// it returns `true` when work is left over, so the next poll does not block.
    func start(_ runBatch: @escaping (Batch) -> Bool) throws(DaemonError) {
        let context = Unmanaged.passRetained(PollThreadContext(poller: self, runBatch: runBatch)).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { context in
            // The context was retained for this thread, which runs for the life of the process:
            // `run` never returns. The argument is the non-nil pointer passed below.
            ThreadName.poll.apply()
            Unmanaged<PollThreadContext>.fromOpaque(context!).takeRetainedValue().run()
        }, context)
        guard created == 0 else {
            Unmanaged<PollThreadContext>.fromOpaque(context).release()
            throw .system("pthread_create", created)
        }
        pthread_detach(thread)
    }

    /// Polls on the calling thread (which must not be the queue's), for the life of the process:
    /// the daemon's main thread becomes its poll thread. `runBatch` as for `start`.
    func run(_ runBatch: @escaping (Batch) -> Bool) -> Never {
        dispatchPrecondition(condition: .notOnQueue(queue))
        poll(runBatch)
    }

    /// How long the poll waits, in nanoseconds (-1: until something is ready): not at all with
    /// work left, else until the sooner of the idle wake-up (while the timer cannot be armed)
    /// and the poll's wake-up at `wakeup`, both on the kernel's boot clock, which reads `now`.
    static func waitNanoseconds(workLeft: Bool, idleWakeMilliseconds: Int32?, wakeup: Int64?, now: Int64) -> Int64 {
        if workLeft { return 0 }
        let idle = idleWakeMilliseconds.map { Int64($0) * 1_000_000 }
        guard let wakeup else { return idle ?? -1 }
        let untilWakeup = max(wakeup - now, 0)
        return idle.map { min($0, untilWakeup) } ?? untilWakeup
    }

    /// The poll thread's loop: wait, then run the batch on the queue. Never returns.
    fileprivate func poll(_ runBatch: (Batch) -> Bool) -> Never {
        let capacity = Self.batchCapacity
        let tokens = UnsafeMutablePointer<UInt64>.allocate(capacity: capacity)
        let events = UnsafeMutablePointer<UInt32>.allocate(capacity: capacity)
        if servesPollWakeups {
            // A poll wake-up is then late by the kernel's 0.1 % of the wait (20 µs at most within
            // `WakeupTimer.pollWakeupHorizon`), not by the default 50 µs of slack; a timerfd has
            // none. Threads created later start from the default again (the kernel copies the
            // default, not this). Ignored on purpose when refused: wake-ups are then that much
            // later, which only the lateness figures see.
            _ = countdownd_set_timer_slack(1)
        }
        var workLeft = false
        var idleWake: Int32?
        var wakeup: Int64?
        while true {
            let count: Int32
            if servesPollWakeups {
                // Until the poll's wake-up, measured now, just before waiting (its instant is on
                // the boot clock; the wait's timeout is relative).
                let timeout = Self.waitNanoseconds(workLeft: workLeft, idleWakeMilliseconds: idleWake, wakeup: wakeup,
                                                   now: wakeup == nil ? 0 : kernelBootNow())
                count = countdownd_epoll_wait_nanoseconds(epollDescriptor, tokens, events, Int32(capacity), timeout)
            } else {
                count = countdownd_epoll_wait(epollDescriptor, tokens, events, Int32(capacity), workLeft ? 0 : idleWake ?? -1)
            }
            if count < 0 {
                // EINTR is a signal; anything else (EBADF, EINVAL) would be a bug, and spinning on
                // it is worse than stopping.
                guard errno == EINTR else { fatalError("epoll_wait failed: \(String(cString: strerror(errno)))") }
                continue
            }
            let batch = Batch(tokens: tokens, events: events, count: Int(count), poller: self)
            // `idleWakeMilliseconds` and `pollWakeup` are set on the queue, inside the batch just run.
            (workLeft, idleWake, wakeup) = queue.sync {
                isRunningBatch = true
                defer { isRunningBatch = false }
                return (runBatch(batch), idleWakeMilliseconds, pollWakeup)
            }
        }
    }
}

/// What the poll thread holds: the poller and the daemon's batch handler.
private final class PollThreadContext {
    let poller: EventPoller
    let runBatch: (EventPoller.Batch) -> Bool

    init(poller: EventPoller, runBatch: @escaping (EventPoller.Batch) -> Bool) {
        self.poller = poller
        self.runBatch = runBatch
    }

    func run() -> Never {
        poller.poll(runBatch)
    }
}
