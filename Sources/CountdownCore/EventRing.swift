/// The most recent lifecycle events, kept for `SUBSCRIBE … SINCE <seq>`: a client that was away
/// replays what it missed, then goes live with no gap and no duplicate.
///
/// Split strictly by owner: each uid keeps its own latest `depth` events, and only its own
/// events push out its own. So what one user's history holds, and from where it is whole,
/// depends on that user's changes alone: another user can neither push it out nor be counted
/// through it (the eviction channel a shared history would open). Memory is `depth` events per
/// uid that has made changes.
///
/// A user other than root replays by its own numbers (`CountdownEvent.ownerSequence`), root by
/// the daemon's. Each owner's kept events are the latest of its own (an event pushes out its
/// owner's oldest, never one in the middle), so an owner's history is whole after the number
/// before its oldest kept event.
///
/// Ticks and snapshots are never kept (they change nothing). The daemon fills it only with
/// events that have been released to clients, so a replay never shows a change that storage
/// refused.
public struct EventRing: Sendable {
    /// How many of its latest events each uid keeps, whatever the others do.
    public let depth: Int

    /// One owner's events, oldest first, from `head` on.
    private struct OwnerHistory: Sendable {
        var events: [CountdownEvent] = []
        var head = 0
        /// Every event of this owner numbered after this is kept.
        var keptAfter: UInt64
        /// The same, by the owner's own numbers.
        var keptAfterOwn: UInt64

        var count: Int { events.count - head }

        /// Appends `event`; returns the new count.
        mutating func append(_ event: CountdownEvent) -> Int {
            events.append(event)
            return events.count - head
        }

        mutating func removeOldest() {
            keptAfter = max(keptAfter, events[head].sequence)
            keptAfterOwn = max(keptAfterOwn, events[head].ownerSequence)
            head += 1
            // Compacted once half is dead: O(1) amortized per event.
            if head > 64 && head * 2 > events.count {
                events.removeFirst(head)
                head = 0
            }
        }
    }

    private var histories: [UInt32: OwnerHistory] = [:]
    private var total = 0
    /// What every owner's history starts from (the ring read back after a restart).
    private let initialKeptAfter: UInt64
    /// Each user's last own number when the ring was made: for a user without history, every
    /// event of its own after that is kept.
    private let initialOwners: OwnerSequences
    /// Whether users see numbers of their own; otherwise (state written before them, cluster
    /// mode) their events carry the daemon-wide numbers, and `initialKeptAfter` holds for them.
    private let numbersPerUser: Bool

    /// Creates an empty ring that keeps each owner's latest `depth` events, holding every event
    /// after `keptAfter` and, of each user, every event numbered (by the user's own numbers)
    /// after its last in `owners` (`nil`: the users see the daemon-wide numbers, as they did
    /// before per-user numbers and do in cluster mode).
    public init(depth: Int, keptAfter: UInt64 = 0, owners: OwnerSequences? = nil) {
        self.depth = max(0, depth)
        initialKeptAfter = keptAfter
        initialOwners = owners ?? OwnerSequences(base: keptAfter)
        numbersPerUser = owners != nil
    }

    /// A history for `event`'s owner, which has none yet. With numbers per user, whole after the
    /// owner's number before this event (what came before it was pushed out, or never was: a
    /// number a refused change took); otherwise after the ring's start.
    private static func newHistory(for event: CountdownEvent, keptAfter: UInt64, numbersPerUser: Bool) -> OwnerHistory {
        OwnerHistory(keptAfter: keptAfter, keptAfterOwn: numbersPerUser ? max(event.ownerSequence, 1) - 1 : keptAfter)
    }

    /// How many events are kept, of every owner.
    public var count: Int { total }

    /// Every lifecycle event numbered after this is kept, whoever owns it (or was never released:
    /// a number used by a change storage refused is a gap, not a loss).
    public var keptAfter: UInt64 {
        histories.values.reduce(initialKeptAfter) { max($0, $1.keptAfter) }
    }

    /// Every event of `owner` numbered after this is kept.
    public func keptAfter(owner: UInt32) -> UInt64 {
        histories[owner]?.keptAfter ?? initialKeptAfter
    }

    /// The same, by `owner`'s own numbers.
    public func keptAfterOwn(owner: UInt32) -> UInt64 {
        histories[owner]?.keptAfterOwn ?? initialOwners.last(of: owner)
    }

    /// Appends an event; lifecycle events only (others are ignored). Numbers must increase.
    public mutating func append(_ event: CountdownEvent) {
        guard event.kind.isLifecycle else { return }
        let (keptAfter, perUser) = (initialKeptAfter, numbersPerUser)  // Not `self`: `histories` is being changed.
        guard depth > 0 else {
            histories[event.owner, default: Self.newHistory(for: event, keptAfter: keptAfter, numbersPerUser: perUser)].keptAfter = event.sequence
            histories[event.owner]?.keptAfterOwn = event.ownerSequence
            return
        }
        let count = histories[event.owner, default: Self.newHistory(for: event, keptAfter: keptAfter, numbersPerUser: perUser)].append(event)
        total += 1
        // Only the owner's own event pushes out the owner's own oldest.
        if count > depth {
            histories[event.owner]?.removeOldest()
            total -= 1
        }
    }

    /// The kept events in order, oldest first.
    public var events: [CountdownEvent] {
        var all: [CountdownEvent] = []
        all.reserveCapacity(total)
        for history in histories.values {
            all += history.events[history.head...]
        }
        // Each history is in order; a replay or a snapshot is rare enough for a sort.
        return histories.count > 1 ? all.sorted { $0.sequence < $1.sequence } : all
    }

    /// Why a replay cannot be served.
    public enum ReplayError: Error, Equatable {
        /// Events of `owner` after `sequence` were pushed out; its history is whole after
        /// `keptAfter`.
        case tooOld(keptAfter: UInt64, owner: UInt32)
    }

    /// The kept events numbered after `sequence` that `viewer` may replay, oldest first,
    /// optionally only those of `names` (keys), or of keys that start with `prefix`. A non-root
    /// viewer replays its own events, by its own numbers: only its own history must reach back
    /// far enough. Root replays everyone's, by the daemon's numbers, so every owner it asks about
    /// must.
    /// - Throws: `tooOld` naming an owner whose events after `sequence` are no longer kept.
    public func events(after sequence: UInt64, names: Set<String>?, prefix: String? = nil, viewer: UInt32) throws(ReplayError) -> [CountdownEvent] {
        if viewer != 0 {
            let kept = keptAfterOwn(owner: viewer)
            guard sequence >= kept else { throw .tooOld(keptAfter: kept, owner: viewer) }
            guard let history = histories[viewer] else { return [] }
            var index = history.events.count
            while index > history.head && history.events[index - 1].ownerSequence > sequence { index -= 1 }
            return history.events[index...].filter { event in
                (names?.contains(event.name) ?? true) && (prefix.map { event.name.hasPrefix($0) } ?? true)
            }
        }
        let owners: [UInt32]
        if let names {
            owners = Array(Set(names.map { CountdownAddress.split($0).owner }))
        } else if let prefix, let owner = CountdownAddress.onlyOwner(ofKeysStartingWith: prefix) {
            owners = [owner]
        } else {
            owners = Array(histories.keys)
        }
        // Every owner's history starts no earlier than the ring's own start.
        guard sequence >= initialKeptAfter else { throw .tooOld(keptAfter: initialKeptAfter, owner: viewer) }
        var result: [CountdownEvent] = []
        for owner in owners.sorted() {
            let kept = keptAfter(owner: owner)
            guard sequence >= kept else { throw .tooOld(keptAfter: kept, owner: owner) }
            guard let history = histories[owner] else { continue }
            // Numbers increase: the scan from the newest end stops at the first older event.
            var index = history.events.count
            while index > history.head && history.events[index - 1].sequence > sequence { index -= 1 }
            for event in history.events[index...] where names?.contains(event.name) ?? true {
                if let prefix, !event.name.hasPrefix(prefix) { continue }
                result.append(event)
            }
        }
        return owners.count > 1 ? result.sorted { $0.sequence < $1.sequence } : result
    }
}
