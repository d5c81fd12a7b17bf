import CountdownCore

/// The checksums of a snapshot (schema 4): SQLite checks none of its pages, so a flipped bit in
/// a row would read as a different countdown (`s7-3` came back as `r7-3`). Each row carries the
/// CRC-32C of its values in a canonical encoding (little-endian, absent values as `Int64.min`,
/// the same for the writer and the reader whatever SQLite stores); `meta` carries the number of
/// rows of each table with the sum of their checksums, and a checksum of its own entries.
///
/// Reuses one buffer for the encoding: a million rows are checked at start-up.
struct SnapshotChecksum {
    /// The `meta` key of the checksum over the other entries.
    static let metaKey = "meta_crc"

    /// How many rows a table holds, and the wrapping sum of their checksums: a lost, added or
    /// altered row changes it.
    struct Digest: Equatable, CustomStringConvertible {
        var count: UInt64 = 0
        var sum: UInt64 = 0

        mutating func add(_ checksum: UInt32) {
            count += 1
            sum &+= UInt64(checksum)
        }

        /// As stored in `meta`: `count:sum`.
        var description: String { "\(count):\(sum)" }
    }

    struct Digests {
        var countdowns = Digest()
        var events = Digest()
    }

    private var buffer: [UInt8] = []

    /// The checksum of a countdown row.
    mutating func of(_ row: StoredCountdown) -> UInt32 {
        buffer.removeAll(keepingCapacity: true)
        append(row.name)
        buffer.append(UInt8(JournalFormat.states.firstIndex(of: row.state) ?? 255))
        append(row.totalMilliseconds)
        append(row.deadlineUnixMilliseconds)
        append(row.deadlineBootNanoseconds)
        append(row.remainingNanoseconds)
        append(row.finishedUnixMilliseconds)
        append(Int64(row.owner))
        append(row.lateMilliseconds)
        append(row.pinnedUnixMilliseconds)
        buffer.append(row.pausesOnSuspend ? 1 : 0)
        return CRC32C.checksum(buffer)
    }

    /// The checksum of a replay-history row; `name` as stored (the plain name).
    mutating func of(_ event: CountdownEvent, name: String) -> UInt32 {
        buffer.removeAll(keepingCapacity: true)
        append(Int64(bitPattern: event.sequence))
        append(event.kind.rawValue)
        append(name)
        append(event.remainingMilliseconds)
        append(event.totalMilliseconds)
        append(event.lateMilliseconds)
        append(Int64(event.owner))
        buffer.append(event.causedBySuspend ? 1 : 0)
        return CRC32C.checksum(buffer)
    }

    /// The checksum of `meta`'s entries but its own, by key: `key=value` lines.
    static func metaChecksum(_ entries: [(String, String)]) -> UInt32 {
        var text = ""
        for (key, value) in entries.sorted(by: { $0.0 < $1.0 }) where key != metaKey {
            text += "\(key)=\(value)\n"
        }
        return CRC32C.checksum(Array(text.utf8))
    }

    private mutating func append(_ value: Int64?) {
        JournalFormat.append(value ?? JournalFormat.absent, to: &buffer)
    }

    private mutating func append(_ text: String) {
        append(Int64(text.utf8.count))
        buffer.append(contentsOf: text.utf8)
    }
}
