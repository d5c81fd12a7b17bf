import CountdownCore
import FoundationEssentials

/// Clock offsets between hosts, from heartbeats: every `interval` each host writes its wall
/// clock to `<prefix>.hosts/<host id>` (never a countdown's key: a key's first part is a uid
/// or a name, and names have no `/`), and every host that sees another's heartbeat arrive live
/// takes (its own clock − the one written) as a sample. The smallest of a host's last
/// `samplesKept` is its estimate: the offset plus the smallest delay seen, an upper bound.
///
/// A delay is never read as an offset for long: heartbeats are evenly spaced, so one that etcd
/// held back (an outage) is one sample among many prompt ones. At most one heartbeat is in
/// flight, and after one fails the next waits until a read shows etcd answering again, so an
/// outage leaves at most one heartbeat to commit late. A host that never changes a countdown is
/// measured too.
///
/// Confined to the daemon's queue, like the replica that owns it.
final class ClockHeartbeat {
    /// Where heartbeats live, under the countdown prefix: `<prefix>.hosts/`.
    static let keyInfix = ".hosts/"
    /// How often a host writes its heartbeat: also how soon a silent watch is noticed
    /// (`ClusterReplica.expectFromWatch`) and a gone host's countdowns taken over
    /// (`TakeOverPolicy.silenceNanoseconds`).
    static let intervalNanoseconds: Int64 = 1_000_000_000
    /// How many samples per host the estimate is taken over (about a minute of heartbeats).
    static let samplesKept = 64
    /// Past this, a host's clock offset is logged as a warning (deadlines would be off by it).
    static let warningMilliseconds: Int64 = 250

    private enum Phase {
        /// The next heartbeat goes out when due.
        case idle
        /// One is in etcd's hands.
        case inFlight
        /// The last one failed: a read must succeed before the next.
        case confirmingEtcd
    }

    private let client: any EtcdTransport
    private let logger: Logger
    private let hostID: String
    /// This host's heartbeat key.
    let key: String
    private var phase = Phase.idle
    private var lastBeat: Instant?
    /// When etcd last answered a heartbeat (or the read that confirms it answers again); the
    /// first beat's instant before any answer.
    private var lastAnswered: Instant?
    /// Each other host's samples and estimate, in ms. Positive: its clock is behind this one's.
    private(set) var skews: [String: (estimate: Int64, samples: [Int64], warnedAt: Instant?)] = [:]
    /// When each other host's last sample arrived, on the monotonic clock.
    private var lastSampled: [String: Instant] = [:]
    /// Since when this host has been measuring the others: its first heartbeat, or the last step
    /// of its wall clock (`wallClockStepped`).
    private var measuringSince: Instant?
    /// How long a host measures before it concludes there is nobody to measure (every other
    /// host gone): twice the heartbeats a live host's estimate needs, so one stalled for a few
    /// seconds is measured first.
    static let measuringNanoseconds: Int64 = 2 * Int64(samplesTrusted) * intervalNanoseconds

    /// Where the wall clock is read.
    private let time: DaemonClock

    /// Called with the revision of each heartbeat etcd committed: the replica expects its watch
    /// to bring it (`ClusterReplica.expectFromWatch`), which is how a watch gone silent is
    /// noticed when no client changes anything.
    var committed: (_ revision: Int64) -> Void = { _ in }

    /// Called when etcd answers again (the read after a failed heartbeat, or a heartbeat),
    /// with the instant the first unanswered heartbeat of the outage was sent and the revision
    /// etcd answered at: the replica moves a watch that has brought nothing since, and counts as
    /// behind until its copy reaches that revision (`ClusterReplica.heartbeatAnsweredAgain`).
    var answeredAgain: (_ unansweredSince: Instant, _ revision: Int64) -> Void = { _, _ in }

    /// When the first heartbeat (or read) that got no answer was sent, while etcd has answered
    /// none since.
    private var unansweredSince: Instant?

    /// How long etcd may leave this host's heartbeats unanswered before the copy counts as out of
    /// touch (`isOutOfTouch`): two heartbeats and a half.
    static let outOfTouchNanoseconds: Int64 = 2_500_000_000

    /// Whether etcd has answered none of this host's heartbeats for `outOfTouchNanoseconds`:
    /// the host is cut off (a partition, every member down), so its copy may trail etcd by
    /// anything, though no change it knows of is missing.
    func isOutOfTouch(now: Instant) -> Bool {
        lastAnswered.map { now.nanoseconds(since: $0) > Self.outOfTouchNanoseconds } ?? false
    }

    init(client: any EtcdTransport, prefix: String, hostID: String, logger: Logger, time: DaemonClock = .system) {
        self.time = time
        self.client = client
        self.hostID = hostID
        self.logger = logger
        key = prefix + Self.keyInfix + hostID
    }

    /// Whether `key` (under the prefix, the prefix removed) is a heartbeat, not a countdown.
    static func isHeartbeat(_ key: String) -> Bool {
        key.hasPrefix(keyInfix)
    }

    /// Writes this host's heartbeat if one is due (called by the replica's housekeeping).
    func beat(now: Instant) {
        if measuringSince == nil { measuringSince = now }
        guard phase != .inFlight, lastBeat.map({ now.nanoseconds(since: $0) >= Self.intervalNanoseconds }) ?? true else { return }
        lastBeat = now
        if lastAnswered == nil { lastAnswered = now }
        let written = time.mapping(at: now).unixMilliseconds(of: now)
        let wasConfirming = phase == .confirmingEtcd
        phase = .inFlight
        if wasConfirming {
            // A read of the key proves etcd answers (it is linearizable) before anything is written.
            client.transaction(if: [], then: [.get(key)], else: [], timeoutMilliseconds: 1000) { [self] result in
                switch result {
                case .success(let answer):
                    phase = .idle
                    answered(at: answer.revision)
                case .failure(let error):
                    phase = .confirmingEtcd
                    failed(error, sentAt: now)
                }
            }
            return
        }
        let value = Array(#"{"written_unix_ms":\#(written)}"#.utf8)
        client.transaction(if: [], then: [.put(key, value, lease: nil)], else: [], timeoutMilliseconds: 1000) { [self] result in
            switch result {
            case .success(let answer):
                phase = .idle
                answered(at: answer.revision)
                committed(answer.revision)
            case .failure(let error):
                phase = .confirmingEtcd
                failed(error, sentAt: now)
            }
        }
    }

    /// etcd answered, at `revision`: the end of an outage, if there was one.
    private func answered(at revision: Int64) {
        lastAnswered = time.now()
        if let since = unansweredSince {
            unansweredSince = nil
            answeredAgain(since, revision)
        }
    }

    /// A heartbeat (or read) sent at `sentAt` failed. Only no answer starts an outage: a member
    /// that refuses (no leader in an election, a full database, a role without the heartbeat
    /// keys) answers, and a watch is no more stuck for it (moved at each refusal, the watch of
    /// a host whose puts etcd refused while it answered reads moved every two seconds).
    private func failed(_ error: EtcdError, sentAt: Instant) {
        switch error {
        case .unreachable, .ambiguous:
            if unansweredSince == nil { unansweredSince = sentAt }
        case .server, .malformed:
            lastAnswered = time.now()
        }
    }

    /// Another host's heartbeat (`host` is what follows `.hosts/`), as the watch brought it at
    /// `arrivedAt`: `live` when it was the newest change in etcd when the watch sent it (history
    /// replayed after a reconnection is not a sample). A backlog applies it later: the sample is
    /// the wall clock now, less the time since its arrival on the monotonic clock (a step of the
    /// wall clock in between enters that one sample, which the smallest of the others outweighs).
    func received(from host: String, value: [UInt8], live: Bool, arrivedAt: Instant) {
        guard live, host != hostID,
              let written = (try? JSONDecoder().decode(Beat.self, from: Data(value)))?.written_unix_ms else { return }
        // A heartbeat is any value written under the prefix: a written time that makes no sense
        // (more than a day off) is no sample, and never an overflow.
        let (sample, overflow) = time.mapping().unixMilliseconds(of: arrivedAt).subtractingReportingOverflow(written)
        guard !overflow, abs(sample) <= 86_400_000 else { return }
        var entry = skews[host] ?? (sample, [], nil)
        entry.samples.append(sample)
        if entry.samples.count > Self.samplesKept { entry.samples.removeFirst(entry.samples.count - Self.samplesKept) }
        // The smallest is the least mixed with network and commit delays (which only add).
        entry.estimate = entry.samples.min() ?? sample
        if abs(entry.estimate) > Self.warningMilliseconds, entry.samples.count >= Self.samplesTrusted,
           entry.warnedAt.map({ arrivedAt.nanoseconds(since: $0) > 60_000_000_000 }) ?? true {
            logger.log(.warning, "cluster: host \(host)'s clock is about \(entry.estimate) ms off this one's; deadlines are timed on each host's wall clock, so sync them (NTP)")
            entry.warnedAt = arrivedAt
        }
        skews[host] = entry
        lastSampled[host] = max(lastSampled[host] ?? arrivedAt, arrivedAt)
    }

    /// A heartbeat's value in etcd: `{"written_unix_ms": …}`.
    private struct Beat: Decodable {
        // swiftlint:disable:next identifier_name
        let written_unix_ms: Int64
    }

    /// How many samples a host's estimate needs before it is reported, warned of or acted on: a
    /// heartbeat replayed in a restarted host's catch-up can arrive looking live, and alone it
    /// would read its age as an offset (31 s, for hosts on one clock, in an attack); the
    /// smallest of several is a prompt one's.
    static let samplesTrusted = 4

    /// The largest clock offset estimated from another host, in ms (0 with none seen).
    var largestSkewMilliseconds: Int64 {
        skews.values.filter { $0.samples.count >= Self.samplesTrusted }.map(\.estimate).max { abs($0) < abs($1) } ?? 0
    }

    /// How far `host`'s clock is behind this one's at `now`, in ms, from its heartbeats: 0 when
    /// it is not; `nil` when this host has nothing to go by.
    ///
    /// For a host not measured (it died before four of its heartbeats came live, or before this
    /// host started), how far this host's clock is ahead of the fleet: the least it is ahead of
    /// any host measured within the last `samplesKept` heartbeat intervals. Reading such a
    /// host's deadlines as if the clocks agreed, a taker 5 s ahead of the fleet finished its
    /// countdowns 3 s early. The least, not the most: one host whose clock is far behind (or a
    /// heartbeat key written by anyone who may write the prefix) says nothing of the others, and
    /// would delay every such take-over by up to `largestOffsetAllowedFor`. Recent only: a host
    /// measured long ago, since gone, says nothing of this host's clock now (NTP may have set
    /// it). With no host measured recently: `nil` (this host cannot tell yet whether its clock
    /// is ahead) for `measuringNanoseconds` after it began measuring, then 0 (nobody else is
    /// there to measure). An attack: a taker 5 s ahead that had measured nobody yet, a live
    /// host stalled around its start, finished 64 of 90 such countdowns up to 3 s early.
    func offsetBehind(of host: String, now: Instant) -> Int64? {
        if let entry = skews[host], entry.samples.count >= Self.samplesTrusted { return Self.allowance(for: entry.estimate) }
        let recent = Int64(Self.samplesKept) * Self.intervalNanoseconds
        let lead = skews.filter { other, entry in
            entry.samples.count >= Self.samplesTrusted && lastSampled[other].map { now.nanoseconds(since: $0) <= recent } == true
        }.map { Self.allowance(for: $0.value.estimate) }.min()
        if let lead { return lead }
        guard let since = measuringSince, now.nanoseconds(since: since) >= Self.measuringNanoseconds else { return nil }
        return 0
    }

    /// This host's wall clock was set, at `now`: every offset measured so far is off by the step,
    /// so each is measured afresh (`samplesTrusted` heartbeats). Kept, a taker whose clock
    /// stepped 5 s forward read the others as 5 s behind for a minute, and finished a gone
    /// writer's countdowns 2 s early.
    func wallClockStepped(at now: Instant) {
        skews.removeAll()
        lastSampled.removeAll()
        measuringSince = now
    }

    /// What an estimate of `estimate` ms behind is allowed for: 0 for a clock ahead of this one's,
    /// at most `largestOffsetAllowedFor`.
    private static func allowance(for estimate: Int64) -> Int64 {
        min(max(0, estimate), largestOffsetAllowedFor)
    }

    /// The most `offsetBehind` gives, in ms: an offset beyond it is a clock to fix (it is
    /// logged), not one to wait for, and no value in etcd can push a deadline past what an
    /// instant holds.
    static let largestOffsetAllowedFor: Int64 = 60_000
}
