import CountdownCore
import Glibc

/// The snapshot's on-disk format (`countdownd.snapshot`): a flat image in the journal's own
/// frames (`JournalFormat`: magic, length, CRC-32C, frame index, payload), so every byte is
/// checksummed and every frame knows its place, like Redis's RDB or etcd's snapshot file.
///
/// Frames, numbered from 0:
///
///     0     the image header, alone:
///           16 image  version u8 (1), journal_generation u64, last_seq u64,
///                     events_kept_after u64, written_unix_ms i64, boot id (u8 length + bytes)
///     1…    countdowns, then the replay history, about 4 KiB of records a frame:
///           17 countdown  state u8, flags u8 (bit 0: stands still while the machine sleeps),
///                         owner u32, total_ms i64, deadline_unix_ms i64, deadline_boot_ns i64,
///                         remaining_ns i64, finished_unix_ms i64, late_ms i64, pinned_unix_ms i64,
///                         name (u8 length + bytes, the plain name in the owner's namespace)
///           18 event      seq u64, kind u8, flags u8 (bit 0: caused by the machine's sleep),
///                         owner u32, remaining_ms i64, total_ms i64, late_ms i64, name
///     last  the end, alone:
///           19 end    countdowns u64, events u64
///
/// Absent values are `Int64.min`. The file is written whole and renamed into place, so any
/// frame that does not verify, any frame out of its place, anything after the end record, and
/// an image without one (cut short) is damage. The reader goes on past damage to every whole
/// frame, so `--repair-state` keeps every countdown that verifies.
///
/// A million countdowns are about 80 MB; they are written in 1 MiB writes and read with one
/// pass over the bytes, each name made into a String once.
enum SnapshotImage {
    static let version: UInt8 = 1
    /// Records of countdowns and events are gathered into frames of about this many bytes.
    static let framePayload = 4 << 10
    /// Bytes handed to `write` at a time.
    static let writeChunk = 1 << 20

    enum RecordType: UInt8 {
        case image = 16
        case countdown = 17
        case event = 18
        case end = 19
    }

    enum Flag {
        static let pausesOnSuspend: UInt8 = 1
        static let causedBySuspend: UInt8 = 1
    }

    // MARK: Writing

    /// Encodes `contents` into frames, handing the bytes to `sink` about `writeChunk` at a time.
    static func encode(
        _ contents: SnapshotFile.Contents, writtenUnixMilliseconds: Int64, sink: ([UInt8]) throws(StorageError) -> Void
    ) throws(StorageError) {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(writeChunk + framePayload + 512)
        var index: UInt64 = 0
        var frameStart = 0
        func begin() {
            frameStart = buffer.count
            JournalFormat.beginFrame(in: &buffer)
        }
        func seal() {
            JournalFormat.sealFrame(in: &buffer, at: frameStart, index: index)
            index += 1
        }
        // Seals the frame when full, and hands over the buffer when it holds a chunk.
        func recordWritten() throws(StorageError) {
            guard buffer.count - frameStart - JournalFormat.frameHeaderSize >= framePayload else { return }
            seal()
            if buffer.count >= writeChunk {
                try sink(buffer)
                buffer.removeAll(keepingCapacity: true)
            }
            begin()
        }

        begin()
        buffer.append(RecordType.image.rawValue)
        buffer.append(version)
        JournalFormat.append(contents.journalGeneration, to: &buffer)
        JournalFormat.append(contents.lastSequence, to: &buffer)
        JournalFormat.append(contents.eventsKeptAfter, to: &buffer)
        JournalFormat.append(writtenUnixMilliseconds, to: &buffer)
        JournalFormat.appendShortString(contents.bootID ?? "", to: &buffer)
        seal()
        begin()
        for row in contents.rows {
            buffer.append(RecordType.countdown.rawValue)
            buffer.append(UInt8(JournalFormat.states.firstIndex(of: row.state) ?? 0))
            buffer.append(row.pausesOnSuspend ? Flag.pausesOnSuspend : 0)
            JournalFormat.append(UInt64(row.owner), to: &buffer, width: 4)
            JournalFormat.append(row.totalMilliseconds, to: &buffer)
            JournalFormat.append(row.deadlineUnixMilliseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.append(row.deadlineBootNanoseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.append(row.remainingNanoseconds, to: &buffer)
            JournalFormat.append(row.finishedUnixMilliseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.append(row.lateMilliseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.append(row.pinnedUnixMilliseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.appendShortString(row.name, to: &buffer)
            try recordWritten()
        }
        for event in contents.events {
            buffer.append(RecordType.event.rawValue)
            JournalFormat.append(event.sequence, to: &buffer)
            buffer.append(UInt8(JournalFormat.kinds.firstIndex(of: event.kind) ?? 0))
            buffer.append(event.causedBySuspend ? Flag.causedBySuspend : 0)
            JournalFormat.append(UInt64(event.owner), to: &buffer, width: 4)
            JournalFormat.append(event.remainingMilliseconds, to: &buffer)
            JournalFormat.append(event.totalMilliseconds, to: &buffer)
            JournalFormat.append(event.lateMilliseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.appendShortString(CountdownAddress.display(event.name, owner: event.owner, to: event.owner), to: &buffer)
            try recordWritten()
        }
        if buffer.count > frameStart + JournalFormat.frameHeaderSize {
            seal()
        } else {
            buffer.removeSubrange(frameStart...)  // An empty frame would hold nothing.
        }
        begin()
        buffer.append(RecordType.end.rawValue)
        JournalFormat.append(UInt64(contents.rows.count), to: &buffer)
        JournalFormat.append(UInt64(contents.events.count), to: &buffer)
        seal()
        try sink(buffer)
    }

    // MARK: Reading

    /// Decodes an image. Never throws: what does not verify is named in `problems`, and every
    /// countdown of every whole frame is kept in `rows` (all of them when `problems` is empty).
    static func decode(_ bytes: [UInt8]) -> SnapshotFile.Contents {
        var contents = SnapshotFile.Contents()
        guard !bytes.isEmpty else {
            contents.problems.append("the file is empty (0 bytes)")
            return contents
        }
        // About 80 bytes a countdown: room for them at once.
        contents.rows.reserveCapacity(bytes.count / 80)
        var expected: UInt64 = 0
        var offset = 0
        var sawHeader = false
        var end: (countdowns: UInt64, events: UInt64)?
        var problems: [String] = []
        while offset < bytes.count {
            guard let frame = JournalFormat.wholeFrame(at: offset, in: bytes), frame.layout == .ordered else {
                // Written whole and renamed into place: no torn tail is legitimate.
                guard let next = JournalFormat.nextValidFrame(in: bytes, after: offset) else {
                    problems.append(end == nil
                        ? "bytes \(offset) to \(bytes.count) are not a whole frame, and the image has no end: it was cut short or overwritten"
                        : "bytes \(offset) to \(bytes.count) after the image's end are not a whole frame")
                    break
                }
                problems.append("bytes \(offset) to \(next) do not verify (a checksum that does not match, or a frame cut short)")
                offset = next
                continue
            }
            if frame.index != expected {
                problems.append(frame.index < expected
                    ? "frame \(frame.index) comes again where frame \(expected) belongs: a frame is repeated, or frames are out of order"
                    : "frame \(frame.index) comes where frame \(expected) belongs: frames are missing, or out of order")
            }
            if end != nil {
                problems.append("a frame after the image's end, at byte \(offset)")
            }
            expected = max(expected, frame.index) + 1
            offset = frame.end
            // (withUnsafeBytes rethrows untyped errors: the result carries the reason out.)
            let failure = bytes.withUnsafeBytes { raw -> String? in
                do throws(JournalFormat.FormatError) {
                    try decodePayload(raw, frame: frame, sawHeader: &sawHeader, end: &end, into: &contents)
                    return nil
                } catch {
                    return error.reason
                }
            }
            if let failure { problems.append("the frame at byte \(frame.offset): \(failure)") }
        }
        if !sawHeader {
            problems.append("it does not start with a whole image header")
        }
        if let end {
            if end.countdowns != UInt64(contents.rows.count) || end.events != UInt64(contents.events.count) {
                problems.append("it holds \(contents.rows.count) countdowns and \(contents.events.count) events where \(end.countdowns) and \(end.events) were written: frames are missing, added or altered")
            }
        } else if problems.isEmpty {
            problems.append("it has no end record: it was cut short")
        }
        contents.problems = problems
        return contents
    }

    private static func decodePayload(
        _ raw: UnsafeRawBufferPointer, frame: JournalFormat.Frame, sawHeader: inout Bool,
        end: inout (countdowns: UInt64, events: UInt64)?, into contents: inout SnapshotFile.Contents
    ) throws(JournalFormat.FormatError) {
        var reader = JournalFormat.Reader(bytes: raw, offset: frame.payload.lowerBound, end: frame.payload.upperBound)
        while reader.offset < reader.end {
            let type = RecordType(rawValue: try reader.byte())
            guard type == .image || sawHeader else {
                throw JournalFormat.FormatError(reason: "a record before the image header")
            }
            switch type {
            case .image:
                guard !sawHeader, frame.index == 0, reader.offset == frame.payload.lowerBound + 1 else {
                    throw JournalFormat.FormatError(reason: "an image header that is not the first frame")
                }
                let version = try reader.byte()
                guard version == Self.version else {
                    throw JournalFormat.FormatError(reason: "image version \(version), which this countdownd does not read (it reads \(Self.version))")
                }
                contents.journalGeneration = try reader.u64()
                contents.lastSequence = try reader.u64()
                contents.eventsKeptAfter = try reader.u64()
                _ = try reader.i64()  // When it was written: for people reading a dump.
                let boot = try reader.shortString()
                contents.bootID = boot.isEmpty ? nil : boot
                guard reader.offset == reader.end else { throw JournalFormat.FormatError(reason: "records after the image header in its frame") }
                sawHeader = true
            case .countdown:
                let stateIndex = Int(try reader.byte()), flags = try reader.byte()
                guard stateIndex < JournalFormat.states.count, flags & ~Flag.pausesOnSuspend == 0 else {
                    throw JournalFormat.FormatError(reason: "a countdown with an unknown state or flags")
                }
                let owner = UInt32(truncatingIfNeeded: try reader.u64(width: 4))
                let total = try reader.i64(), deadlineUnix = try reader.i64(), deadlineBoot = try reader.i64()
                let remaining = try reader.i64(), finished = try reader.i64(), late = try reader.i64()
                let pinned = try reader.i64()
                let name = try reader.name()
                contents.rows.append(StoredCountdown(
                    name: name, state: JournalFormat.states[stateIndex], totalMilliseconds: total,
                    deadlineUnixMilliseconds: present(deadlineUnix), deadlineBootNanoseconds: present(deadlineBoot),
                    remainingNanoseconds: remaining, finishedUnixMilliseconds: present(finished), owner: owner,
                    lateMilliseconds: present(late), pinnedUnixMilliseconds: present(pinned),
                    pausesOnSuspend: flags & Flag.pausesOnSuspend != 0
                ))
            case .event:
                let sequence = try reader.u64()
                let kindIndex = Int(try reader.byte()), flags = try reader.byte()
                guard kindIndex < JournalFormat.kinds.count, flags & ~Flag.causedBySuspend == 0 else {
                    throw JournalFormat.FormatError(reason: "an event with an unknown kind or flags")
                }
                let owner = UInt32(truncatingIfNeeded: try reader.u64(width: 4))
                let remaining = try reader.i64(), total = try reader.i64(), late = try reader.i64()
                let name = try reader.name()
                var event = CountdownEvent(
                    sequence: sequence, kind: JournalFormat.kinds[kindIndex], name: CountdownAddress.key(owner: owner, name: name),
                    remainingMilliseconds: remaining, totalMilliseconds: total, lateMilliseconds: present(late), owner: owner
                )
                event.causedBySuspend = flags & Flag.causedBySuspend != 0
                contents.events.append(event)
            case .end:
                guard end == nil, reader.offset == frame.payload.lowerBound + 1 else {
                    throw JournalFormat.FormatError(reason: "an end record that does not begin its frame")
                }
                end = (try reader.u64(), try reader.u64())
                guard reader.offset == reader.end else { throw JournalFormat.FormatError(reason: "records after the end record in its frame") }
            case nil:
                throw JournalFormat.FormatError(reason: "a record of unknown type")
            }
        }
    }

    private static func present(_ value: Int64) -> Int64? { value == JournalFormat.absent ? nil : value }
}
