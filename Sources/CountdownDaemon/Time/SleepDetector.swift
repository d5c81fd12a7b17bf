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
    /// A growth of the clocks' difference smaller than this is taken for noise in reading them,
    /// and dropped: a suspend and resume take seconds, and the kernel moves the boot clock on by
    /// the whole time slept at once, before any process runs again, so one check sees all of a
    /// sleep. (Kept for later, a small growth would be credited to countdowns started after it.)
    static let threshold: Int64 = 100_000_000

    /// Readings further apart than this are taken again (the thread was preempted between them);
    /// when three in a row are, the check is skipped: the next batch checks again.
    static let maximumUncertainty: Int64 = 1_000_000

    /// The most a simulated sleep may add up to (ten years): the boot clock plus any deadline
    /// stays far from overflowing.
    static let maximumSimulatedMilliseconds: Int64 = 10 * 366 * 86_400_000

    /// The environment variable of the test hook.
    static let simulationVariable = "COUNTDOWND_TEST_SLEEP_FILE"

    private let readClocks: () -> (boot: Int64, monotonic: Int64, uncertainty: Int64)
    private let simulationFile: String?
    /// The clocks' difference at the last check.
    private var lastOffset: Int64 = 0

    /// Starts watching from now. `readClocks` is `SystemClock.bootAndMonotonic` but in tests.
    init(
        environment: [String: String],
        readClocks: @escaping () -> (boot: Int64, monotonic: Int64, uncertainty: Int64) = SystemClock.bootAndMonotonic
    ) {
        self.readClocks = readClocks
        simulationFile = environment[Self.simulationVariable].flatMap { $0.isEmpty ? nil : $0 }
        loadSimulation()
        // Three tries at start, however loaded the machine: a reading this far off is a small
        // error in the first sleep reported, never a sleep.
        lastOffset = offset() ?? (readClocks().boot - readClocks().monotonic)
    }

    /// How long the machine slept since the last check, in nanoseconds, when at least
    /// `threshold`; 0 otherwise.
    mutating func sleptSinceLastCheck() -> Int64 {
        loadSimulation()
        guard let current = offset() else { return 0 }
        let slept = current - lastOffset
        lastOffset = current
        return slept >= Self.threshold ? slept : 0
    }

    /// The boot clock's lead over the monotonic one, from the first of up to three readings
    /// taken close enough together; `nil` when none was.
    private func offset() -> Int64? {
        for _ in 0..<3 {
            let reading = readClocks()
            if reading.uncertainty <= Self.maximumUncertainty {
                return reading.boot - reading.monotonic
            }
        }
        return nil
    }

    /// Reads the test hook's file, if there is one; a missing or malformed file leaves the
    /// simulated sleep as it was. Opened without blocking (a FIFO there must not hang the daemon).
    private func loadSimulation() {
        guard let simulationFile else { return }
        let descriptor = open(simulationFile, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        guard let file = fdopen(descriptor, "r") else {
            _ = close(descriptor)  // Nothing was read through it.
            return
        }
        defer { _ = fclose(file) }  // Ignored on purpose: read only, so closing loses nothing.
        var buffer = [CChar](repeating: 0, count: 32)
        guard fgets(&buffer, Int32(buffer.count), file) != nil else { return }
        let text = String(decoding: buffer.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let milliseconds = Int64(text), milliseconds >= 0, milliseconds <= Self.maximumSimulatedMilliseconds else { return }
        // A sleep only moves the boot clock forward: a smaller number is a mistake, ignored.
        let nanoseconds = milliseconds * 1_000_000
        if nanoseconds > SystemClock.simulatedSleep.load(ordering: .relaxed) {
            SystemClock.simulatedSleep.store(nanoseconds, ordering: .relaxed)
        }
    }
}
