/// The limits on how many countdowns exist (`--max-countdowns`, less root's reserve for others,
/// and `--max-countdowns-per-user`), made exact across a fleet (cluster mode).
///
/// Each pool is a numbered set of slots: the daemon-wide pool has `maximumCountdowns`, each
/// non-root uid's has `maximumCountdownsPerOwner`. A new countdown claims a free slot in each
/// pool it counts against, and the shared store creates the slot's key in the same transaction
/// as the countdown, on the condition that it does not exist yet. So two hosts can never both
/// take the last slot: one of the two creations fails its condition, and is judged again once
/// its host has seen the other's. A countdown's removal deletes its slots in the same
/// transaction. Users other than root take slots below `RootReserve.usable`, so the reserve's
/// slots stay root's across the fleet. Root takes the others' range first and the reserve's
/// once that is full, so that root's countdowns count against the others' range, as a single
/// host counts them.
///
/// This value knows which slots the shared store holds (as its watch reports them) and which
/// this host has claimed for creations not yet decided. It reads no clock and does no I/O.
public struct QuotaSlots: Sendable {
    /// One slot: its pool and its number.
    public struct Slot: Hashable, Sendable, CustomStringConvertible {
        /// The uid whose quota it counts against; `nil` for the daemon-wide pool.
        public var owner: UInt32?
        /// Its number in the pool, from 0.
        public var index: Int

        /// A slot of the daemon-wide pool (`owner` `nil`) or of one uid's.
        public init(owner: UInt32?, index: Int) {
            self.owner = owner
            self.index = index
        }

        /// Its key under the cluster prefix: `.slots/all/<index>` or `.slots/<uid>/<index>`.
        /// (Never a countdown's key: a countdown's first part is a uid or a name, and `.slots`
        /// is neither.)
        public var key: String {
            QuotaSlots.keyInfix + (owner.map { String($0) } ?? "all") + "/" + String(index)
        }

        /// The slot a key under the prefix names, or `nil` for any other key.
        public init?(key: String) {
            guard key.hasPrefix(QuotaSlots.keyInfix) else { return nil }
            let parts = key.dropFirst(QuotaSlots.keyInfix.count).split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count == 2, let index = Int(parts[1]), index >= 0 else { return nil }
            if parts[0] == "all" {
                owner = nil
            } else if let uid = UInt32(parts[0]) {
                owner = uid
            } else {
                return nil
            }
            self.index = index
        }

        /// Its key.
        public var description: String { key }
    }

    /// Where slots live under the cluster prefix.
    public static let keyInfix = ".slots/"

    /// Whether `key` (under the prefix, the prefix removed) is a slot, not a countdown.
    public static func isSlotKey(_ key: String) -> Bool {
        key.hasPrefix(keyInfix)
    }

    /// How many random numbers are tried before the pool is searched in order.
    private static let randomProbes = 16

    private let maximumCountdowns: Int
    private let maximumPerOwner: Int
    /// The slots the shared store holds, and the countdown key each was taken for.
    private var holders: [Slot: String] = [:]
    /// The same, by countdown key.
    private var slotsByHolder: [String: [Slot]] = [:]
    /// How many slots of each pool the store holds (`nil`: the daemon-wide pool).
    private var heldCount: [UInt32?: Int] = [:]
    /// Claimed by this host for creations the store has not decided yet.
    private var claimed: Set<Slot> = []

    /// No slot held, for these limits.
    public init(limits: EngineConfiguration) {
        maximumCountdowns = limits.maximumCountdowns
        maximumPerOwner = limits.maximumCountdownsPerOwner
    }

    // MARK: - What the store holds

    /// The store holds `slot`, taken for the countdown `holder`. Noting it again changes nothing.
    public mutating func noteHeld(_ slot: Slot, by holder: String) {
        if let previous = holders[slot] {
            guard previous != holder else { return }
            slotsByHolder[previous]?.removeAll { $0 == slot }
            if slotsByHolder[previous]?.isEmpty == true { slotsByHolder[previous] = nil }
        } else {
            heldCount[slot.owner, default: 0] += 1
        }
        holders[slot] = holder
        slotsByHolder[holder, default: []].append(slot)
    }

    /// The store no longer holds `slot`. Noting it again changes nothing.
    public mutating func noteFreed(_ slot: Slot) {
        guard let holder = holders.removeValue(forKey: slot) else { return }
        heldCount[slot.owner, default: 1] -= 1
        slotsByHolder[holder]?.removeAll { $0 == slot }
        if slotsByHolder[holder]?.isEmpty == true { slotsByHolder[holder] = nil }
    }

    /// Everything the store holds, read at once (claims in flight stay claimed).
    public mutating func replaceHeld(with held: [(slot: Slot, holder: String)]) {
        holders.removeAll(keepingCapacity: true)
        slotsByHolder.removeAll(keepingCapacity: true)
        heldCount.removeAll(keepingCapacity: true)
        for (slot, holder) in held { noteHeld(slot, by: holder) }
    }

    /// Every slot the store holds, with the countdown it was taken for.
    public var heldSlots: [(slot: Slot, holder: String)] {
        holders.map { ($0.key, $0.value) }
    }

    /// The slots the countdown `key` holds: what its removal frees.
    public func slots(heldBy key: String) -> [Slot] {
        slotsByHolder[key] ?? []
    }

    /// How many slots of the pool (`owner` `nil`: daemon-wide) the store holds.
    public func heldCount(owner: UInt32?) -> Int {
        heldCount[owner] ?? 0
    }

    // MARK: - Claiming

    /// Claims the slots a new countdown of `owner` needs: one in the daemon-wide pool, and one
    /// in the owner's own unless it is root. They stay claimed until `release`d, whatever the
    /// store decides, so that this host's creations in flight never claim one twice.
    /// - Throws: `limit` when a pool has no free slot this host knows of.
    public mutating func claim(for owner: UInt32, using generator: inout some RandomNumberGenerator) throws(ProtocolError) -> [Slot] {
        let usable = RootReserve.usable(of: maximumCountdowns, by: owner)
        // Root's countdowns fill the others' range first, as on a single host, where they count
        // towards the point past which others are refused; the reserve is root's alone.
        let othersUsable = RootReserve.usable(of: maximumCountdowns, by: 1)
        let ranges = owner == 0 ? [0..<othersUsable, othersUsable..<maximumCountdowns] : [0..<usable]
        guard let shared = freeSlot(owner: nil, in: ranges, using: &generator) else {
            throw ProtocolError(
                .limit,
                owner == 0 || usable == maximumCountdowns
                    ? "the fleet already holds its maximum of \(maximumCountdowns) countdowns, counting those being created (a higher --max-countdowns on every host makes room); REMOVE finished ones"
                    : "the fleet holds \(usable) of its \(maximumCountdowns) countdowns that users other than root may have, counting those being created (the last \(RootReserve.share(of: maximumCountdowns)) are kept for root; a higher --max-countdowns makes room); REMOVE finished ones",
                fields: [.advice(.removeFinished)]
            )
        }
        claimed.insert(shared)
        guard owner != 0 else { return [shared] }
        guard let own = freeSlot(owner: owner, in: [0..<maximumPerOwner], using: &generator) else {
            claimed.remove(shared)
            throw ProtocolError(
                .limit,
                "uid \(owner) already holds its maximum of \(maximumPerOwner) countdowns across the fleet, counting those being created (a higher --max-countdowns-per-user allows more); REMOVE finished ones",
                fields: [.advice(.removeFinished)]
            )
        }
        claimed.insert(own)
        return [shared, own]
    }

    /// Ends a claim: the store decided the creation (a slot it made is then held, `noteHeld`).
    public mutating func release(_ slots: [Slot]) {
        for slot in slots { claimed.remove(slot) }
    }

    /// How many slots this host has claimed for creations in flight.
    public var claimedCount: Int { claimed.count }

    private func isFree(_ slot: Slot) -> Bool {
        holders[slot] == nil && !claimed.contains(slot)
    }

    /// A free slot of the pool in the first of `ranges` that has one: random, so that hosts
    /// claiming at once rarely pick the same one, else the first free one after a random start.
    private func freeSlot(owner: UInt32?, in ranges: [Range<Int>], using generator: inout some RandomNumberGenerator) -> Slot? {
        for range in ranges where !range.isEmpty {
            for _ in 0..<Self.randomProbes {
                let slot = Slot(owner: owner, index: Int.random(in: range, using: &generator))
                if isFree(slot) { return slot }
            }
            let start = Int.random(in: range, using: &generator)
            for offset in 0..<range.count {
                let slot = Slot(owner: owner, index: range.lowerBound + (start - range.lowerBound + offset) % range.count)
                if isFree(slot) { return slot }
            }
        }
        return nil
    }
}
