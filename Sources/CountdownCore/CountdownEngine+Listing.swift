/// Which countdowns a listing shows: a viewer's namespace, some states, a name prefix.
public struct ListFilter: Sendable, Equatable {
    /// The uid the listing is for: root (0) sees every namespace, anyone else only its own.
    public var viewer: UInt32
    /// The states shown; empty shows every state.
    public var states: Set<CountdownState>
    /// Only names that start with this, as the viewer writes them (`tea` for a user's own
    /// `1000/tea`; root writes `1000/` for all of uid 1000's). Empty matches every name.
    public var prefix: String

    /// Creates a filter; the defaults show everything the viewer may see.
    public init(viewer: UInt32, states: Set<CountdownState> = [], prefix: String = "") {
        self.viewer = viewer
        self.states = states
        self.prefix = prefix
    }

    /// The prefix keys must have: a user's namespace is the start of each of its keys.
    public var keyPrefix: String {
        viewer == 0 ? prefix : CountdownAddress.key(owner: viewer, name: prefix)
    }
}

/// A listing of many countdowns, produced in bounded slices so that a million of them never hold
/// the daemon's queue for long: the daemon calls `CountdownEngine.nextSlice(of:limit:now:)` once
/// per batch, and other clients and due events are served in between.
///
/// Two kinds of consistency, chosen when it starts:
/// - **frozen** (`LIST`): every countdown exactly as it was at the instant the listing started.
///   It reads a copy-on-write image of the records, so changes made while it runs are not in it:
///   a countdown that existed then appears once, with its state then; one started later does not
///   appear. Cost: each page of 4,096 records that changes meanwhile is copied once.
/// - **live** (a new subscriber's snapshots): each countdown as it is when its line is produced.
///   Every change after that line reaches the subscriber as an event after it, so applying lines
///   in order ends in the true state; a countdown started meanwhile may come as its `started`
///   event only.
///
/// Order: by slot (roughly, order of creation), not by name: sorting a million names would be
/// the stall this exists to avoid. Clients sort (cdctl does).
public struct CountdownListing: Sendable {
    /// What it shows.
    public let filter: ListFilter
    /// For a frozen listing: the records, the cycles' phases (a cycle's phase then, not now),
    /// and the instant it shows.
    fileprivate let frozen: (records: SlotTable<CountdownEngine.Record>, cycles: [String: CountdownCycle], at: Instant)?
    /// Where the next slice begins.
    fileprivate var nextSlot = 0
    /// Whether every slot has been looked at.
    public fileprivate(set) var isFinished = false
    /// How many countdowns it has produced.
    public fileprivate(set) var producedCount = 0
}

extension CountdownEngine {
    /// Starts a listing of the countdowns `filter` selects; see `CountdownListing`.
    /// - Parameter frozen: show every countdown as of `now` (`LIST`), or each as it is when its
    ///   slice is produced (a subscriber's snapshots).
    public func listing(_ filter: ListFilter, frozen: Bool, now: Instant) -> CountdownListing {
        CountdownListing(filter: filter, frozen: frozen ? (records, cycles, now) : nil)
    }

    /// The next at most `limit` countdowns of `listing`, looking at no more than `8 × limit`
    /// slots (so a filter that selects few does not turn one slice into a full scan).
    public func nextSlice(of listing: inout CountdownListing, limit: Int, now: Instant) -> [CountdownSnapshot] {
        guard !listing.isFinished else { return [] }
        let table = listing.frozen?.records ?? records
        let instant = listing.frozen?.at ?? now
        let filter = listing.filter
        let keyPrefix = filter.keyPrefix
        var slice: [CountdownSnapshot] = []
        slice.reserveCapacity(Swift.min(limit, 1024))
        var slot = listing.nextSlot
        let lastSlot = Swift.min(table.count, slot + 8 * Swift.max(limit, 1))
        while slot < lastSlot && slice.count < limit {
            defer { slot += 1 }
            guard let record = table[slot] else { continue }
            guard filter.viewer == 0 || record.owner == filter.viewer,
                  filter.states.isEmpty || filter.states.contains(record.state),
                  keyPrefix.isEmpty || record.name.utf8.starts(with: keyPrefix.utf8) else { continue }
            var shown = snapshot(of: record, now: instant)
            if let frozen = listing.frozen, record.isCycle { shown.cycle = frozen.cycles[record.name] }
            slice.append(shown)
        }
        listing.nextSlot = slot
        // A live listing ends at the slots that exist now; a countdown in a slot added later was
        // started after the listing began, and its subscriber gets its `started` event.
        listing.isFinished = slot >= table.count
        listing.producedCount += slice.count
        return slice
    }
}
