@testable import CountdownDaemon
import CountdownCore
import Testing

@Suite("Cluster mode: which host proposes a change that falls due")
struct TakeOverPolicyTests {
    let due = Instant(nanoseconds: 50_000_000_000)
    /// A host listening for heartbeats since long before the due instant, having heard nobody.
    var policy: TakeOverPolicy = {
        var policy = TakeOverPolicy(hostID: "a:/var/lib/countdownd")
        policy.startListening(at: Instant(nanoseconds: 1_000_000_000))
        return policy
    }()

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

    @Test("a writer heard from within four heartbeat intervals is live: nobody takes over its due changes, however late; once silent that long, anyone past the grace does, to the nanosecond")
    mutating func liveWriterIsNotOvertaken() {
        let writer = "b:/var/lib/countdownd"
        let lastBeat = due.advanced(byMilliseconds: 5000)
        policy.heard(from: writer, at: lastBeat)
        let silentSince = lastBeat.advanced(byNanoseconds: TakeOverPolicy.silenceNanoseconds)
        #expect(TakeOverPolicy.silenceNanoseconds == 4 * ClockHeartbeat.intervalNanoseconds)
        #expect(!policy.proposes(dueAt: due, writtenBy: writer, now: silentSince.advanced(byNanoseconds: -1)), "8.99... s late, writer live")
        #expect(policy.proposes(dueAt: due, writtenBy: writer, now: silentSince))
        // Heard again: live again.
        policy.heard(from: writer, at: silentSince)
        #expect(!policy.proposes(dueAt: due, writtenBy: writer, now: silentSince.advanced(byMilliseconds: 1)))
        // The writer itself never waits for anyone, and another host's heartbeat says nothing of this writer.
        policy.heard(from: "c:/srv", at: silentSince)
        #expect(policy.proposes(dueAt: due, writtenBy: "d:/srv", now: silentSince))
        #expect(policy.proposes(dueAt: due, writtenBy: "a:/var/lib/countdownd", now: due))
    }

    @Test("a writer heard from only before the grace ended: taken over once both the grace and its silence are over")
    mutating func graceAndSilenceBoth() {
        let writer = "b:/var/lib/countdownd"
        policy.heard(from: writer, at: due.advanced(byMilliseconds: -2500))
        // Silent since 0.5 s past due, but the grace runs to 2 s.
        #expect(!policy.proposes(dueAt: due, writtenBy: writer, now: due.advanced(byMilliseconds: 1999)))
        #expect(policy.proposes(dueAt: due, writtenBy: writer, now: due.advanced(byMilliseconds: 2000)))
    }

    @Test("a host that has just started listening has heard nobody yet: every writer counts as live until it has listened for the silence, however late the change")
    func justStarted() {
        var fresh = TakeOverPolicy(hostID: "a:/var/lib/countdownd")
        let writer = "b:/var/lib/countdownd"
        #expect(!fresh.proposes(dueAt: due, writtenBy: writer, now: due.advanced(byMilliseconds: 5000)), "not listening yet")
        let start = due.advanced(byMilliseconds: 1000)
        fresh.startListening(at: start)
        fresh.startListening(at: start.advanced(byMilliseconds: 60_000))  // A watch started again: the first start counts.
        let silent = start.advanced(byNanoseconds: TakeOverPolicy.silenceNanoseconds)
        #expect(!fresh.proposes(dueAt: due, writtenBy: writer, now: silent.advanced(byNanoseconds: -1)))
        #expect(fresh.proposes(dueAt: due, writtenBy: writer, now: silent))
        #expect(fresh.proposes(dueAt: due, writtenBy: nil, now: due.advanced(byNanoseconds: TakeOverPolicy.graceNanoseconds)), "an unknown writer: the grace alone")
    }

    @Test("a writer that lives but does not get its change made is taken over 30 s past due, to the nanosecond, whatever its heartbeats say")
    mutating func liveWriterCapped() {
        let writer = "b:/var/lib/countdownd"
        let cap = due.advanced(byNanoseconds: TakeOverPolicy.maximumWaitNanoseconds)
        policy.heard(from: writer, at: cap)
        #expect(!policy.proposes(dueAt: due, writtenBy: writer, now: cap.advanced(byNanoseconds: -1)))
        #expect(policy.proposes(dueAt: due, writtenBy: writer, now: cap))
        #expect(policy.leavesToWriter(writer, now: cap), "still live: the cap is the due change's own")
    }

    @Test("a host on the same machine with another state directory is another host")
    func sameMachineOtherDirectory() {
        #expect(!policy.proposes(dueAt: due, writtenBy: "a:/srv/countdownd", now: due))
    }
}
