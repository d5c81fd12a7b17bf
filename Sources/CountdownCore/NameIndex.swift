/// The engine's index from a countdown's name to its slot: an open-addressing hash table with
/// linear probing that keeps each entry's hash beside its slot.
///
/// Why not `[String: Int32]`: a Swift `Dictionary` that outgrows its buckets rehashes every key,
/// which for 100,000 names is a stall of over ten milliseconds on the daemon's only queue, right
/// while countdowns are due (measured in the benchmark as a spike of `tick` lateness each time the
/// count crossed a power of two). This table grows by moving stored hashes, never hashing a name
/// again, and at 8 bytes a bucket it is also smaller. Names themselves live in the engine's
/// records; lookups compare them through the `matches` closure.
public struct NameIndex: Sendable {
    private struct Bucket: Sendable {
        var hash: UInt32
        /// The slot, or `-1` for an empty bucket.
        var slot: Int32

        static let empty = Bucket(hash: 0, slot: -1)
    }

    private var buckets: [Bucket] = Array(repeating: .empty, count: 16)

    /// An empty index.
    public init() {}
    /// How many names are held.
    public private(set) var count = 0

    private var mask: Int { buckets.count - 1 }

    /// The hash this index files `name` under.
    public static func hash(_ name: String) -> UInt32 {
        UInt32(truncatingIfNeeded: name.hashValue)
    }

    /// The slot filed under `hash` for which `matches` says yes, or `nil`.
    public func find(hash: UInt32, matches: (Int32) -> Bool) -> Int32? {
        var index = Int(hash) & mask
        while true {
            let bucket = buckets[index]
            if bucket.slot < 0 { return nil }
            if bucket.hash == hash && matches(bucket.slot) { return bucket.slot }
            index = (index + 1) & mask
        }
    }

    /// The slot in the bucket where a search for `hash` begins, or `-1` when that bucket is
    /// empty, in which case no name filed under `hash` is held.
    ///
    /// At a million names every bucket read is a cache miss. Reading the first buckets of a
    /// batch of hashes in one loop, before handling any of them, lets those misses overlap
    /// instead of each waiting for the one before (recovery does this with 32 names at a time).
    public func homeSlot(of hash: UInt32) -> Int32 {
        buckets[Int(hash) & mask].slot
    }

    /// Files `slot` under `hash`; the caller has checked that its name is not already held.
    public mutating func insert(hash: UInt32, slot: Int32) {
        // At most three quarters full, so probe runs stay short.
        if (count + 1) * 4 > buckets.count * 3 {
            grow()
        }
        place(Bucket(hash: hash, slot: slot))
        count += 1
    }

    /// Removes `slot`, filed under `hash`. Later entries of its probe run move back into the gap
    /// (backward-shift deletion), so no tombstones accumulate.
    public mutating func remove(hash: UInt32, slot: Int32) {
        var index = Int(hash) & mask
        while buckets[index].slot != slot {
            guard buckets[index].slot >= 0 else { return }
            index = (index + 1) & mask
        }
        var gap = index
        var next = (gap + 1) & mask
        while buckets[next].slot >= 0 {
            let home = Int(buckets[next].hash) & mask
            // The entry at `next` may fill the gap unless its home lies cyclically in (gap, next].
            let distanceToNext = (next - home) & mask
            let distanceToGap = (gap - home) & mask
            if distanceToGap < distanceToNext {
                buckets[gap] = buckets[next]
                gap = next
            }
            next = (next + 1) & mask
        }
        buckets[gap] = .empty
        count -= 1
    }

    private mutating func place(_ entry: Bucket) {
        var index = Int(entry.hash) & mask
        while buckets[index].slot >= 0 {
            index = (index + 1) & mask
        }
        buckets[index] = entry
    }

    private mutating func grow(to bucketCount: Int? = nil) {
        let old = buckets
        buckets = Array(repeating: .empty, count: bucketCount ?? old.count * 2)
        for entry in old where entry.slot >= 0 {
            place(entry)
        }
    }

    /// Makes room for `total` names at once (at most three quarters full), so that filling the
    /// index with a restored state moves nothing.
    public mutating func reserveCapacity(_ total: Int) {
        var bucketCount = buckets.count
        while total * 4 > bucketCount * 3 {
            bucketCount *= 2
        }
        if bucketCount > buckets.count {
            grow(to: bucketCount)
        }
    }
}
