import Foundation
import Glibc

/// A fresh directory under /tmp (short, so socket paths fit), removed with everything in it.
final class TemporaryDirectory {
    let path: String

    init() {
        var template = Array("/tmp/cdt.XXXXXX".utf8CString)
        // mkdtemp fills in the template; it only fails when /tmp is unusable, which no test survives.
        let result = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(result != nil, "mkdtemp failed: \(String(cString: strerror(errno)))")
        path = String(decoding: template.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func file(_ name: String) -> String {
        path + "/" + name
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Where `swift build` put the executables under test: beside the test bundle.
enum TestBinaries {
    static let directory: String = {
        if let override = ProcessInfo.processInfo.environment["COUNTDOWND_BIN_DIR"] {
            return override
        }
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        return executable.deletingLastPathComponent().path
    }()

    static var countdownd: String { directory + "/countdownd" }
    static var cdctl: String { directory + "/cdctl" }
}

/// Seconds on the monotonic clock, for deadlines in tests.
func monotonicNow() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

/// Milliseconds since the Unix epoch, to compare with `deadline_unix_ms`.
func unixNowMilliseconds() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return Double(spec.tv_sec) * 1000 + Double(spec.tv_nsec) / 1e6
}
