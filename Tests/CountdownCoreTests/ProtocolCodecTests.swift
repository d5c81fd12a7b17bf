import CountdownCore
import Testing

@Suite("Protocol codec: parser, framer, encoder")
struct ProtocolCodecTests {
    static func parse(_ line: String) throws(ProtocolError) -> Request? {
        try RequestParser.parse(Array(line.utf8))
    }

    @Test("well-formed requests", arguments: [
        ("START tea 3m", Request.start(name: "tea", milliseconds: 180_000, replace: false)),
        ("start tea", .start(name: "tea", milliseconds: nil, replace: false)),
        ("START tea 5 replace", .start(name: "tea", milliseconds: 5000, replace: true)),
        ("START tea REPLACE", .start(name: "tea", milliseconds: nil, replace: true)),
        ("START pomodoro 25m ON-SUSPEND pause", .start(name: "pomodoro", milliseconds: 1_500_000, replace: false, onSuspend: .pause)),
        ("start p 25m on-suspend PAUSE replace", .start(name: "p", milliseconds: 1_500_000, replace: true, onSuspend: .pause)),
        ("START p REPLACE ON-SUSPEND count", .start(name: "p", milliseconds: nil, replace: true, onSuspend: .count)),
        ("START p ON-SUSPEND pause", .start(name: "p", milliseconds: nil, replace: false, onSuspend: .pause)),
        ("START p CYCLE 25m:work,5m:break", .start(name: "p", milliseconds: 1_500_000, replace: false, cycle: CountdownCycle(phases: [.init(milliseconds: 1_500_000, label: "work"), .init(milliseconds: 300_000, label: "break")]))),
        ("start p cycle 1s,2s:b REPEAT replace on-suspend pause", .start(name: "p", milliseconds: 1000, replace: true, onSuspend: .pause, cycle: CountdownCycle(phases: [.init(milliseconds: 1000), .init(milliseconds: 2000, label: "b")], rounds: 0))),
        ("START p CYCLE 1s REPEAT 4 REPLACE", .start(name: "p", milliseconds: 1000, replace: true, cycle: CountdownCycle(phases: [.init(milliseconds: 1000)], rounds: 4))),
        ("SKIP p", .skip(name: "p")),
        ("SET p ON-SUSPEND pause", .set(name: "p", onSuspend: .pause)),
        ("set p on-suspend Count", .set(name: "p", onSuspend: .count)),
        ("Status tea", .status(name: "tea")),
        ("LIST", .list(states: [], prefix: "")),
        ("list state running,paused prefix otp:", .list(states: [.running, .paused], prefix: "otp:")),
        ("LIST PREFIX 1000/", .list(states: [], prefix: "1000/")),
        ("CANCEL a", .cancel(name: "a")),
        ("PAUSE a", .pause(name: "a")),
        ("RESUME a", .resume(name: "a")),
        ("EXTEND a 1m", .extend(name: "a", milliseconds: 60_000)),
        ("SUBSCRIBE", .subscribe(names: [], kinds: .all, since: nil)),
        ("SUBSCRIBE EVENTS lifecycle", .subscribe(names: [], kinds: .lifecycle, since: nil)),
        ("SUBSCRIBE tea events DONE,cancelled since 7", .subscribe(names: ["tea"], kinds: [EventKindSet(.done), EventKindSet(.cancelled)], since: 7)),
        ("SUBSCRIBE a b", .subscribe(names: ["a", "b"], kinds: .all, since: nil)),
        ("SUBSCRIBE SINCE 42", .subscribe(names: [], kinds: .all, since: 42)),
        ("subscribe tea since 0", .subscribe(names: ["tea"], kinds: .all, since: 0)),
        ("SUBSCRIBE SINCE", .subscribe(names: ["SINCE"], kinds: .all, since: nil)),
        ("SUBSCRIBE PREFIX otp:", .subscribe(names: [], prefix: "otp:", kinds: .all, since: nil)),
        ("subscribe prefix otp:+49 EVENTS done SINCE 12", .subscribe(names: [], prefix: "otp:+49", kinds: EventKindSet(.done), since: 12)),
        ("SUBSCRIBE tea PREFIX", .subscribe(names: ["tea", "PREFIX"], kinds: .all, since: nil)),
        ("UNSUBSCRIBE", .unsubscribe),
        ("PING\r", .ping),
        ("  QUIT  ", .quit),
    ] as [(String, Request)])
    func wellFormed(line: String, request: Request) throws {
        #expect(try Self.parse(line) == request)
    }

    @Test("blank lines are not requests")
    func blank() throws {
        #expect(try Self.parse("") == nil)
        #expect(try Self.parse("   ") == nil)
        #expect(try Self.parse("\r") == nil)
    }

    @Test("malformed requests get the right error code", arguments: [
        ("FOO", ErrorCode.unknownCommand), ("STARTX tea 5", .unknownCommand), ("\u{0}", .unknownCommand),
        ("START", .badRequest), ("START a 5 REPLACE extra", .badRequest), ("START a 5 6", .badRequest),
        ("STATUS", .badRequest), ("STATUS a b", .badRequest), ("LIST x", .badRequest), ("LIST STATE", .badRequest), ("LIST STATE over", .badRequest), ("LIST STATE done STATE done", .badRequest), ("LIST PREFIX a PREFIX b", .badRequest), ("LIST PREFIX a/b", .badName), ("LIST PREFIX é", .badName), ("SUBSCRIBE EVENTS", .badRequest), ("SUBSCRIBE EVENTS ticks", .badRequest), ("SUBSCRIBE a EVENTS done, SINCE 3", .badRequest), ("PING x", .badRequest),
        ("EXTEND a", .badRequest), ("CANCEL", .badRequest), ("QUIT now", .badRequest), ("UNSUBSCRIBE a", .badRequest), ("SUBSCRIBE SINCE x", .badRequest), ("SUBSCRIBE a SINCE -1", .badRequest), ("SUBSCRIBE SINCE 99999999999999999999999", .badRequest),
        ("SUBSCRIBE PREFIX", .badRequest), ("SUBSCRIBE PREFIX a b", .badRequest), ("SUBSCRIBE PREFIX a/", .badName),
        ("START a/b 5", .badName), ("STATUS é", .badName), ("SUBSCRIBE ok bad\u{1}", .badName), ("START \u{7F} 5", .badName),
        ("START a 5 ON-SUSPEND", .badRequest), ("START a 5 ON-SUSPEND sleep", .badRequest), ("START a 5 ON-SUSPEND pause ON-SUSPEND count", .badRequest),
        ("START a 5 REPLACE REPLACE", .badRequest), ("START a AT 1800000000000 ON-SUSPEND pause", .badRequest), ("START a ON-SUSPEND pause 5", .badRequest),
        ("START a CYCLE", .badRequest), ("START a CYCLE 1s,", .badRequest), ("START a CYCLE 1s:ö", .badRequest), ("START a CYCLE 1s:\(String(repeating: "x", count: 33))", .badRequest),
        ("START a CYCLE \(Array(repeating: "1s", count: 65).joined(separator: ","))", .badRequest), ("START a CYCLE 1s REPEAT 0", .badRequest),
        ("START a CYCLE 1s REPEAT 1000001", .badRequest), ("START a 5 REPEAT", .badRequest), ("START a CYCLE 1s 5", .badRequest), ("START a 5 CYCLE 1s", .badRequest),
        ("START a CYCLE 0s,1s", .badDuration), ("START a CYCLE 99ms", .badDuration), ("START a CYCLE 1s,1ms:x", .badDuration), ("START a CYCLE 1s,367d", .badDuration), ("SKIP", .badRequest), ("SKIP a b", .badRequest),
        ("SET a", .badRequest), ("SET a ON-SUSPEND", .badRequest), ("SET a ON-SUSPEND sleep", .badRequest), ("SET a COLOR red", .badRequest),
        ("SET a/b ON-SUSPEND pause", .badName), ("SET a ON-SUSPEND pause x", .badRequest),
        ("START a 0", .badDuration), ("START a -1", .badDuration), ("START a 99999999999999999999", .badDuration),
        ("EXTEND a 1y", .badDuration), ("START a 367d", .badDuration), ("START a 999999999999999w", .badDuration),
    ] as [(String, ErrorCode)])
    func malformed(line: String, code: ErrorCode) {
        do {
            _ = try Self.parse(line)
            Issue.record("'\(line)' parsed")
        } catch {
            #expect(error.code == code, "\(line): \(error)")
            #expect(!error.message.isEmpty)
        }
    }

    @Test("invalid UTF-8 anywhere is rejected by the field it is in, never crashes")
    func invalidUTF8() {
        let cases: [([UInt8], ErrorCode)] = [
            ([0xFF, 0xFE], .unknownCommand),
            (Array("START ".utf8) + [0xC3, 0x28] + Array(" 5".utf8), .badName),
            (Array("START tea ".utf8) + [0xE2, 0x82], .badDuration),
        ]
        for (bytes, code) in cases {
            do {
                _ = try RequestParser.parse(bytes)
                Issue.record("parsed")
            } catch {
                #expect(error.code == code)
            }
        }
    }

    @Test("the framer splits lines, accepts CRLF, and keeps partial lines for later")
    func framing() {
        var framer = LineFramer()
        #expect(!framer.hasFrame)
        framer.append(Array("PING\r\nLI".utf8))
        #expect(framer.hasFrame)
        #expect(framer.nextFrame() == .line(ArraySlice(Array("PING\r".utf8))))
        #expect(!framer.hasFrame, "half a line is no frame")
        #expect(framer.nextFrame() == nil)
        #expect(framer.hasPartialLine && !framer.hasFrame)
        framer.append(Array("ST\n".utf8))
        #expect(framer.hasFrame)
        #expect(framer.nextFrame() == .line(ArraySlice(Array("LIST".utf8))))
        #expect(framer.nextFrame() == nil)
        #expect(!framer.hasPartialLine)
    }

    @Test("a line put back comes again, whole and first, CRLF or not, with the lines after it in order and a partial line kept")
    func putBack() {
        var framer = LineFramer()
        framer.append(Array("SUBSCRIBE a b\r\nPING\nLI".utf8))
        let first = framer.nextFrame()
        #expect(first == .line(ArraySlice(Array("SUBSCRIBE a b\r".utf8))))
        if let first { framer.putBack(first) }
        #expect(framer.hasFrame)
        #expect(framer.nextFrame() == first, "the same line again")
        let second = framer.nextFrame()
        #expect(second == .line(ArraySlice(Array("PING".utf8))))
        if let second { framer.putBack(second) }
        #expect(framer.nextFrame() == second)
        #expect(framer.nextFrame() == nil)
        framer.append(Array("ST\n".utf8))
        #expect(framer.nextFrame() == .line(ArraySlice(Array("LIST".utf8))))
        #expect(!framer.hasPartialLine)
    }

    @Test("a line over the limit yields one tooLong, is discarded, and the next line is fine")
    func tooLong() {
        var framer = LineFramer(maximumLineLength: 10)
        framer.append(Array("0123456789".utf8))
        #expect(framer.nextFrame() == nil)  // Exactly the limit, still waiting for LF.
        framer.append(Array("AB".utf8))
        #expect(framer.nextFrame() == .tooLong)
        framer.append(Array(repeating: UInt8(ascii: "x"), count: 10_000))
        #expect(framer.nextFrame() == nil)
        #expect(framer.bufferedByteCount == 0, "discarded bytes are not kept")
        framer.append(Array("yy\nPING\n".utf8))
        #expect(framer.nextFrame() == .line(ArraySlice(Array("PING".utf8))))
    }

    @Test("a complete line at the limit passes; one byte over is tooLong; CR does not count")
    func limitBoundary() {
        var framer = LineFramer(maximumLineLength: 4)
        framer.append(Array("abcd\r\nabcde\nok\n".utf8))
        #expect(framer.nextFrame() == .line(ArraySlice(Array("abcd\r".utf8))))
        #expect(framer.nextFrame() == .tooLong)
        #expect(framer.nextFrame() == .line(ArraySlice(Array("ok".utf8))))
    }

    @Test("encoded replies and events read back identically")
    func roundTrip() {
        let clock = WallClockMapping(monotonic: .seconds(100), unixMilliseconds: 1_700_000_000_000)
        let snapshot = CountdownSnapshot(
            Countdown(name: "tea", owner: 1000, totalMilliseconds: 3000, status: .running(deadline: .milliseconds(102_500), pinnedUnixMilliseconds: nil)),
            at: .seconds(100)
        )
        var out: [UInt8] = []
        WireEncoder.appendCountdown(snapshot, clock: clock, to: &out)
        WireEncoder.appendOK(snapshot, clock: clock, to: &out)
        WireEncoder.appendEvent(CountdownEvent(sequence: 7, kind: .tick, name: "tea", remainingMilliseconds: 2000, totalMilliseconds: 3000), to: &out)
        WireEncoder.appendEvent(CountdownEvent(sequence: 8, kind: .done, name: "tea", remainingMilliseconds: 0, totalMilliseconds: 3000, lateMilliseconds: 1234), to: &out)
        WireEncoder.appendSnapshotEvent(sequence: 8, snapshot, clock: clock, to: &out)
        WireEncoder.appendError(ProtocolError(.busy, "two\nlines"), to: &out)
        WireEncoder.appendError(ProtocolError(.busy, "'a=b' is running", fields: [.init("remaining_ms", "58000"), .init("state", "running")]), to: &out)
        WireEncoder.appendGreeting(daemonVersion: "9.9", to: &out)
        var pomodoro = snapshot
        pomodoro.name = "pomodoro"
        pomodoro.countdown.pausesOnSuspend = true
        WireEncoder.appendOK(pomodoro, clock: clock, to: &out)
        WireEncoder.appendSnapshotEvent(sequence: 8, pomodoro, clock: clock, to: &out)
        var slept = CountdownEvent(sequence: 9, kind: .paused, name: "pomodoro", remainingMilliseconds: 2500, totalMilliseconds: 3000)
        slept.causedBySuspend = true
        WireEncoder.appendEvent(slept, to: &out)
        let text = String(decoding: out, as: UTF8.self)
        #expect(text == """
            COUNTDOWN tea running 2500 3000 1700000002500 1000
            OK tea running 2500 3000 1700000002500 1000
            EVENT 7 tick tea 2000 3000
            EVENT 8 done tea 0 3000 1234
            EVENT 8 snapshot tea 2500 3000 running 1700000002500 1000
            ERR busy two lines
            ERR busy 'a=b' is running remaining_ms=58000 state=running
            HELLO countdownd 1 9.9
            OK pomodoro running 2500 3000 1700000002500 1000 - pause-on-suspend
            EVENT 8 snapshot pomodoro 2500 3000 running 1700000002500 1000 pause-on-suspend
            EVENT 9 paused pomodoro 2500 3000 suspend

            """)
        let lines = text.split(separator: "\n").map { WireLine.parse(String($0)) }
        let info = CountdownInfo(name: "tea", state: .running, remainingMilliseconds: 2500, totalMilliseconds: 3000, deadlineUnixMilliseconds: 1_700_000_002_500, owner: 1000)
        #expect(lines[0] == .countdown(info))
        #expect(lines[1] == .ok("tea running 2500 3000 1700000002500 1000"))
        #expect(lines[2] == .event(EventInfo(sequence: 7, kind: .tick, name: "tea", remainingMilliseconds: 2000, totalMilliseconds: 3000)))
        #expect(lines[3] == .event(EventInfo(sequence: 8, kind: .done, name: "tea", remainingMilliseconds: 0, totalMilliseconds: 3000, lateMilliseconds: 1234)))
        #expect(lines[4] == .event(EventInfo(sequence: 8, kind: .snapshot, name: "tea", remainingMilliseconds: 2500, totalMilliseconds: 3000, state: .running, deadlineUnixMilliseconds: 1_700_000_002_500)))
        #expect(lines[5] == .error(code: .busy, rawCode: "busy", message: "two lines"))
        #expect(lines[6] == .error(code: .busy, rawCode: "busy", message: "'a=b' is running remaining_ms=58000 state=running"))
        #expect(lines[7] == .hello(protocolVersion: 1, daemonVersion: "9.9"))
        #expect(WireLine.countdownInfo("pomodoro running 2500 3000 1700000002500 1000 - pause-on-suspend".split(separator: " ").map(String.init))?.pausesOnSuspend == true)
        guard case .event(let snapshotEvent) = lines[9], case .event(let pausedEvent) = lines[10] else {
            Issue.record("not events: \(lines[9]), \(lines[10])")
            return
        }
        #expect(snapshotEvent.pausesOnSuspend == true && snapshotEvent.isPinned == nil)
        #expect(pausedEvent.causedBySuspend == true && pausedEvent.kind == .paused && pausedEvent.remainingMilliseconds == 2500)
    }

    @Test("an ERR's fields are its trailing key=value words; the message before them is whole")
    func errorFields() {
        let split = ProtocolError.splitFields("'tea' is running with 0:00:58 left; wait for it remaining_ms=58000 state=running")
        #expect(split.message == "'tea' is running with 0:00:58 left; wait for it")
        #expect(split.fields == ["remaining_ms": "58000", "state": "running"])
        // A message without fields, and words with '=' that are not fields (a quoted name).
        #expect(ProtocolError.splitFields("no countdown named 'a=b'") == ("no countdown named 'a=b'", [:]))
        #expect(ProtocolError.splitFields("x =1").fields.isEmpty)
    }

    @Test("decimal encoding covers zero, negatives and the extremes")
    func decimals() {
        for value: Int64 in [0, 7, 10, -1, -10, 1_234_567_890_123, .max, .min] {
            var out: [UInt8] = []
            WireEncoder.appendEvent(CountdownEvent(sequence: 1, kind: .tick, name: "n", remainingMilliseconds: value, totalMilliseconds: 1), to: &out)
            #expect(String(decoding: out, as: UTF8.self) == "EVENT 1 tick n \(value) 1\n")
        }
    }

    @Test("event lines written into scratch memory read as the fields say, at every length")
    func eventLinesAgainstInterpolation() {
        var random: UInt64 = 0x2545_F491_4F6C_DD1D
        func next() -> UInt64 {
            random ^= random << 13
            random ^= random >> 7
            random ^= random << 17
            return random
        }
        // Numbers of every length, at both ends of the types, and the longest names (a user's
        // key as root sees it is longer still: `<uid>/` before 128 bytes).
        let numbers: [Int64] = [0, 9, 10, 99, 100, 101, 999_999, 1_000_000, .max, .min, -1, -99, -100]
        let longest = String(repeating: "n", count: CountdownName.maximumLength)
        let names = ["a", "tea", "otp:+4915112345678", longest, "4294967295/" + longest]
        let kinds = EventKind.allCases
        for round in 0..<2_000 {
            let pick = { (values: [Int64]) -> Int64 in
                round % 3 == 0 ? values[Int(next() % UInt64(values.count))] : Int64(bitPattern: next()) >> (next() % 64)
            }
            let sequence: UInt64 = round % 5 == 0 ? UInt64.max - next() % 3 : next() >> (next() % 64)
            var event = CountdownEvent(
                sequence: sequence, kind: kinds[round % kinds.count], name: names[round % names.count],
                remainingMilliseconds: pick(numbers), totalMilliseconds: pick(numbers),
                lateMilliseconds: round % 4 == 0 ? pick(numbers) : nil
            )
            event.causedBySuspend = round % 7 == 0
            var out: [UInt8] = [UInt8(ascii: ">")]  // What was there stays.
            WireEncoder.appendEvent(event, to: &out)
            var expected = ">EVENT \(sequence) \(event.kind.rawValue) \(event.name) \(event.remainingMilliseconds) \(event.totalMilliseconds)"
            if let late = event.lateMilliseconds {
                expected += " \(late)"
            } else if event.causedBySuspend {
                expected += " suspend"
            }
            expected += "\n"
            #expect(String(decoding: out, as: UTF8.self) == expected)
        }
        // Every line that carries a `seq` writes it unsigned, as clients parse it.
        var out: [UInt8] = []
        WireEncoder.appendResync(sequence: .max, to: &out)
        let snapshot = CountdownSnapshot(Countdown(name: "a", owner: 0, totalMilliseconds: 2, status: .paused(remainingNanoseconds: 1_000_000)), at: .zero)
        WireEncoder.appendSnapshotEvent(sequence: .max, snapshot, clock: WallClockMapping(monotonic: .zero, unixMilliseconds: 0), to: &out)
        #expect(String(decoding: out, as: UTF8.self) == "RESYNC 18446744073709551615\nEVENT 18446744073709551615 snapshot a 1 2 paused - 0\n")
    }

    @Test("a cycle's fields come after the optional ones' places (a - where empty), and read back; a plain line is unchanged")
    func cycleFields() {
        let clock = WallClockMapping(monotonic: .seconds(100), unixMilliseconds: 1_700_000_000_000)
        var cycle = CountdownCycle(phases: [.init(milliseconds: 3000, label: "work"), .init(milliseconds: 1000)], rounds: 4)
        let snapshot = CountdownSnapshot(
            Countdown(
                name: "p", owner: 1000, totalMilliseconds: 3000, status: .running(deadline: .milliseconds(102_500), pinnedUnixMilliseconds: nil),
                cycle: cycle
            ),
            at: .seconds(100)
        )
        var out: [UInt8] = []
        WireEncoder.appendOK(snapshot, clock: clock, to: &out)
        WireEncoder.appendSnapshotEvent(sequence: 8, snapshot, clock: clock, to: &out)
        var tick = CountdownEvent(sequence: 8, kind: .tick, name: "p", remainingMilliseconds: 2000, totalMilliseconds: 3000)
        tick.cycle = cycle
        WireEncoder.appendEvent(tick, to: &out)
        cycle = cycle.next
        cycle.rounds = 0
        var phase = CountdownEvent(sequence: 9, kind: .phase, name: "p", remainingMilliseconds: 1000, totalMilliseconds: 1000, lateMilliseconds: 1500)
        phase.cycle = cycle
        WireEncoder.appendEvent(phase, to: &out)
        var changed = CountdownEvent(sequence: 10, kind: .changed, name: "p", remainingMilliseconds: 1000, totalMilliseconds: 1000)
        changed.suspendPolicy = .pause
        changed.cycle = cycle
        WireEncoder.appendEvent(changed, to: &out)
        changed.cycle = nil
        changed.suspendPolicy = .count
        WireEncoder.appendEvent(changed, to: &out)
        var suspended = CountdownSnapshot(
            Countdown(name: "q", owner: 0, totalMilliseconds: 2, status: .paused(remainingNanoseconds: 1_000_000), pausesOnSuspend: true), at: .zero
        )
        suspended.cycle = CountdownCycle(phases: [.init(milliseconds: 2)])
        WireEncoder.appendCountdown(suspended, clock: clock, to: &out)
        let text = String(decoding: out, as: UTF8.self)
        #expect(text == """
            OK p running 2500 3000 1700000002500 1000 - - phase=1/2 label=work round=1/4
            EVENT 8 snapshot p 2500 3000 running 1700000002500 1000 - phase=1/2 label=work round=1/4
            EVENT 8 tick p 2000 3000 - phase=1/2 label=work round=1/4
            EVENT 9 phase p 1000 1000 1500 phase=2/2 round=1
            EVENT 10 changed p 1000 1000 pause-on-suspend phase=2/2 round=1
            EVENT 10 changed p 1000 1000 count-on-suspend
            COUNTDOWN q paused 1 2 - 0 - pause-on-suspend phase=1/1

            """)
        let lines = text.split(separator: "\n").map { WireLine.parse(String($0)) }
        let work = CyclePosition(phase: 1, phases: 2, label: "work", round: 1, rounds: 4)
        #expect(WireLine.countdownInfo("p running 2500 3000 1700000002500 1000 - - phase=1/2 label=work round=1/4".split(separator: " ").map(String.init))?.cycle == work)
        guard case .event(let snapshotEvent) = lines[1], case .event(let tickEvent) = lines[2], case .event(let phaseEvent) = lines[3],
              case .event(let toPause) = lines[4], case .event(let toCount) = lines[5], case .countdown(let paused) = lines[6] else {
            Issue.record("\(lines)")
            return
        }
        #expect(snapshotEvent.cycle == work && tickEvent.cycle == work && tickEvent.lateMilliseconds == nil)
        #expect(phaseEvent.kind == .phase && phaseEvent.lateMilliseconds == 1500 && phaseEvent.cycle == CyclePosition(phase: 2, phases: 2, round: 1))
        #expect(paused.pausesOnSuspend == true && paused.lateMilliseconds == nil && paused.cycle == CyclePosition(phase: 1, phases: 1))
        #expect(toPause.kind == .changed && toPause.pausesOnSuspend == true && toPause.cycle?.phase == 2)
        #expect(toCount.pausesOnSuspend == false && toCount.cycle == nil)
    }

    @Test("clients ignore trailing fields they do not know")
    func unknownTrailingFields() {
        #expect(WireLine.parse("EVENT 3 tick a 1000 2000 future stuff") == .event(EventInfo(sequence: 3, kind: .tick, name: "a", remainingMilliseconds: 1000, totalMilliseconds: 2000)))
        if case .countdown(let info) = WireLine.parse("COUNTDOWN a paused 5 10 - 0 - extra") {
            #expect(info.state == .paused && info.deadlineUnixMilliseconds == nil)
        } else {
            Issue.record("COUNTDOWN with extra fields not read")
        }
    }

    @Test("wall-clock mapping derives Unix deadlines from monotonic instants and back")
    func wallClock() {
        let mapping = WallClockMapping(monotonic: .seconds(50), unixMilliseconds: 1_000_000)
        #expect(mapping.unixMilliseconds(of: .seconds(60)) == 1_010_000)
        #expect(mapping.unixMilliseconds(of: .seconds(40)) == 990_000)
        #expect(mapping.instant(ofUnixMilliseconds: 1_010_000) == .seconds(60))
    }

    @Test("a wall-clock time further than 100 years from the mapping's maps to 100 years away, never to an overflow (a damaged stored value once stopped the daemon with a trap)")
    func wallClockFarAway() {
        let mapping = WallClockMapping(monotonic: .seconds(50), unixMilliseconds: 1_764_488_400_000)
        let farthest = WallClockMapping.farthestMilliseconds
        for unix in [Int64.min, Int64.min + 1, -9_223_336_852_482_686_976, -farthest * 2] {
            #expect(mapping.instant(ofUnixMilliseconds: unix) == Instant.seconds(50).advanced(byMilliseconds: -farthest), "\(unix)")
        }
        for unix in [Int64.max, Int64.max - 1, 1_764_488_400_000 + farthest * 3] {
            #expect(mapping.instant(ofUnixMilliseconds: unix) == Instant.seconds(50).advanced(byMilliseconds: farthest), "\(unix)")
        }
        let near = 1_764_488_400_000 + farthest - 1
        #expect(mapping.instant(ofUnixMilliseconds: near) == Instant.seconds(50).advanced(byMilliseconds: farthest - 1), "within the reach, exact")
    }
}
