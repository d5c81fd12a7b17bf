@testable import CountdownDaemon
import CountdownCore
import Testing

@Suite("Cluster mode: which host proposes a change that falls due")
struct TakeOverPolicyTests {
    let due = Instant(nanoseconds: 50_000_000_000)
    let policy = TakeOverPolicy(hostID: "a:/var/lib/countdownd")

    @Test("the writer proposes at the due instant; another host only once the grace has passed, to the nanosecond")
    func writerFirstThenAnyone() {
        #expect(policy.proposes(dueAt: due, writtenBy: "a:/var/lib/countdownd", now: due))
        #expect(!policy.proposes(dueAt: due, writtenBy: "b:/var/lib/countdownd", now: due))
        let beforeGrace = due.advanced(byNanoseconds: TakeOverPolicy.graceNanoseconds - 1)
        #expect(!policy.proposes(dueAt: due, writtenBy: "b:/var/lib/countdownd", now: beforeGrace))
        let atGrace = due.advanced(byNanoseconds: TakeOverPolicy.graceNanoseconds)
        #expect(policy.proposes(dueAt: due, writtenBy: "b:/var/lib/countdownd", now: atGrace))
    }

    @Test("a countdown whose writer is unknown (a fresh read) is proposed by anyone after the grace, by nobody before")
    func unknownWriter() {
        #expect(!policy.proposes(dueAt: due, writtenBy: nil, now: due.advanced(byMilliseconds: 1999)))
        #expect(policy.proposes(dueAt: due, writtenBy: nil, now: due.advanced(byMilliseconds: 2000)))
    }

    @Test("a host on the same machine with another state directory is another host")
    func sameMachineOtherDirectory() {
        #expect(!policy.proposes(dueAt: due, writtenBy: "a:/srv/countdownd", now: due))
    }
}
