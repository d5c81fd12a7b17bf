import CountdownCore

/// The journal's on-disk format: frames of records, little-endian.
///
/// A **frame** is what one batch's commit writes, in one `write`:
///
///     magic "CDJ\u{1}" (4 bytes) | payload length (u32) | CRC-32C of the payload (u32) | payload
///
/// A **payload** is one or more records, each starting with its type byte:
///
///     1 header  generation u64, created_unix_ms i64, boot id (u8 length + bytes)
///               -- the first frame of every journal file
///     2 event   seq u64, kind u8, state u8, owner u32, total_ms i64, event_remaining_ms i64,
///               late_ms i64, deadline_unix_ms i64, deadline_boot_ns i64, remaining_ns i64,
///               finished_unix_ms i64, name (u8 length + bytes), state late_ms i64,
///               pinned_unix_ms i64
///               -- a lifecycle event and the countdown's whole state after it; the name is
///               -- the plain name in the owner's namespace
///     3 removed seq u64, owner u32, total_ms i64, name (u8 length + bytes)
///               -- the countdown was forgotten (REMOVE, or the end of its retention)
///     4 flagged event: an event record (type 2's fields) followed by flags u8:
///               -- bit 0: the event was caused by the machine's sleep (`suspend`)
///               -- bit 1: the countdown stands still while the machine sleeps (ON-SUSPEND pause)
///               -- written only when a flag is set, so a journal of countdowns that never
///               -- pause on suspend stays readable by an older countdownd (which refuses a
///               -- type 4 record as a record of unknown type, and a schema 3 snapshot)
///
/// Absent values are `Int64.min`. Ticks are never written: they are derived from deadlines.
enum JournalFormat {
    static let magic: [UInt8] = [0x43, 0x44, 0x4A, 0x01]
    static let frameHeaderSize = 12
    /// A frame longer than this is not one the daemon wrote.
    static let maximumPayload = 1 << 30
    static let absent = Int64.min

    enum RecordType: UInt8 {
        case header = 1
        case event = 2
        case removed = 3
        case flaggedEvent = 4
    }

    /// The flags of a `flaggedEvent` record.
    enum EventFlag {
        static let causedBySuspend: UInt8 = 1
        static let pausesOnSuspend: UInt8 = 2
        static let known: UInt8 = 3
    }

    /// Event kinds by their stored index; new kinds go at the end. (`snapshot` records hold a
    /// cluster-mode host's copy as read from etcd.)
    static let kinds: [EventKind] = [.started, .paused, .resumed, .extended, .done, .cancelled, .removed, .snapshot]
    static let states: [CountdownState] = [.running, .paused, .done, .cancelled]

    /// The header record of a journal file.
    struct Header: Equatable {
        var generation: UInt64
        var createdUnixMilliseconds: Int64
        var bootID: String?
    }

    /// An event record: a lifecycle event and the countdown's state after it (`nil`: removed).
    struct EventRecord: Equatable {
        var event: CountdownEvent
        var state: StoredCountdown?
    }

    // MARK: Writing

    /// Reserves room for a frame header at the end of `buffer`; `sealFrame` fills it in.
    static func beginFrame(in buffer: inout [UInt8]) {
        buffer.append(contentsOf: [UInt8](repeating: 0, count: frameHeaderSize))
    }

    /// Fills in the header of the frame that starts at `start`, covering everything after it.
    static func sealFrame(in buffer: inout [UInt8], at start: Int) {
        let payloadLength = buffer.count - start - frameHeaderSize
        let crc = buffer.withUnsafeBytes { raw in
            CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[(start + frameHeaderSize)...]))
        }
        buffer.replaceSubrange(start..<(start + 4), with: magic)
        store(UInt32(payloadLength), at: start + 4, in: &buffer)
        store(crc, at: start + 8, in: &buffer)
    }

    static func appendHeader(_ header: Header, to buffer: inout [UInt8]) {
        buffer.append(RecordType.header.rawValue)
        append(header.generation, to: &buffer)
        append(header.createdUnixMilliseconds, to: &buffer)
        appendShortString(header.bootID ?? "", to: &buffer)
    }

    static func appendEvent(_ event: CountdownEvent, state: StoredCountdown, to buffer: inout [UInt8]) {
        let flags = (event.causedBySuspend ? EventFlag.causedBySuspend : 0) | (state.pausesOnSuspend ? EventFlag.pausesOnSuspend : 0)
        buffer.append(flags == 0 ? RecordType.event.rawValue : RecordType.flaggedEvent.rawValue)
        append(event.sequence, to: &buffer)
        buffer.append(UInt8(kinds.firstIndex(of: event.kind) ?? 0))
        buffer.append(UInt8(states.firstIndex(of: state.state) ?? 0))
        append(UInt64(state.owner), to: &buffer, width: 4)
        append(state.totalMilliseconds, to: &buffer)
        append(event.remainingMilliseconds, to: &buffer)
        append(event.lateMilliseconds ?? absent, to: &buffer)
        append(state.deadlineUnixMilliseconds ?? absent, to: &buffer)
        append(state.deadlineBootNanoseconds ?? absent, to: &buffer)
        append(state.remainingNanoseconds, to: &buffer)
        append(state.finishedUnixMilliseconds ?? absent, to: &buffer)
        appendShortString(state.name, to: &buffer)
        append(state.lateMilliseconds ?? absent, to: &buffer)
        append(state.pinnedUnixMilliseconds ?? absent, to: &buffer)
        if flags != 0 {
            buffer.append(flags)
        }
    }

    static func appendRemoved(_ event: CountdownEvent, to buffer: inout [UInt8]) {
        buffer.append(RecordType.removed.rawValue)
        append(event.sequence, to: &buffer)
        append(UInt64(event.owner), to: &buffer, width: 4)
        append(event.totalMilliseconds, to: &buffer)
        appendShortString(CountdownAddress.display(event.name, owner: event.owner, to: event.owner), to: &buffer)
    }

    private static func append(_ value: Int64, to buffer: inout [UInt8]) {
        append(UInt64(bitPattern: value), to: &buffer)
    }

    private static func append(_ value: UInt64, to buffer: inout [UInt8], width: Int = 8) {
        for shift in 0..<width {
            buffer.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(shift))))
        }
    }

    private static func appendShortString(_ text: String, to buffer: inout [UInt8]) {
        let bytes = text.utf8.prefix(255)
        buffer.append(UInt8(bytes.count))
        buffer.append(contentsOf: bytes)
    }

    private static func store(_ value: UInt32, at offset: Int, in buffer: inout [UInt8]) {
        for shift in 0..<4 {
            buffer[offset + shift] = UInt8(truncatingIfNeeded: value >> (8 * UInt32(shift)))
        }
    }

    // MARK: Reading

    /// What a scan of a journal file found.
    struct Scan {
        var header: Header?
        var events: [EventRecord] = []
        /// Bytes of whole, valid frames from the start of the file.
        var validLength = 0
        /// A torn last frame: what was wrong with it (the file is cut back to `validLength`).
        var tornTail: String?
        /// Damage that is not a torn tail: where, and what.
        var damage: (offset: Int, reason: String)?
    }

    /// Reads every frame of a journal file's contents.
    ///
    /// A frame that runs past the end of the file, a last frame whose checksum fails, or zeros to
    /// the end (space the file system allocated but never filled) is a torn tail: what a write cut
    /// short by a crash or a power loss leaves, provided no whole frame follows it (frames are
    /// written one after the other, so nothing valid comes after a torn one). Anything else that
    /// does not check out, or a "torn" frame with a valid one after it (a flipped bit in a length
    /// field), is damage.
    static func scan(_ bytes: [UInt8]) -> Scan {
        var events: [EventRecord] = []
        var scan = scan(bytes) { events.append($0) }
        scan.events = events
        return scan
    }

    /// Reads every frame, handing each record to `visit` as it is decoded (recovery of a large
    /// journal keeps only what it needs); the returned `Scan` has no `events`.
    static func scan(_ bytes: [UInt8], visit: (EventRecord) -> Void) -> Scan {
        var scan = Scan()
        var offset = 0
        while offset < bytes.count {
            let left = bytes.count - offset
            guard left >= frameHeaderSize, bytes[offset..<(offset + 4)].elementsEqual(magic) else {
                if bytes[offset...].allSatisfy({ $0 == 0 }) {
                    scan.tornTail = "\(left) zero bytes at the end"
                } else if let next = nextValidFrame(in: bytes, after: offset) {
                    scan.damage = (offset, "no frame starts here (bad magic), yet a whole frame follows at byte \(next)")
                } else if left < frameHeaderSize {
                    scan.tornTail = "a frame header cut short (\(left) bytes)"
                } else {
                    scan.damage = (offset, "no frame starts here (bad magic)")
                }
                break
            }
            let length = Int(load32(bytes, offset + 4))
            let crc = load32(bytes, offset + 8)
            guard length <= left - frameHeaderSize else {
                if let next = nextValidFrame(in: bytes, after: offset) {
                    scan.damage = (offset, "a frame's length (\(length) bytes) runs past the end of the file, yet a whole frame follows at byte \(next): its length field is damaged")
                } else {
                    scan.tornTail = "a frame of \(length) bytes cut short at \(left - frameHeaderSize)"
                }
                break
            }
            let payloadStart = offset + frameHeaderSize
            let payloadEnd = payloadStart + length
            let actual = bytes.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[payloadStart..<payloadEnd])) }
            guard actual == crc else {
                if payloadEnd == bytes.count || bytes[payloadEnd...].allSatisfy({ $0 == 0 }) {
                    scan.tornTail = "the last frame's checksum does not match (a write cut short)"
                } else {
                    scan.damage = (offset, "checksum mismatch in a frame followed by more data")
                }
                break
            }
            // (withUnsafeBytes rethrows untyped errors: the result carries the typed one out.)
            let decoded: Result<Void, FormatError> = bytes.withUnsafeBytes { raw in
                do throws(FormatError) {
                    try decodePayload(raw, from: payloadStart, to: payloadEnd, into: &scan, visit: visit)
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }
            if case .failure(let error) = decoded {
                scan.damage = (offset, error.reason)
                break
            }
            offset = payloadEnd
            scan.validLength = offset
        }
        return scan
    }

    /// Where the first whole frame (magic, a length within the file, a matching checksum) after
    /// `offset` starts, if any: the test between a torn tail and damage. Only on the rare path
    /// of a frame that does not check out.
    static func nextValidFrame(in bytes: [UInt8], after offset: Int) -> Int? {
        var candidate = offset + 1
        while candidate + frameHeaderSize <= bytes.count {
            if bytes[candidate] == magic[0], bytes[candidate..<(candidate + 4)].elementsEqual(magic) {
                let length = Int(load32(bytes, candidate + 4))
                let payloadStart = candidate + frameHeaderSize
                if length > 0, length <= bytes.count - payloadStart {
                    let actual = bytes.withUnsafeBytes {
                        CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[payloadStart..<(payloadStart + length)]))
                    }
                    if actual == load32(bytes, candidate + 8) { return candidate }
                }
            }
            candidate += 1
        }
        return nil
    }

    /// The header record a journal file starts with, if its first frame begins with one (its
    /// checksum is checked by `scan`).
    static func header(of bytes: [UInt8]) -> Header? {
        guard bytes.count >= frameHeaderSize, bytes[0..<4].elementsEqual(magic) else { return nil }
        let end = min(bytes.count, frameHeaderSize + Int(load32(bytes, 4)))
        return bytes.withUnsafeBytes { raw -> Header? in
            var reader = Reader(bytes: raw, offset: frameHeaderSize, end: end)
            guard (try? reader.byte()) == RecordType.header.rawValue else { return nil }
            return try? reader.header()
        }
    }

    struct FormatError: Error {
        var reason: String
    }

    private static func decodePayload(
        _ bytes: UnsafeRawBufferPointer, from start: Int, to end: Int, into scan: inout Scan, visit: (EventRecord) -> Void
    ) throws(FormatError) {
        var reader = Reader(bytes: bytes, offset: start, end: end)
        while reader.offset < end {
            let type = RecordType(rawValue: try reader.byte())
            switch type {
            case .header:
                scan.header = try reader.header()
            case .event, .flaggedEvent:
                let flagged = type == .flaggedEvent
                let sequence = try reader.u64()
                let kindIndex = Int(try reader.byte()), stateIndex = Int(try reader.byte())
                guard kindIndex < kinds.count, stateIndex < states.count else {
                    throw FormatError(reason: "an event record with an unknown kind or state")
                }
                let owner = UInt32(truncatingIfNeeded: try reader.u64(width: 4))
                let total = try reader.i64(), eventRemaining = try reader.i64(), eventLate = try reader.i64()
                let deadlineUnix = try reader.i64(), deadlineBoot = try reader.i64(), remaining = try reader.i64()
                let finished = try reader.i64()
                let name = try reader.shortString()
                let stateLate = try reader.i64()
                let pinned = try reader.i64()
                let flags = flagged ? try reader.byte() : 0
                guard flags & ~EventFlag.known == 0 else {
                    throw FormatError(reason: "an event record with unknown flags (\(flags))")
                }
                func present(_ value: Int64) -> Int64? { value == absent ? nil : value }
                var event = CountdownEvent(
                    sequence: sequence, kind: kinds[kindIndex], name: CountdownAddress.key(owner: owner, name: name),
                    remainingMilliseconds: eventRemaining, totalMilliseconds: total, lateMilliseconds: present(eventLate),
                    owner: owner
                )
                event.causedBySuspend = flags & EventFlag.causedBySuspend != 0
                visit(EventRecord(
                    event: event,
                    state: StoredCountdown(
                        name: name, state: states[stateIndex], totalMilliseconds: total,
                        deadlineUnixMilliseconds: present(deadlineUnix), deadlineBootNanoseconds: present(deadlineBoot),
                        remainingNanoseconds: remaining, finishedUnixMilliseconds: present(finished),
                        owner: owner, lateMilliseconds: present(stateLate), pinnedUnixMilliseconds: present(pinned),
                        pausesOnSuspend: flags & EventFlag.pausesOnSuspend != 0
                    )
                ))
            case .removed:
                let sequence = try reader.u64()
                let owner = UInt32(truncatingIfNeeded: try reader.u64(width: 4))
                let total = try reader.i64()
                let name = try reader.shortString()
                visit(EventRecord(
                    event: CountdownEvent(
                        sequence: sequence, kind: .removed, name: CountdownAddress.key(owner: owner, name: name),
                        remainingMilliseconds: 0, totalMilliseconds: total, owner: owner
                    ),
                    state: nil
                ))
            case nil:
                throw FormatError(reason: "a record of unknown type")
            }
        }
    }

    private static func load32(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16 | UInt32(bytes[offset + 3]) << 24
    }

    /// Reads little-endian fields from a frame's payload, checking each against the payload's end
    /// (the frame's length was checked against the file, so no read leaves the buffer).
    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var offset: Int
        let end: Int

        mutating func byte() throws(FormatError) -> UInt8 {
            guard offset < end else { throw FormatError(reason: "a record cut short") }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func u64(width: Int = 8) throws(FormatError) -> UInt64 {
            guard end - offset >= width else { throw FormatError(reason: "a record cut short") }
            defer { offset += width }
            if width == 8 {
                return UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            }
            return UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
        }

        mutating func i64() throws(FormatError) -> Int64 {
            Int64(bitPattern: try u64())
        }

        /// The fields of a header record (after its type byte).
        mutating func header() throws(FormatError) -> Header {
            let generation = try u64()
            let created = try i64()
            let boot = try shortString()
            return Header(generation: generation, createdUnixMilliseconds: created, bootID: boot.isEmpty ? nil : boot)
        }

        mutating func shortString() throws(FormatError) -> String {
            let count = Int(try byte())
            guard end - offset >= count else { throw FormatError(reason: "a record cut short") }
            defer { offset += count }
            return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)]), as: UTF8.self)
        }
    }
}
