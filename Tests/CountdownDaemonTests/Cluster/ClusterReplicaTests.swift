@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Foundation
import Glibc
import Testing

@Suite("The cluster replica against a scripted etcd: lost answers, lost races, the watch")
struct ClusterReplicaTests {
    let queue = DispatchQueue(label: "replica-test")

    /// The replica's clock: the boot clock at the start, moved by the tests, never by itself.
    let time = ManualTime()

    /// A replica on a scripted store; its retries and housekeeping wait in a schedule nobody
    /// runs (no timer fires).
    func replica(
        _ store: ScriptedEtcd, limits: EngineConfiguration = EngineConfiguration(), later: DelayedWork? = nil, clock: DaemonClock? = nil
    ) throws -> ClusterReplica {
        queue.sync {
            ClusterReplica(
                configuration: ClusterConfiguration(endpoints: store.endpoints), limits: limits, client: store, driver: nil,
                later: later ?? DelayedWork(queue: queue), queue: queue, logger: Logger(threshold: .error, environment: [:]), time: clock ?? time.clock
            )
        }
    }

    @Test("retries and timeouts wait in the daemon's one schedule: a waiter the watch never reaches is released, not caught up, by the housekeeping at its time on the moved clock, and not before")
    func waiterTimesOutOnTheSchedule() throws {
        let store = ScriptedEtcd()
        let later = DelayedWork(queue: queue)
        let replica = try replica(store, later: later)
        final class Seen: @unchecked Sendable {
            var released: [Bool] = []
        }
        let seen = Seen()
        let answerBy = time.clock.now().advanced(byMilliseconds: 1000)
        queue.sync {
            replica.resume(from: 10_000)
            replica.start()
            replica.afterRevision(12, answerBy: answerBy) { seen.released.append($0) }
        }
        time.advance(byMilliseconds: 900)
        queue.sync { _ = later.runDue(now: time.clock.now()) }
        #expect(queue.sync { seen.released }.isEmpty, "not before its time")
        time.advance(byMilliseconds: 300)
        queue.sync { _ = later.runDue(now: time.clock.now()) }
        #expect(queue.sync { seen.released } == [false], "released once, not caught up")
    }

    func value(_ replica: ClusterReplica, operation: String? = nil) -> ClusterValue {
        let state = Countdown(
            name: "otp:1", owner: 0, totalMilliseconds: 60_000,
            status: .running(deadline: SystemClock.now().advanced(byMilliseconds: 60_000), pinnedUnixMilliseconds: nil)
        )
        return ClusterValue(state, event: .started, eventRemainingMilliseconds: 60_000, operation: operation ?? replica.nextOperation(), clock: DaemonClock.system.mapping())
    }

    func stored(_ value: ClusterValue, revision: Int64, key: String = "otp:1") -> EtcdKeyValue {
        EtcdKeyValue(key: "/countdownd/" + key, value: value.encoded, createRevision: revision, modRevision: revision)
    }

    /// Heartbeats of `host` at `revisions`, each arriving live now through `watch`, written
    /// `behind` ms behind this host's clock: enough of them (4) measure its clock.
    func heartbeats(of host: String, behind: Int64 = 0, at revisions: ClosedRange<Int64>, through watch: ScriptedEtcd.Watch) {
        for revision in revisions {
            let written = time.clock.mapping().unixMilliseconds - behind
            let beat = EtcdKeyValue(key: "/countdownd/.hosts/" + host, value: Array(#"{"written_unix_ms":\#(written)}"#.utf8), createRevision: revisions.lowerBound, modRevision: revision)
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: beat)], revision)
        }
    }

    /// Runs one change and returns its outcome, answering each transaction with the next of
    /// `answers` (each built from the transaction it answers).
    func change(
        _ replica: ClusterReplica, _ store: ScriptedEtcd, value: ClusterValue?, expecting: ClusterReplica.Expectation = .absent,
        answers: [(ScriptedEtcd.Transaction) -> Result<EtcdTransactionResult, EtcdError>]
    ) -> (ClusterReplica.ChangeOutcome?, [ScriptedEtcd.Transaction]) {
        queue.sync {
            var outcome: ClusterReplica.ChangeOutcome?
            var sent: [ScriptedEtcd.Transaction] = []
            replica.change("otp:1", to: value, expecting: expecting) { outcome = $0 }
            replica.sendPending()  // As the batch's end does.
            for answer in answers {
                guard let next = store.transactions.first else { break }
                sent.append(next)
                store.answer(answer(next))
            }
            #expect(store.transactions.isEmpty, "no transaction left unanswered: \(store.transactions.count)")
            return (outcome, sent)
        }
    }

    @Test("an answer lost once is sent again with the same operation id; its commit then counts")
    func ambiguousThenCommitted() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        let mine = value(replica)
        let (outcome, sent) = change(replica, store, value: mine, answers: [
            { _ in .failure(.ambiguous("timed out")) },
            { _ in .success(EtcdTransactionResult(succeeded: true, revision: 42, ranges: [])) },
        ])
        #expect(sent.count == 2)
        #expect(sent.map { $0.putValue?.operation } == [mine.operation, mine.operation], "the retry carries the same operation")
        guard case .committed(42)? = outcome else {
            Issue.record("\(String(describing: outcome))")
            return
        }
    }

    @Test("the retry finds its own first attempt committed (the compare fails on our value): committed, at that revision")
    func retryFindsItsOwnCommit() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        let mine = value(replica)
        let (outcome, _) = change(replica, store, value: mine, answers: [
            { _ in .failure(.ambiguous("connection lost after sending")) },
            { _ in .success(EtcdTransactionResult(succeeded: false, revision: 50, ranges: [[self.stored(mine, revision: 43)]])) },
        ])
        guard case .committed(43)? = outcome else {
            Issue.record("our own commit at 43 is not a conflict: \(String(describing: outcome))")
            return
        }
    }

    /// What a change was answered, seen from outside the queue.
    final class Answered: @unchecked Sendable {
        var outcome: ClusterReplica.ChangeOutcome?
    }

    /// Proposes one change and sends it (as a batch's end does); its answer lands in the box.
    func propose(_ replica: ClusterReplica, value: ClusterValue) -> Answered {
        let answered = Answered()
        queue.sync {
            replica.change("otp:1", to: value, expecting: .absent) { answered.outcome = $0 }
            replica.sendPending()
        }
        return answered
    }

    /// Moves the clock by `milliseconds` and runs the housekeeping, answering what it sends with
    /// `answer` (built from the transaction); how many transactions it sent.
    func housekeeping(_ replica: ClusterReplica, _ store: ScriptedEtcd, after milliseconds: Int64, answer: (ScriptedEtcd.Transaction) -> Result<EtcdTransactionResult, EtcdError>) -> Int {
        time.advance(byMilliseconds: milliseconds)
        return queue.sync {
            replica.housekeeping(now: time.clock.now())
            var sent = 0
            while let next = store.transactions.first {
                sent += 1
                store.answer(answer(next))
            }
            return sent
        }
    }

    @Test("refused for want of a leader (an election: nothing proposed): held, asked again at the housekeeping after its pause, not before, and committed once a leader answers")
    func noLeaderIsWaitedOut() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        let mine = value(replica)
        let answered = propose(replica, value: mine)
        queue.sync { store.answer(.failure(.server(code: 14, message: "etcdserver: no leader"))) }
        #expect(queue.sync { answered.outcome } == nil && queue.sync { store.transactions.isEmpty }, "held, not answered, not sent again at once")
        #expect(housekeeping(replica, store, after: 100, answer: { _ in .failure(.ambiguous("not sent yet")) }) == 0, "not before its pause")
        #expect(housekeeping(replica, store, after: 100, answer: { _ in .failure(.server(code: 14, message: "etcdserver: no leader")) }) == 1, "asked again")
        var operations: [String?] = []
        let sent = housekeeping(replica, store, after: 200, answer: { transaction in
            operations.append(transaction.putValue?.operation)
            return .success(EtcdTransactionResult(succeeded: true, revision: 77, ranges: []))
        })
        #expect(sent == 1 && operations == [mine.operation], "the same change, the same operation id")
        guard case .committed(77)? = queue.sync(execute: { answered.outcome }) else {
            Issue.record("\(String(describing: queue.sync { answered.outcome }))")
            return
        }
    }

    @Test("with no leader until the deadline: answered with etcd's refusal in the deadline's last 250 ms, never later; after a lost answer, still may-or-may-not (the first attempt can commit once quorum returns)")
    func noLeaderUntilTheDeadline() throws {
        for answerLostFirst in [false, true] {
            let store = ScriptedEtcd()
            let replica = try replica(store)
            let answered = propose(replica, value: value(replica))
            queue.sync {
                store.answer(answerLostFirst ? .failure(.ambiguous("timed out")) : .failure(.server(code: 14, message: "etcdserver: no leader")))
                if answerLostFirst { store.answer(.failure(.server(code: 14, message: "etcdserver: no leader"))) }
            }
            var elapsed: Int64 = 0
            var asked = 0
            while queue.sync(execute: { answered.outcome }) == nil && elapsed < Int64(ClusterReplica.changeTimeoutMilliseconds) {
                elapsed += 200
                asked += housekeeping(replica, store, after: 200, answer: { _ in .failure(.server(code: 14, message: "etcdserver: no leader")) })
            }
            #expect(elapsed > Int64(ClusterReplica.changeTimeoutMilliseconds) - 250 - 200 && elapsed <= Int64(ClusterReplica.changeTimeoutMilliseconds) - ClusterReplica.minimumRetryMilliseconds + 200, "answered at \(elapsed) ms")
            #expect(asked >= 10, "asked again through the election: \(asked)")
            switch queue.sync(execute: { answered.outcome }) {
            case .failed(.ambiguous(let why))? where answerLostFirst:
                #expect(why.contains("no leader"), "\(why)")
            case .failed(.server(code: 14, let message))? where !answerLostFirst:
                #expect(message.contains("no leader"))
            case let other:
                Issue.record("lost first: \(answerLostFirst): \(String(describing: other))")
            }
        }
    }

    @Test("a second lost answer is reported as such, never retried a third time")
    func ambiguousTwice() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        let (outcome, sent) = change(replica, store, value: value(replica), answers: [
            { _ in .failure(.ambiguous("first")) },
            { _ in .failure(.ambiguous("second")) },
        ])
        #expect(sent.count == 2)
        guard case .failed(.ambiguous("second"))? = outcome else {
            Issue.record("\(String(describing: outcome))")
            return
        }
    }

    @Test("the retry shares the first attempt's deadline: a change is answered within 3 s in all, and with too little time left it is not retried")
    func retryWithinTheDeadline() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        // The first attempt's answer is lost after 1 s of its 3.
        let (outcome, sent) = change(replica, store, value: value(replica), answers: [
            { [time] _ in time.advance(byMilliseconds: 1000); return .failure(.ambiguous("lost")) },
            { _ in .success(EtcdTransactionResult(succeeded: true, revision: 9, ranges: [])) },
        ])
        let first = try #require(sent.first?.timeoutMilliseconds)
        #expect(first == ClusterReplica.changeTimeoutMilliseconds / 2, "half the 3 s, leaving the retry time: \(first) ms")
        let second = try #require(sent.count == 2 ? sent[1].timeoutMilliseconds : nil)
        #expect(second == 2000, "what was left of the 3 s: \(second) ms")
        guard case .committed(9)? = outcome else {
            Issue.record("\(String(describing: outcome))")
            return
        }
        // Lost after 2.8 s: too little left to try again; the client learns it at once.
        let (late, lateSent) = change(replica, store, value: value(replica), answers: [
            { [time] _ in time.advance(byMilliseconds: 2800); return .failure(.ambiguous("lost late")) },
        ])
        #expect(lateSent.count == 1)
        guard case .failed(.ambiguous("lost late"))? = late else {
            Issue.record("\(String(describing: late))")
            return
        }
    }

    @Test("a delete whose answer was lost is not retried: the caller learns it may or may not have happened")
    func ambiguousDelete() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        queue.sync {
            replica.start()  // A first read of everything, which holds the quota slots (none).
            store.ranges.removeFirst().completion(.success(([], 5)))
        }
        let (outcome, sent) = change(replica, store, value: nil, expecting: .unchangedSince(7), answers: [{ _ in .failure(.ambiguous("lost")) }])
        #expect(sent.count == 1)
        if case .modifiedAt(_, 7)? = sent.first?.compares.first {} else {
            Issue.record("compared on the revision it was given: \(String(describing: sent.first?.compares))")
        }
        guard case .failed(.ambiguous)? = outcome else {
            Issue.record("\(String(describing: outcome))")
            return
        }
    }

    /// A replica on `store` resumed after revision 10 (a kept copy), and its watch.
    func watchingReplica(_ store: ScriptedEtcd, later: DelayedWork? = nil, clock: DaemonClock? = nil) throws -> (ClusterReplica, ScriptedEtcd.Watch) {
        let replica = try replica(store, later: later, clock: clock)
        queue.sync {
            replica.resume(from: 10_999)
            replica.start()
        }
        return (replica, try #require(queue.sync { store.watches.first }))
    }

    @Test("a race lost to another host is a conflict with the winner's value; the replica's revision stays the one it applied (a done compared on the winner's revision was a second done)")
    func lostRace() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        let theirs = value(replica, operation: "other-host-1-9")
        let (outcome, _) = change(replica, store, value: value(replica), answers: [
            { _ in .success(EtcdTransactionResult(succeeded: false, revision: 61, ranges: [[self.stored(theirs, revision: 60)]])) },
        ])
        guard case .conflict(let found?, revision: 60)? = outcome else {
            Issue.record("\(String(describing: outcome))")
            return
        }
        #expect(found.operation == "other-host-1-9")
        #expect(queue.sync { replica.appliedAt["otp:1"] } == nil, "only the watch sets it, when it brings the winner's change")
    }

    @Test("a due change on its way is not proposed again: not while unanswered, nor once committed until the watch brings the key's change; one that lost its race may be proposed again at once")
    func dueChangeProposedOnce() throws {
        let store = ScriptedEtcd()
        let (replica, watch) = try watchingReplica(store)
        let done = value(replica)
        try queue.sync {
            replica.proposeDue("otp:1", to: done, comparedOn: 5)
            replica.sendPending()
            #expect(store.transactions.count == 1 && replica.isProposingDue("otp:1"))
            replica.proposeDue("otp:1", to: done, comparedOn: 5)
            replica.sendPending()
            #expect(store.transactions.count == 1, "unanswered: not sent again")
            store.answer(.success(EtcdTransactionResult(succeeded: true, revision: 12, ranges: [])))
            replica.proposeDue("otp:1", to: done, comparedOn: 5)
            replica.sendPending()
            #expect(store.transactions.isEmpty && replica.isProposingDue("otp:1"), "committed, the watch has not brought it: not sent again")
            // Another key's change says nothing of this one.
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(done, revision: 11, key: "other"))], 11)
            #expect(replica.isProposingDue("otp:1"))
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(done, revision: 12))], 12)
            #expect(!replica.isProposingDue("otp:1"), "the watch brought it: decided")
            // A proposal that loses its race is no longer on its way.
            replica.proposeDue("otp:1", to: done, comparedOn: 12)
            replica.sendPending()
            let lost = try #require(store.transactions.first)
            #expect(lost.compares.count == 1)
            store.answer(.success(EtcdTransactionResult(succeeded: false, revision: 14, ranges: [[self.stored(value(replica, operation: "other-host-1-9"), revision: 13)]])))
            #expect(!replica.isProposingDue("otp:1"))
        }
    }

    @Test("after a restart from the local copy, which keeps no writers, the host reads them from etcd and proposes its own countdowns' due changes at once again; a writer the watch brought first stands; a failed read is asked again a second later")
    func writersAfterRestart() throws {
        let store = ScriptedEtcd()
        let later = DelayedWork(queue: queue)
        let (replica, watch) = try watchingReplica(store, later: later)
        let due = time.clock.now()
        let mine = value(replica), theirs = value(replica, operation: "other-host~1-1")
        try queue.sync {
            #expect(store.ranges.map(\.prefix) == ["/countdownd/"], "one read: the quota slots and the writers")
            #expect(!replica.proposes("otp:1", dueAt: due, now: due), "the writer unknown: the grace first")
            store.ranges.removeLast().completion(.failure(.unreachable("down")))
            #expect(store.ranges.isEmpty, "asked again later, not at once")
            _ = later.runDue(now: due.advanced(byMilliseconds: 999))
            #expect(store.ranges.isEmpty)
            _ = later.runDue(now: due.advanced(byMilliseconds: 1000))
            let read = try #require(store.ranges.last)
            #expect(read.prefix == "/countdownd/")
            // The watch brings another host's change of "b" before the read answers.
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(theirs, revision: 11, key: "b"))], 11)
            store.ranges.removeLast().completion(.success((
                [stored(mine, revision: 9), stored(mine, revision: 12, key: "b"), stored(theirs, revision: 8, key: "c")], 12
            )))
            #expect(replica.writers["otp:1"] == replica.hostID && replica.writers["c"] == "other-host")
            #expect(replica.writers["b"] == "other-host", "the watch's writer stands")
            #expect(replica.proposes("otp:1", dueAt: due, now: due), "its own: at once")
        }
    }

    @Test("the copy knows it is behind etcd while its watch is not running or has brought no change made since it started, while it has changes to apply, and once a change etcd committed for it has been missing a second; not before, and not once the watch brings it")
    func knowsItIsBehind() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        #expect(queue.sync { replica.isBehind(now: time.clock.now()) }, "no watch yet")
        let watch = try queue.sync { () throws -> ScriptedEtcd.Watch in
            replica.resume(from: 10_999)
            replica.start()
            return try #require(store.watches.first)
        }
        let other = value(replica, operation: "other-host~1-1")
        queue.sync {
            let start = time.clock.now()
            #expect(replica.isBehind(now: start), "no change brought live yet: it may be replaying what it missed")
            // etcd's first answer: the watch was made at revision 12; then the history it
            // replays (11, sent when etcd was at 13), then revision 12, the watch's own.
            watch.onEvents([], 12)
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 11, key: "first"))], 13)
            #expect(replica.isBehind(now: start), "history replayed: older than the watch")
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 12, key: "second"))], 13)
            #expect(!replica.isBehind(now: start), "a change made when the watch was applied")
            replica.expectFromWatch(13)  // A heartbeat etcd committed at revision 13.
            #expect(!replica.isBehind(now: start.advanced(byNanoseconds: ClusterReplica.behindAfterNanoseconds - 1)))
            #expect(replica.isBehind(now: start.advanced(byNanoseconds: ClusterReplica.behindAfterNanoseconds)))
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 13))], 13)
            #expect(!replica.isBehind(now: start.advanced(byNanoseconds: ClusterReplica.behindAfterNanoseconds)), "brought")
            let many = (0..<300).map { EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: Int64(14 + $0), key: "k\($0)")) }
            watch.onEvents(many, 313)
            #expect(replica.isBehind(now: start), "changes brought, not applied yet")
            replica.continueCatchUp()
            #expect(!replica.isBehind(now: start))
            watch.onEnd(.failed(.unreachable("cut")))
            #expect(replica.isBehind(now: start), "the watch is being started again")
        }
    }

    @Test("taking over, a writer whose clock the heartbeats show 5 s behind this one's is given its 5 s: its countdown is proposed 2 s past the deadline it meant, not 3 s before it; a live writer's is taken over 30 s past due all the same")
    func takeOverAllowsForTheWritersClock() throws {
        let store = ScriptedEtcd()
        let (replica, watch) = try watchingReplica(store)
        let writer = "slow-host:/var/lib/countdownd"
        let theirs = value(replica, operation: writer + "~1-1")
        queue.sync {
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(theirs, revision: 11))], 11)
            // Four heartbeats, each arriving live, each written 5 s behind this host's clock.
            heartbeats(of: writer, behind: 5000, at: 12...15, through: watch)
            let lastHeard = time.clock.now()
            // Due (as this host reads the writer's deadline) when last heard; silent from then on.
            let due = lastHeard
            let meant = due.advanced(byMilliseconds: 5000 + 2000)
            #expect(!replica.proposes("otp:1", dueAt: due, now: meant.advanced(byNanoseconds: -1)), "not before the deadline the writer meant, plus the grace")
            #expect(replica.proposes("otp:1", dueAt: due, now: meant))
            // Heard again: live. Taken over only at the cap, counted from the deadline it meant.
            let beat = EtcdKeyValue(key: "/countdownd/.hosts/" + writer, value: Array(#"{"written_unix_ms":1}"#.utf8), createRevision: 12, modRevision: 16)
            time.advance(byMilliseconds: 33_000)  // Within the silence of the cap below.
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: beat)], 16)
            let cap = due.advanced(byMilliseconds: 5000).advanced(byNanoseconds: TakeOverPolicy.maximumWaitNanoseconds)
            #expect(!replica.proposes("otp:1", dueAt: due, now: cap.advanced(byNanoseconds: -1)))
            #expect(replica.proposes("otp:1", dueAt: due, now: cap), "live, but 30 s past the deadline it meant")
        }
    }

    @Test("taking over from a writer never measured (gone before four of its heartbeats came), a taker whose clock the heartbeats show 5 s ahead of the fleet allows those 5 s (without, it finished such a countdown 3 s early); the least lead over recent hosts counts, not one host far behind, nor one heard from long ago")
    func takeOverAllowsForTheTakersLeadWhenTheWriterIsUnmeasured() throws {
        let store = ScriptedEtcd()
        let (replica, watch) = try watchingReplica(store)
        let writer = "gone-host:/var/lib/countdownd", third = "third-host:/var/lib/countdownd", fourth = "fourth-host:/var/lib/countdownd"
        let theirs = value(replica, operation: writer + "~1-1")
        var revision: Int64 = 11
        /// Four heartbeats of `host`, arriving live now, written `behind` ms behind this host's clock.
        func beats(_ host: String, behind: Int64) {
            heartbeats(of: host, behind: behind, at: (revision + 1)...(revision + 4), through: watch)
            revision += 4
        }
        /// Whether the writer's countdown, due now as this host reads it, is proposed first
        /// `allowance` ms plus the grace later.
        func takenOverAfter(allowance: Int64) -> Bool {
            let due = time.clock.now()
            let first = due.advanced(byMilliseconds: allowance).advanced(byNanoseconds: TakeOverPolicy.graceNanoseconds)
            return !replica.proposes("otp:1", dueAt: due, now: first.advanced(byNanoseconds: -1)) && replica.proposes("otp:1", dueAt: due, now: first)
        }
        queue.sync {
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(theirs, revision: 11))], 11)
            // The writer is never heard from; the third host is, 5 s behind this one.
            beats(third, behind: 5000)
            // Past the silence since this host began listening: the writer counts as gone.
            time.advance(byMilliseconds: TakeOverPolicy.silenceNanoseconds / 1_000_000)
            #expect(takenOverAfter(allowance: 5000), "this host is 5 s ahead of the one it measured")
            // A fourth host on this host's clock: the least lead counts, 0.
            beats(fourth, behind: 0)
            #expect(takenOverAfter(allowance: 0), "one host far behind says nothing of the others")
            // A minute later, neither heard from since: nothing recent to go by.
            time.advance(byMilliseconds: Int64(ClockHeartbeat.samplesKept) * ClockHeartbeat.intervalNanoseconds / 1_000_000 + 1)
            beats(third, behind: 5000)
            #expect(takenOverAfter(allowance: 5000), "the fourth host's old samples no longer count")
        }
    }

    @Test("a host's id names its state directory one way however it was written (a trailing slash, `.`, `..`, doubled slashes, relative to the working directory), and leaves links as they are (systemd's DynamicUser= puts the state directory behind one)")
    func canonicalStateDirectory() throws {
        let names = ["/var/lib/countdownd", "/var/lib/countdownd/", "/var/lib/./countdownd", "/var//lib/countdownd", "/var/lib/x/../countdownd"].map(ClusterReplica.canonical)
        #expect(Set(names) == ["/var/lib/countdownd"], "\(names)")
        let workingDirectory = FileManager.default.currentDirectoryPath
        #expect(ClusterReplica.canonical("state/") == ClusterReplica.canonical(workingDirectory + "/state"))
        #expect(ClusterReplica.canonical("") == "")
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("cd-canonical-\(getpid())").path
        try FileManager.default.createDirectory(atPath: base + "/private/state", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        try FileManager.default.createSymbolicLink(atPath: base + "/state", withDestinationPath: base + "/private/state")
        #expect(ClusterReplica.canonical(base + "/state") == base + "/state", "the link, not where it leads: the id earlier versions used")
    }

    @Test("group commit: clients' changes go before due changes waiting with them, so a burst of deadlines never makes a client's change wait its turn; no transaction waits longer than a client's 3 s for its answer, removals included")
    func clientsFirst() throws {
        let store = ScriptedEtcd()
        let (replica, watch) = try watchingReplica(store)
        let other = value(replica, operation: "other-host~1-1")
        try queue.sync {
            store.ranges.removeFirst().completion(.success(([], 10)))  // The read after the resume: no slot held.
            // 300 countdowns this host holds, all finished and due for removal.
            watch.onEvents((0..<300).map { EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 11, key: "d\($0)")) }, 11)
            replica.continueCatchUp()
            for index in 0..<300 { replica.proposeDue("d\(index)", to: nil, comparedOn: 11) }
            replica.change("client", to: value(replica), expecting: .absent) { _ in }
            replica.sendPending()
            #expect(store.transactions.count == 2, "two in flight")
            let first = try #require(store.transactions.first)
            guard case .absent(let key)? = first.compares.first else {
                Issue.record("the first compare: \(String(describing: first.compares.first))")
                return
            }
            #expect(key == "/countdownd/client", "the client's change first, before 300 due ones")
            #expect(store.transactions.allSatisfy { $0.timeoutMilliseconds <= ClusterReplica.changeTimeoutMilliseconds }, "\(store.transactions.map(\.timeoutMilliseconds))")
        }
    }

    @Test("a host whose copy is behind its watch takes over nobody's due change, past the grace or not; its own it still proposes")
    func noTakeOverWhileBehind() throws {
        let store = ScriptedEtcd()
        let (replica, watch) = try watchingReplica(store)
        let other = value(replica, operation: "other-host~1-1")
        let mine = value(replica)
        queue.sync {
            // More than a slice at once: the copy applies 256 and is behind by the rest.
            let events = (0..<300).map { index in
                EtcdWatchEvent(kind: .put, keyValue: stored(index == 0 ? mine : other, revision: Int64(11 + index), key: "k\(index)"))
            }
            watch.onEvents(events, 310)
            let due = time.clock.now()
            let later = due.advanced(byNanoseconds: TakeOverPolicy.graceNanoseconds + TakeOverPolicy.silenceNanoseconds)
            #expect(replica.isCatchingUp)
            #expect(!replica.proposes("k1", dueAt: due, now: later), "behind: another host's is not taken over")
            #expect(replica.proposes("k0", dueAt: due, now: due), "its own, at once")
            replica.continueCatchUp()
            #expect(!replica.isCatchingUp)
            // A third host on this host's clock: this host knows where its clock stands.
            heartbeats(of: "third-host:/srv", at: 311...314, through: watch)
            #expect(replica.proposes("k1", dueAt: due, now: later), "caught up, the writer never heard from: taken over past the grace")
        }
    }

    @Test("a host that has measured nobody's clock recently (just started, everyone else stalled or gone), or whose own wall clock was just set, takes over no gone writer's due change until it has measured for 8 s, or the cap: a taker 5 s ahead finished such countdowns up to 3 s early")
    func noTakeOverWithoutAClockToGoBy() throws {
        let store = ScriptedEtcd()
        let (replica, watch) = try watchingReplica(store)
        let other = value(replica, operation: "gone-host~1-1")
        queue.sync {
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 11, key: "k"))], 11)
            let due = time.clock.now()
            let past = due.advanced(byNanoseconds: TakeOverPolicy.graceNanoseconds + TakeOverPolicy.silenceNanoseconds)
            let cap = due.advanced(byNanoseconds: TakeOverPolicy.maximumWaitNanoseconds)
            #expect(!replica.proposes("k", dueAt: due, now: past), "nobody measured: not past the grace and the silence")
            #expect(!replica.proposes("k", dueAt: due, now: cap.advanced(byNanoseconds: -1)))
            #expect(replica.proposes("k", dueAt: due, now: cap), "at the cap, whatever the clocks")
            heartbeats(of: "third-host:/srv", at: 12...15, through: watch)
            #expect(replica.proposes("k", dueAt: due, now: past), "a third host measured on this clock: taken over past the grace")
            replica.wallClockStepped()
            #expect(!replica.proposes("k", dueAt: due, now: past), "this host's clock was set: every offset is measured afresh")
            heartbeats(of: "third-host:/srv", at: 16...19, through: watch)
            #expect(replica.proposes("k", dueAt: due, now: past))
            // Stepped again, and nobody heard from since: nobody else is there to measure.
            replica.wallClockStepped()
            let stepped = time.clock.now()
            let measured = stepped.advanced(byNanoseconds: ClockHeartbeat.measuringNanoseconds)
            #expect(!replica.proposes("k", dueAt: due, now: measured.advanced(byNanoseconds: -1)))
            #expect(replica.proposes("k", dueAt: due, now: measured), "measured 8 s for nothing: no allowance, taken over")
        }
    }

    @Test("the watch resumes at the kept revision, numbers each change by its revision and its place in its transaction, applies each once, in order, and releases a waiter at its revision")
    func watchOrder() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        final class Seen: @unchecked Sendable {
            var applied: [(String, UInt64)] = []
            var released: [Bool] = []
        }
        let seen = Seen()
        queue.sync {
            replica.apply = { key, _, sequence in seen.applied.append((key, sequence)) }
            // The copy had applied the first two changes of revision 10's transaction.
            replica.resume(from: 10_001)
            replica.start()
            replica.afterRevision(12) { seen.released.append($0) }
        }
        let watch = try #require(queue.sync { store.watches.first })
        #expect(watch.from == 10, "resumed at the kept revision, which may have more changes")
        let other = value(replica, operation: "other-host-1-1")
        func put(_ revision: Int64, _ key: String) -> EtcdWatchEvent {
            EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: revision, key: key))
        }
        queue.sync {
            // The stream repeats revision 10: its first two are skipped, its third is new.
            watch.onEvents([put(10, "a"), put(10, "b"), put(10, "c"), put(11, "a")], 11)
            #expect(seen.released.isEmpty, "revision 12 is not reached yet")
            // One transaction of three changes, in two answers of the stream.
            watch.onEvents([put(12, "a"), put(12, "b")], 12)
            watch.onEvents([put(12, "c")], 12)
        }
        queue.sync {
            #expect(seen.applied.map(\.1) == [10_002, 11_000, 12_000, 12_001, 12_002], "each change once, in order: \(seen.applied)")
            #expect(seen.applied.map(\.0) == ["c", "a", "a", "b", "c"])
            #expect(seen.released == [true])
            #expect(replica.revision == 12)
        }
    }

    @Test("a backlog from the watch is applied in slices of about 256, one a batch, each ending between revisions, numbered as one; a waiter is released once its revision is applied")
    func catchUpInSlices() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        final class Seen: @unchecked Sendable {
            var applied: [UInt64] = []
            var released = 0
        }
        let seen = Seen()
        queue.sync {
            replica.apply = { _, _, sequence in seen.applied.append(sequence) }
            replica.resume(from: 10_999)
            replica.start()
            replica.afterRevision(20) { if $0 { seen.released += 1 } }
        }
        let watch = try #require(queue.sync { store.watches.first })
        let other = value(replica, operation: "other-host-1-1")
        // 600 changes: 300 of one transaction (revision 11), then one each at 12…311.
        let events = (0..<300).map { EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 11, key: "t\($0)")) }
            + (12..<312).map { EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: Int64($0), key: "s\($0)")) }
        queue.sync {
            watch.onEvents(events, 311)
            #expect(seen.applied.count == 300 && replica.isCatchingUp, "one slice in the batch that received them, to the end of the transaction")
            #expect(seen.released == 0, "revision 20 is not applied yet")
            #expect(replica.revision == 11)
            replica.continueCatchUp()
            #expect(seen.applied.count == 556 && seen.released == 1)
            replica.continueCatchUp()
            #expect(seen.applied.count == 600 && !replica.isCatchingUp)
        }
        #expect(seen.applied[0] == 11_000 && seen.applied[299] == 11_299, "one transaction's places run on across slices")
        #expect(seen.applied[300] == 12_000 && seen.applied.last == 311_000)
        #expect(zip(seen.applied, seen.applied.dropFirst()).allSatisfy { $0 < $1 })
    }

    @Test("a START … REPLACE already applied still takes its two places when the watch repeats its revision: the changes after it are numbered as every other host numbers them")
    func repeatedReplacementKeepsPlaces() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        final class Seen: @unchecked Sendable { var applied: [(String, UInt64)] = [] }
        let seen = Seen()
        queue.sync {
            replica.apply = { key, _, sequence in seen.applied.append((key, sequence)) }
            // The copy applied revision 20's replacement of a (20000 and 20001), then stopped.
            replica.resume(from: 20_001)
            replica.start()
        }
        let watch = try #require(queue.sync { store.watches.first })
        var replacement = value(replica, operation: "other-host-1-1")
        replacement.replacedRemainingMilliseconds = 42_000
        let plain = value(replica, operation: "other-host-1-2")
        queue.sync {
            watch.onEvents([
                EtcdWatchEvent(kind: .put, keyValue: stored(replacement, revision: 20, key: "a")),
                EtcdWatchEvent(kind: .put, keyValue: stored(plain, revision: 20, key: "b")),
                EtcdWatchEvent(kind: .put, keyValue: stored(plain, revision: 20, key: "c")),
            ], 20)
        }
        #expect(seen.applied.map(\.0) == ["b", "c"], "a was applied already; b is not lost")
        #expect(seen.applied.map(\.1) == [20_002, 20_003])
    }

    @Test("group commit: changes proposed in one batch go as one transaction; the one whose compare failed is a conflict and the others are sent again at once and commit")
    func groupCommit() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        final class Outcomes: @unchecked Sendable { var byKey: [String: ClusterReplica.ChangeOutcome] = [:] }
        let outcomes = Outcomes()
        let mine = value(replica), theirs = value(replica, operation: "other-host-1-9")
        try queue.sync {
            for key in ["a", "b", "c"] {
                replica.change(key, to: mine, expecting: key == "b" ? .unchangedSince(5) : .absent) { outcomes.byKey[key] = $0 }
            }
            // A second change of "a" in the same batch cannot share its transaction.
            replica.change("a", to: value(replica), expecting: .absent) { outcomes.byKey["a2"] = $0 }
            replica.sendPending()
            #expect(store.transactions.count == 2, "one transaction for a, b, c; one for the second change of a")
            let first = store.transactions.removeFirst()
            #expect(first.compares.count == 3 && first.success.count == 3 && first.failure.count == 3, "every key compared, put, and read back on failure")
            // b was changed by another host since revision 5: the rest is sent again.
            first.completion(.success(EtcdTransactionResult(succeeded: false, revision: 70, ranges: [[], [self.stored(theirs, revision: 69, key: "b")], []])))
            if case .conflict(let found?, revision: 69)? = outcomes.byKey["b"] {
                #expect(found.operation == "other-host-1-9")
            } else {
                Issue.record("b lost its race: \(String(describing: outcomes.byKey["b"]))")
            }
            #expect(outcomes.byKey["a"] == nil && outcomes.byKey["c"] == nil, "their compares held: not failed")
            let again = try #require(store.transactions.last, "a and c sent again at once")
            #expect(again.compares.count == 2)
            again.completion(.success(EtcdTransactionResult(succeeded: true, revision: 71, ranges: [])))
            store.transactions.removeLast()
            for key in ["a", "c"] {
                guard case .committed(71)? = outcomes.byKey[key] else {
                    Issue.record("\(key): \(String(describing: outcomes.byKey[key]))")
                    continue
                }
            }
            let second = try #require(store.transactions.first)
            #expect(second.compares.count == 1)
            second.completion(.success(EtcdTransactionResult(succeeded: false, revision: 71, ranges: [[self.stored(mine, revision: 71, key: "a")]])))
            store.transactions.removeFirst()
        }
        // The second change of a finds the first one's value: a conflict, judged again by its caller.
        guard case .conflict(_, revision: 71)? = outcomes.byKey["a2"] else {
            Issue.record("\(String(describing: outcomes.byKey["a2"]))")
            return
        }
    }

    @Test("quota slots: a creation claims its slots in its own transaction (each compared absent); a slot another host took makes it a conflict and frees the claim; a removal deletes its slots; slot changes take no numbers; a restart reads the slots and applies the watch's newer ones")
    func quotaSlots() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store, limits: EngineConfiguration(maximumCountdowns: 10, maximumCountdownsPerOwner: 5))
        final class Seen: @unchecked Sendable {
            var applied: [(String, UInt64)] = []
            var outcomes: [ClusterReplica.ChangeOutcome] = []
        }
        let seen = Seen()
        let other = value(replica, operation: "other-host-1-1")
        func slot(_ key: String, holder: String, revision: Int64) -> EtcdKeyValue {
            EtcdKeyValue(key: "/countdownd/" + key, value: Array(holder.utf8), createRevision: revision, modRevision: revision)
        }
        try queue.sync {
            replica.apply = { key, _, sequence in seen.applied.append((key, sequence)) }
            replica.resume(from: 10_999)
            replica.start()
            let early = #expect(throws: ProtocolError.self, "no creation is judged before the slots are read") { try replica.claimSlots(for: 1000) }
            #expect(early?.code == .unavailable)
            let watch = try #require(store.watches.first, "the watch starts at once: reads go on")
            let read = try #require(store.ranges.first)
            #expect(read.prefix == "/countdownd/" && store.ranges.count == 1, "one read: the quota slots and the writers")
            // A removal now could not say which slots it frees: refused, nothing sent.
            replica.change("1000/old", to: nil, expecting: .unchangedSince(8)) { seen.outcomes.append($0) }
            replica.sendPending()
            guard case .failed(.unreachable)? = seen.outcomes.first, store.transactions.isEmpty else {
                Issue.record("a removal before the slots' read: \(seen.outcomes), \(store.transactions.count) sent")
                return
            }
            seen.outcomes.removeAll()
            // The watch brings revision 12 (a creation with its two slots) before the read
            // answers at 11, where 1000/old holds all/3 and 1000/0.
            watch.onEvents([
                EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 12, key: "1000/new")),
                EtcdWatchEvent(kind: .put, keyValue: slot(".slots/all/4", holder: "1000/new", revision: 12)),
                EtcdWatchEvent(kind: .put, keyValue: slot(".slots/1000/1", holder: "1000/new", revision: 12)),
                EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 12, key: "tea")),
            ], 12)
            #expect(seen.applied.map(\.1) == [12_000, 12_001], "slots take no numbers: \(seen.applied)")
            read.completion(.success((
                [slot(".slots/all/3", holder: "1000/old", revision: 8), slot(".slots/1000/0", holder: "1000/old", revision: 8)], 11
            )))
            #expect(replica.quotaCounts.heldFleetWide == 2, "all/3 from the read, all/4 from the watch: \(replica.quotaCounts)")

            // A creation for uid 1000: a daemon-wide and an own slot, neither held.
            let claimed = try replica.claimSlots(for: 1000)
            #expect(claimed.count == 2 && !claimed.contains { [".slots/all/3", ".slots/all/4", ".slots/1000/0", ".slots/1000/1"].contains($0.key) })
            replica.change("1000/tea", to: other, expecting: .absent, claiming: claimed) { seen.outcomes.append($0) }
            replica.sendPending()
            let creation = try #require(store.transactions.first)
            #expect(creation.compares.count == 3 && creation.success.count == 3 && creation.failure.count == 3)
            for (index, compare) in creation.compares.dropFirst().enumerated() {
                guard case .absent(let key) = compare, key == "/countdownd/" + claimed[index].key else {
                    Issue.record("slot \(index) compared as \(compare)")
                    continue
                }
            }
            for (index, operation) in creation.success.dropFirst().enumerated() {
                guard case .put(let key, let holder, nil) = operation, key == "/countdownd/" + claimed[index].key, holder == Array("1000/tea".utf8) else {
                    Issue.record("slot \(index) written as \(operation)")
                    continue
                }
            }
            // Another host took the second slot first: the countdown's compare held, the slot's did not.
            store.answer(.success(EtcdTransactionResult(succeeded: false, revision: 30, ranges: [[], [], [slot(claimed[1].key, holder: "1000/else", revision: 29)]])))
            guard case .conflict(nil, revision: 30)? = seen.outcomes.first else {
                Issue.record("a taken slot: \(seen.outcomes)")
                return
            }
            #expect(replica.quotaCounts.claimed == 0, "the claim ends with the change")
            #expect(store.transactions.isEmpty, "not sent again: it is judged again by its caller")

            // Removing 1000/old deletes its slots with it.
            replica.change("1000/old", to: nil, expecting: .unchangedSince(8)) { _ in }
            replica.sendPending()
            let removal = try #require(store.transactions.first)
            let deleted = removal.success.compactMap { operation -> String? in
                if case .delete(let key) = operation { return key }
                return nil
            }
            #expect(Set(deleted) == ["/countdownd/1000/old", "/countdownd/.slots/all/3", "/countdownd/.slots/1000/0"], "\(deleted)")
            #expect(removal.compares.count == 1 && removal.failure.count == 1, "a freed slot needs no compare: the countdown's holds them")
        }
    }

    @Test("group commit: at most 128 changes in one transaction, and a change that waits past its deadline unsent fails as surely not made")
    func groupCommitLimits() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        final class Outcomes: @unchecked Sendable { var all: [ClusterReplica.ChangeOutcome] = [] }
        let outcomes = Outcomes()
        queue.sync {
            for index in 0..<300 {
                replica.change("k\(index)", to: value(replica), expecting: .absent) { outcomes.all.append($0) }
            }
            replica.sendPending()
            #expect(store.transactions.map(\.compares.count) == [128, 128], "two in flight at most, 128 each")
            // The rest waits; past its deadline, unsent, it fails as not made.
            replica.change("late", to: value(replica), expecting: .absent, deadline: SystemClock.now()) { outcomes.all.append($0) }
            replica.sendPending()
            #expect(outcomes.all.count == 1)
            if case .failed(.unreachable)? = outcomes.all.first {} else {
                Issue.record("\(String(describing: outcomes.all.first))")
            }
            store.answer(.success(EtcdTransactionResult(succeeded: true, revision: 5, ranges: [])))
            #expect(store.transactions.map(\.compares.count) == [128, 44], "the rest goes as soon as a place is free")
        }
    }

    @Test("clock offsets come from other hosts' heartbeats that arrive live: the smallest of the last 64 counts, so one held back by an outage is no offset; countdown changes, history and this host's own heartbeat are no samples")
    func skewFromHeartbeats() throws {
        let store = ScriptedEtcd()
        let (replica, watch) = try watchingReplica(store)
        func beat(_ host: String, writtenAgo: Int64, revision: Int64) -> EtcdWatchEvent {
            let written = DaemonClock.system.mapping().unixMilliseconds - writtenAgo
            let value = Array(#"{"written_unix_ms":\#(written)}"#.utf8)
            return EtcdWatchEvent(kind: .put, keyValue: EtcdKeyValue(key: "/countdownd/.hosts/" + host, value: value, createRevision: revision, modRevision: revision))
        }
        final class Applied: @unchecked Sendable { var keys: [String] = [] }
        let applied = Applied()
        queue.sync {
            replica.apply = { key, _, _ in applied.keys.append(key) }
            // A countdown written by another host 90 s ago, arriving live: not a sample.
            var old = value(replica, operation: "other-host-1-1")
            old.writtenUnixMilliseconds = DaemonClock.system.mapping().unixMilliseconds - 90_000
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(old, revision: 11))], 11)
            #expect(replica.skews.isEmpty)
            // History (not the newest when sent), then a live heartbeat.
            watch.onEvents([beat("b:/var/lib/countdownd", writtenAgo: 5000, revision: 12), beat("b:/var/lib/countdownd", writtenAgo: 10, revision: 13)], 13)
            #expect(replica.skews.count == 1 && abs(replica.largestSkewMilliseconds) < 1000, "\(replica.largestSkewMilliseconds)")
            // One held back 70 s by an outage: one sample among the prompt ones.
            watch.onEvents([beat("b:/var/lib/countdownd", writtenAgo: 70_000, revision: 14)], 14)
            #expect(abs(replica.largestSkewMilliseconds) < 1000, "\(replica.largestSkewMilliseconds)")
            // A host whose clock is 5 s behind: every sample says so.
            for revision in Int64(15)..<20 {
                watch.onEvents([beat("c:/srv", writtenAgo: 5000, revision: revision)], revision)
            }
            let estimate = try? #require(replica.skews["c:/srv"]?.estimate)
            #expect(estimate.map { abs($0 - 5000) < 1000 } == true, "\(String(describing: estimate))")
            // This host's own heartbeat is no sample, and no heartbeat reaches the engine.
            watch.onEvents([beat(replica.hostID, writtenAgo: 9000, revision: 21)], 21)
            #expect(replica.skews.count == 2)
            #expect(applied.keys == ["otp:1"], "heartbeats are not countdowns: \(applied.keys)")
            #expect(replica.revision == 21)
        }
    }

    @Test("a heartbeat in a backlog is timed from when the watch brought it, not when a later slice applied it: a restarted host catching up read other hosts' clocks 71 s off")
    func heartbeatInABacklogTimedAtArrival() throws {
        let store = ScriptedEtcd()
        let clock = time.clockWithMovingWall
        let (replica, watch) = try watchingReplica(store, clock: clock)
        let other = value(replica, operation: "other-host~1-1")
        let host = "b:/var/lib/countdownd"
        queue.sync {
            // 2,000 changes, a backlog each delivery applies one slice of (256)...
            watch.onEvents((0..<2_000).map { EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 11 + Int64($0), key: "k\($0)")) }, 2_010)
            // ...then heartbeats, each written just now on this clock and the newest change when
            // the watch sent it: live samples of an offset of 0, behind the backlog.
            for revision in Int64(2_011)..<2_011 + Int64(ClockHeartbeat.samplesTrusted) {
                let written = Array(#"{"written_unix_ms":\#(clock.mapping().unixMilliseconds)}"#.utf8)
                watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: EtcdKeyValue(key: "/countdownd/.hosts/" + host, value: written, createRevision: revision, modRevision: revision))], revision)
            }
            #expect(replica.isCatchingUp && replica.skews.isEmpty, "the heartbeats wait in the backlog")
        }
        time.advance(byMilliseconds: 30_000)  // The backlog's slices are applied 30 s later.
        try queue.sync {
            while replica.isCatchingUp { replica.continueCatchUp() }
            let estimate = try #require(replica.skews[host]?.estimate)
            #expect(abs(estimate) < 1000, "an offset of \(estimate) ms")
            #expect(replica.largestSkewMilliseconds == estimate)
        }
    }

    @Test("heartbeats: at most one a second and one in flight; after one fails, a read must succeed before the next is written")
    func heartbeatPacing() throws {
        let store = ScriptedEtcd()
        let heartbeat = ClockHeartbeat(client: store, prefix: "/countdownd/", hostID: "me:/state", logger: Logger(threshold: .error, environment: [:]))
        let start = SystemClock.now()
        func at(_ milliseconds: Int64) -> Instant { start.advanced(byMilliseconds: milliseconds) }
        func isPut(_ transaction: ScriptedEtcd.Transaction) -> Bool {
            if case .put("/countdownd/.hosts/me:/state", _, _)? = transaction.success.first { return true }
            return false
        }
        heartbeat.beat(now: at(0))
        #expect(store.transactions.count == 1 && isPut(store.transactions[0]))
        heartbeat.beat(now: at(3000))
        #expect(store.transactions.count == 1, "one in flight at most")
        store.answer(.failure(.ambiguous("timed out")))
        heartbeat.beat(now: at(3000))
        #expect(store.transactions.count == 1 && !isPut(store.transactions[0]), "after a failure, a read first")
        store.answer(.success(EtcdTransactionResult(succeeded: true, revision: 5, ranges: [[]])))
        heartbeat.beat(now: at(3999))
        #expect(store.transactions.isEmpty, "not due: 1 s after the last")
        heartbeat.beat(now: at(4000))
        #expect(store.transactions.count == 1 && isPut(store.transactions[0]))
    }

    @Test("with no client change to notice it, a watch that does not bring this host's heartbeat within 2 s of its commit is moved to another member (a healed partition, a stopped member); one that brings each is left")
    func silentWatchNoticedByHeartbeats() throws {
        for brings in [true, false] {
            let store = ScriptedEtcd()
            let later = DelayedWork(queue: queue)
            let (replica, watch) = try watchingReplica(store, later: later)
            #expect(watch.handle.endpoint == store.endpoints[0])
            final class Committed: @unchecked Sendable { var revisions: [Int64] = [] }
            let committed = Committed()
            // 3 s of housekeeping, every heartbeat committed at once: the first at 0.2 s, then
            // one a second.
            for _ in 0..<15 {
                time.advance(byMilliseconds: 200)
                queue.sync {
                    _ = later.runDue(now: time.clock.now())
                    while let transaction = store.transactions.first,
                          case .put(let key, _, _)? = transaction.success.first, key == "/countdownd/.hosts/" + replica.hostID {
                        let revision = Int64(11 + committed.revisions.count)
                        committed.revisions.append(revision)
                        store.answer(.success(EtcdTransactionResult(succeeded: true, revision: revision, ranges: [])))
                        if brings {
                            let value = Array(#"{"written_unix_ms":1}"#.utf8)
                            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: EtcdKeyValue(key: key, value: value, createRevision: 11, modRevision: revision))], revision)
                        }
                    }
                }
            }
            #expect(queue.sync { committed.revisions } == [11, 12, 13], "a heartbeat at 0.2 s, 1.2 s and 2.2 s")
            if brings {
                #expect(queue.sync { (store.cancelled, store.currentEndpoint, replica.revision) } == (0, 0, 13), "a watch that brings them is left")
            } else {
                #expect(queue.sync { (store.cancelled, store.currentEndpoint, replica.revision) } == (1, 1, 10), "moved at 2.2 s, once, to the next member")
            }
        }
    }

    @Test("etcd answering again after an unanswered heartbeat moves a watch that brought nothing since that heartbeat was sent, at once, to the next member (a partition: TCP's back-off kept such a watch silent 25-95 s after the heal); not before it answers (a busy etcd leaves both waiting), not a watch that brought anything meanwhile, and not one whose changes wait in the backlog")
    func answeredAgainMovesSilentWatch() throws {
        enum Case: CaseIterable { case silent, brings, backlog }
        for kind in Case.allCases {
            let store = ScriptedEtcd()
            let later = DelayedWork(queue: queue)
            let (replica, watch) = try watchingReplica(store, later: later)
            if kind == .backlog {
                // Brought before the heartbeat is sent: 300 changes, of which the watch's delivery
                // applies one slice; the rest wait for the next batches, which nobody runs here.
                let other = value(replica, operation: "other-host~1-1")
                queue.sync {
                    let many = (0..<300).map { EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: Int64(11 + $0), key: "k\($0)")) }
                    watch.onEvents(many, 310)
                    #expect(replica.isCatchingUp)
                }
            }
            time.advance(byMilliseconds: 200)
            queue.sync {
                _ = later.runDue(now: time.clock.now())
                #expect(store.transactions.count == 1, "the first heartbeat, in flight")
            }
            time.advance(byMilliseconds: 500)
            if kind == .brings {
                let value = Array(#"{"written_unix_ms":1}"#.utf8)
                let key = "/countdownd/.hosts/other:/state"
                queue.sync { watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: EtcdKeyValue(key: key, value: value, createRevision: 11, modRevision: 11))], 11) }
            }
            time.advance(byMilliseconds: 500)
            queue.sync {
                store.answer(.failure(.ambiguous("timed out")))
                #expect(store.cancelled == 0, "\(kind): unanswered, but not answering again yet")
            }
            time.advance(byMilliseconds: 1000)
            queue.sync {
                _ = later.runDue(now: time.clock.now())  // The read that confirms etcd answers.
                #expect(store.transactions.count == 1)
                store.answer(.success(EtcdTransactionResult(succeeded: true, revision: 11, ranges: [[]])))
            }
            switch kind {
            case .silent:
                #expect(queue.sync { (store.cancelled, store.currentEndpoint) } == (1, 1), "silent since the heartbeat was sent: moved once etcd answers, to the next member")
            case .brings:
                #expect(queue.sync { (store.cancelled, store.currentEndpoint) } == (0, 0), "it brought another host's heartbeat after this one was sent: left")
            case .backlog:
                #expect(queue.sync { (store.cancelled, store.currentEndpoint) } == (0, 0), "changes waiting in the backlog: this host is behind the watch, which is left")
            }
        }
    }

    @Test("cut off, the copy says it is behind: once etcd has answered no heartbeat for 2.5 s (not before), until etcd answers again")
    func outOfTouchIsBehind() throws {
        let store = ScriptedEtcd()
        let later = DelayedWork(queue: queue)
        let (replica, watch) = try watchingReplica(store, later: later)
        let start = time.clock.now()
        func at(_ milliseconds: Int64) -> Instant { start.advanced(byMilliseconds: milliseconds) }
        time.advance(byMilliseconds: 200)
        queue.sync { _ = later.runDue(now: time.clock.now()) }
        // The watch brings another host's change after the heartbeat was sent (so it is not
        // moved): only this host's own calls go unanswered.
        time.advance(byMilliseconds: 300)
        let other = value(replica, operation: "other-host~1-1")
        queue.sync {
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 11))], 11)
            store.answer(.failure(.ambiguous("timed out")))
            #expect(!replica.isBehind(now: at(200 + 2500)), "2.5 s after the first heartbeat was sent")
            #expect(replica.isBehind(now: at(200 + 2501)))
        }
        time.advance(byMilliseconds: 2500)  // 3 s: the read that confirms etcd answers again.
        queue.sync {
            _ = later.runDue(now: time.clock.now())
            #expect(replica.isBehind(now: time.clock.now()))
            // etcd answers at revision 13: what the outage held back comes through the watch.
            store.answer(.success(EtcdTransactionResult(succeeded: true, revision: 13, ranges: [[]])))
            #expect(store.cancelled == 0, "the watch brought a change during the outage: left")
            #expect(replica.isBehind(now: time.clock.now()), "answered again at 13, the copy at 11")
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 13, key: "later"))], 13)
            #expect(!replica.isBehind(now: time.clock.now()), "the copy reached etcd's revision of the answer")
        }
    }

    @Test("a watch that trickles (a flapping link's stream answers now and then, moving the copy nowhere) is moved once the copy has stood short of the revision etcd answered at after an outage for 3 s; one that reaches it is left, and one that keeps moving the copy on (a burst's) too")
    func tricklingWatchMoved() throws {
        for reaches in [false, true] {
            let store = ScriptedEtcd()
            let later = DelayedWork(queue: queue)
            let (replica, _) = try watchingReplica(store, later: later)
            let other = value(replica, operation: "other-host~1-1")
            time.advance(byMilliseconds: 200)
            queue.sync {
                _ = later.runDue(now: time.clock.now())  // The first heartbeat, then no answer.
                store.answer(.failure(.ambiguous("timed out")))
            }
            time.advance(byMilliseconds: 1000)
            queue.sync {
                _ = later.runDue(now: time.clock.now())  // The read: etcd answers again, at 40.
                store.answer(.success(EtcdTransactionResult(succeeded: true, revision: 40, ranges: [[]])))
                #expect(store.cancelled == 1, "silent through the outage: moved at once")
            }
            let second = try #require(queue.sync { store.watches.last })
            // The new watch trickles: an answer every half second that moves the copy nowhere (or,
            // when it reaches, revision 40 after 1.5 s).
            for step in 0..<8 {
                time.advance(byMilliseconds: 500)
                let brought: Int64? = reaches && step == 2 ? 40 : nil
                queue.sync {
                    second.onEvents(brought.map { [EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: $0, key: "k\($0)"))] } ?? [], 40)
                    _ = later.runDue(now: time.clock.now())
                    // Heartbeats refused (nothing committed for the watch to bring, so no other
                    // rule moves it), the reads after them answered.
                    store.answerHeartbeats(refusingPutsWith: .server(code: 14, message: "etcdserver: no leader"), readsAt: 40)
                }
                if brought != nil { break }
            }
            if reaches {
                #expect(queue.sync { store.cancelled } == 1, "it reached etcd's revision: left")
            } else {
                #expect(queue.sync { store.cancelled } == 2, "short of 40 for 3 s: moved again")
            }
        }
    }

    @Test("a watch seconds behind etcd in a burst, moving the copy on, is not moved for the revision etcd answered at after a heartbeat went unanswered")
    func busyWatchNotMovedForReach() throws {
        let store = ScriptedEtcd()
        let later = DelayedWork(queue: queue)
        let (replica, watch) = try watchingReplica(store, later: later)
        let other = value(replica, operation: "other-host~1-1")
        time.advance(byMilliseconds: 200)
        queue.sync {
            _ = later.runDue(now: time.clock.now())
            store.answer(.failure(.ambiguous("timed out")))
        }
        // The watch keeps bringing changes, one revision every 100 ms, so it is not moved when
        // etcd answers again (at 1,000), nor for the copy staying short of that for 5 s.
        var revision: Int64 = 10
        for _ in 0..<60 {
            time.advance(byMilliseconds: 100)
            revision += 1
            queue.sync {
                watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: revision, key: "k\(revision)"))], 1_000)
                _ = later.runDue(now: time.clock.now())
                store.answerHeartbeats(refusingPutsWith: .server(code: 14, message: "etcdserver: no leader"), readsAt: 1_000)
            }
        }
        queue.sync {
            #expect(store.cancelled == 0, "moving the copy on: left")
            #expect(replica.isBehind(now: time.clock.now()), "short of etcd's revision: behind")
        }
    }

    @Test("a heartbeat etcd refuses (no leader, a full database) is an answer: no outage begins, the copy is not out of touch, and the watch is left when the next read answers")
    func refusedHeartbeatIsAnAnswer() throws {
        let store = ScriptedEtcd()
        let later = DelayedWork(queue: queue)
        let (replica, watch) = try watchingReplica(store, later: later)
        let other = value(replica, operation: "other-host~1-1")
        queue.sync { watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 11))], 11) }
        for _ in 0..<4 {
            time.advance(byMilliseconds: 1000)
            queue.sync {
                _ = later.runDue(now: time.clock.now())
                store.answerHeartbeats(refusingPutsWith: .server(code: 8, message: "etcdserver: mvcc: database space exceeded"), readsAt: 11)
            }
        }
        queue.sync {
            #expect(store.cancelled == 0, "never moved")
            #expect(!replica.isBehind(now: time.clock.now()), "refusals are answers: not out of touch")
        }
    }

    @Test("a change answered before the copy held it (its watch too slow for the change's time) makes reads say the copy is behind until the watch brings it: a client's next read may not show its own change")
    func answeredAheadIsBehind() throws {
        let store = ScriptedEtcd()
        let (replica, watch) = try watchingReplica(store)
        let other = value(replica, operation: "other-host~1-1")
        queue.sync {
            let now = time.clock.now()
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 11))], 11)
            #expect(!replica.isBehind(now: now))
            replica.noteAnsweredAhead(of: 13)
            #expect(replica.isBehind(now: now))
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 12))], 12)
            #expect(replica.isBehind(now: now), "revision 12 of 13")
            watch.onEvents([EtcdWatchEvent(kind: .put, keyValue: stored(other, revision: 13))], 13)
            #expect(!replica.isBehind(now: now), "brought")
        }
    }

    @Test("a compacted watch reads everything again, loads it, and watches from the revision read")
    func compactedWatch() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        final class Loaded: @unchecked Sendable { var loads: [(Int, UInt64)] = [] }
        let loaded = Loaded()
        queue.sync {
            replica.load = { countdowns, revision in loaded.loads.append((countdowns.count, revision)) }
            replica.resume(from: 10_999)
            replica.start()
            #expect(store.ranges.map(\.prefix) == ["/countdownd/"], "resumed from the copy: the quota slots and the writers are read, in one read")
            store.watches[0].onEnd(.compacted(at: 30))
            #expect(store.ranges.count == 2, "read everything again")
            store.ranges.removeLast().completion(.success(([self.stored(value(replica, operation: "h-1-1"), revision: 25)], 31)))
            // The read after the resume answers late, older than the full read: its slot and
            // its writer change nothing.
            let slot = EtcdKeyValue(key: "/countdownd/.slots/all/0", value: Array("gone".utf8), createRevision: 3, modRevision: 3)
            store.ranges.removeFirst().completion(.success(([slot, self.stored(value(replica, operation: "late~1-1"), revision: 20)], 29)))
            #expect(replica.writers["otp:1"] == "h-1", "the full read's writer stands (an id of the form before runs: up to its count)")
        }
        queue.sync {
            #expect(loaded.loads.map(\.0) == [1] && loaded.loads.map(\.1) == [31_999], "numbered after every change of the revision read")
            #expect(store.watches.count == 2 && store.watches[1].from == 31, "watched from the revision read (its changes are in the read, and skipped)")
            #expect(replica.appliedAt["otp:1"] == 25)
            #expect(replica.quotaCounts.heldFleetWide == 0, "the full read holds no slot")
        }
    }

    @Test("a key under the prefix that names no countdown a client could have (a newline, a space, a bad uid) is skipped, from the read and from the watch, as a value this version cannot read: never applied, never shown to a client")
    func keysThatNameNoCountdown() throws {
        let store = ScriptedEtcd()
        let replica = try replica(store)
        final class Seen: @unchecked Sendable {
            var loaded: [String] = []
            var applied: [String] = []
        }
        let seen = Seen()
        let bad = ["tea\nEVENT 1 done x 0 1", "a b", "x/tea", "1000/", "99999999999/tea", ""]
        let good = ["tea", "1000/otp:+4915112345678"]
        #expect(bad.allSatisfy { !ClusterReplica.isCountdownKey($0) } && good.allSatisfy(ClusterReplica.isCountdownKey))
        queue.sync {
            replica.load = { countdowns, _ in seen.loaded = countdowns.map(\.0) }
            replica.apply = { key, _, _ in seen.applied.append(key) }
            replica.start()
            let other = value(replica, operation: "other-host-1-1")
            let read = (bad + good).enumerated().map { self.stored(other, revision: Int64(10 + $0.offset), key: $0.element) }
            store.ranges.removeFirst().completion(.success((read, 20)))
        }
        let watch = try #require(queue.sync { store.watches.first })
        queue.sync {
            let other = value(replica, operation: "other-host-2-1")
            watch.onEvents((bad + ["later"]).enumerated().map {
                EtcdWatchEvent(kind: .put, keyValue: self.stored(other, revision: Int64(21 + $0.offset), key: $0.element))
            }, 30)
        }
        queue.sync {
            #expect(seen.loaded.sorted() == good.sorted(), "\(seen.loaded)")
            #expect(seen.applied == ["later"], "\(seen.applied)")
        }
    }
}
