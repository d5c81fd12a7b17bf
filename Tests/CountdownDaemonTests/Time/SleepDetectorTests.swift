@testable import CountdownDaemon
import Foundation
import Testing

extension BootClockSuites {
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

        @Test("growth below the threshold is noise, dropped: it is never credited later, to countdowns started after it")
        func smallGrowthIsDropped() {
            let clocks = FakeClocks()
            var detector = SleepDetector(environment: [:], readClocks: clocks.read)
            clocks.slept += 95_000_000
            #expect(detector.sleptSinceLastCheck() == 0)
            clocks.slept += 10_000_000
            #expect(detector.sleptSinceLastCheck() == 0, "10 ms, not 105")
            clocks.slept += 30_000_000_000
            #expect(detector.sleptSinceLastCheck() == 30_000_000_000, "a real sleep, exactly")
        }

        @Test("readings far apart (a preempted thread) are taken again; with none close enough the check waits for the next batch")
        func preemptedReadings() {
            let clocks = FakeClocks()
            var detector = SleepDetector(environment: [:], readClocks: clocks.read)
            // Preempted for 400 ms between the readings: half of it would look like a 200 ms sleep.
            clocks.uncertainties = [400_000_000, 300_000, 0]
            clocks.reads = 0
            #expect(detector.sleptSinceLastCheck() == 0)
            #expect(clocks.reads == 2, "read again once, and the second reading was close enough")
            // Three in a row too far apart, and a sleep meanwhile: not now, and not lost.
            clocks.slept += 5_000_000_000
            clocks.uncertainties = [400_000_000, 400_000_000, 400_000_000]
            #expect(detector.sleptSinceLastCheck() == 0)
            #expect(abs(detector.sleptSinceLastCheck() - 5_000_000_000) < 1_000_000, "within the readings' uncertainty")
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
            try "1000".write(toFile: file, atomically: true, encoding: .utf8)
            #expect(detector.sleptSinceLastCheck() == 0 && SystemClock.simulatedSleep.load(ordering: .relaxed) == 2_250_000_000, "the boot clock never goes back")
            try "9200000000000".write(toFile: file, atomically: true, encoding: .utf8)
            #expect(detector.sleptSinceLastCheck() == 0, "past ten years: ignored, so no deadline overflows")
        }
    }
}
