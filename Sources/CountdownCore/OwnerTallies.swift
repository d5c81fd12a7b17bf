/// What each owner (uid) holds, by owner, with the owner counted last kept aside.
///
/// Consecutive changes mostly concern one owner: a restart restores a million countdowns of one
/// user, and an OTP server's cooldowns all belong to its uid. Those are counted in the tally kept
/// aside, without a dictionary lookup each (two lookups a countdown were a tenth of filling the
/// engine at a launch). Counting another owner puts that tally back first: two lookups, as many
/// as one change cost before.
struct OwnerTallies: Sendable {
    /// Every owner's tally but `recentOwner`'s, whose entry here may be stale; no empty ones.
    private var byOwner: [UInt32: OwnerTally] = [:]
    /// The owner counted last, and its tally (authoritative).
    private var recentOwner: UInt32?
    private var recent = OwnerTally()

    /// What `owner` holds (nothing: an empty tally).
    func tally(of owner: UInt32) -> OwnerTally {
        owner == recentOwner ? recent : byOwner[owner] ?? OwnerTally()
    }

    /// Changes what `owner` holds with `change`.
    mutating func update(_ owner: UInt32, _ change: (inout OwnerTally) -> Void) {
        if owner != recentOwner {
            if let previous = recentOwner {
                byOwner[previous] = recent == OwnerTally() ? nil : recent
            }
            recentOwner = owner
            recent = byOwner[owner] ?? OwnerTally()
        }
        change(&recent)
    }
}
