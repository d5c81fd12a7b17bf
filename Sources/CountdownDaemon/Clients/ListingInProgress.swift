import CountdownCore

/// A reply of many lines in progress on one connection, produced a slice per batch: a `LIST`, or
/// the snapshots a new subscriber to everything is sent after its `OK`. The connection keeps it
/// (`Connection.Lifecycle.listing`); the daemon produces each slice (`Daemon+Listings`).
struct ListingInProgress {
    /// What the lines are.
    enum Purpose {
        /// `COUNTDOWN` lines, then `OK <count>`; it holds its place in its user's count
        /// (`ListingQuota`) until it is dropped.
        case list(ListingQuota.Permit)
        /// `EVENT snapshot` lines (the `OK` came first).
        case snapshots
    }

    var listing: CountdownListing
    let purpose: Purpose
    /// The wall clock as the listing started, for the wall-clock fields of its lines.
    let clock: WallClockMapping
    /// In cluster mode, the copy as the listing started, which its lines show (its final `OK`
    /// names it); `nil` on a daemon of its own.
    let copy: ChangeStore.ReadCopy?

    /// Whether its last slice was produced.
    var isFinished: Bool { listing.isFinished }

    /// A `LIST`'s place in its user's count; `nil` for snapshots, which are not counted.
    var permit: ListingQuota.Permit? {
        if case .list(let permit) = purpose { permit } else { nil }
    }
}
