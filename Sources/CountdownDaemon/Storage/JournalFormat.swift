import CountdownCore

/// The journal's on-disk format: frames of records, little-endian.
///
/// A **frame** is what one batch's commit writes, in one `write`:
///
///     magic "CDJ\u{2}" (4 bytes) | payload length (u32) | CRC-32C (u32) | frame index (u64) | payload
///
/// The checksum covers the frame index and the payload. A file's frames are numbered from 0 (its
/// header frame) up, one by one, so a frame removed, repeated or moved is seen where it breaks the
/// count, and `--repair-state` can put intact frames back in their order. Files written by
/// countdownd before frame indexes (magic "CDJ\u{1}", no index: a 12-byte frame header) are read
/// as they are; one file never mixes the two.
///
/// A **payload** is one or more records, each starting with its type byte:
///
///     1 header  generation u64, created_unix_ms i64, boot id (u8 length + bytes),
///               [ordered files:] follows: the index (u64; all ones: none) and CRC-32C (u32) of
///               the last frame of the journal file before this one
///               -- the only record of frame 0, and only there
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
///               -- bit 2: the owner's own number follows, owner_seq u64 (`OwnerSequences`)
///               -- every event is written so since per-user numbers; before, only when a
///               -- flag was set
///               -- bit 3: the countdown's cycle follows (after owner_seq), a cycle block
///               -- bit 4: the event's own cycle follows (after the countdown's), a cycle block
///               -- bit 5: a `changed` event's setting is ON-SUSPEND pause (clear: count)
///               -- bit 6: with bit 4, the event's cycle has the countdown's phases: only its
///               -- place follows (rounds u32, phase index u16, round u32), not the phases again
///               -- bit 7: the event's own total_ms i64 follows (after the blocks), when it
///               -- differs from the countdown's by the commit (two phases begun in one batch)
///     cycle block: rounds u32 (0: for ever), phase index u16, round u32, phase count u8, then
///               per phase: duration_ms i64, label (u8 length + bytes)
///     5 removed, numbered: a removed record (type 3's fields) followed by owner_seq u64
///     6 removed, numbered, of a cycle: type 5's fields followed by the event's cycle block (the
///               phase it was in, for the replayed `removed` line's `phase=`, `label=`, `round=`)
///
/// A record without `owner_seq` was written before per-user numbers: its owner saw the
/// daemon-wide `seq`, which stands for its own number.
///
/// Absent values are `Int64.min`. Ticks are never written: they are derived from deadlines.
enum JournalFormat {
    /// How a file's frames are laid out, told by their magic.
    enum Layout: Equatable {
        /// Frames numbered from 0, the checksum covering the number (magic "CDJ\u{2}"): what
        /// countdownd writes.
        case ordered
        /// Frames without numbers (magic "CDJ\u{1}"), written by earlier versions; read only.
        case unnumbered

        var magic: [UInt8] { self == .ordered ? JournalFormat.magic : [0x43, 0x44, 0x4A, 0x01] }
        /// Magic, length and checksum, and in an ordered frame its index.
        var headerSize: Int { self == .ordered ? 20 : 12 }
    }

    static let magic: [UInt8] = [0x43, 0x44, 0x4A, 0x02]
    /// The header of a frame as written (`Layout.ordered`).
    static let frameHeaderSize = 20
    /// A frame longer than this is not one the daemon wrote.
    static let maximumPayload = 1 << 30
    static let absent = Int64.min

    enum RecordType: UInt8 {
        case header = 1
        case event = 2
        case removed = 3
        case flaggedEvent = 4
        case numberedRemoved = 5
        case cycleRemoved = 6
    }

    /// The flags of a `flaggedEvent` record.
    enum EventFlag {
        static let causedBySuspend: UInt8 = 1
        static let pausesOnSuspend: UInt8 = 2
        static let ownerSequence: UInt8 = 4
        static let stateCycle: UInt8 = 8
        static let eventCycle: UInt8 = 16
        static let changedToPause: UInt8 = 32
        static let eventCyclePlace: UInt8 = 64
        static let eventTotal: UInt8 = 128
        static let known: UInt8 = 255
    }

    /// Event kinds by their stored index; new kinds go at the end. (`snapshot` records hold a
    /// cluster-mode host's copy as read from etcd.)
    static let kinds: [EventKind] = [.started, .paused, .resumed, .extended, .done, .cancelled, .removed, .snapshot, .phase, .changed]
    static let states: [CountdownState] = [.running, .paused, .done, .cancelled]

    /// The header record of a journal file.
    struct Header: Equatable {
        var generation: UInt64
        var createdUnixMilliseconds: Int64
        var bootID: String?
        /// The last frame of the journal file before this one (`nil`: none, or unknown to an
        /// unnumbered file's writer): a file cut short or missing frames at its end shows here.
        var follows: FrameMark? = nil
    }

    /// One frame, by its index in its file and its checksum.
    struct FrameMark: Equatable, CustomStringConvertible {
        var index: UInt64
        var checksum: UInt32

        var description: String { "frame \(index) (checksum \(String(checksum, radix: 16)))" }
    }

    /// An event record: a lifecycle event and the countdown's state after it (`nil`: removed).
    struct EventRecord: Equatable {
        var event: CountdownEvent
        var state: StoredCountdown?
        /// Whether the record holds the owner's own number: written since per-user numbers.
        var numberedByOwner = true
    }

    // MARK: Writing

    /// Reserves room for a frame header at the end of `buffer`; `sealFrame` fills it in.
    static func beginFrame(in buffer: inout [UInt8]) {
        buffer.append(contentsOf: [UInt8](repeating: 0, count: frameHeaderSize))
    }

    /// Fills in the header of the frame that starts at `start`, covering everything after it, as
    /// frame `index` of its file (the header frame is 0). Returns its mark, which the next file's
    /// header names when this is the last frame of its file.
    @discardableResult
    static func sealFrame(in buffer: inout [UInt8], at start: Int, index: UInt64) -> FrameMark {
        let payloadLength = buffer.count - start - frameHeaderSize
        buffer.replaceSubrange(start..<(start + 4), with: magic)
        store(UInt32(payloadLength), at: start + 4, in: &buffer)
        store(UInt32(truncatingIfNeeded: index), at: start + 12, in: &buffer)
        store(UInt32(truncatingIfNeeded: index >> 32), at: start + 16, in: &buffer)
        let crc = buffer.withUnsafeBytes { raw in
            CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[(start + 12)...]))
        }
        store(crc, at: start + 8, in: &buffer)
        return FrameMark(index: index, checksum: crc)
    }

    static func appendHeader(_ header: Header, to buffer: inout [UInt8]) {
        buffer.append(RecordType.header.rawValue)
        append(header.generation, to: &buffer)
        append(header.createdUnixMilliseconds, to: &buffer)
        appendShortString(header.bootID ?? "", to: &buffer)
        append(header.follows?.index ?? UInt64.max, to: &buffer)
        append(UInt64(header.follows?.checksum ?? 0), to: &buffer, width: 4)
    }

    static func appendEvent(_ event: CountdownEvent, state: StoredCountdown, to buffer: inout [UInt8]) {
        // The event's cycle is nearly always the countdown's, a phase or two before: its phases
        // are not written twice (64 phases with labels are 2.6 KB).
        let placeOnly = event.cycle != nil && event.cycle?.phases == state.cycle?.phases
        let flags = (event.causedBySuspend ? EventFlag.causedBySuspend : 0) | (state.pausesOnSuspend ? EventFlag.pausesOnSuspend : 0)
            | EventFlag.ownerSequence | (state.cycle != nil ? EventFlag.stateCycle : 0) | (event.cycle != nil ? EventFlag.eventCycle : 0)
            | (event.suspendPolicy == .pause ? EventFlag.changedToPause : 0) | (placeOnly ? EventFlag.eventCyclePlace : 0)
            | (event.totalMilliseconds != state.totalMilliseconds ? EventFlag.eventTotal : 0)
        var name = state.name
        name.withUTF8 { name in
            // Before the name: type, seq, kind, state, owner and seven 8-byte fields (71 bytes);
            // the name's length byte and bytes; after it, two 8-byte fields, the flags and
            // owner_seq (25). The cycle blocks, rare, follow field by field.
            let capacity = 71 + 1 + min(name.count, 255) + 25
            ScratchWriter.append(capacity: capacity, to: &buffer) { record in
                record.write(RecordType.flaggedEvent.rawValue)
                record.writeLittleEndian(event.sequence)
                record.write(UInt8(kinds.firstIndex(of: event.kind) ?? 0))
                record.write(UInt8(states.firstIndex(of: state.state) ?? 0))
                record.writeLittleEndian(UInt64(state.owner), width: 4)
                record.writeLittleEndian(state.totalMilliseconds)
                record.writeLittleEndian(event.remainingMilliseconds)
                record.writeLittleEndian(event.lateMilliseconds ?? absent)
                record.writeLittleEndian(state.deadlineUnixMilliseconds ?? absent)
                record.writeLittleEndian(state.deadlineBootNanoseconds ?? absent)
                record.writeLittleEndian(state.remainingNanoseconds)
                record.writeLittleEndian(state.finishedUnixMilliseconds ?? absent)
                record.write(UInt8(min(name.count, 255)))
                record.write(UnsafeBufferPointer(rebasing: name.prefix(255)))
                record.writeLittleEndian(state.lateMilliseconds ?? absent)
                record.writeLittleEndian(state.pinnedUnixMilliseconds ?? absent)
                record.write(flags)
                record.writeLittleEndian(event.ownerSequence)
            }
        }
        if let cycle = state.cycle { appendCycle(cycle, to: &buffer) }
        if let cycle = event.cycle { appendCycle(cycle, to: &buffer, placeOnly: placeOnly) }
        if event.totalMilliseconds != state.totalMilliseconds { append(event.totalMilliseconds, to: &buffer) }
    }

    /// A cycle block (see the format above); the snapshot image's rows hold the same.
    static func appendCycle(_ cycle: CountdownCycle, to buffer: inout [UInt8], placeOnly: Bool = false) {
        append(UInt64(cycle.rounds), to: &buffer, width: 4)
        append(UInt64(cycle.phaseIndex), to: &buffer, width: 2)
        append(UInt64(cycle.round), to: &buffer, width: 4)
        guard !placeOnly else { return }
        buffer.append(UInt8(cycle.phases.count))
        for phase in cycle.phases {
            append(phase.milliseconds, to: &buffer)
            appendShortString(phase.label, to: &buffer)
        }
    }

    static func appendRemoved(_ event: CountdownEvent, to buffer: inout [UInt8]) {
        // A cycle's `removed` names its phase (`phase=`, `label=`, `round=`), so its replay after a
        // restart must too: the cycle follows.
        buffer.append((event.cycle == nil ? RecordType.numberedRemoved : .cycleRemoved).rawValue)
        append(event.sequence, to: &buffer)
        append(UInt64(event.owner), to: &buffer, width: 4)
        append(event.totalMilliseconds, to: &buffer)
        appendShortString(CountdownAddress.display(event.name, owner: event.owner, to: event.owner), to: &buffer)
        append(event.ownerSequence, to: &buffer)
        if let cycle = event.cycle { appendCycle(cycle, to: &buffer) }
    }

    /// Appends `value` little-endian (the encoding of every field; `SnapshotChecksum`'s too).
    static func append(_ value: Int64, to buffer: inout [UInt8]) {
        append(UInt64(bitPattern: value), to: &buffer)
    }

    /// Appends the low `width` bytes of `value`, little-endian, in one copy (a snapshot of a
    /// million countdowns appends eight million of them).
    static func append(_ value: UInt64, to buffer: inout [UInt8], width: Int = 8) {
        withUnsafeBytes(of: value.littleEndian) { bytes in
            buffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[..<width]))
        }
    }

    /// Appends a length byte and at most 255 bytes of `text`'s UTF-8.
    static func appendShortString(_ text: String, to buffer: inout [UInt8]) {
        var text = text
        text.withUTF8 { bytes in
            let count = min(bytes.count, 255)
            buffer.append(UInt8(count))
            buffer.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[..<count]))
        }
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
        /// The layout of the file's frames (`nil`: not one whole frame).
        var layout: Layout?
        /// Bytes of whole, valid frames from the start of the file.
        var validLength = 0
        /// The last whole frame in order, with its index (an unnumbered file's frames are counted).
        var lastFrame: FrameMark?
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
    /// does not check out is damage: a "torn" frame with a valid one after it (a flipped bit in a
    /// length field), a whole frame out of its place in the count (removed, repeated or moved
    /// frames), a file that does not start with a whole header frame (files are created whole).
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
        var expected: UInt64 = 0
        while offset < bytes.count {
            guard let frame = wholeFrame(at: offset, in: bytes) else {
                classifyBrokenFrame(at: offset, in: bytes, layout: scan.layout, into: &scan)
                break
            }
            if scan.layout == nil { scan.layout = frame.layout }
            guard frame.layout == scan.layout else {
                scan.damage = (offset, "a frame of the older, unnumbered format inside a file of numbered frames")
                break
            }
            if frame.layout == .ordered, frame.index != expected {
                scan.damage = (offset, frame.index < expected
                    ? "frame \(frame.index) comes again where frame \(expected) belongs: a frame is repeated, or frames are out of order"
                    : "frame \(frame.index) comes where frame \(expected) belongs: frames are missing, or out of order")
                break
            }
            if let reason = decodeFrame(frame, in: bytes, position: expected, into: &scan, visit: visit) {
                scan.damage = (offset, reason)
                break
            }
            scan.lastFrame = FrameMark(index: expected, checksum: frame.checksum)
            expected += 1
            offset = frame.end
            scan.validLength = offset
        }
        if !bytes.isEmpty, scan.header == nil, scan.damage == nil {
            scan.damage = (0, "the file does not start with a whole header frame, though journal files are created with it (\(scan.tornTail ?? "no header record")): it was cut short or overwritten")
            scan.tornTail = nil
        }
        return scan
    }

    /// A whole frame found in a file: where its payload is, its index and its checksum.
    struct Frame {
        var layout: Layout
        var offset: Int
        var index: UInt64
        var checksum: UInt32
        var payload: Range<Int>
        var end: Int { payload.upperBound }
    }

    /// The whole frame at `offset` (its magic, a length within the file, a matching checksum), in
    /// either layout (the scan names a file that mixes them).
    static func wholeFrame(at offset: Int, in bytes: [UInt8]) -> Frame? {
        let left = bytes.count - offset
        guard left >= 12 else { return nil }
        let found: Layout
        if bytes[offset..<(offset + 4)].elementsEqual(magic) {
            found = .ordered
        } else if bytes[offset..<(offset + 4)].elementsEqual(Layout.unnumbered.magic) {
            found = .unnumbered
        } else {
            return nil
        }
        guard left >= found.headerSize else { return nil }
        let length = Int(load32(bytes, offset + 4))
        guard length <= left - found.headerSize else { return nil }
        let payloadStart = offset + found.headerSize
        let crc = load32(bytes, offset + 8)
        // Both layouts: the checksum covers what follows it (an ordered frame's index, then the payload).
        let actual = bytes.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[(offset + 12)..<(payloadStart + length)])) }
        guard actual == crc else { return nil }
        let index = found == .ordered ? UInt64(load32(bytes, offset + 12)) | UInt64(load32(bytes, offset + 16)) << 32 : 0
        return Frame(layout: found, offset: offset, index: index, checksum: crc, payload: payloadStart..<(payloadStart + length))
    }

    /// Says why the frame at `offset` is not whole: a torn tail (nothing whole after it), or
    /// damage (a whole frame follows).
    private static func classifyBrokenFrame(at offset: Int, in bytes: [UInt8], layout: Layout?, into scan: inout Scan) {
        let left = bytes.count - offset
        let next = nextValidFrame(in: bytes, after: offset)
        let magicMatches = left >= 4 && (bytes[offset..<(offset + 4)].elementsEqual(magic) || bytes[offset..<(offset + 4)].elementsEqual(Layout.unnumbered.magic))
        guard magicMatches else {
            if bytes[offset...].allSatisfy({ $0 == 0 }) {
                scan.tornTail = "\(left) zero bytes at the end"
            } else if let next {
                scan.damage = (offset, "no frame starts here (bad magic), yet a whole frame follows at byte \(next)")
            } else if left < (layout ?? .ordered).headerSize {
                scan.tornTail = "a frame header cut short (\(left) bytes)"
            } else {
                scan.damage = (offset, "no frame starts here (bad magic)")
            }
            return
        }
        let headerSize = bytes[offset + 3] == magic[3] ? Layout.ordered.headerSize : Layout.unnumbered.headerSize
        guard left >= headerSize else {
            scan.tornTail = "a frame header cut short (\(left) bytes)"
            return
        }
        let length = Int(load32(bytes, offset + 4))
        guard length <= left - headerSize else {
            if let next {
                scan.damage = (offset, "a frame's length (\(length) bytes) runs past the end of the file, yet a whole frame follows at byte \(next): its length field is damaged")
            } else {
                scan.tornTail = "a frame of \(length) bytes cut short at \(left - headerSize)"
            }
            return
        }
        let payloadEnd = offset + headerSize + length
        if payloadEnd == bytes.count || bytes[payloadEnd...].allSatisfy({ $0 == 0 }) {
            scan.tornTail = "the last frame's checksum does not match (a write cut short)"
        } else {
            scan.damage = (offset, "checksum mismatch in a frame followed by more data")
        }
    }

    /// Where the first whole frame after `offset` starts, if any: the test between a torn tail
    /// and damage, and where `--check-state` resumes. Only on the rare path of a frame that does
    /// not check out.
    static func nextValidFrame(in bytes: [UInt8], after offset: Int) -> Int? {
        var candidate = offset + 1
        while candidate + 12 <= bytes.count {
            if bytes[candidate] == magic[0], wholeFrame(at: candidate, in: bytes)?.payload.isEmpty == false {
                return candidate
            }
            candidate += 1
        }
        return nil
    }

    /// Every whole frame of a file, past damage (found again by magic and checksum after it):
    /// what `--repair-state` keeps, to be put back in the order of their indexes.
    static func wholeFrames(in bytes: [UInt8]) -> [Frame] {
        var frames: [Frame] = []
        var offset = 0
        while offset < bytes.count {
            if let frame = wholeFrame(at: offset, in: bytes) {
                frames.append(frame)
                offset = frame.end
            } else if let next = nextValidFrame(in: bytes, after: offset) {
                offset = next
            } else {
                break
            }
        }
        return frames
    }

    /// The header record a journal file starts with, if its first frame is whole and begins
    /// with one.
    static func header(of bytes: [UInt8]) -> Header? {
        guard let frame = wholeFrame(at: 0, in: bytes) else { return nil }
        var scan = Scan()
        guard decodeFrame(frame, in: bytes, position: 0, into: &scan, visit: { _ in }) == nil else { return nil }
        return scan.header
    }

    /// Decodes the records of `frame`, the `position`th of its file (0: the header frame, which
    /// holds the header record and nothing else); returns what is wrong with it, if anything.
    static func decodeFrame(
        _ frame: Frame, in bytes: [UInt8], position: UInt64, into scan: inout Scan, visit: (EventRecord) -> Void
    ) -> String? {
        // (withUnsafeBytes rethrows untyped errors: the result carries the typed one out.)
        bytes.withUnsafeBytes { raw -> String? in
            do throws(FormatError) {
                try decodePayload(raw, from: frame.payload.lowerBound, to: frame.payload.upperBound, layout: frame.layout, position: position, into: &scan, visit: visit)
                return nil
            } catch {
                return error.reason
            }
        }
    }

    struct FormatError: Error {
        var reason: String
    }

    /// The largest event number, user's number or journal file generation a countdownd reads:
    /// 2^62, more than a billion a second for 146 years. A larger one (a checksum-valid rewrite)
    /// is damage, so that the daemon's `+ 1` on the last of them can never overflow (a sequence
    /// number of 2^64 - 1 read as valid trapped at the first change).
    static let largestNumber: UInt64 = 1 << 62

    private static func decodePayload(
        _ bytes: UnsafeRawBufferPointer, from start: Int, to end: Int, layout: Layout, position: UInt64,
        into scan: inout Scan, visit: (EventRecord) -> Void
    ) throws(FormatError) {
        var reader = Reader(bytes: bytes, offset: start, end: end)
        if position == 0 {
            guard end > start, bytes[start] == RecordType.header.rawValue else {
                throw FormatError(reason: "the file's first frame is not its header")
            }
        }
        while reader.offset < end {
            let type = RecordType(rawValue: try reader.byte())
            switch type {
            case .header:
                guard position == 0, reader.offset == start + 1 else {
                    throw FormatError(reason: "a header record after the start of the file")
                }
                scan.header = try reader.header(layout: layout)
                guard reader.offset == end else { throw FormatError(reason: "records after the header in the header frame") }
            case .event, .flaggedEvent:
                let flagged = type == .flaggedEvent
                let sequence = try reader.number("an event number")
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
                let numberedByOwner = flags & EventFlag.ownerSequence != 0
                let ownerSequence = try ownerNumber(&reader, numbered: numberedByOwner, sequence: sequence, of: "an event record")
                let stateCycle = flags & EventFlag.stateCycle != 0 ? try reader.cycle() : nil
                var eventCycle: CountdownCycle?
                if flags & EventFlag.eventCycle != 0 {
                    if flags & EventFlag.eventCyclePlace != 0 {
                        guard let phases = stateCycle?.phases else {
                            throw FormatError(reason: "an event's cycle given by its countdown's phases, without a countdown cycle")
                        }
                        eventCycle = try reader.cycle(phases: phases)
                    } else {
                        eventCycle = try reader.cycle()
                    }
                } else if flags & EventFlag.eventCyclePlace != 0 {
                    throw FormatError(reason: "an event record with a cycle's place and no cycle")
                }
                let eventTotal = flags & EventFlag.eventTotal != 0 ? try reader.i64() : total
                func present(_ value: Int64) -> Int64? { value == absent ? nil : value }
                var event = CountdownEvent(
                    sequence: sequence, kind: kinds[kindIndex], name: CountdownAddress.key(owner: owner, name: name),
                    remainingMilliseconds: eventRemaining, totalMilliseconds: eventTotal, lateMilliseconds: present(eventLate),
                    owner: owner, ownerSequence: ownerSequence
                )
                event.causedBySuspend = flags & EventFlag.causedBySuspend != 0
                event.cycle = eventCycle
                if event.kind == .changed {
                    event.suspendPolicy = flags & EventFlag.changedToPause != 0 ? .pause : .count
                }
                let state = StoredCountdown(
                    name: name, state: states[stateIndex], totalMilliseconds: total,
                    deadlineUnixMilliseconds: present(deadlineUnix), deadlineBootNanoseconds: present(deadlineBoot),
                    remainingNanoseconds: remaining, finishedUnixMilliseconds: present(finished),
                    owner: owner, lateMilliseconds: present(stateLate), pinnedUnixMilliseconds: present(pinned),
                    pausesOnSuspend: flags & EventFlag.pausesOnSuspend != 0, cycle: stateCycle
                )
                if let problem = state.implausibility {
                    throw FormatError(reason: "an event record whose countdown has \(problem)")
                }
                visit(EventRecord(event: event, state: state, numberedByOwner: numberedByOwner))
            case .removed, .numberedRemoved, .cycleRemoved:
                let sequence = try reader.number("an event number")
                let owner = UInt32(truncatingIfNeeded: try reader.u64(width: 4))
                let total = try reader.i64()
                let name = try reader.shortString()
                if let problem = StoredCountdown.nameProblem(name) {
                    throw FormatError(reason: "a removed record with \(problem)")
                }
                let numberedByOwner = type != .removed
                let ownerSequence = try ownerNumber(&reader, numbered: numberedByOwner, sequence: sequence, of: "a removed record")
                var event = CountdownEvent(
                    sequence: sequence, kind: .removed, name: CountdownAddress.key(owner: owner, name: name),
                    remainingMilliseconds: 0, totalMilliseconds: total, owner: owner, ownerSequence: ownerSequence
                )
                if type == .cycleRemoved { event.cycle = try reader.cycle() }
                visit(EventRecord(event: event, state: nil, numberedByOwner: numberedByOwner))
            case nil:
                throw FormatError(reason: "a record of unknown type")
            }
        }
    }

    /// A record's owner's number: read when it holds one, else its daemon-wide number (written
    /// before per-user numbers); never above that.
    private static func ownerNumber(_ reader: inout Reader, numbered: Bool, sequence: UInt64, of record: String) throws(FormatError) -> UInt64 {
        let ownerSequence = numbered ? try reader.number("a user's event number") : sequence
        guard ownerSequence <= sequence else {
            throw FormatError(reason: "\(record) whose owner's number (\(ownerSequence)) is above its own (\(sequence))")
        }
        return ownerSequence
    }

    private static func load32(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16 | UInt32(bytes[offset + 3]) << 24
    }

    /// Reads little-endian fields from a frame's payload, checking each against the payload's end
    /// (the frame's length was checked against the file, so no read leaves the buffer).
    struct Reader {
        let bytes: UnsafeRawBufferPointer
        var offset: Int
        let end: Int

        mutating func byte() throws(FormatError) -> UInt8 {
            guard offset < end else { throw FormatError(reason: "a record cut short") }
            defer { offset += 1 }
            return bytes[offset]
        }

        /// A sequence number, a user's number or a file generation: at most `largestNumber`, so
        /// that counting on from it never overflows.
        mutating func number(_ what: String) throws(FormatError) -> UInt64 {
            let value = try u64()
            guard value <= JournalFormat.largestNumber else {
                throw FormatError(reason: "\(what) of \(value), past any a countdownd reaches (\(JournalFormat.largestNumber))")
            }
            return value
        }

        mutating func u64(width: Int = 8) throws(FormatError) -> UInt64 {
            guard end - offset >= width else { throw FormatError(reason: "a record cut short") }
            defer { offset += width }
            switch width {
            case 8: return UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            case 4: return UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
            case 2: return UInt64(UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt16.self)))
            default: preconditionFailure("a field of \(width) bytes")  // Callers name 2, 4 or 8.
            }
        }

        mutating func i64() throws(FormatError) -> Int64 {
            Int64(bitPattern: try u64())
        }

        /// The fields of a header record (after its type byte).
        mutating func header(layout: Layout) throws(FormatError) -> Header {
            let generation = try number("a file generation")
            let created = try i64()
            let boot = try shortString()
            var header = Header(generation: generation, createdUnixMilliseconds: created, bootID: boot.isEmpty ? nil : boot)
            if layout == .ordered {
                let index = try u64()
                let checksum = UInt32(try u64(width: 4))
                header.follows = index == UInt64.max ? nil : FrameMark(index: index, checksum: checksum)
            }
            return header
        }

        /// A cycle block, checked against a cycle's limits (`CountdownCycle.isValid`); with
        /// `phases`, only its place (the phases are those given).
        mutating func cycle(phases given: [CountdownCycle.Phase]? = nil) throws(FormatError) -> CountdownCycle {
            let rounds = UInt32(truncatingIfNeeded: try u64(width: 4)), phaseIndex = UInt16(truncatingIfNeeded: try u64(width: 2))
            let round = UInt32(truncatingIfNeeded: try u64(width: 4))
            var phases: [CountdownCycle.Phase] = given ?? []
            if given == nil {
                let count = Int(try byte())
                for _ in 0..<count {
                    let milliseconds = try i64()
                    phases.append(CountdownCycle.Phase(milliseconds: milliseconds, label: try shortString()))
                }
            }
            let cycle = CountdownCycle(phases: phases, rounds: rounds, phaseIndex: phaseIndex, round: round)
            guard cycle.isValid else { throw FormatError(reason: "a cycle of phases out of its limits") }
            return cycle
        }

        mutating func shortString() throws(FormatError) -> String {
            let count = Int(try byte())
            guard end - offset >= count else { throw FormatError(reason: "a record cut short") }
            defer { offset += count }
            return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)]), as: UTF8.self)
        }

        /// A countdown's name, within the name rules (`StoredCountdown.nameProblem`): a checksum
        /// covers the bytes, not whether a client could have given them, and a name read here
        /// is sent to clients in lines.
        mutating func name() throws(FormatError) -> String {
            let name = try shortString()
            if let problem = StoredCountdown.nameProblem(name) { throw FormatError(reason: problem) }
            return name
        }
    }
}
