@testable import CountdownDaemon
import CountdownCore
import Synchronization

/// A clock for one component test: it starts at the boot clock's reading and moves only when
/// the test moves it, so a test of deadlines advances time instead of sleeping through it.
final class ManualTime: Sendable {
    private let nanoseconds: Atomic<Int64>
    private let start: Int64
    private let startUnixNanoseconds = SystemClock.unixNanoseconds()

    init() {
        start = SystemClock.now().nanoseconds
        nanoseconds = Atomic(start)
    }

    /// The same clock, with a wall clock that moves with it (from the real one's reading at the
    /// start): for a component that takes wall-clock readings at instants it kept.
    var clockWithMovingWall: DaemonClock {
        DaemonClock(
            now: { [self] in Instant(nanoseconds: nanoseconds.load(ordering: .relaxed)) },
            unixNanoseconds: { [self] in startUnixNanoseconds + nanoseconds.load(ordering: .relaxed) - start }
        )
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
