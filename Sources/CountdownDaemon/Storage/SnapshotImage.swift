import CountdownCore
import Glibc

/// The snapshot's on-disk format (`countdownd.snapshot`): a flat image in the journal's own
/// frames (`JournalFormat`: magic, length, CRC-32C, frame index, payload), so every byte is
/// checksummed and every frame knows its place, like Redis's RDB or etcd's snapshot file.
///
/// Frames, numbered from 0:
///
///     0     the image header, alone:
///           16 image  version u8 (2), journal_generation u64, last_seq u64,
///                     events_kept_after u64, written_unix_ms i64, countdowns u64, events u64,
///                     [version 2:] owner_base u64, owners u64,
///                     boot id (u8 length + bytes)
///     1…    each user's last own number, the replay history, then the countdowns, about
///           4 KiB of records a frame (a frame holds one kind of the three):
///           20 owner      owner u32, last owner_seq u64 (`OwnerSequences`; version 2)
///           18 event      seq u64, kind u8, flags u8 (bit 0: caused by the machine's sleep;
///                         bit 1: owner_seq follows the name; bit 2: a cycle block follows
///                         that; bit 3: a `changed` to ON-SUSPEND pause), owner u32,
///                         remaining_ms i64, total_ms i64, late_ms i64, name,
///                         [owner_seq u64], [cycle]
///           17 countdown  state u8, flags u8 (bit 0: stands still while the machine sleeps;
///                         bit 1: a cycle block follows the name), owner u32, total_ms i64,
///                         deadline_unix_ms i64, deadline_boot_ns i64, remaining_ns i64,
///                         finished_unix_ms i64, late_ms i64, pinned_unix_ms i64,
///                         name (u8 length + bytes, the plain name in the owner's namespace),
///                         [cycle]
///           -- a cycle block is the journal's (`JournalFormat`)
///     last  the end, alone:
///           19 end    countdowns u64, events u64, frames_crc u32
///           -- frames_crc chains the checksums of every frame before it, in order
///           -- (`chained`): a frame of another image, whole and in the right place (a lost
///           -- or misdirected write into reused blocks), does not chain
///
/// Absent values are `Int64.min`. An image of version 1 was written before per-user numbers:
/// its users saw the daemon-wide `seq`. The file is written whole and renamed into place, so any
/// frame that does not verify, any frame out of its place, anything after the end record, an
/// image without one (cut short), and counts that differ from the header's are damage. The
/// reader goes on past damage to every whole frame, so `--repair-state` keeps every countdown
/// that verifies.
///
/// The history comes first so that recovery can read it, then the journal, then stream the
/// countdowns straight into the engine: a million (about 66 MB) are never gathered into an array.
enum SnapshotImage {
    static let version: UInt8 = 2
    /// Records of countdowns and events are gathered into frames of about this many bytes: a
    /// flipped bit costs `--repair-state` at most one frame's countdowns (some 55).
    static let framePayload = 4 << 10
    /// Bytes handed to `write` at a time.
    static let writeChunk = 1 << 20

    enum RecordType: UInt8 {
        case image = 16
        case countdown = 17
        case event = 18
        case end = 19
        case owner = 20
    }

    enum Flag {
        static let pausesOnSuspend: UInt8 = 1
        static let countdownCycle: UInt8 = 2
        static let causedBySuspend: UInt8 = 1
        static let ownerSequence: UInt8 = 2
        static let eventCycle: UInt8 = 4
        static let changedToPause: UInt8 = 8
    }

    /// What the header frame says.
    struct Header: Equatable {
        var journalGeneration: UInt64
        var lastSequence: UInt64
        var eventsKeptAfter: UInt64
        var writtenUnixMilliseconds: Int64
        var countdowns: UInt64
        var events: UInt64
        var bootID: String?
        /// `OwnerSequences.base`, and how many users' last numbers follow (version 2).
        var ownerBase: UInt64 = 0
        var owners: UInt64 = 0
    }

    // MARK: Writing

    /// Encodes a snapshot into frames, handing the bytes to `sink` about `writeChunk` at a time:
    /// `header` (its owner fields from `owners`), `owners`' numbers, `events`, then the
    /// `header.countdowns` countdowns that `countdowns` hands over.
    static func encode(
        _ header: Header, owners: OwnerSequences, events: [CountdownEvent], countdowns: ((StoredCountdown) -> Void) -> Void,
        sink: ([UInt8]) throws(StorageError) -> Void
    ) throws(StorageError) {
        var encoder = Encoder()
        var header = header
        header.ownerBase = owners.base
        header.owners = UInt64(owners.last.count)
        encoder.add(header)
        for (owner, sequence) in owners.last.sorted(by: { $0.key < $1.key }) {
            encoder.add(owner: owner, last: sequence)
            if let chunk = encoder.takeChunk() { try sink(chunk) }
        }
        encoder.sealFrame()  // The history starts a frame of its own.
        for event in events {
            encoder.add(event)
            if let chunk = encoder.takeChunk() { try sink(chunk) }
        }
        encoder.sealFrame()  // The countdowns start a frame of their own.
        var written: UInt64 = 0
        var failure: StorageError?
        // (`countdowns` takes a plain closure: a failed write is kept, and thrown after. The
        // visitor calls `sink`, which the compiler cannot see is not re-entrant; it does not
        // escape.)
        withoutActuallyEscaping(sink) { sink in
            countdowns { row in
                encoder.add(row)
                written += 1
                if failure == nil, let chunk = encoder.takeChunk() {
                    do throws(StorageError) { try sink(chunk) } catch { failure = error }
                }
            }
        }
        if let failure { throw failure }
        // The header promised a number: a writer that handed over another is a bug, not a
        // snapshot to keep (it would be refused at the next start).
        guard written == header.countdowns else {
            throw .writeFailed(path: "the snapshot", reason: "\(written) countdowns were written where \(header.countdowns) were announced")
        }
        encoder.addEnd(countdowns: written, events: UInt64(events.count))
        try sink(encoder.finish())
    }

    /// Builds frames in a buffer, a chunk at a time.
    private struct Encoder {
        private var buffer: [UInt8] = []
        private var index: UInt64 = 0
        private var frameStart = 0
        private var chain: UInt32 = 0

        init() {
            buffer.reserveCapacity(writeChunk + framePayload + 512)
            JournalFormat.beginFrame(in: &buffer)
        }

        /// Seals the frame being built (unless it is empty) and begins the next.
        mutating func sealFrame() {
            guard buffer.count > frameStart + JournalFormat.frameHeaderSize else { return }
            chain = chained(chain, JournalFormat.sealFrame(in: &buffer, at: frameStart, index: index).checksum)
            index += 1
            frameStart = buffer.count
            JournalFormat.beginFrame(in: &buffer)
        }

        /// The bytes of every sealed frame, once they make a chunk.
        mutating func takeChunk() -> [UInt8]? {
            if buffer.count - frameStart - JournalFormat.frameHeaderSize >= framePayload { sealFrame() }
            guard frameStart >= writeChunk else { return nil }
            let chunk = Array(buffer[..<frameStart])
            buffer.removeSubrange(..<frameStart)
            frameStart = 0
            return chunk
        }

        /// The rest, the frame begun after the last one dropped.
        mutating func finish() -> [UInt8] {
            sealFrame()
            return Array(buffer[..<frameStart])
        }

        mutating func add(_ header: Header) {
            buffer.append(RecordType.image.rawValue)
            buffer.append(version)
            JournalFormat.append(header.journalGeneration, to: &buffer)
            JournalFormat.append(header.lastSequence, to: &buffer)
            JournalFormat.append(header.eventsKeptAfter, to: &buffer)
            JournalFormat.append(header.writtenUnixMilliseconds, to: &buffer)
            JournalFormat.append(header.countdowns, to: &buffer)
            JournalFormat.append(header.events, to: &buffer)
            JournalFormat.append(header.ownerBase, to: &buffer)
            JournalFormat.append(header.owners, to: &buffer)
            JournalFormat.appendShortString(header.bootID ?? "", to: &buffer)
            sealFrame()
        }

        mutating func add(owner: UInt32, last: UInt64) {
            buffer.append(RecordType.owner.rawValue)
            JournalFormat.append(UInt64(owner), to: &buffer, width: 4)
            JournalFormat.append(last, to: &buffer)
        }

        mutating func add(_ event: CountdownEvent) {
            buffer.append(RecordType.event.rawValue)
            JournalFormat.append(event.sequence, to: &buffer)
            buffer.append(UInt8(JournalFormat.kinds.firstIndex(of: event.kind) ?? 0))
            buffer.append(
                (event.causedBySuspend ? Flag.causedBySuspend : 0) | Flag.ownerSequence | (event.cycle != nil ? Flag.eventCycle : 0)
                    | (event.suspendPolicy == .pause ? Flag.changedToPause : 0)
            )
            JournalFormat.append(UInt64(event.owner), to: &buffer, width: 4)
            JournalFormat.append(event.remainingMilliseconds, to: &buffer)
            JournalFormat.append(event.totalMilliseconds, to: &buffer)
            JournalFormat.append(event.lateMilliseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.appendShortString(CountdownAddress.display(event.name, owner: event.owner, to: event.owner), to: &buffer)
            JournalFormat.append(event.ownerSequence, to: &buffer)
            if let cycle = event.cycle { JournalFormat.appendCycle(cycle, to: &buffer) }
        }

        mutating func add(_ row: StoredCountdown) {
            buffer.append(RecordType.countdown.rawValue)
            buffer.append(UInt8(JournalFormat.states.firstIndex(of: row.state) ?? 0))
            buffer.append((row.pausesOnSuspend ? Flag.pausesOnSuspend : 0) | (row.cycle != nil ? Flag.countdownCycle : 0))
            JournalFormat.append(UInt64(row.owner), to: &buffer, width: 4)
            JournalFormat.append(row.totalMilliseconds, to: &buffer)
            JournalFormat.append(row.deadlineUnixMilliseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.append(row.deadlineBootNanoseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.append(row.remainingNanoseconds, to: &buffer)
            JournalFormat.append(row.finishedUnixMilliseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.append(row.lateMilliseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.append(row.pinnedUnixMilliseconds ?? JournalFormat.absent, to: &buffer)
            JournalFormat.appendShortString(row.name, to: &buffer)
            if let cycle = row.cycle { JournalFormat.appendCycle(cycle, to: &buffer) }
        }

        /// The end record, in a frame of its own, after every other frame.
        mutating func addEnd(countdowns: UInt64, events: UInt64) {
            sealFrame()
            buffer.append(RecordType.end.rawValue)
            JournalFormat.append(countdowns, to: &buffer)
            JournalFormat.append(events, to: &buffer)
            JournalFormat.append(UInt64(chain), to: &buffer, width: 4)
        }
    }

    /// The chain of frame checksums after one more frame: CRC-32C of the chain so far and the
    /// frame's checksum (both little-endian).
    static func chained(_ chain: UInt32, _ checksum: UInt32) -> UInt32 {
        // On the stack, not in an array: once per frame, some 18,000 times a million countdowns.
        withUnsafeBytes(of: (UInt64(chain) | UInt64(checksum) << 32).littleEndian) { CRC32C.checksum($0) }
    }

    // MARK: Reading

    /// Reads an image in two steps, frame by frame: the header and the replay history, then the
    /// countdowns, each handed over as it is decoded. Damage is collected in `problems`, never
    /// thrown: the reader goes on to the next whole frame.
    struct Decoder {
        let bytes: [UInt8]
        /// The header's fields and the events (no `rows`; `problems` are below).
        private(set) var contents = SnapshotFile.Contents()
        /// Equal phase lists of the history's events, one array (`CyclePhaseInterner`).
        private var phaseLists = CyclePhaseInterner()
        private(set) var header: Header?
        private(set) var problems: [String] = []
        private var offset = 0
        private var expected: UInt64 = 0
        private var end: (countdowns: UInt64, events: UInt64)?
        /// The end record's chain of frame checksums, and the chain of the frames read before it.
        private var endChain: UInt32?
        private var chain: UInt32 = 0
        private var countdownsRead: UInt64 = 0
        private var ownersRead: UInt64 = 0
        /// The header's version (`nil`: no header read): whether events carry their owner's number.
        private var version: UInt8?
        private var readingCountdowns = false
        /// Problems past the first `problemLimit`, counted, not listed: damage across a million
        /// countdowns' frames would otherwise be a message of megabytes.
        private var unlistedProblems = 0
        static let problemLimit = 20

        private mutating func note(_ problem: String) {
            if problems.count < Self.problemLimit { problems.append(problem) } else { unlistedProblems += 1 }
        }

        init(_ bytes: [UInt8]) {
            self.bytes = bytes
        }

        /// Reads the header and the replay history: every frame before the first of countdowns.
        mutating func readHistory() {
            guard !bytes.isEmpty else {
                note("the file is empty (0 bytes)")
                return
            }
            readFrames(stopAtCountdowns: true) { _ in }
            // Countdowns first (the header and history frames gone): refused before the journal
            // is judged against a generation no header gave.
            if header == nil { noteMissingHeader() }
        }

        private var missingHeaderNoted = false

        private mutating func noteMissingHeader() {
            guard !missingHeaderNoted else { return }
            missingHeaderNoted = true
            note("it does not start with a whole image header")
        }

        /// Reads the rest, handing each countdown to `visit`, then checks the end record.
        mutating func readCountdowns(_ visit: (StoredCountdown) -> Void) {
            readFrames(stopAtCountdowns: false, visit: visit)
            guard !bytes.isEmpty else { return }
            if header == nil { noteMissingHeader() }
            let read = (countdowns: countdownsRead, events: UInt64(contents.events.count))
            let promised = header.map { (countdowns: $0.countdowns, events: $0.events) }
            if let header, header.owners != ownersRead {
                note("it holds the numbers of \(ownersRead) users where its header says \(header.owners) were written: frames are missing, added or altered")
            }
            if let end {
                if end != read {
                    note("it holds \(read.countdowns) countdowns and \(read.events) events where its end record says \(end.countdowns) and \(end.events) were written: frames are missing, added or altered")
                } else if let promised, promised != read {
                    note("it holds \(read.countdowns) countdowns and \(read.events) events where its header says \(promised.countdowns) and \(promised.events) were written: frames are missing, added or altered")
                } else if endChain != chain {
                    note("its frames do not chain to its end record: a frame of another snapshot, or one rewritten whole with its checksum, is among them, and which one cannot be told; its countdowns verify one by one, so --repair-state would keep that frame's too: prefer a backup")
                }
            } else if problems.isEmpty {
                note("it has no end record: it was cut short")
            }
            if unlistedProblems > 0 {
                problems.append("and \(unlistedProblems) more problems of its frames")
                unlistedProblems = 0
            }
        }

        private mutating func readFrames(stopAtCountdowns: Bool, visit: (StoredCountdown) -> Void) {
            let bytes = self.bytes  // (Shared, not copied: `self` is mutated below.)
            while offset < bytes.count {
                guard let frame = JournalFormat.wholeFrame(at: offset, in: bytes), frame.layout == .ordered else {
                    // Written whole and renamed into place: no torn tail is legitimate.
                    guard let next = JournalFormat.nextValidFrame(in: bytes, after: offset) else {
                        note(end == nil
                            ? "bytes \(offset) to \(bytes.count) are not a whole frame, and the image has no end: it was cut short or overwritten"
                            : "bytes \(offset) to \(bytes.count) after the image's end are not a whole frame")
                        offset = bytes.count
                        return
                    }
                    note("bytes \(offset) to \(next) do not verify (a checksum that does not match, or a frame cut short)")
                    offset = next
                    continue
                }
                if stopAtCountdowns, !frame.payload.isEmpty, bytes[frame.payload.lowerBound] == RecordType.countdown.rawValue {
                    return  // Left for `readCountdowns`.
                }
                if frame.index != expected {
                    note(frame.index < expected
                        ? "frame \(frame.index) comes again where frame \(expected) belongs: a frame is repeated, or frames are out of order"
                        : "frame \(frame.index) comes where frame \(expected) belongs: frames are missing, or out of order")
                }
                if end != nil {
                    note("a frame after the image's end, at byte \(offset)")
                }
                expected = max(expected, frame.index) + 1
                offset = frame.end
                if end == nil, frame.payload.first.map({ bytes[$0] }) != RecordType.end.rawValue {
                    chain = SnapshotImage.chained(chain, frame.checksum)
                }
                // (withUnsafeBytes rethrows untyped errors: the result carries the reason out.)
                let failure = bytes.withUnsafeBytes { raw -> String? in
                    do throws(JournalFormat.FormatError) {
                        try decodePayload(raw, frame: frame, visit: visit)
                        return nil
                    } catch {
                        return error.reason
                    }
                }
                if let failure { note("the frame at byte \(frame.offset): \(failure)") }
            }
        }

        private mutating func decodePayload(
            _ raw: UnsafeRawBufferPointer, frame: JournalFormat.Frame, visit: (StoredCountdown) -> Void
        ) throws(JournalFormat.FormatError) {
            var reader = JournalFormat.Reader(bytes: raw, offset: frame.payload.lowerBound, end: frame.payload.upperBound)
            guard reader.offset < reader.end else { throw JournalFormat.FormatError(reason: "an empty frame") }
            while reader.offset < reader.end {
                // (Without a header, which is named once at the end, the other frames are still
                // read: `--repair-state` keeps the countdowns of every one that verifies.)
                let type = RecordType(rawValue: try reader.byte())
                switch type {
                case .image:
                    guard header == nil, frame.index == 0, reader.offset == frame.payload.lowerBound + 1 else {
                        throw JournalFormat.FormatError(reason: "an image header that is not the first frame")
                    }
                    let version = try reader.byte()
                    guard version == 1 || version == SnapshotImage.version else {
                        throw JournalFormat.FormatError(reason: "image version \(version), which this countdownd does not read (it reads 1 and \(SnapshotImage.version))")
                    }
                    let generation = try reader.number("a journal generation"), lastSequence = try reader.number("a last event number")
                    let keptAfter = try reader.number("a history start")
                    let written = try reader.i64(), countdowns = try reader.u64(), events = try reader.u64()
                    let ownerBase = version >= 2 ? try reader.number("a users' numbers base") : 0, owners = version >= 2 ? try reader.u64() : 0
                    let boot = try reader.shortString()
                    guard reader.offset == reader.end else { throw JournalFormat.FormatError(reason: "records after the image header in its frame") }
                    header = Header(
                        journalGeneration: generation, lastSequence: lastSequence, eventsKeptAfter: keptAfter,
                        writtenUnixMilliseconds: written, countdowns: countdowns, events: events, bootID: boot.isEmpty ? nil : boot,
                        ownerBase: ownerBase, owners: owners
                    )
                    guard ownerBase <= lastSequence else {
                        throw JournalFormat.FormatError(reason: "an image header whose users' numbers start after its last number")
                    }
                    self.version = version
                    // Version 1: written before per-user numbers (`SnapshotFile.Contents`).
                    contents.ownerSequences = version >= 2 ? OwnerSequences(base: ownerBase) : nil
                    contents.journalGeneration = generation
                    contents.lastSequence = lastSequence
                    contents.eventsKeptAfter = keptAfter
                    contents.bootID = boot.isEmpty ? nil : boot
                case .countdown:
                    readingCountdowns = true
                    let stateIndex = Int(try reader.byte()), flags = try reader.byte()
                    guard stateIndex < JournalFormat.states.count, flags & ~(Flag.pausesOnSuspend | Flag.countdownCycle) == 0 else {
                        throw JournalFormat.FormatError(reason: "a countdown with an unknown state or flags")
                    }
                    let owner = UInt32(truncatingIfNeeded: try reader.u64(width: 4))
                    let total = try reader.i64(), deadlineUnix = try reader.i64(), deadlineBoot = try reader.i64()
                    let remaining = try reader.i64(), finished = try reader.i64(), late = try reader.i64()
                    let pinned = try reader.i64()
                    let name = try reader.name()
                    let cycle = flags & Flag.countdownCycle != 0 ? try reader.cycle() : nil
                    let row = StoredCountdown(
                        name: name, state: JournalFormat.states[stateIndex], totalMilliseconds: total,
                        deadlineUnixMilliseconds: present(deadlineUnix), deadlineBootNanoseconds: present(deadlineBoot),
                        remainingNanoseconds: remaining, finishedUnixMilliseconds: present(finished), owner: owner,
                        lateMilliseconds: present(late), pinnedUnixMilliseconds: present(pinned),
                        pausesOnSuspend: flags & Flag.pausesOnSuspend != 0, cycle: cycle
                    )
                    if let problem = row.implausibility {
                        throw JournalFormat.FormatError(reason: "a countdown with \(problem)")
                    }
                    countdownsRead += 1
                    visit(row)
                case .owner:
                    guard !readingCountdowns, contents.events.isEmpty else {
                        throw JournalFormat.FormatError(reason: "a user's number after the history or the countdowns")
                    }
                    let owner = UInt32(truncatingIfNeeded: try reader.u64(width: 4)), last = try reader.u64()
                    guard owner != 0, contents.ownerSequences?.last[owner] == nil else {
                        throw JournalFormat.FormatError(reason: "a user's number given twice, or root's")
                    }
                    guard version != 1, last <= header?.lastSequence ?? .max else {
                        throw JournalFormat.FormatError(reason: "a user's number in an image of version 1, or after the image's last number")
                    }
                    ownersRead += 1
                    if contents.ownerSequences == nil { contents.ownerSequences = OwnerSequences() }
                    contents.ownerSequences?.raise(owner, to: last)
                case .event:
                    guard !readingCountdowns else { throw JournalFormat.FormatError(reason: "an event after the countdowns") }
                    let sequence = try reader.number("an event number")
                    let kindIndex = Int(try reader.byte()), flags = try reader.byte()
                    guard kindIndex < JournalFormat.kinds.count, flags & ~(Flag.causedBySuspend | Flag.ownerSequence | Flag.eventCycle | Flag.changedToPause) == 0 else {
                        throw JournalFormat.FormatError(reason: "an event with an unknown kind or flags")
                    }
                    let owner = UInt32(truncatingIfNeeded: try reader.u64(width: 4))
                    let remaining = try reader.i64(), total = try reader.i64(), late = try reader.i64()
                    let name = try reader.name()
                    let numbered = flags & Flag.ownerSequence != 0
                    // Version 2 numbers every event for its owner, version 1 none.
                    if let version, numbered != (version >= 2) {
                        throw JournalFormat.FormatError(reason: numbered ? "an owner's number in an image of version 1" : "an event without its owner's number")
                    }
                    let ownerSequence = numbered ? try reader.u64() : sequence
                    guard ownerSequence <= sequence else {
                        throw JournalFormat.FormatError(reason: "an event whose owner's number is above its own")
                    }
                    let cycle = flags & Flag.eventCycle != 0 ? try reader.cycle() : nil
                    var event = CountdownEvent(
                        sequence: sequence, kind: JournalFormat.kinds[kindIndex], name: CountdownAddress.key(owner: owner, name: name),
                        remainingMilliseconds: remaining, totalMilliseconds: total, lateMilliseconds: present(late), owner: owner,
                        ownerSequence: ownerSequence
                    )
                    event.causedBySuspend = flags & Flag.causedBySuspend != 0
                    event.cycle = cycle
                    phaseLists.intern(&event.cycle)
                    if event.kind == .changed { event.suspendPolicy = flags & Flag.changedToPause != 0 ? .pause : .count }
                    contents.events.append(event)
                case .end:
                    guard end == nil, reader.offset == frame.payload.lowerBound + 1 else {
                        throw JournalFormat.FormatError(reason: "an end record that does not begin its frame")
                    }
                    end = (try reader.u64(), try reader.u64())
                    endChain = UInt32(try reader.u64(width: 4))
                    guard reader.offset == reader.end else { throw JournalFormat.FormatError(reason: "records after the end record in its frame") }
                case nil:
                    throw JournalFormat.FormatError(reason: "a record of unknown type")
                }
            }
        }

        private func present(_ value: Int64) -> Int64? { value == JournalFormat.absent ? nil : value }
    }
}
