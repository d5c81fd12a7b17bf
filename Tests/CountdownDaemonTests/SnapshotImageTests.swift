@testable import CountdownDaemon
import CountdownCore
import Testing

/// The snapshot image's encoder and decoder, without files: every field of every state comes
/// back as it was, across many frames, and the end record tells a short image from a whole one.
@Suite("The snapshot image: every field back as written, across frames")
struct SnapshotImageTests {
    func contents(rows: Int) -> SnapshotFile.Contents {
        var contents = SnapshotFile.Contents(lastSequence: 9_000, bootID: "0f9c3e1a-boot", journalGeneration: 42, events: [], eventsKeptAfter: 8_000)
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
                totalMilliseconds: 60_000, lateMilliseconds: index % 3 == 0 ? 12 : nil, owner: owner
            )
            event.causedBySuspend = index % 11 == 0
            contents.events.append(event)
        }
        return contents
    }

    func encoded(_ contents: SnapshotFile.Contents) throws -> [UInt8] {
        var bytes: [UInt8] = []
        try SnapshotImage.encode(contents, writtenUnixMilliseconds: 1_764_000_000_000) { (chunk) throws(StorageError) in bytes += chunk }
        return bytes
    }

    @Test("10,000 countdowns of every state and 300 events: decoded as written, in many frames", arguments: [0, 1, 10_000])
    func roundTrip(rows: Int) throws {
        let written = contents(rows: rows)
        let bytes = try encoded(written)
        let frames = JournalFormat.wholeFrames(in: bytes)
        #expect(frames.map(\.index) == (0..<UInt64(frames.count)).map { $0 }, "numbered from 0, in order")
        #expect(frames.allSatisfy { $0.payload.count <= SnapshotImage.framePayload + 512 }, "no frame much beyond 4 KiB")
        if rows == 10_000 { #expect(frames.count > 100) }
        let read = SnapshotImage.decode(bytes)
        #expect(read.problems.isEmpty, "\(read.problems)")
        #expect(read.rows == written.rows)
        #expect(read.events == written.events)
        #expect(read.lastSequence == 9_000 && read.eventsKeptAfter == 8_000 && read.journalGeneration == 42 && read.bootID == "0f9c3e1a-boot")
    }

    @Test("cut at any frame boundary: a problem (no end record, or counts that do not match), never a shorter snapshot read as whole")
    func cutShort() throws {
        let bytes = try encoded(contents(rows: 500))
        let frames = JournalFormat.wholeFrames(in: bytes)
        for frame in frames {
            #expect(!SnapshotImage.decode(Array(bytes[..<frame.offset])).problems.isEmpty, "cut before frame \(frame.index)")
        }
        var dropped = frames.map { Array(bytes[$0.offset..<$0.end]) }
        dropped.remove(at: 1)
        let read = SnapshotImage.decode(dropped.flatMap { $0 })
        #expect(read.problems.contains { $0.contains("frames are missing") } && read.rows.count < 500 && !read.rows.isEmpty, "\(read.problems)")
    }
}
