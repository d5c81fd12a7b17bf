import CountdownCore
import Glibc
import Synchronization

/// The daemon's clocks: `CLOCK_BOOTTIME` for countdowns, `CLOCK_REALTIME` for reporting.
///
/// `CLOCK_BOOTTIME` is monotonic and keeps counting while the machine is suspended, so a tea timer
/// set before closing the lid is due at the right moment after it opens. It never steps when the
/// wall clock is set, so NTP or `date -s` never moves a running countdown.
enum SystemClock {
    /// The current instant on `CLOCK_BOOTTIME` (plus any simulated sleep).
    static func now() -> Instant {
        Instant(nanoseconds: read(CLOCK_BOOTTIME) &+ simulatedSleep.load(ordering: .relaxed))
    }

    /// `CLOCK_BOOTTIME` and `CLOCK_MONOTONIC`, read as close together as the machine allows: the
    /// boot clock between two readings of the monotonic one, whose midpoint is returned with the
    /// time between the two. Their difference grows by exactly the time the machine slept.
    static func bootAndMonotonic() -> (boot: Int64, monotonic: Int64, uncertainty: Int64) {
        let before = read(CLOCK_MONOTONIC)
        let boot = read(CLOCK_BOOTTIME) &+ simulatedSleep.load(ordering: .relaxed)
        let after = read(CLOCK_MONOTONIC)
        return (boot, before + (after - before) / 2, after - before)
    }

    /// Time added to `CLOCK_BOOTTIME` readings, and to nothing else: a sleep of the machine,
    /// simulated for tests (`SleepDetector`), since a real suspend cannot be had on a test
    /// machine. Always 0 in service.
    static let simulatedSleep = Atomic<Int64>(0)

    /// `CLOCK_BOOTTIME` as the kernel reads it now, without any simulated sleep: what
    /// `kernelBootNanoseconds(of:)` is compared with.
    static func kernelBootNow() -> Int64 {
        read(CLOCK_BOOTTIME)
    }

    /// An instant as the kernel's `CLOCK_BOOTTIME` has it, for arming a timer on that clock.
    static func kernelBootNanoseconds(of instant: Instant) -> Int64 {
        instant.nanoseconds &- simulatedSleep.load(ordering: .relaxed)
    }

    /// The wall clock, in nanoseconds since the Unix epoch.
    static func unixNanoseconds() -> Int64 {
        read(CLOCK_REALTIME)
    }

    private static func read(_ clock: clockid_t) -> Int64 {
        var spec = timespec()
        // clock_gettime cannot fail for these clocks on Linux with a valid pointer.
        clock_gettime(clock, &spec)
        return Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec)
    }
}

extension SystemClock {
    /// The kernel's id for this boot, or `nil` when it cannot be read (e.g. under `ProcSubset=pid`):
    /// boot-clock deadlines in storage are only valid within the boot that wrote them.
    static let bootID: String? = {
        guard let file = fopen("/proc/sys/kernel/random/boot_id", "r") else { return nil }
        defer { _ = fclose(file) }  // Ignored on purpose: read only, so closing loses nothing.
        var buffer = [CChar](repeating: 0, count: 64)
        guard fgets(&buffer, Int32(buffer.count), file) != nil else { return nil }
        let text = String(decoding: buffer.prefix { $0 != 0 && $0 != 10 && $0 != 32 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text.isEmpty ? nil : text
    }()
}
