import CLinuxShims
import Dispatch
import Glibc
import Synchronization

/// Closes clients' descriptors on a thread of its own. Tearing down a Unix socket is most of what
/// a hang-up costs the daemon (measured with 10,000 clients closing at once: `close` was 44 % of
/// the queue's samples, in `unix_release_sock`, `dput` and the epoll bookkeeping), and none of it
/// needs the queue. A descriptor is taken out of the poller before it is handed over, so it is
/// never reported again, and its number is not reused until it is closed here.
///
/// Bursts share one hand-off: the first descriptor of a burst schedules a drain, which closes
/// everything handed over until it finds nothing more. Should the closer's thread fall behind by
/// `maximumWaiting` descriptors (starved of CPU), the caller closes the next ones itself: they
/// never pile up towards the descriptor limit.
final class DescriptorCloser: Sendable {
    /// The most descriptors waiting to be closed before callers close them themselves.
    let maximumWaiting: Int

    private struct Pending {
        var descriptors: [Int32] = []
        var isDrainScheduled = false
        /// Handed over and not closed yet: waiting, or being closed by a drain.
        var outstanding = 0
    }

    private let pending = Mutex(Pending())
    private let thread = DispatchQueue(label: "countdownd.descriptor-closer")

    init(maximumWaiting: Int = 4096) {
        self.maximumWaiting = maximumWaiting
    }

    /// Closes `descriptor` soon, on the closer's thread. It must be out of the poller already.
    func close(_ descriptor: Int32) {
        enum Action { case scheduleDrain, nothing, closeHere }
        let action = pending.withLock { state -> Action in
            guard state.descriptors.count < maximumWaiting else { return .closeHere }
            state.descriptors.append(descriptor)
            state.outstanding += 1
            defer { state.isDrainScheduled = true }
            return state.isDrainScheduled ? .nothing : .scheduleDrain
        }
        switch action {
        case .scheduleDrain:
            thread.async {
                ThreadName.closer.apply()
                self.drain()
            }
        case .nothing:
            break
        case .closeHere:
            Self.release(descriptor)
        }
    }

    /// Returns once every descriptor handed over before the call is closed: a drain scheduled
    /// or running then has taken it, and runs before this.
    func waitUntilClosed() {
        thread.sync {}
    }

    /// Descriptors handed over and still open: they count against the descriptor limit.
    var outstanding: Int {
        pending.withLock { $0.outstanding }
    }

    private func drain() {
        while true {
            let taken = pending.withLock { state in
                let taken = state.descriptors
                state.descriptors.removeAll(keepingCapacity: true)
                if taken.isEmpty { state.isDrainScheduled = false }
                return taken
            }
            guard !taken.isEmpty else { return }
            for descriptor in taken {
                Self.release(descriptor)
            }
            pending.withLock { $0.outstanding -= taken.count }
        }
    }

    private static func release(_ descriptor: Int32) {
        countdownd_close(descriptor)
    }
}
