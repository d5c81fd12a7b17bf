import CountdownCore
import Glibc

/// Notices that the machine was suspended, so countdowns that pause on suspend can stand still
/// for exactly that time (`CountdownEngine.machineSlept(for:now:events:)`).
///
/// `CLOCK_BOOTTIME` counts the time asleep and `CLOCK_MONOTONIC` does not (both stop in
/// suspend-to-RAM, suspend-to-idle and hibernation alike, and only the boot clock is moved on
/// by the time slept at resume), so their difference grows by the time slept and by nothing
/// else. The daemon checks it at the start of every batch: every wake-up, which includes the
/// one at resume (the boot-clock timer fires for whatever fell due meanwhile, and the wall-clock
/// watcher's `TFD_TIMER_CANCEL_ON_SET` timer is cancelled when the kernel resumes timekeeping).
///
/// For tests, `COUNTDOWND_TEST_SLEEP_FILE` names a file holding a number of milliseconds: the
/// daemon then behaves as if the machine had slept that long in all, adding it to every
/// boot-clock reading (`SystemClock.simulatedSleep`) and not to the monotonic one. It is read
/// at each check. Never set in service.
struct SleepDetector {
    /// A growth of the clocks' difference smaller than this is not reported (yet): it is below
    /// what matters to a countdown shown in seconds. It is kept, not lost: a later check reports
    /// the whole of it.
    static let threshold: Int64 = 100_000_000

    /// Readings further apart than this are taken again (the thread was preempted between them).
    static let maximumUncertainty: Int64 = 1_000_000

    /// The environment variable of the test hook.
    static let simulationVariable = "COUNTDOWND_TEST_SLEEP_FILE"

    private let readClocks: () -> (boot: Int64, monotonic: Int64, uncertainty: Int64)
    private let simulationFile: String?
    /// The clocks' difference when the last sleep was reported (or at start).
    private var reportedOffset: Int64 = 0

    /// Starts watching from now. `readClocks` is `SystemClock.bootAndMonotonic` but in tests.
    init(
        environment: [String: String],
        readClocks: @escaping () -> (boot: Int64, monotonic: Int64, uncertainty: Int64) = SystemClock.bootAndMonotonic
    ) {
        self.readClocks = readClocks
        simulationFile = environment[Self.simulationVariable].flatMap { $0.isEmpty ? nil : $0 }
        loadSimulation()
        reportedOffset = offset()
    }

    /// How long the machine slept since the last sleep reported, in nanoseconds, when at least
    /// `threshold`; 0 otherwise.
    mutating func sleptSinceLastCheck() -> Int64 {
        loadSimulation()
        let current = offset()
        let slept = current - reportedOffset
        guard slept >= Self.threshold else { return 0 }
        reportedOffset = current
        return slept
    }

    /// The boot clock's lead over the monotonic one, from the closest of three readings.
    private func offset() -> Int64 {
        var best = readClocks()
        for _ in 0..<2 where best.uncertainty > Self.maximumUncertainty {
            let again = readClocks()
            if again.uncertainty < best.uncertainty { best = again }
        }
        return best.boot - best.monotonic
    }

    /// Reads the test hook's file, if there is one: a missing or malformed file is no sleep.
    private func loadSimulation() {
        guard let simulationFile, let file = fopen(simulationFile, "r") else { return }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 32)
        guard fgets(&buffer, Int32(buffer.count), file) != nil else { return }
        let text = String(decoding: buffer.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let milliseconds = Int64(text), milliseconds >= 0, milliseconds < Int64.max / 1_000_000 else { return }
        SystemClock.simulatedSleep.store(milliseconds * 1_000_000, ordering: .relaxed)
    }
}
