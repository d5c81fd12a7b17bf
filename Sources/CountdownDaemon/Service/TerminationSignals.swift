import CLinuxShims
import Glibc

/// SIGTERM and SIGINT, read from a `signalfd` watched by the daemon's `EventPoller`.
///
/// Both signals are blocked (`block()`) before the daemon starts any thread, so a signal that
/// comes early, even before the daemon has said `READY=1`, stays pending in the kernel until the
/// poller reads it: none is lost, and none kills the process without a clean stop. (A Dispatch
/// signal source is registered asynchronously by libdispatch's manager thread: under load,
/// `READY=1` could go out first, and a SIGTERM in that gap was ignored.)
final class TerminationSignals {
    private let descriptor: Int32
    private let poller: EventPoller
    private var token: EventPoller.Token?

    /// Blocks SIGTERM and SIGINT in the calling thread and every thread created after it. Call
    /// first thing, before any thread exists.
    static func block() throws(DaemonError) {
        guard countdownd_block_termination_signals() == 0 else {
            throw .system("pthread_sigmask(SIG_BLOCK, SIGTERM|SIGINT)", errno)
        }
    }

    /// Watches the signals; `received` runs on the poller's queue, in a batch, with each signal's
    /// number. A signal sent before this was created is delivered at the first batch.
    init(poller: EventPoller, received: @escaping (Int32) -> Void) throws(DaemonError) {
        let fd = countdownd_termination_signalfd()
        guard fd >= 0 else { throw .system("signalfd(SIGTERM|SIGINT)", errno) }
        descriptor = fd
        self.poller = poller
        do {
            token = try poller.register(fd, interest: .readable) { _ in
                while true {
                    let signalNumber = countdownd_read_signal(fd)
                    guard signalNumber > 0 else {
                        // 0: all read. -1 (EINTR, or a bug): level-triggered, the poller reports the
                        // descriptor again while a signal is pending.
                        return
                    }
                    received(signalNumber)
                }
            }
        } catch {
            // Never watched; startup fails with `error`.
            countdownd_close(fd)
            throw error
        }
    }
}
