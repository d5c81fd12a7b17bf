@testable import CountdownDaemon
import Foundation
import Testing

@Suite("The sleep detector: the boot clock's lead over the monotonic one")
struct SleepDetectorTests {
    /// Clocks the test moves: `boot - monotonic` grows by what the "machine" slept.
    final class FakeClocks: @unchecked Sendable {
        var monotonic: Int64 = 5_000_000_000
        var slept: Int64 = 0
        /// How far apart the two monotonic readings around the boot clock's are, per read.
        var uncertainties: [Int64] = []
        var reads = 0

        func read() -> (boot: Int64, monotonic: Int64, uncertainty: Int64) {
            reads += 1
            let uncertainty = uncertainties.isEmpty ? 0 : uncertainties.removeFirst()
            // The boot clock was read somewhere between the two monotonic readings; here at
            // their start, so the midpoint is off by half the uncertainty.
            return (monotonic + 7_000_000_000 + slept, monotonic + uncertainty / 2, uncertainty)
        }
    }

    @Test("no sleep is none, however much time passes; a sleep is reported once, exactly")
    func reportsSleepOnce() {
        let clocks = FakeClocks()
        var detector = SleepDetector(environment: [:], readClocks: clocks.read)
        clocks.monotonic += 3_600_000_000_000
        #expect(detector.sleptSinceLastCheck() == 0, "an hour awake is not a sleep")
        clocks.slept += 90_000_000_000
        clocks.monotonic += 1_000_000
        #expect(detector.sleptSinceLastCheck() == 90_000_000_000)
        #expect(detector.sleptSinceLastCheck() == 0, "reported once")
    }

    @Test("sleeps below the threshold are kept until they add up to it")
    func smallSleepsAddUp() {
        let clocks = FakeClocks()
        var detector = SleepDetector(environment: [:], readClocks: clocks.read)
        clocks.slept += 60_000_000
        #expect(detector.sleptSinceLastCheck() == 0)
        clocks.slept += 60_000_000
        #expect(detector.sleptSinceLastCheck() == 120_000_000, "both, not the last alone")
    }

    @Test("readings far apart (a preempted thread) are taken again, and the closest is used")
    func preemptedReadings() {
        let clocks = FakeClocks()
        var detector = SleepDetector(environment: [:], readClocks: clocks.read)
        // Preempted for 400 ms between the readings: half of it would look like a 200 ms sleep.
        clocks.uncertainties = [400_000_000, 300_000, 0]
        clocks.reads = 0
        #expect(detector.sleptSinceLastCheck() == 0)
        #expect(clocks.reads == 2, "read again once, and the second reading was close enough")
    }

    @Test("the test hook: COUNTDOWND_TEST_SLEEP_FILE adds its milliseconds to the boot clock only")
    func simulatedSleep() throws {
        let file = NSTemporaryDirectory() + "sleep-\(UUID().uuidString)"
        defer {
            try? FileManager.default.removeItem(atPath: file)
            SystemClock.simulatedSleep.store(0, ordering: .relaxed)
        }
        try "250".write(toFile: file, atomically: true, encoding: .utf8)
        var detector = SleepDetector(environment: [SleepDetector.simulationVariable: file])
        #expect(detector.sleptSinceLastCheck() == 0, "what the file says at start is not a sleep")
        let before = SystemClock.now()
        try "2250".write(toFile: file, atomically: true, encoding: .utf8)
        let slept = detector.sleptSinceLastCheck()
        #expect(abs(slept - 2_000_000_000) < 1_000_000, "\(slept)")
        #expect(SystemClock.now().nanoseconds(since: before) >= 2_000_000_000, "the boot clock jumped")
        let instant = SystemClock.now()
        #expect(instant.nanoseconds - SystemClock.kernelBootNanoseconds(of: instant) == 2_250_000_000, "timers are armed on the kernel's clock")
        try "not a number".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(detector.sleptSinceLastCheck() == 0, "a malformed file changes nothing")
    }
}
