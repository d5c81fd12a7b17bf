/// How each user numbers its own lifecycle events: a user's `seq` steps once for each change of
/// its own countdowns and never for another user's, so the numbers it receives say nothing of
/// what others do (PROTOCOL.md, *Events*). Root sees the daemon-wide numbers, which order every
/// user's events; it is never in the table.
///
/// Stored with the snapshot and, event by event, in the journal, so a user's numbers are exact
/// across restarts, as the daemon-wide ones are. (In cluster mode every host numbers events by
/// etcd's revision, the same for everyone; see CLUSTER.md.)
public struct OwnerSequences: Sendable, Equatable {
    /// Where the numbers of a user without any of its own start. 0 in a state directory that
    /// began with per-user numbers; in one written before them, the daemon-wide number at the
    /// upgrade, so each number a user received before stays behind every number it gets after.
    public private(set) var base: UInt64
    /// Each user's last number (absent: `base`).
    public private(set) var last: [UInt32: UInt64]

    /// A table starting every user at `base`, with `last` as the users' last numbers.
    public init(base: UInt64 = 0, last: [UInt32: UInt64] = [:]) {
        self.base = base
        self.last = last
    }

    /// The number of `owner`'s last lifecycle event.
    public func last(of owner: UInt32) -> UInt64 {
        max(base, last[owner] ?? 0)
    }

    /// Numbers `owner`'s next lifecycle event.
    mutating func next(for owner: UInt32) -> UInt64 {
        // One lookup (the dictionary's modify accessor), not one to read and one to write.
        Self.increment(&last[owner, default: 0], base: base)
    }

    private static func increment(_ value: inout UInt64, base: UInt64) -> UInt64 {
        value = max(value, base) + 1
        return value
    }

    /// Makes sure `owner`'s next number is after `sequence` (reading stored events back).
    public mutating func raise(_ owner: UInt32, to sequence: UInt64) {
        guard owner != 0, sequence > last(of: owner) else { return }
        last[owner] = sequence
    }

    /// Makes sure every user's next number is after `sequence`: reading state written before
    /// per-user numbers, where every user saw the daemon-wide numbers.
    public mutating func raiseBase(to sequence: UInt64) {
        base = max(base, sequence)
    }

    /// Sets `owner`'s last number back to `sequence`: numbers after it were taken by changes that
    /// were undone (`CountdownEngine.giveBackOwnerSequences`).
    mutating func rewind(_ owner: UInt32, to sequence: UInt64) {
        guard owner != 0 else { return }
        last[owner] = max(base, sequence)
    }

    /// Every user's numbers moved on by `count`: after a repair that may have lost some of a
    /// user's last events, so that no number it saw is given again, whoever it is.
    public func skipped(by count: UInt64) -> OwnerSequences {
        OwnerSequences(base: base + count, last: last.mapValues { $0 + count })
    }

    /// Takes in another table (what storage held), keeping the higher number of each user.
    public mutating func merge(_ other: OwnerSequences) {
        raiseBase(to: other.base)
        for (owner, sequence) in other.last { raise(owner, to: sequence) }
    }
}
