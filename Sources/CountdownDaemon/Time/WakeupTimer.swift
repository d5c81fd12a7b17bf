import CountdownCore
import CLinuxShims
import Glibc

/// The daemon's single wake-up timer: a `timerfd` on `CLOCK_BOOTTIME`, armed with an absolute
/// deadline, watched by the daemon's `EventPoller` and delivered first in its batch.
///
/// Dispatch's own timers run on `CLOCK_MONOTONIC`, which stops while the machine is suspended;
/// a `CLOCK_BOOTTIME` timerfd fires on time (or as soon as the machine wakes).
///
/// An instant armed within a batch and at most `pollWakeupHorizon` off is served by the poll's
/// own timeout instead (`EventPoller.setPollWakeup`, where `epoll_pwait2` works): a busy
/// daemon, waking every few hundred microseconds, then pays neither the timerfd's re-arm nor its
/// read (of a wake-up's six system calls where something finished, four where only ticks went
/// out, these two). Its wait runs on `CLOCK_MONOTONIC`, hence the horizon's bound below.
final class WakeupTimer {
    private let descriptor: Int32
    private let poller: EventPoller
    private var token: EventPoller.Token?
    private var armedFor: Instant?
    /// Whether the last `timerfd_settime` failed: until one succeeds, near instants go to the
    /// timerfd too, so the caller keeps hearing the failure (and keeps its fallback) rather than
    /// success and failure by turns as instants come near and go far.
    private var kernelRefused = false
    /// When the timer last fired.
    private var lastFired = Instant(nanoseconds: .min / 2)

    /// The least time between two wake-ups. With 100,000 countdowns something is due every few
    /// tens of microseconds; waking for each costs more in the kernel (timerfd re-arm, context
    /// switch) than the work itself. Waking at most every 400 µs batches them, adds at most
    /// 400 µs to an event, and changes nothing when events are sparse. Measured at 100,000
    /// ticking countdowns, three runs each: 250 µs gave 1.95–2.06 µs of CPU per event and a
    /// `tick` p99 of 0.30–0.36 ms; 500 µs 1.32–1.51 µs and 0.55 ms alone, but 0.58–0.71 ms (and
    /// once 1.10 ms) with STARTs arriving meanwhile; 400 µs 1.40–1.77 µs, 0.45–0.52 ms alone and
    /// 0.48–0.55 ms with STARTs: a margin under the 1 ms target for a little CPU.
    static let minimumWakeInterval: Int64 = 400_000

    /// How far off an instant may be for the poll's timeout to serve it. The poll's timeout runs
    /// on `CLOCK_MONOTONIC`, which stops while the machine is suspended: a wait under way when it
    /// sleeps ends up to this much after it wakes, where the timerfd would fire at once. Busy
    /// daemons wake far more often than this; sparse countdowns (one tick a second) keep the
    /// timerfd.
    static let pollWakeupHorizon: Int64 = 20_000_000

    /// Records that the timer fired at `now` (the next wake-up is at least
    /// `minimumWakeInterval` later).
    func fired(at now: Instant) {
        lastFired = now
    }

    /// Creates the timer; `handler` runs on the poller's queue each time it fires.
    convenience init(poller: EventPoller, handler: @escaping () -> Void) throws(DaemonError) {
        let fd = timerfd_create(CLOCK_BOOTTIME, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
        guard fd >= 0 else {
            throw DaemonError.system("timerfd_create(CLOCK_BOOTTIME)", errno)
        }
        try self.init(descriptor: fd, poller: poller, handler: handler)
    }

    /// Wraps a timer descriptor it then owns (closed on failure and by `cancel`). The tests hand
    /// it other descriptors too, to see a failing `timerfd_settime`.
    init(descriptor fd: Int32, poller: EventPoller, handler: @escaping () -> Void) throws(DaemonError) {
        descriptor = fd
        self.poller = poller
        poller.handlePollWakeups(with: handler)
        do {
            token = try poller.register(fd, interest: .readable, urgent: true) { [unowned self] _ in
                // A one-shot timer that fired is disarmed: the next `arm` re-arms even for the same
                // instant.
                armedFor = nil
                var expirations: UInt64 = 0
                // Ignored on purpose: the count of expirations is not needed, and EAGAIN (re-armed
                // since the poll saw it) just means there is nothing to clear.
                _ = read(fd, &expirations, MemoryLayout<UInt64>.size)
                handler()
            }
        } catch {
            countdownd_close(fd)
            throw error
        }
    }

    /// The boot clock moved under the timer (a simulated sleep, `SleepDetector`): the next `arm`
    /// sets it again even for the same instant.
    func clockMoved() {
        armedFor = nil
    }

    /// Arms the timer for `requested` (no sooner than `minimumWakeInterval` after it last fired),
    /// or disarms it for `nil`. An instant already past fires at once.
    /// - Throws: `DaemonError.system` when `timerfd_settime` fails; the timer is then unarmed
    ///   (the next `arm` tries again), and the caller must wake up by other means.
    func arm(at requested: Instant?) throws(DaemonError) {
        let instant = requested.map { max($0, lastFired.advanced(byNanoseconds: Self.minimumWakeInterval)) }
        if let instant, poller.servesPollWakeups, poller.isRunningBatch, !kernelRefused {
            let kernelInstant = SystemClock.kernelBootNanoseconds(of: instant)
            if kernelInstant - SystemClock.kernelBootNow() <= Self.pollWakeupHorizon {
                // The timerfd is left as it is: disarmed once it fired (a busy daemon's case), or
                // armed for another instant, when it wakes a batch that finds nothing due (were
                // both due at once, the handler runs twice in that batch, the second time to
                // find nothing due either).
                poller.setPollWakeup(kernelInstant)
                return
            }
        }
        poller.setPollWakeup(nil)
        guard instant != armedFor else { return }
        var spec = itimerspec()
        if let instant {
            // An all-zero it_value would disarm the timer; never ask for less than 1 ns.
            let ns = max(SystemClock.kernelBootNanoseconds(of: instant), 1)
            spec.it_value.tv_sec = Int(ns / 1_000_000_000)
            spec.it_value.tv_nsec = Int(ns % 1_000_000_000)
        }
        guard timerfd_settime(descriptor, Int32(TFD_TIMER_ABSTIME), &spec, nil) == 0 else {
            armedFor = nil
            kernelRefused = true
            throw .system("timerfd_settime", errno)
        }
        kernelRefused = false
        armedFor = instant
    }

    /// What the kernel holds: the time until the timer fires, in nanoseconds (`nil`: disarmed).
    func kernelTimeLeft() throws(DaemonError) -> Int64? {
        var spec = itimerspec()
        guard timerfd_gettime(descriptor, &spec) == 0 else { throw .system("timerfd_gettime", errno) }
        let left = Int64(spec.it_value.tv_sec) * 1_000_000_000 + Int64(spec.it_value.tv_nsec)
        return left == 0 ? nil : left
    }

    /// Stops the timer and closes its descriptor.
    func cancel() {
        guard let token else { return }
        poller.setPollWakeup(nil)
        poller.unregister(token)
        self.token = nil
        countdownd_close(descriptor)
    }
}
