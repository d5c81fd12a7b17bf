import CountdownCore
import Dispatch
import CLinuxShims
import Glibc

/// The daemon's single wake-up timer: a `timerfd` on `CLOCK_BOOTTIME`, armed with an absolute
/// deadline, watched by a Dispatch read source on the daemon's queue.
///
/// Dispatch's own timers run on `CLOCK_MONOTONIC`, which stops while the machine is suspended;
/// a `CLOCK_BOOTTIME` timerfd fires on time (or as soon as the machine wakes).
final class WakeupTimer {
    private let descriptor: Int32
    private let source: any DispatchSourceRead
    private var armedFor: Instant?

    /// Creates the timer; `handler` runs on `queue` each time it fires.
    init(queue: DispatchQueue, handler: @escaping () -> Void) throws(DaemonError) {
        let fd = timerfd_create(CLOCK_BOOTTIME, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
        guard fd >= 0 else {
            throw DaemonError.system("timerfd_create(CLOCK_BOOTTIME)", errno)
        }
        descriptor = fd
        source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler {
            var expirations: UInt64 = 0
            _ = read(fd, &expirations, MemoryLayout<UInt64>.size)  // EAGAIN after a re-arm is fine.
            handler()
        }
        source.setCancelHandler {
            close(fd)
        }
        source.activate()
    }

    /// Arms the timer for `instant`, or disarms it for `nil`. An instant already past fires at once.
    func arm(at instant: Instant?) {
        guard instant != armedFor else { return }
        armedFor = instant
        var spec = itimerspec()
        if let instant {
            // An all-zero it_value would disarm the timer; never ask for less than 1 ns.
            let ns = max(instant.nanoseconds, 1)
            spec.it_value.tv_sec = Int(ns / 1_000_000_000)
            spec.it_value.tv_nsec = Int(ns % 1_000_000_000)
        }
        timerfd_settime(descriptor, Int32(TFD_TIMER_ABSTIME), &spec, nil)
    }

    /// Forgets the armed instant, so the next `arm` re-arms even for the same instant.
    func didFire() {
        armedFor = nil
    }

    /// Stops the timer and closes its descriptor.
    func cancel() {
        source.cancel()
    }
}
