import CountdownCore
import Dispatch

/// Group commit: the changes a host proposes within one batch (clients' changes, and the
/// `done`s and removals due in it) go to etcd as **one transaction** of many compares and puts,
/// up to `maximumOperations`, so a burst of deadlines costs one transaction, not one each.
///
/// The transaction's failure branch reads back every key it touches, so a failed compare says
/// exactly which change lost its race: that one is a conflict (judged again by its caller), and
/// the others are sent again at once, so one conflicting name never fails its neighbours.
///
/// Each change keeps its request's deadline (`ClusterReplica.Attempt.answerBy`); one still
/// waiting 250 ms before it fails: surely not made if it was never sent, may-or-may-not if it
/// was. A transaction refused because its member has no leader (an election: nothing was
/// proposed) is held and asked again every `noLeaderPauseMilliseconds` while its changes have
/// time, so an election of a second or so delays a START instead of failing it. A transaction
/// whose answer was lost, or that a member gave up on after taking it, is sent once more, to the
/// next member, with its changes' operation ids: a change whose key then holds its own operation
/// id had committed the first time.
///
/// Confined to the daemon's queue, like the replica that owns it.
final class GroupCommit {
    /// One proposed change: a reference, so that gathering a burst's thousands into
    /// transactions moves pointers, not their keys and arrays (copies of the value were 40 % of
    /// a host's time in a burst of 30,000 deadlines).
    private final class Change {
        /// The key in etcd (the prefix included).
        let key: String
        let value: ClusterValue?
        let expectation: ClusterReplica.Expectation
        /// Quota slot keys created with it, each on the condition that it does not exist yet
        /// (`QuotaSlots`), holding the countdown's key.
        let claimed: [String]
        /// Quota slot keys deleted with it (a removal frees its countdown's slots).
        let freed: [String]
        /// What a claimed slot holds: the countdown's key without the prefix.
        let holder: [UInt8]
        let deadline: Instant
        /// A change that fell due (a `done`, a removal), which no client waits for: sent after
        /// the clients' changes waiting with it.
        let isDueChange: Bool
        /// It went out once and its answer was lost: it may have committed.
        var sentBefore = false
        /// Refused before anything was proposed (no leader, as in an election): held until
        /// then, and asked again; what it was refused with, for its answer if time runs out.
        var heldUntil: Instant?
        var refusal: EtcdError?
        let completion: (ClusterReplica.ChangeOutcome) -> Void

        init(
            key: String, value: ClusterValue?, expectation: ClusterReplica.Expectation, claimed: [String], freed: [String], holder: [UInt8],
            deadline: Instant, isDueChange: Bool, completion: @escaping (ClusterReplica.ChangeOutcome) -> Void
        ) {
            self.isDueChange = isDueChange
            self.key = key
            self.value = value
            self.expectation = expectation
            self.claimed = claimed
            self.freed = freed
            self.holder = holder
            self.deadline = deadline
            self.completion = completion
        }

        /// Whether its deadline is too near to send it (`GroupCommit.isTooNear`).
        func isExpired(at now: Instant) -> Bool {
            GroupCommit.isTooNear(deadline, now: now)
        }

        /// Whether it may go out now (it is not held for want of a leader).
        func isDue(at now: Instant) -> Bool {
            heldUntil.map { $0 <= now } ?? true
        }

        /// Its compares: the countdown's, then each claimed slot's absence.
        var compares: [EtcdClient.Compare] {
            let own: EtcdClient.Compare
            switch expectation {
            case .absent: own = .absent(key)
            case .unchangedSince(let revision): own = .modifiedAt(key, revision)
            }
            return [own] + claimed.map { .absent($0) }
        }

        /// Its writes: the countdown's, its claimed slots' and its freed slots'.
        var operations: [EtcdClient.Operation] {
            [value.map { .put(key, $0.encoded, lease: nil) } ?? .delete(key)]
                + claimed.map { .put($0, holder, lease: nil) } + freed.map { .delete($0) }
        }

        /// What the failure branch reads back: the countdown, then each claimed slot.
        var readBacks: [EtcdClient.Operation] {
            [.get(key)] + claimed.map { .get($0) }
        }

        /// The most of any branch's operations it adds to a transaction.
        var operationCount: Int { 1 + claimed.count + freed.count }

        /// Every key it touches (etcd refuses a transaction that names one twice).
        var keys: [String] { [key] + claimed + freed }

        /// Whether etcd's current `found` is what this change expected.
        func holds(against found: EtcdKeyValue?) -> Bool {
            switch expectation {
            case .absent: return found == nil
            case .unchangedSince(let revision): return found?.modRevision == revision
            }
        }
    }

    /// etcd's default `--max-txn-ops`: the most puts (and compares) in one transaction.
    static let maximumOperations = 128
    /// Transactions in flight at once. While they are, new changes gather for the next one.
    static let maximumInFlight = 2
    /// How long a change refused for want of a leader waits before it is asked again (the
    /// housekeeping, five times a second, sends it once this has passed).
    static let noLeaderPauseMilliseconds: Int64 = 150

    private let client: any EtcdTransport
    /// Clients' changes waiting to be sent, oldest first: they go first, so that a burst of
    /// deadlines (whose changes may wait their turn for up to 30 s) never makes a client's
    /// change expire unsent.
    private var pending: [Change] = []
    /// Due changes waiting to be sent, oldest first, after the clients'.
    private var pendingDue: [Change] = []
    /// No change in `pending` has an earlier deadline (one may have a later one: sending does
    /// not update it). `expire` reads the queue only when this is near.
    private var earliestDeadline: Instant?
    private var inFlight = 0
    /// Transactions sent, and changes they carried (for `STATS`).
    private(set) var transactionsSent = 0
    private(set) var changesSent = 0

    /// Where deadlines are measured.
    private let time: DaemonClock

    init(client: any EtcdTransport, time: DaemonClock = .system) {
        self.client = client
        self.time = time
    }

    /// Proposes a change; it goes out with the next transaction (`send`). `completion` runs on
    /// the queue, once. `claimed` slot keys are created with it (each compared absent, each
    /// holding `holder`, the countdown's key without the prefix), and `freed` ones deleted.
    func propose(
        _ key: String, to value: ClusterValue?, expecting expectation: ClusterReplica.Expectation, claiming claimed: [String],
        freeing freed: [String], holder: [UInt8], deadline: Instant, isDueChange: Bool = false,
        completion: @escaping (ClusterReplica.ChangeOutcome) -> Void
    ) {
        enqueue([Change(
            key: key, value: value, expectation: expectation, claimed: claimed, freed: freed, holder: holder, deadline: deadline,
            isDueChange: isDueChange, completion: completion
        )])
    }

    /// Puts changes in their queue (clients' or due): at its end, or (sent again) at its front.
    private func enqueue(_ changes: [Change], atFront: Bool = false) {
        for change in changes where earliestDeadline.map({ change.deadline < $0 }) ?? true {
            earliestDeadline = change.deadline
        }
        let clients = changes.filter { !$0.isDueChange }, due = changes.filter(\.isDueChange)
        if atFront {
            pending.insert(contentsOf: clients, at: 0)
            pendingDue.insert(contentsOf: due, at: 0)
        } else {
            pending.append(contentsOf: clients)
            pendingDue.append(contentsOf: due)
        }
    }

    /// Whether changes wait to be sent.
    var hasPending: Bool { !pending.isEmpty || !pendingDue.isEmpty }

    /// Sends what is pending, as few transactions as the limits allow: at the end of each batch,
    /// when a transaction's answer frees its place, and at each housekeeping (changes held for
    /// want of a leader, once their pause is over).
    ///
    /// Each transaction takes changes from the front, in order, until it is full, passing over
    /// those held and those that touch a key it touches already (etcd refuses a transaction
    /// that puts one key twice: such a change waits for the next one, and then fails its
    /// compare, as a second change on one revision must); what it passed over goes back to the
    /// front. So a send reads only what it sends, never the whole queue: in a burst of
    /// deadlines thousands wait, and reading them all at every batch (copies of each change's
    /// value, then) was 40 % of a host's time at 30,000 deadlines.
    func send() {
        guard hasPending else { return }
        let now = time.now()
        if earliestDeadline.map({ Self.isTooNear($0, now: now) }) ?? false {
            expire(now: now)
        }
        var groups: [[Change]] = []
        var places = Self.maximumInFlight - inFlight
        while places > 0, hasPending {
            var group = Group()
            group.take(from: &pending, now: now)
            group.take(from: &pendingDue, now: now)
            guard !group.changes.isEmpty else { break }  // All held for want of a leader.
            groups.append(group.changes)
            places -= 1
        }
        // Settled before anything is sent: a transaction's completion may propose and send again,
        // and one that completes at once (a transfer refused before it started) may have sent
        // what takes the places counted here: a group without a place goes back to the front.
        for (index, group) in groups.enumerated() {
            guard inFlight < Self.maximumInFlight else {
                enqueue(groups[index...].flatMap { $0 }, atFront: true)
                break
            }
            transmit(group, now: now)
        }
    }

    /// One transaction being filled (`send`).
    private struct Group {
        var changes: [Change] = []
        var keys = Set<String>()
        var operations = 0

        /// Takes changes from the front of `queue`, in order, until the transaction is full,
        /// passing over those held and those that touch a key it touches already; what it passed
        /// over goes back to the front.
        mutating func take(from queue: inout [Change], now: Instant) {
            var passedOver: [Change] = []
            var taken = 0
            while taken < queue.count {
                let change = queue[taken]
                if operations + change.operationCount > GroupCommit.maximumOperations {
                    // Full; a change too big for any transaction still goes alone (etcd refuses it).
                    guard changes.isEmpty, passedOver.isEmpty else { break }
                }
                taken += 1
                guard change.isDue(at: now), !change.keys.contains(where: keys.contains) else {
                    passedOver.append(change)
                    continue
                }
                keys.formUnion(change.keys)
                operations += change.operationCount
                changes.append(change)
            }
            queue.replaceSubrange(0..<taken, with: passedOver)
        }
    }

    /// Whether `deadline` leaves too little time to send a change (less than
    /// `minimumRetryMilliseconds`): it is failed instead.
    static func isTooNear(_ deadline: Instant, now: Instant) -> Bool {
        deadline.nanoseconds(since: now) < ClusterReplica.minimumRetryMilliseconds * 1_000_000
    }

    /// Fails the changes still waiting within 250 ms of their deadline.
    func expire(now: Instant) {
        var expired: [Change] = []
        var earliest: Instant?
        let removeExpired = { (change: Change) -> Bool in
            if change.isExpired(at: now) {
                expired.append(change)
                return true
            }
            if earliest.map({ change.deadline < $0 }) ?? true { earliest = change.deadline }
            return false
        }
        pending.removeAll(where: removeExpired)
        pendingDue.removeAll(where: removeExpired)
        earliestDeadline = earliest
        fail(expired)
    }

    /// Answers changes whose time ran out before they could be sent (again).
    private func fail(_ expired: [Change]) {
        for change in expired {
            if let refusal = change.refusal {
                // Refused for want of a leader until its time ran out.
                change.completion(.failed(change.sentBefore ? .ambiguous("an earlier attempt's answer was lost, and etcd then refused: \(refusal)") : refusal))
                continue
            }
            change.completion(.failed(change.sentBefore
                ? .ambiguous("its answer was lost, and no time was left to ask again")
                : .unreachable("etcd did not take it within \(ClusterReplica.changeTimeoutMilliseconds) ms: earlier transactions were still unanswered")))
        }
    }

    private func transmit(_ group: [Change], now: Instant) {
        // The first attempt of a put gets at most half of its time, so that a member that
        // stopped after taking the request leaves the retry on the next one time to be answered.
        // Never longer than a client's whole bound, however long a due change may wait: a
        // member that stopped holds a place no longer than that.
        let remaining = min(group.map { Int($0.deadline.nanoseconds(since: now) / 1_000_000) }.min() ?? 0, ClusterReplica.changeTimeoutMilliseconds)
        let firstAttempt = group.contains { !$0.sentBefore && $0.value != nil }
        let timeout = max(firstAttempt ? min(remaining, ClusterReplica.changeTimeoutMilliseconds / 2) : remaining, 1)
        inFlight += 1
        transactionsSent += 1
        changesSent += group.count
        client.transaction(
            if: group.flatMap(\.compares), then: group.flatMap(\.operations), else: group.flatMap(\.readBacks), timeoutMilliseconds: timeout
        ) { [self] result in
            inFlight -= 1
            decide(group, result)
            send()
        }
    }

    /// Whether etcd's refusal can come after the transaction entered its log: a timeout or a
    /// leader change while it waited (gRPC 4, or 14 other than "no leader", which `hasleader`
    /// refuses before anything is proposed).
    static func mayHaveEntered(_ error: EtcdError) -> Bool {
        guard case .server(let code, let message) = error else { return false }
        return code == 4 || (code == 14 && !message.contains("no leader"))
    }

    /// Whether etcd refused for want of a leader, before proposing anything (`hasleader`).
    static func isNoLeader(_ error: EtcdError) -> Bool {
        guard case .server(let code, let message) = error else { return false }
        return code == 14 && message.contains("no leader")
    }

    private func decide(_ group: [Change], _ result: Result<EtcdTransactionResult, EtcdError>) {
        switch result {
        case .failure(.ambiguous(let why)):
            let now = time.now()
            var again: [Change] = []
            for change in group {
                // Once only, for a put (its operation id tells its own commit apart) with time left.
                if !change.sentBefore, change.value != nil,
                   change.deadline.nanoseconds(since: now) >= ClusterReplica.minimumRetryMilliseconds * 1_000_000 {
                    change.sentBefore = true
                    again.append(change)
                } else {
                    change.completion(.failed(.ambiguous(why)))
                }
            }
            enqueue(again, atFront: true)
        case .failure(let error) where Self.isNoLeader(error):
            // Nothing was proposed: held, and asked again after a pause while there is time
            // (the housekeeping fails it with this refusal once there is none).
            let now = time.now()
            let heldUntil = now.advanced(byMilliseconds: Self.noLeaderPauseMilliseconds)
            for change in group {
                change.heldUntil = heldUntil
                change.refusal = error
            }
            enqueue(group)
            expire(now: now)
        case .failure(let error) where Self.mayHaveEntered(error):
            // A member took it and gave up waiting ("request timed out", "leader changed"): it is in
            // etcd's log and may still commit. As with a lost answer, a put is asked once more.
            decide(group, .failure(.ambiguous("\(error)")))
        case .failure(let error):
            for change in group {
                // Refused now, but an earlier attempt whose answer was lost may yet commit (a
                // member without a leader holds it until quorum returns): not "surely not made".
                change.completion(.failed(change.sentBefore ? .ambiguous("an earlier attempt's answer was lost, and this one failed: \(error)") : error))
            }
        case .success(let outcome) where outcome.succeeded:
            for change in group { change.completion(.committed(outcome.revision)) }
        case .success(let outcome) where outcome.ranges.count != group.reduce(0, { $0 + $1.readBacks.count }):
            let error = EtcdError.malformed("a failed transaction read back \(outcome.ranges.count) keys of \(group.reduce(0) { $0 + $1.readBacks.count })")
            for change in group { change.completion(.failed(change.sentBefore ? .ambiguous("\(error)") : error)) }
        case .success(let outcome):
            // The failure branch read every key back, in order: who lost, and who is sent again.
            var again: [Change] = []
            var offset = 0
            for change in group {
                let current = outcome.ranges[offset].first
                let slotsTaken = outcome.ranges[(offset + 1)..<(offset + 1 + change.claimed.count)].contains { !$0.isEmpty }
                offset += 1 + change.claimed.count
                let found = current.flatMap { ClusterValue.decode($0.value) }
                if let value = change.value, let found, found.operation == value.operation, let current {
                    change.completion(.committed(current.modRevision))  // An earlier attempt did commit.
                } else if !change.holds(against: current) {
                    // What etcd has now. The replica's revision stays as it is: the watch brings
                    // the winner's change, and a retry compares on that once it is applied.
                    change.completion(.conflict(found, revision: current?.modRevision ?? outcome.revision))
                } else if slotsTaken {
                    // Another host's creation took a quota slot claimed here: judged again once
                    // this host's copy holds what etcd read, that slot taken.
                    change.completion(.conflict(found, revision: outcome.revision))
                } else {
                    again.append(change)  // Its compare held: a neighbour failed the transaction.
                }
            }
            guard again.count < group.count else {
                // Every compare held by what etcd read back, yet it refused: never loop on it.
                let error = EtcdError.malformed("etcd refused a transaction whose compares all held")
                for change in again { change.completion(.failed(change.sentBefore ? .ambiguous("\(error)") : error)) }
                return
            }
            enqueue(again, atFront: true)
        }
    }
}
