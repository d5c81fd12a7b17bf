@testable import CountdownDaemon
import Testing

@Suite("A batch's phases")
struct BatchPhaseTests {
    typealias Phase = Daemon.Phase

    @Test("idle → serving → sealing → flushing → idle, and sealing → serving when a failed commit is undone; nothing else")
    func transitions() {
        let all: [Phase] = [.idle, .serving, .sealing, .flushing]
        let allowed: Set<String> = ["idle→serving", "serving→sealing", "sealing→flushing", "flushing→idle", "sealing→serving"]
        for from in all {
            for to in all {
                #expect(from.leads(to: to) == allowed.contains("\(from)→\(to)"), "\(from) → \(to)")
            }
        }
    }
}
