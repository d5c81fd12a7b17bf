import Foundation
import Glibc

/// A host whose wall clock is off, for real: `Tests/Scripts/clockshift.c`, built here into an
/// `LD_PRELOAD` library that moves `CLOCK_REALTIME` of the process it is loaded into (and of no
/// other) by `COUNTDOWND_TEST_CLOCK_SHIFT_MS`.
enum ClockShift {
    /// Why the library cannot be built here, or `nil` when it can.
    static var unavailableReason: String? {
        access(compiler, X_OK) == 0 ? nil : "no C compiler at \(compiler) to build the clock-shifting library (gcc; make deps installs it)"
    }

    private static let compiler = "/usr/bin/cc"

    /// The library, built once per test run.
    static let library: Result<String, any Error> = Result {
        let directory = NSTemporaryDirectory() + "clockshift-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let output = directory + "/clockshift.so"
        let built = try runCommand(compiler, ["-shared", "-fPIC", "-O2", "-o", output, packageRoot + "/Tests/Scripts/clockshift.c", "-ldl"])
        guard built.status == 0 else { throw HarnessError.unexpected("building clockshift.so failed: \(built.stderr)") }
        return output
    }

    /// The environment that starts a process with its wall clock `milliseconds` off.
    static func environment(shiftedBy milliseconds: Int) throws -> [String: String] {
        ["LD_PRELOAD": try library.get(), "COUNTDOWND_TEST_CLOCK_SHIFT_MS": String(milliseconds)]
    }
}
