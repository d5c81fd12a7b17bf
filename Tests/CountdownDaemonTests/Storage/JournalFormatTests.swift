@testable import CountdownDaemon
import CountdownCore
import Testing

@Suite("Journal format: frames, checksums, torn tails and damage")
struct JournalFormatTests {
    func event(_ sequence: UInt64, _ name: String) -> (CountdownEvent, StoredCountdown) {
        (
            // The daemon's key: the name in uid 1000's namespace.
            CountdownEvent(sequence: sequence, kind: .started, name: "1000/\(name)", remainingMilliseconds: 5000, totalMilliseconds: 5000, owner: 1000),
            StoredCountdown(
                name: name, state: .running, totalMilliseconds: 5000, deadlineUnixMilliseconds: 1_764_488_400_000,
                deadlineBootNanoseconds: 12_345_678_901, remainingNanoseconds: 0, finishedUnixMilliseconds: nil,
                owner: 1000, lateMilliseconds: nil
            )
        )
    }

    /// A file: a header frame, then one frame per batch of names.
    func file(_ batches: [[String]]) -> [UInt8] {
        frames(batches).reduce([], +)
    }

    /// The frames of `file(batches)`, one by one: the header frame first.
    func frames(_ batches: [[String]], follows: JournalFormat.FrameMark? = nil) -> [[UInt8]] {
        var header: [UInt8] = []
        JournalFormat.beginFrame(in: &header)
        JournalFormat.appendHeader(.init(generation: 3, createdUnixMilliseconds: 1, bootID: "boot-a", follows: follows), to: &header)
        JournalFormat.sealFrame(in: &header, at: 0, index: 0)
        var frames = [header]
        var sequence: UInt64 = 0
        for (index, batch) in batches.enumerated() {
            var bytes: [UInt8] = []
            JournalFormat.beginFrame(in: &bytes)
            for name in batch {
                sequence += 1
                let (event, state) = event(sequence, name)
                JournalFormat.appendEvent(event, state: state, to: &bytes)
            }
            JournalFormat.sealFrame(in: &bytes, at: 0, index: UInt64(index + 1))
            frames.append(bytes)
        }
        return frames
    }

    /// The same file in the layout of countdownd before frame indexes ("CDJ\u{1}", 12-byte
    /// frame headers, no `follows`), as an earlier version left it.
    func unnumberedFile(_ batches: [[String]]) -> [UInt8] {
        var payloads: [[UInt8]] = [[1] + le(3) + le(1) + [6] + Array("boot-a".utf8)]
        var sequence: UInt64 = 0
        for batch in batches {
            var payload: [UInt8] = []
            for name in batch {
                sequence += 1
                let (event, state) = event(sequence, name)
                JournalFormat.appendEvent(event, state: state, to: &payload)
            }
            payloads.append(payload)
        }
        return payloads.flatMap { payload in
            [0x43, 0x44, 0x4A, 0x01] + le32(UInt32(payload.count)) + le32(CRC32C.checksum(payload)) + payload
        }
    }

    func le(_ value: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
    func le32(_ value: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }

    /// Two event records of every field (a running countdown to a wall-clock time, and a late
    /// `done` of a cycle's phase caused by the machine's sleep, with a name of 255 bytes, its
    /// own total and the event's cycle apart), each as `appendEvent` writes them.
    func goldenRecords() -> [UInt8] {
        var bytes: [UInt8] = []
        var started = CountdownEvent(
            sequence: 0x0102_0304_0506_0708, kind: .started, name: "1000/tea", remainingMilliseconds: 180_000,
            totalMilliseconds: 180_000, owner: 1000, ownerSequence: 41
        )
        started.slotHint = 3
        JournalFormat.appendEvent(
            started,
            state: StoredCountdown(
                name: "tea", state: .running, totalMilliseconds: 180_000, deadlineUnixMilliseconds: 1_764_488_400_000,
                deadlineBootNanoseconds: 12_345_678_901, remainingNanoseconds: 0, finishedUnixMilliseconds: nil, owner: 1000,
                lateMilliseconds: nil, pinnedUnixMilliseconds: 1_764_488_400_000
            ),
            to: &bytes
        )
        let phases = [CountdownCycle.Phase(milliseconds: 1_500_000, label: "work"), .init(milliseconds: 300_000, label: "break")]
        let long = String(repeating: "x", count: 255)
        var done = CountdownEvent(
            sequence: 9, kind: .done, name: long, remainingMilliseconds: 0, totalMilliseconds: 1_500_000, lateMilliseconds: 2_500,
            owner: 0, ownerSequence: 9
        )
        done.causedBySuspend = true
        done.cycle = CountdownCycle(phases: phases, rounds: 0, phaseIndex: 0, round: 7)
        JournalFormat.appendEvent(
            done,
            state: StoredCountdown(
                name: long, state: .running, totalMilliseconds: 300_000, deadlineUnixMilliseconds: -1, deadlineBootNanoseconds: nil,
                remainingNanoseconds: 0, finishedUnixMilliseconds: nil, owner: 0, lateMilliseconds: 2_500, pausesOnSuspend: true,
                cycle: CountdownCycle(phases: phases, rounds: 0, phaseIndex: 1, round: 7)
            ),
            to: &bytes
        )
        return bytes
    }

    @Test("event records are laid out byte for byte as the format says (a journal written before reads the same)")
    func eventRecordLayout() {
        // Written by the field-by-field encoder before records were written into reserved room.
        let expected =
            "0408070605040302010000e803000020bf02000000000020bf0200000000000000000000000080804cb4d39a01000035" +
            "1cdcdf0200000000000000000000000000000000000080037465610000000000000080804cb4d39a0100000429000000" +
            "00000000040900000000000000040000000000e0930400000000000000000000000000c409000000000000ffffffffff" +
            "ffffff000000000000008000000000000000000000000000000080ff"
            + String(repeating: "78", count: 255) +
            "c4090000000000000000000000000080df0900000000000000000000000100070000000260e316000000000004776f72" +
            "6be09304000000000005627265616b0000000000000700000060e3160000000000"
        #expect(goldenRecords().map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() == expected)
    }

    @Test("a removed record keeps the event's cycle, so a cycle's removed is replayed after a restart with its phase; a plain one is written as before")
    func removedKeepsCycle() {
        var bytes: [UInt8] = []
        JournalFormat.beginFrame(in: &bytes)
        JournalFormat.appendHeader(.init(generation: 1, createdUnixMilliseconds: 1, bootID: "boot-a"), to: &bytes)
        JournalFormat.sealFrame(in: &bytes, at: 0, index: 0)
        let frame = bytes.count
        JournalFormat.beginFrame(in: &bytes)
        let cycle = CountdownCycle(
            phases: [.init(milliseconds: 1_500_000, label: "work"), .init(milliseconds: 300_000, label: "break")], rounds: 4, phaseIndex: 1, round: 1
        )
        var removed = CountdownEvent(sequence: 3, kind: .removed, name: "1000/pom", remainingMilliseconds: 0, totalMilliseconds: 300_000, owner: 1000, ownerSequence: 2)
        removed.cycle = cycle
        JournalFormat.appendRemoved(removed, to: &bytes)
        let plainStart = bytes.count
        let plain = CountdownEvent(sequence: 4, kind: .removed, name: "tea", remainingMilliseconds: 0, totalMilliseconds: 60_000, owner: 0, ownerSequence: 4)
        JournalFormat.appendRemoved(plain, to: &bytes)
        #expect(bytes[plainStart] == 5, "a removed record without a cycle is the numbered one, as before")
        JournalFormat.sealFrame(in: &bytes, at: frame, index: 1)
        let scan = JournalFormat.scan(bytes)
        #expect(scan.damage == nil && scan.tornTail == nil)
        #expect(scan.events.map(\.event) == [removed, plain])
        #expect(scan.events.first?.event.cycle == cycle)
    }

    @Test("records round-trip through a frame, with the header")
    func roundTrip() {
        let scan = JournalFormat.scan(file([["tea", "otp:+4915112345678"], ["c"]]))
        #expect(scan.damage == nil && scan.tornTail == nil)
        #expect(scan.header == .init(generation: 3, createdUnixMilliseconds: 1, bootID: "boot-a"))
        #expect(scan.events.map(\.event.name) == ["1000/tea", "1000/otp:+4915112345678", "1000/c"])
        #expect(scan.events.map(\.state?.name) == ["tea", "otp:+4915112345678", "c"], "storage keeps plain names beside the owner")
        #expect(scan.events.map(\.event.sequence) == [1, 2, 3])
        #expect(scan.events[1].state == event(2, "otp:+4915112345678").1)
        #expect(scan.events[1].event == event(2, "otp:+4915112345678").0)
    }

    @Test("a write cut short anywhere in the last frame is a torn tail: everything before it is kept")
    func tornTail() {
        let whole = file([["a"], ["b", "c"]])
        let complete = JournalFormat.scan(whole).validLength
        let lastFrame = JournalFormat.scan(file([["a"]])).validLength
        for cut in (lastFrame + 1)..<whole.count {
            let scan = JournalFormat.scan(Array(whole[0..<cut]))
            #expect(scan.damage == nil, "cut at \(cut)")
            #expect(scan.tornTail != nil, "cut at \(cut)")
            #expect(scan.validLength == lastFrame && scan.events.map(\.event.name) == ["1000/a"])
        }
        #expect(complete == whole.count)
        // Zeros after the last frame (space allocated, never written) and a garbled last frame.
        #expect(JournalFormat.scan(whole + [UInt8](repeating: 0, count: 4096)).tornTail != nil)
        var garbled = whole
        garbled[garbled.count - 3] ^= 0x55
        let scan = JournalFormat.scan(garbled)
        #expect(scan.tornTail != nil && scan.damage == nil && scan.validLength == lastFrame)
    }

    @Test("a record whose checksum verifies but whose values no countdownd writes (a name no client could give, a time no clock reaches, a negative time or total) is damage, named; every byte of a record altered and sealed again reads as damage or as a plausible countdown, and mapping its times to the clock never traps")
    func checksumValidImplausibleValues() {
        /// A file of one event whose stored state is `state`, sealed: its checksums verify.
        func sealed(_ state: StoredCountdown, then more: Bool = true) -> [UInt8] {
            var frames = self.frames([])
            var bytes: [UInt8] = []
            JournalFormat.beginFrame(in: &bytes)
            JournalFormat.appendEvent(event(1, state.name).0, state: state, to: &bytes)
            JournalFormat.sealFrame(in: &bytes, at: 0, index: 1)
            frames.append(bytes)
            if more { frames.append(self.frames([["a"], ["after"]])[2]) }
            return frames.reduce([], +)
        }
        let good = event(1, "tea").1
        #expect(JournalFormat.scan(sealed(good)).damage == nil)
        var cases: [(String, StoredCountdown)] = []
        var state = good
        state.pinnedUnixMilliseconds = -9_223_336_852_482_686_976  // The attack's: the absent marker with a bit changed.
        cases.append(("a time of day of -9223336852482686976", state))
        state = good
        state.deadlineUnixMilliseconds = 99_999_999_999_999
        cases.append(("a deadline of 99999999999999", state))
        state = good
        state.name = "b-\u{13}23"
        cases.append(("a name with a byte outside", state))
        state = good
        state.name = "tea\nEVENT 1 done x 0 1"
        cases.append(("a name with a byte outside", state))
        state = good
        state.totalMilliseconds = 0
        cases.append(("a total of 0 ms", state))
        state = good
        state.remainingNanoseconds = -1
        cases.append(("-1 ns left", state))
        state = good
        state.lateMilliseconds = -5
        cases.append(("-5 ms late", state))
        state = good
        state.deadlineBootNanoseconds = .max  // A second attack's: EXTEND then trapped.
        cases.append(("a boot-clock deadline of 9223372036854775807", state))
        for (problem, state) in cases {
            for more in [true, false] {
                let scan = JournalFormat.scan(sealed(state, then: more))
                #expect(scan.damage?.reason.contains(problem) == true, "\(problem): \(scan.damage?.reason ?? "read as valid")")
                #expect(scan.tornTail == nil && scan.events.isEmpty, "\(problem): never a torn tail, nothing of it read")
            }
        }
        // An event number no daemon reaches: the first change after it trapped on its `+ 1`.
        var numbered: [UInt8] = []
        JournalFormat.beginFrame(in: &numbered)
        var last = event(1, "tea").0
        last.sequence = .max
        last.ownerSequence = .max
        JournalFormat.appendEvent(last, state: good, to: &numbered)
        JournalFormat.sealFrame(in: &numbered, at: 0, index: 1)
        let numberScan = JournalFormat.scan(frames([]).reduce([], +) + numbered)
        #expect(numberScan.damage?.reason.contains("an event number of 18446744073709551615") == true, "\(numberScan.damage?.reason ?? "read as valid")")
        #expect(StateJournal.continuityProblem(of: .max, after: (.max - 1, "journal.x"), snapshotGeneration: nil, directory: "/d")?.contains("numbered past any") == true,
                "a file named past any generation is damage, and its predecessor's + 1 is never computed")
        // Every byte of the record, two values each, sealed again.
        var record: [UInt8] = []
        JournalFormat.beginFrame(in: &record)
        var pinned = good
        pinned.pinnedUnixMilliseconds = 1_764_488_400_000
        pinned.finishedUnixMilliseconds = 1_764_488_000_000
        pinned.lateMilliseconds = 20
        JournalFormat.appendEvent(event(1, "tea").0, state: pinned, to: &record)
        let clock = WallClockMapping(monotonic: Instant(nanoseconds: 5_000_000_000), unixMilliseconds: 1_764_488_000_000)
        var random = SplitMix64(state: 11)
        var accepted = 0
        for offset in JournalFormat.frameHeaderSize..<record.count {
            for _ in 0..<2 {
                var altered = record
                altered[offset] = UInt8(truncatingIfNeeded: random.next())
                JournalFormat.sealFrame(in: &altered, at: 0, index: 1)
                let scan = JournalFormat.scan(frames([]).reduce([], +) + altered)
                for read in scan.events {
                    guard let state = read.state else { continue }
                    accepted += 1
                    #expect(state.implausibility == nil, "byte \(offset)")
                    _ = state.persisted(clock: clock, sameBoot: false, key: state.key)
                }
            }
        }
        #expect(accepted > 0, "some alterations are plausible countdowns (a different total, a different deadline)")
    }

    @Test("a bad frame followed by good data is damage, reported at its offset")
    func damage() {
        var bytes = file([["a"], ["b"], ["c"]])
        let firstTwo = JournalFormat.scan(file([["a"]])).validLength
        bytes[firstTwo + 20] ^= 0x01  // Inside the frame of "b", with "c" after it.
        let scan = JournalFormat.scan(bytes)
        #expect(scan.damage?.offset == firstTwo)
        #expect(scan.events.map(\.event.name) == ["1000/a"])
        var noMagic = file([["a"], ["b"]])
        noMagic[firstTwo] = 0x00
        #expect(JournalFormat.scan(noMagic).damage?.offset == firstTwo)
    }

    @Test("every single-bit flip in a middle frame's header (magic, length or checksum), with 298 frames after it, is damage at that frame, never a torn tail that would cut them off")
    func flippedHeaderBits() {
        let whole = file((0..<300).map { ["c\($0)"] })
        let header = JournalFormat.scan(file([])).validLength
        let frame = (JournalFormat.scan(file([["c0"]])).validLength - header)
        let second = header + frame  // The frame of c1.
        for bit in 0..<(JournalFormat.frameHeaderSize * 8) {
            var bytes = whole
            bytes[second + bit / 8] ^= UInt8(1 << (bit % 8))
            let scan = JournalFormat.scan(bytes)
            #expect(scan.damage?.offset == second, "bit \(bit): \(String(describing: scan.tornTail))")
            #expect(scan.tornTail == nil, "bit \(bit)")
            #expect(scan.events.map(\.event.name) == ["1000/c0"], "bit \(bit)")
        }
    }

    @Test("every frame removed, repeated or moved, anywhere after the header, is damage at the first frame out of its place; the file's last frame removed is what a stop before it leaves")
    func framesKnowTheirPlace() {
        let parts = frames((0..<6).map { ["c\($0)"] })
        func offset(ofFrame index: Int, in layout: [Int]) -> Int { layout.prefix(index).reduce(0) { $0 + parts[$1].count } }
        var layouts: [(String, [Int], Int)] = []  // (what, frame order, position of the first frame out of place)
        for removed in 1..<6 { layouts.append(("frame \(removed) removed", Array(0...6).filter { $0 != removed }, removed)) }
        for repeated in 1...6 {
            layouts.append(("frame \(repeated) repeated", Array(0...repeated) + [repeated] + Array(0...6).dropFirst(repeated + 1), repeated + 1))
        }
        for first in 1..<6 {
            var order = Array(0...6)
            order.swapAt(first, first + 1)
            layouts.append(("frames \(first) and \(first + 1) swapped", order, first))
        }
        layouts.append(("frame 6 moved to the front", [0, 6, 1, 2, 3, 4, 5], 1))
        for (what, order, firstOutOfPlace) in layouts {
            let bytes = order.flatMap { parts[$0] }
            let scan = JournalFormat.scan(bytes)
            #expect(scan.damage?.offset == offset(ofFrame: firstOutOfPlace, in: order), "\(what): \(String(describing: scan.damage))")
            #expect(scan.tornTail == nil, "\(what)")
            #expect(scan.events.count == firstOutOfPlace - 1, "\(what): only the frames before it are taken")
        }
        // The last frame gone is indistinguishable from a stop before it was written: the file is
        // whole, and the next file's header (`follows`) is what tells it from a cut (below).
        let shorter = JournalFormat.scan(parts.dropLast().flatMap { $0 })
        #expect(shorter.damage == nil && shorter.lastFrame?.index == 5)
    }

    @Test("a file's header names the last frame of the file before it; a file without a whole header frame is damage, not a torn tail")
    func headerAndFollows() {
        let before = JournalFormat.scan(file([["a"], ["b"]]))
        let mark = try! #require(before.lastFrame)
        #expect(mark.index == 2)
        let next = JournalFormat.scan(frames([["c"]], follows: mark).reduce([], +))
        #expect(next.header?.follows == mark && next.damage == nil)
        #expect(JournalFormat.scan(file([])).header?.follows == nil)
        let whole = file([["a"]])
        let headerLength = frames([]).first!.count
        for cut in 1..<headerLength {
            let scan = JournalFormat.scan(Array(whole[0..<cut]))
            #expect(scan.damage?.offset == 0 && scan.tornTail == nil, "cut at \(cut)")
        }
        // A frame of events in the header's place, or a header later on, is damage too.
        let events = frames([["a"], ["b"]])
        var eventsFirst = events[1]
        JournalFormat.sealFrame(in: &eventsFirst, at: 0, index: 0)
        #expect(JournalFormat.scan(eventsFirst + events[2]).damage?.reason.contains("not its header") == true)
        var headerAgain = events[0]
        JournalFormat.sealFrame(in: &headerAgain, at: 0, index: 2)
        #expect(JournalFormat.scan(events[0] + events[1] + headerAgain).damage?.reason.contains("header record after the start") == true)
    }

    @Test("a journal of the earlier layout (unnumbered frames) still reads, with its frames counted; a numbered frame inside one is damage")
    func unnumberedFilesRead() {
        let old = unnumberedFile([["a"], ["b", "c"]])
        let scan = JournalFormat.scan(old)
        #expect(scan.damage == nil && scan.tornTail == nil && scan.layout == .unnumbered)
        #expect(scan.header == .init(generation: 3, createdUnixMilliseconds: 1, bootID: "boot-a"))
        #expect(scan.events.map(\.event.name) == ["1000/a", "1000/b", "1000/c"])
        #expect(scan.lastFrame?.index == 2)
        let mixed = old + frames([["d"], ["e"]])[2]
        #expect(JournalFormat.scan(mixed).damage?.offset == old.count)
        // A torn last frame is still a torn tail in the old layout.
        #expect(JournalFormat.scan(Array(old.dropLast(3))).tornTail != nil)
    }

    @Test("CRC-32C matches the standard check value")
    func checksum() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([]) == 0)
        #expect(Array("123456789".utf8).withUnsafeBytes { CRC32C.tableChecksum($0) } == 0xE306_9283)
    }

    @Test(
        "CRC-32C from the processor's instruction equals the tables' at every length and alignment",
        .enabled(if: CRC32C.usesInstruction, "this processor has no CRC-32C instruction that countdownd uses (SSE 4.2 on x86-64): the tables alone are used, and tested above")
    )
    func checksumInstruction() {
        var random: UInt64 = 0x9E37_79B9_7F4A_7C15
        let bytes = (0..<4096).map { _ -> UInt8 in
            random = random &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: random >> 56)
        }
        bytes.withUnsafeBytes { raw in
            for start in 0..<9 {
                for length in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255, 1000, 4000] {
                    let slice = UnsafeRawBufferPointer(rebasing: raw[start..<(start + length)])
                    #expect(CRC32C.checksum(slice) == CRC32C.tableChecksum(slice), "start \(start), length \(length)")
                }
            }
        }
    }
}
