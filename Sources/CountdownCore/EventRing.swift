/// The most recent lifecycle events, kept for `SUBSCRIBE … SINCE <seq>`: a client that was away
/// replays what it missed, then goes live with no gap and no duplicate.
///
/// Bounded: once full, each new event pushes out the oldest. Ticks and snapshots are never kept
/// (they change nothing). The daemon fills it only with events that have been released to
/// clients, so a replay never shows a change that storage refused.
public struct EventRing: Sendable {
    /// The most events kept.
    public let capacity: Int
    private var storage: [CountdownEvent] = []
    /// Index in `storage` of the oldest event, once the ring is full.
    private var start = 0
    /// Every lifecycle event numbered after this is kept (or was never released: a number used by
    /// a change storage refused is a gap, not a loss).
    public private(set) var keptAfter: UInt64

    /// Creates an empty ring that holds every event after `keptAfter`.
    public init(capacity: Int, keptAfter: UInt64 = 0) {
        self.capacity = max(0, capacity)
        self.keptAfter = keptAfter
    }

    /// How many events are kept.
    public var count: Int { storage.count }

    /// Appends an event; lifecycle events only (others are ignored). Numbers must increase.
    public mutating func append(_ event: CountdownEvent) {
        guard event.kind.isLifecycle else { return }
        guard capacity > 0 else {
            keptAfter = max(keptAfter, event.sequence)
            return
        }
        if storage.count < capacity {
            storage.append(event)
        } else {
            keptAfter = storage[start].sequence
            storage[start] = event
            start = (start + 1) % capacity
        }
    }

    /// The kept events in order, oldest first.
    public var events: [CountdownEvent] {
        Array(storage[start...] + storage[..<start])
    }

    /// Why a replay cannot be served.
    public enum ReplayError: Error, Equatable {
        /// Events after `sequence` were pushed out; the ring keeps those after `keptAfter`.
        case tooOld(keptAfter: UInt64)
    }

    /// The kept events numbered after `sequence`, oldest first, optionally only those of `names`.
    /// - Throws: `tooOld` when events after `sequence` are no longer kept.
    public func events(after sequence: UInt64, names: Set<String>?) throws(ReplayError) -> [CountdownEvent] {
        guard sequence >= keptAfter else { throw .tooOld(keptAfter: keptAfter) }
        // Numbers increase around the ring: binary search would do, but a replay is rare and the
        // scan stops at the first newer event from the end.
        var result: [CountdownEvent] = []
        for event in events.reversed() {
            guard event.sequence > sequence else { break }
            if names?.contains(event.name) ?? true {
                result.append(event)
            }
        }
        return result.reversed()
    }
}
