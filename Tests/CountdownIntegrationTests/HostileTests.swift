import CountdownClient
import CountdownCore
import Foundation
import Glibc
import Testing

extension Integration {
    /// Attacks from issue 18's table, each against the real binary.
    @Suite("Hostile clients: floods that must not reach the log, the other users, or the disk")
    struct HostileTests {
        /// How many times `needle` occurs in `text`.
        func occurrences(of needle: String, in text: String) -> Int {
            text.components(separatedBy: needle).count - 1
        }

        /// The counts said by summary lines such as "17 more lifecycle events in the last 10 s".
        func summarized(_ what: String, in text: String) -> Int {
            text.split(separator: "\n").reduce(0) { total, line in
                guard line.contains(" more \(what) in the last "),
                      let count = line.firstMatch(of: #/(\d+) more /#).flatMap({ Int($0.1) }) else { return total }
                return total + count
            }
        }

        @Test("500 refused connections and 40 lifecycle events over a limit of 10: a line per 10 s window in full, the rest counted, and the counts add up exactly")
        func logFloods() throws {
            let daemon = try DaemonProcess(arguments: ["--max-connections", "2", "--log-lifecycle-limit", "10"])
            let began = monotonicNow()
            let first = try daemon.connect(), second = try daemon.connect()
            let refusals = 500
            for _ in 0..<refusals {
                do {
                    _ = try CountdownConnection(path: daemon.socketPath, timeout: 30)
                    Issue.record("a third connection was taken")
                } catch {
                    #expect("\(error)".contains("too many connections"), "\(error)")
                }
            }
            _ = try StorageFaults.pipeline((0..<20).map { "START flood\($0) 1h" }, on: first)
            _ = try StorageFaults.pipeline((0..<20).map { "CANCEL flood\($0)" }, on: first)
            // Each window ends with its count; wait until every refusal and event is accounted for.
            let refusedLine = "refused a connection: limit of 2 reached"
            let eventLine = #/seq \d+ \(uid \d+\): /#
            try waitUntil(timeout: 60) {
                let log = daemon.stderrText
                return occurrences(of: refusedLine, in: log) + summarized("connections refused at the connection limit", in: log) == refusals
                    && log.matches(of: eventLine).count + summarized("lifecycle events", in: log) == 40
            }
            let windows = Int((monotonicNow() - began) / 10) + 1
            let log = daemon.stderrText
            #expect(occurrences(of: refusedLine, in: log) <= windows, "one line in full per 10 s window, \(windows) windows: \(log)")
            #expect(log.matches(of: eventLine).count <= 10 * windows, "ten lifecycle lines per window: \(log)")
            #expect(summarized("connections refused at the connection limit", in: log) > 0, "the count is said")
            _ = second
        }
    }
}
