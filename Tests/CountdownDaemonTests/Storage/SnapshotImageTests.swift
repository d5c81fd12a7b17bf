@testable import CountdownDaemon
import CountdownCore
import Foundation
import Glibc
import Testing

/// The snapshot image's encoder and decoder, without files: every field of every state comes
/// back as it was, across many frames, and the end record tells a short image from a whole one.
@Suite("The snapshot image: every field back as written, across frames")
struct SnapshotImageTests {
    func contents(rows: Int) -> SnapshotFile.Contents {
        var contents = SnapshotFile.Contents(lastSequence: 9_000, bootID: "0f9c3e1a-boot", journalGeneration: 42, events: [], eventsKeptAfter: 8_000)
        contents.ownerSequences = OwnerSequences(base: 7, last: [1000: 750, 2000: 9, 65534: 8])
        let states = JournalFormat.states
        for index in 0..<rows {
            let state = states[index % states.count]
            contents.rows.append(StoredCountdown(
                name: "otp:+49151\(index)", state: state, totalMilliseconds: Int64(60_000 + index),
                deadlineUnixMilliseconds: state == .running ? 4_102_444_800_000 + Int64(index) : nil,
                deadlineBootNanoseconds: state == .running && index % 2 == 0 ? Int64(index) * 1_000_000_007 : nil,
                remainingNanoseconds: state == .paused ? Int64(index) * 999 : 0,
                finishedUnixMilliseconds: state == .done || state == .cancelled ? 1_700_000_000_000 + Int64(index) : nil,
                owner: UInt32(index % 3) * 1000, lateMilliseconds: state == .done && index % 5 == 0 ? Int64(index) : nil,
                pinnedUnixMilliseconds: state == .running && index % 7 == 0 ? 4_102_444_800_000 : nil,
                pausesOnSuspend: index % 4 == 1
            ))
        }
        for index in 0..<300 {
            let owner = UInt32(index % 2) * 1000
            var event = CountdownEvent(
                sequence: 8_001 + UInt64(index), kind: JournalFormat.kinds[index % 7],
                name: CountdownAddress.key(owner: owner, name: "e\(index)"), remainingMilliseconds: Int64(index),
                totalMilliseconds: 60_000, lateMilliseconds: index % 3 == 0 ? 12 : nil, owner: owner,
                ownerSequence: owner == 0 ? nil : 600 + UInt64(index)
            )
            event.causedBySuspend = index % 11 == 0
            contents.events.append(event)
        }
        return contents
    }

    func encoded(_ contents: SnapshotFile.Contents) throws -> [UInt8] {
        var bytes: [UInt8] = []
        let header = SnapshotImage.Header(
            journalGeneration: contents.journalGeneration, lastSequence: contents.lastSequence, eventsKeptAfter: contents.eventsKeptAfter,
            writtenUnixMilliseconds: 1_764_000_000_000, countdowns: UInt64(contents.rows.count), events: UInt64(contents.events.count),
            bootID: contents.bootID
        )
        try SnapshotImage.encode(header, owners: contents.ownerSequences ?? OwnerSequences(), events: contents.events, countdowns: { contents.rows.forEach($0) }) { (chunk) throws(StorageError) in bytes += chunk }
        return bytes
    }

    /// The image read whole, as `--check-state` reads it.
    func decode(_ bytes: [UInt8]) -> SnapshotFile.Contents {
        var decoder = SnapshotImage.Decoder(bytes)
        decoder.readHistory()
        var contents = decoder.contents
        decoder.readCountdowns { contents.rows.append($0) }
        contents.problems = decoder.problems
        return contents
    }

    @Test("10,000 countdowns of every state and 300 events: decoded as written, in many frames", arguments: [0, 1, 10_000])
    func roundTrip(rows: Int) throws {
        let written = contents(rows: rows)
        let bytes = try encoded(written)
        let frames = JournalFormat.wholeFrames(in: bytes)
        #expect(frames.map(\.index) == (0..<UInt64(frames.count)).map { $0 }, "numbered from 0, in order")
        #expect(frames.allSatisfy { $0.payload.count <= SnapshotImage.framePayload + 512 }, "no frame much beyond 4 KiB")
        if rows == 10_000 { #expect(frames.count > 100) }
        let read = decode(bytes)
        #expect(read.problems.isEmpty, "\(read.problems)")
        #expect(read.rows == written.rows)
        #expect(read.events == written.events)
        #expect(read.events.contains { $0.ownerSequence != $0.sequence }, "users' own numbers are kept apart from the daemon's")
        #expect(read.ownerSequences == written.ownerSequences)
        #expect(read.lastSequence == 9_000 && read.eventsKeptAfter == 8_000 && read.journalGeneration == 42 && read.bootID == "0f9c3e1a-boot")
    }

    @Test("cut at any frame boundary: a problem (no end record, or counts that do not match), never a shorter snapshot read as whole")
    func cutShort() throws {
        let bytes = try encoded(contents(rows: 500))
        let frames = JournalFormat.wholeFrames(in: bytes)
        for frame in frames {
            #expect(!decode(Array(bytes[..<frame.offset])).problems.isEmpty, "cut before frame \(frame.index)")
        }
        var dropped = frames.map { Array(bytes[$0.offset..<$0.end]) }
        dropped.remove(at: frames.count - 2)  // The last frame of countdowns.
        let read = decode(dropped.flatMap { $0 })
        #expect(read.problems.contains { $0.contains("frames are missing") } && read.rows.count < 500 && !read.rows.isEmpty, "\(read.problems)")
    }

    /// The image with frame `index`'s payload changed by `change` and every frame sealed again,
    /// so checksums and numbers verify and only the decoder's own rules can refuse it.
    func resealed(_ bytes: [UInt8], frame index: Int, change: (inout [UInt8]) -> Void) -> [UInt8] {
        var payloads = JournalFormat.wholeFrames(in: bytes).map { Array(bytes[$0.payload]) }
        if index < payloads.count { change(&payloads[index]) } else { var extra: [UInt8] = []; change(&extra); payloads.append(extra) }
        var out: [UInt8] = []
        for (number, payload) in payloads.enumerated() {
            let start = out.count
            JournalFormat.beginFrame(in: &out)
            out += payload
            JournalFormat.sealFrame(in: &out, at: start, index: UInt64(number))
        }
        return out
    }

    @Test("frames that verify but break the image's own rules are refused, each with its reason")
    func rulesBeyondChecksums() throws {
        let bytes = try encoded(contents(rows: 500))
        let frames = JournalFormat.wholeFrames(in: bytes)
        let firstCountdowns = try #require(frames.firstIndex { bytes[$0.payload.lowerBound] == SnapshotImage.RecordType.countdown.rawValue })
        let last = frames.count - 1
        let firstEvents = try #require(frames.firstIndex { bytes[$0.payload.lowerBound] == SnapshotImage.RecordType.event.rawValue })
        let owners = try #require(frames.firstIndex { bytes[$0.payload.lowerBound] == SnapshotImage.RecordType.owner.rawValue })
        let cases: [(String, Int, (inout [UInt8]) -> Void, String)] = [
            ("version 3", 0, { $0[1] = 3 }, "image version 3"),
            ("the last event number at 2^64 - 1", 0, { $0[10...17] = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF] }, "a last event number of 18446744073709551615"),
            ("the journal generation at 2^64 - 1", 0, { $0[2...9] = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF] }, "a journal generation of 18446744073709551615"),
            ("a countdown of state 9", firstCountdowns, { $0[1] = 9 }, "unknown state or flags"),
            ("an event with flag 16", firstEvents, { $0[10] = 16 }, "unknown kind or flags"),
            ("an event without its owner's number", firstEvents, { $0[10] = 0 }, "an event without its owner's number"),
            ("a user's number after the image's last", owners, { $0[5...12] = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F] }, "after the image's last number"),
            ("a user's number among the events", firstEvents, { $0 += Array(bytes[frames[owners].payload.prefix(13)]) }, "a user's number after the history"),
            ("a user's number twice", owners, { $0 += Array(bytes[frames[owners].payload.prefix(13)]) }, "a user's number given twice"),
            ("root's number", owners, { $0[1] = 0; $0[2] = 0; $0[3] = 0; $0[4] = 0 }, "or root's"),
            ("a countdown with an empty name", firstCountdowns, { $0[63] = 0 }, "a name of 0 bytes"),
            ("a countdown whose name has a newline", firstCountdowns, { $0[64] = 0x0A }, "a name with a byte outside"),
            ("an event whose name has a newline", firstEvents, { $0[40] = 0x0A }, "a name with a byte outside"),
            ("one countdown more in the end record", last, { $0[1] &+= 1 }, "end record says 501 and 300 were written"),
            ("the chain of frames altered", last, { $0[17] ^= 1 }, "do not chain"),
            ("a record after the end record", last, { $0.append(SnapshotImage.RecordType.end.rawValue) }, "records after the end record"),
            ("a frame after the end", last + 1, { $0 = [SnapshotImage.RecordType.end.rawValue] + [UInt8](repeating: 0, count: 20) }, "a frame after the image's end"),
            ("an event among the countdowns", last - 1, { $0 += Array(bytes[frames[firstEvents].payload.lowerBound..<(frames[firstEvents].payload.lowerBound + 40)]) }, "an event after the countdowns"),
            ("a second header", 1, { $0 = Array(bytes[frames[0].payload]) }, "an image header that is not the first frame"),
            ("an empty frame", 1, { $0 = [] }, "an empty frame"),
        ]
        for (what, frame, change, reason) in cases {
            let read = decode(resealed(bytes, frame: frame, change: change))
            #expect(read.problems.contains { $0.contains(reason) }, "\(what): \(read.problems)")
        }
        #expect(decode(resealed(bytes, frame: 0, change: { _ in })).problems.isEmpty, "sealed again unchanged, it is whole")
        let promised = decode(resealed(bytes, frame: 0, change: { $0[34] &+= 1 }))  // The header's count of countdowns.
        #expect(promised.problems.contains { $0.contains("its header says 501 and 300") }, "\(promised.problems)")
    }

    @Test("a damaged header: refused, named once, and every countdown of the frames that verify is still read (what --repair-state keeps)")
    func damagedHeader() throws {
        var bytes = try encoded(contents(rows: 2_000))
        bytes[30] ^= 0x08
        let read = decode(bytes)
        #expect(read.rows.count == 2_000, "the countdowns' frames all verify")
        // The damaged frame, the count that starts at 1, the missing header, the chain: named once each.
        #expect(read.problems.count <= 4 && read.problems.contains { $0.contains("does not start with a whole image header") }, "\(read.problems)")
    }

    @Test("an image whose header and history frames are gone is refused at its history, before any journal is judged against it")
    func countdownsFirst() throws {
        let bytes = try encoded(contents(rows: 500))
        let frames = JournalFormat.wholeFrames(in: bytes)
        let first = try #require(frames.first { bytes[$0.payload.lowerBound] == SnapshotImage.RecordType.countdown.rawValue })
        var decoder = SnapshotImage.Decoder(Array(bytes[first.offset...]))
        decoder.readHistory()
        #expect(decoder.problems == ["it does not start with a whole image header"], "\(decoder.problems)")
        decoder.readCountdowns { _ in }
        #expect(decoder.problems.filter { $0.contains("image header") }.count == 1, "named once: \(decoder.problems)")
    }

    @Test("damage in every frame is named for the first 20 and counted for the rest, not listed frame by frame")
    func problemsBounded() throws {
        let bytes = try encoded(contents(rows: 10_000))
        // Every frame of countdowns sealed again around a state this countdownd does not know.
        var damaged: [UInt8] = []
        for frame in JournalFormat.wholeFrames(in: bytes) {
            var payload = Array(bytes[frame.payload])
            if payload[0] == SnapshotImage.RecordType.countdown.rawValue { payload[1] = 9 }
            let start = damaged.count
            JournalFormat.beginFrame(in: &damaged)
            damaged += payload
            JournalFormat.sealFrame(in: &damaged, at: start, index: frame.index)
        }
        let read = decode(damaged)
        #expect(read.problems.count == SnapshotImage.Decoder.problemLimit + 1 && read.problems.last?.hasPrefix("and ") == true, "\(read.problems.count): \(read.problems.last ?? "")")
        #expect(read.rows.isEmpty)
    }
}

extension StateJournalTests {
    @Test("an earlier countdownd's database left beside the image (a stop between the image landing and its removal) is removed at the next start, and never read in its place")
    func supersededDatabaseRemovedAtStart() throws {
        let scratch = ScratchDirectory()
        let directory = try snapshotDirectory(in: scratch, lastSequence: 1, rows: [StoredCountdown(
            name: "tea", state: .paused, totalMilliseconds: 60_000, deadlineUnixMilliseconds: nil, deadlineBootNanoseconds: nil,
            remainingNanoseconds: 30_000_000_000, finishedUnixMilliseconds: nil, owner: 0, lateMilliseconds: nil
        )])
        let stale = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/schema4/countdownd.db").path
        try FileManager.default.copyItem(atPath: stale, toPath: directory + "/" + SnapshotDatabase.fileName)
        let recovered = try recover(journal(in: directory))
        #expect(recovered.countdowns.map(\.name) == ["tea"], "the image, not the database")
        #expect(!FileManager.default.fileExists(atPath: directory + "/" + SnapshotDatabase.fileName))
        #expect(recovered.remarks.contains { $0.contains("removed countdownd.db") }, "\(recovered.remarks)")
    }
}

@Suite("countdownd --dump-state: what a start would restore, as JSON lines")
struct StateDumpTests {
    @Test("a whole directory: a state line, then one line per countdown by owner and name, exit 0; a damaged one: what is intact, the damage named on the first line and on stderr, exit 1")
    func dumpWholeAndDamaged() throws {
        let scratch = ScratchDirectory()
        let directory = try snapshotDirectory(in: scratch, lastSequence: 7, rows: [(1000 as UInt32, "b"), (0, "z"), (1000, "a")].map { owner, name in
            StoredCountdown(
                name: name, state: .paused, totalMilliseconds: 60_000, deadlineUnixMilliseconds: nil, deadlineBootNanoseconds: nil,
                remainingNanoseconds: 5_000_000_000, finishedUnixMilliseconds: nil, owner: owner, lateMilliseconds: nil, pausesOnSuspend: name == "a"
            )
        })
        var lines: [String] = [], errors: [String] = []
        #expect(StateDump.dump(directory, print: { lines.append($0) }, printError: { errors.append($0) }) == 0)
        let objects = try lines.map { try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]) }
        #expect(objects.first?["type"] as? String == "state" && objects.first?["countdowns"] as? Int == 3 && (objects.first?["damaged"] as? [Any])?.isEmpty == true)
        #expect(objects.dropFirst().map { "\($0["owner"] ?? "")/\($0["name"] ?? "")" } == ["0/z", "1000/a", "1000/b"], "by owner, then name")
        #expect(objects[2]["on_suspend"] as? String == "pause" && objects[1]["on_suspend"] == nil && objects[1]["remaining_ns"] as? Int == 5_000_000_000)
        #expect(errors.isEmpty)

        let path = directory + "/" + SnapshotFile.fileName
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        bytes[bytes.count - 3] ^= 0x10  // In the end record's frame.
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        lines = []
        #expect(StateDump.dump(directory, print: { lines.append($0) }, printError: { errors.append($0) }) == 1)
        let header = try #require(try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        #expect((header["damaged"] as? [String])?.isEmpty == false, "\(header)")
        #expect(errors.count == 1 && errors[0].contains("is damaged") && errors[0].contains("--check-state"), "\(errors)")
    }
}

extension StateDumpTests {
    @Test("each stored field is printed under its name, exactly: a running cycle's deadlines on both clocks, its phases as CYCLE reads them and where it is; a done one's finishing time and lateness; a pinned one's time")
    func dumpFieldsExactly() throws {
        let scratch = ScratchDirectory()
        let cycle = CountdownCycle(phases: [.init(milliseconds: 1_500_000, label: "work"), .init(milliseconds: 300_000)], rounds: 4, phaseIndex: 1, round: 2)
        let directory = try snapshotDirectory(in: scratch, lastSequence: 3, rows: [
            StoredCountdown(
                name: "a", state: .running, totalMilliseconds: 300_000, deadlineUnixMilliseconds: 4_102_444_800_000,
                deadlineBootNanoseconds: 123_456, remainingNanoseconds: 0, finishedUnixMilliseconds: nil, owner: 0, lateMilliseconds: nil,
                cycle: cycle
            ),
            StoredCountdown(
                name: "b", state: .done, totalMilliseconds: 60_000, deadlineUnixMilliseconds: nil, deadlineBootNanoseconds: nil,
                remainingNanoseconds: 0, finishedUnixMilliseconds: 1_700_000_000_000, owner: 0, lateMilliseconds: 2_500
            ),
            StoredCountdown(
                name: "c", state: .running, totalMilliseconds: 60_000, deadlineUnixMilliseconds: 4_102_444_800_000, deadlineBootNanoseconds: nil,
                remainingNanoseconds: 0, finishedUnixMilliseconds: nil, owner: 1000, lateMilliseconds: nil, pinnedUnixMilliseconds: 4_102_444_800_000
            ),
        ])
        var lines: [String] = []
        #expect(StateDump.dump(directory, print: { lines.append($0) }, printError: { _ in }) == 0)
        #expect(Array(lines.dropFirst()) == [
            #"{"cycle":"25m:work,5m","deadline_boot_ns":123456,"deadline_unix_ms":4102444800000,"name":"a","owner":0,"phase":2,"round":3,"rounds":4,"state":"running","total_ms":300000,"type":"countdown"}"#,
            #"{"finished_unix_ms":1700000000000,"late_ms":2500,"name":"b","owner":0,"state":"done","total_ms":60000,"type":"countdown"}"#,
            #"{"deadline_unix_ms":4102444800000,"name":"c","owner":1000,"pinned_unix_ms":4102444800000,"state":"running","total_ms":60000,"type":"countdown"}"#,
        ], "\(lines.joined(separator: "\n"))")
    }
}

extension StateJournalTests {
    @Test("a snapshot that is a FIFO, a device, a file of 5 GiB (sparse) or a symbolic link to nothing is refused at once, never read forever, waited on, or taken for no snapshot", arguments: ["fifo", "device", "sparse", "dangling"])
    func snapshotNotARegularFile(kind: String) throws {
        let scratch = ScratchDirectory()
        let directory = scratch.path + "/state"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/" + SnapshotFile.fileName
        switch kind {
        case "fifo": #expect(mkfifo(path, 0o600) == 0)
        case "device": #expect(symlink("/dev/zero", path) == 0)
        case "sparse": #expect(open(path, O_WRONLY | O_CREAT, 0o600) >= 0 && truncate(path, 5 << 30) == 0)
        default: #expect(symlink(scratch.path + "/moved-away", path) == 0)
        }
        #expect(throws: StorageError.self, "\(kind): refused") { try recover(journal(in: directory)) }
        #expect(!FileManager.default.fileExists(atPath: directory + "/journal.000000000001"), "no journal begun beside it")
        let inspection = try StateRepair.inspect(directory)
        #expect(!inspection.problems.isEmpty, "\(kind): --check-state agrees: \(inspection.problems)")
    }
}

/// A state directory in `scratch` holding only a snapshot of `rows`, the last event number
/// `lastSequence`, no replay history and no journal.
private func snapshotDirectory(in scratch: ScratchDirectory, lastSequence: UInt64, rows: [StoredCountdown]) throws -> String {
    let directory = scratch.path + "/state"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    var contents = SnapshotFile.Contents(lastSequence: lastSequence, bootID: nil, journalGeneration: 1, events: [], eventsKeptAfter: 0)
    contents.rows = rows
    try SnapshotFile.write(contents, directory: directory)
    return directory
}
