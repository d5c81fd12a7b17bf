import CLinuxShims
import Glibc

/// Notices when the wall clock is set (NTP stepping it, `date -s`), so countdowns to a time of
/// day can follow: a timerfd on `CLOCK_REALTIME`, armed for a far-away absolute time with
/// `TFD_TIMER_CANCEL_ON_SET`, becomes readable (its read fails with `ECANCELED`) whenever the
/// clock jumps. Watched by the poller like any descriptor; no thread, no polling.
final class WallClockWatcher {
    private let descriptor: Int32
    private let poller: EventPoller
    private var token: EventPoller.Token?

    /// Starts watching; `stepped` runs on the daemon's queue, in a batch, after each step, with
    /// `nil`, or with the error that stopped the watch (the timer could not be armed again:
    /// later steps go unnoticed, and the daemon says so).
    init(poller: EventPoller, stepped: @escaping (DaemonError?) -> Void) throws(DaemonError) {
        let fd = timerfd_create(CLOCK_REALTIME, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
        guard fd >= 0 else { throw DaemonError.system("timerfd_create(CLOCK_REALTIME)", errno) }
        descriptor = fd
        self.poller = poller
        guard arm() else {
            let code = errno
            countdownd_close(fd)
            throw DaemonError.system("timerfd_settime(TFD_TIMER_CANCEL_ON_SET)", code)
        }
        do {
            token = try poller.register(fd, interest: .readable) { [unowned self] _ in
                var expirations: UInt64 = 0
                // ECANCELED: the clock was set. Anything else (EAGAIN) is not a step.
                let count = read(descriptor, &expirations, MemoryLayout<UInt64>.size)
                guard count < 0 && errno == ECANCELED else { return }
                stepped(arm() ? nil : DaemonError.system("timerfd_settime(TFD_TIMER_CANCEL_ON_SET)", errno))
            }
        } catch {
            countdownd_close(fd)
            throw error
        }
    }

    /// Arms the timer for the year 2100: it never fires, it only reports steps.
    private func arm() -> Bool {
        var spec = itimerspec()
        spec.it_value.tv_sec = 4_102_444_800
        return timerfd_settime(descriptor, Int32(TFD_TIMER_ABSTIME) | Int32(TFD_TIMER_CANCEL_ON_SET), &spec, nil) == 0
    }
}
