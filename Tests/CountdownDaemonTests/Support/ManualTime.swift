@testable import CountdownDaemon
import CountdownCore
import Synchronization

/// A clock for one component test: it starts at the boot clock's reading and moves only when
/// the test moves it, so a test of deadlines advances time instead of sleeping through it.
final class ManualTime: Sendable {
    private let nanoseconds: Atomic<Int64>

    init() {
        nanoseconds = Atomic(SystemClock.now().nanoseconds)
    }

    /// The component's view of it.
    var clock: DaemonClock {
        DaemonClock(
            now: { [self] in Instant(nanoseconds: nanoseconds.load(ordering: .relaxed)) },
            unixNanoseconds: { SystemClock.unixNanoseconds() }
        )
    }

    /// Moves time forward.
    func advance(byMilliseconds milliseconds: Int64) {
        nanoseconds.add(milliseconds * 1_000_000, ordering: .relaxed)
    }
}
