import Foundation
import Testing

/// `swiftc` from the same toolchain as `swift test`, if it can be found.
let swiftcPath: String? = {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    return path.split(separator: ":").map { "\($0)/swiftc" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}()

extension Integration {
    @Suite("Fuzzing")
    struct FuzzTests {
        @Test(
            "a bounded libFuzzer run over framer, parser, engine and encoder finds nothing",
            .enabled(if: swiftcPath != nil, "swiftc is not on PATH, so the fuzzer cannot be built"),
            .timeLimit(.minutes(5))
        )
        func boundedFuzzRun() throws {
            let make = try runCommand("/usr/bin/make", ["-C", packageRoot, "fuzz-smoke"], timeout: 280)
            #expect(make.status == 0, "fuzzing failed:\n\(make.stdout.suffix(2000))\n\(make.stderr.suffix(4000))")
            #expect(make.stderr.contains("Done 50000 runs"), "\(make.stderr.suffix(2000))")
        }
    }
}
