import CountdownCore
import Testing

@Suite("Durations and names")
struct DurationAndNameTests {
    @Test("accepted duration forms", arguments: [
        ("90", 90_000), ("90s", 90_000), ("1m30s", 90_000), ("1500ms", 1500), ("2h", 7_200_000),
        ("1d", 86_400_000), ("1h1m1s1ms", 3_661_001), ("366d", 366 * 86_400_000), ("0m1s", 1000), ("007", 7000),
        // systemd.time(7) spellings.
        ("5min", 300_000), ("1h30min", 5_400_000), ("2days", 172_800_000), ("1week", 604_800_000), ("2w", 1_209_600_000),
        ("90sec", 90_000), ("3hours", 10_800_000), ("1hr", 3_600_000), ("250msec", 250), ("1minute30seconds", 90_000),
        // Fractions, as systemd.time(7) takes them, kept to the whole millisecond below.
        ("1.5h", 5_400_000), ("1.5min", 90_000), ("0.25s", 250), ("1.5", 1500), ("1h0.5min", 3_630_000),
        ("1.0009s", 1000), ("2.5ms", 2), ("0.5w", 302_400_000), ("1.99999999999999999999s", 1999), ("366.0d", 366 * 86_400_000),
        // The sum is floored once, exactly (a review found 260 of 3,000 random inputs 1-2 ms low).
        ("10.2426462889751weeks", 6_194_752_475), ("0.159083016minute1.9ms", 9546), ("0.00000000166w", 1),
        ("0.5ms0.5ms", 1), ("0.5s0.5ms", 500), (".5s", 500), (".5", 500), ("1h.5h", 5_400_000),
    ] as [(String, Int64)])
    func accepted(text: String, milliseconds: Int64) throws {
        #expect(try CountdownDuration.parse(text) == milliseconds)
    }

    @Test("rejected durations are bad-duration", arguments: [
        "", "0", "0s", "-5", "+5", "5x", "1.s", ".s", ".", "1..5s", "1.5.5s", "366.5d", "-1.5h", "s", "1m30", "90 s", "367d", "8785h", "99999999999999999999999",
        "9223372036854775807ms", "1e3", "１", "5S", "\u{0}", "5mins5", "1fortnight", "53w", "5minute s",
        // Found by the fuzzer: a huge count of the largest unit must be "too long", not a trap.
        "999999999999999w", "99999999999weeks99999h", "999999999999999w99999h11m",
    ])
    func rejected(text: String) {
        do {
            _ = try CountdownDuration.parse(text)
            Issue.record("'\(text)' was accepted")
        } catch {
            #expect(error.code == .badDuration)
            #expect(error.message.contains("1m30s"), "the message shows the accepted forms")
        }
    }

    @Test("durations render back in the accepted syntax and as a clock")
    func rendering() throws {
        #expect(CountdownDuration.format(milliseconds: 90_000) == "1m30s")
        #expect(CountdownDuration.format(milliseconds: 1500) == "1s500ms")
        #expect(try CountdownDuration.parse(CountdownDuration.format(milliseconds: 93_784_005)) == 93_784_005)
        #expect(CountdownDuration.clock(milliseconds: 0) == "0:00:00")
        #expect(CountdownDuration.clock(milliseconds: 1) == "0:00:01")
        #expect(CountdownDuration.clock(milliseconds: 3_599_000) == "0:59:59")
        #expect(CountdownDuration.clock(milliseconds: 366 * 86_400_000) == "8784:00:00")
    }

    @Test("accepted names", arguments: ["tea", "otp:+4915112345678", "a", "build.release_1@host-2", String(repeating: "n", count: 128)])
    func goodNames(name: String) throws {
        #expect(try CountdownName.validate(name) == name)
    }

    @Test("rejected names are bad-name", arguments: [
        "", String(repeating: "n", count: 129), "with space", "slash/", "tab\t", "nul\u{0}", "del\u{7F}", "é", "emoji🍵", "new\nline", "quote\"",
    ])
    func badNames(name: String) {
        #expect(throws: ProtocolError.self) { try CountdownName.validate(name) }
        do { _ = try CountdownName.validate(name) } catch { #expect(error.code == .badName) }
    }

    @Test("invalid UTF-8 in a name is bad-name, and the message escapes it")
    func invalidUTF8Name() {
        do {
            _ = try CountdownName.validate(bytes: [0x61, 0xFF, 0xFE])
            Issue.record("accepted")
        } catch {
            #expect(error.code == .badName)
            #expect(error.message.contains("0xff"))
        }
    }

    @Test("the default socket path follows the documented order")
    func socketPath() {
        #expect(SocketPath.resolve(environment: ["COUNTDOWND_SOCKET": "/x.sock", "XDG_RUNTIME_DIR": "/run/user/1"], uid: 1) == "/x.sock")
        #expect(SocketPath.resolve(environment: ["XDG_RUNTIME_DIR": "/run/user/1000"], uid: 1000) == "/run/user/1000/countdownd/countdownd.sock")
        #expect(SocketPath.resolve(environment: [:], uid: 0) == "/run/countdownd/countdownd.sock")
        #expect(SocketPath.resolve(environment: ["COUNTDOWND_SOCKET": ""], uid: 1000) == "/tmp/countdownd-1000/countdownd.sock")
    }
}

@Suite("Addresses: names per user")
struct CountdownAddressTests {
    @Test("keys: root's plain, everyone else's uid/name; shown plain to the owner, qualified to root")
    func keys() {
        #expect(CountdownAddress.key(owner: 0, name: "tea") == "tea")
        #expect(CountdownAddress.key(owner: 1000, name: "otp:+49") == "1000/otp:+49")
        #expect(CountdownAddress.split("1000/otp:+49") == (1000, "otp:+49"))
        #expect(CountdownAddress.split("tea") == (0, "tea"))
        #expect(CountdownAddress.display("1000/tea", owner: 1000, to: 1000) == "tea")
        #expect(CountdownAddress.display("1000/tea", owner: 1000, to: 0) == "1000/tea")
        #expect(CountdownAddress.display("tea", owner: 0, to: 0) == "tea")
    }

    @Test("resolving: a user's plain name is its own; uid/name is root's to use", arguments: [
        ("tea", UInt32(1000), "1000/tea", UInt32(1000)),
        ("1000/tea", 1000, "1000/tea", 1000),
        ("tea", 0, "tea", 0),
        ("1000/tea", 0, "1000/tea", 1000),
        ("0/tea", 0, "tea", 0),
    ] as [(String, UInt32, String, UInt32)])
    func resolve(address: String, requester: UInt32, key: String, owner: UInt32) throws {
        let resolved = try CountdownAddress.resolve(address, requester: requester)
        #expect(resolved.key == key && resolved.owner == owner)
    }

    @Test("a user may not address another's namespace; malformed uids are bad names")
    func refused() {
        #expect(throws: ProtocolError(.forbidden, "'0/tea' is in uid 0's namespace; only root may address another user's countdowns")) {
            try CountdownAddress.resolve("0/tea", requester: 1000)
        }
        for bad in ["/tea", "x/tea", "99999999999/tea", "1000/", "1000/te/a", "-1/tea"] {
            #expect(throws: ProtocolError.self, "\(bad)") { try CountdownAddress.validate(bytes: Array(bad.utf8)) }
        }
        #expect((try? CountdownAddress.validate(bytes: Array("1000/tea".utf8))) == "1000/tea")
    }
}

@Suite("Wall-clock times for START … AT")
struct WallClockTimeTests {
    @Test("Unix milliseconds and RFC 3339 with an offset", arguments: [
        ("1798135200000", Int64(1_798_135_200_000)),
        ("2026-12-24T18:00:00Z", 1_798_135_200_000),
        ("2026-12-24T19:00+01:00", 1_798_135_200_000),
        ("2026-12-24t18:00:00.250z", 1_798_135_200_250),
        ("2026-12-24 13:00:00-05:00", 1_798_135_200_000),
        ("1970-01-01T00:00:00Z", 0),
        ("2024-02-29T12:00:00Z", 1_709_208_000_000),
    ] as [(String, Int64)])
    func accepted(text: String, unix: Int64) throws {
        #expect(try WallClockTime.parse(bytes: Array(text.utf8)) == unix)
    }

    @Test("malformed times are bad-duration", arguments: [
        "", "tomorrow", "2026-12-24T18:00", "2026-13-01T00:00Z", "2026-02-30T00:00Z", "2025-02-29T00:00Z",
        "2026-12-24T24:00Z", "2026-12-24T18:00+25:00", "2026-12-24T18:00Zextra", "12:00Z", "-5",
    ])
    func rejected(text: String) {
        #expect(throws: ProtocolError.self, "\(text)") { try WallClockTime.parse(bytes: Array(text.utf8)) }
    }

    @Test("START … AT parses, with REPLACE; other words after the time are bad requests")
    func parser() throws {
        #expect(try RequestParser.parse(Array("START standup AT 1798135200000".utf8)) == .startAt(name: "standup", unixMilliseconds: 1_798_135_200_000, replace: false))
        #expect(try RequestParser.parse(Array("start x at 2026-12-24T18:00:00Z replace".utf8)) == .startAt(name: "x", unixMilliseconds: 1_798_135_200_000, replace: true))
        #expect(throws: ProtocolError.self) { try RequestParser.parse(Array("START x AT".utf8)) }
        #expect(throws: ProtocolError.self) { try RequestParser.parse(Array("START x AT 1798135200000 NOW".utf8)) }
    }
}

@Suite("Engine: countdowns to a wall-clock time")
struct EnginePinnedTests {
    @Test("a wall-clock step moves a countdown to a time of day, not a plain one; pause unpins it; extend moves its time")
    func pinned() throws {
        var clock = ManualClock()
        // At instant 0 the wall clock reads 1,000,000 ms.
        let before = WallClockMapping(monotonic: .zero, unixMilliseconds: 1_000_000)
        try clock.perform { engine, now, events throws(ProtocolError) in
            try engine.start("standup", milliseconds: 60_000, requester: 0, pinnedTo: 1_060_000, now: now, events: &events)
        }
        try clock.start("tea", 60_000)
        #expect(clock.engine.persistentState(of: "standup")?.pinnedUnixMilliseconds == 1_060_000)
        #expect(try clock.engine.status(of: "standup", now: clock.now).pinnedUnixMilliseconds == 1_060_000)
        // The wall clock is set 20 s ahead: 09:30 is now 20 s nearer on the monotonic clock.
        let after = WallClockMapping(monotonic: .zero, unixMilliseconds: before.unixMilliseconds + 20_000)
        #expect(clock.engine.wallClockChanged(to: after, now: clock.now) == 1)
        #expect(try clock.engine.status(of: "standup", now: clock.now).remainingMilliseconds == 40_000)
        #expect(try clock.engine.status(of: "tea", now: clock.now).remainingMilliseconds == 60_000, "a duration does not move")
        clock.advance(byMilliseconds: 40_000)
        #expect(clock.events(of: "standup").last?.1 == .done)
        #expect(clock.events(of: "tea").last?.1 == .tick)
        // Set back: a time that moved further away raises the total, never above 100 %.
        try clock.perform { engine, now, events throws(ProtocolError) in
            try engine.start("later", milliseconds: 10_000, requester: 0, pinnedTo: 1_070_000, now: now, events: &events)
        }
        #expect(clock.engine.wallClockChanged(to: WallClockMapping(monotonic: .zero, unixMilliseconds: 1_000_000), now: clock.now) == 1)
        let later = try clock.engine.status(of: "later", now: clock.now)
        #expect(later.remainingMilliseconds == 30_000 && later.totalMilliseconds == 30_000)
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.extend("later", by: 5000, requester: 0, now: now, events: &events) }
        #expect(clock.engine.persistentState(of: "later")?.pinnedUnixMilliseconds == 1_075_000)
        try clock.perform { engine, now, events throws(ProtocolError) in try engine.pause("later", requester: 0, now: now, events: &events) }
        #expect(clock.engine.persistentState(of: "later")?.pinnedUnixMilliseconds == nil, "a paused countdown keeps its time left, not a time of day")
    }

    @Test("a name prefix resolves as an address does: a user's own, plain or as <uid>/; another's is forbidden; root names anyone's")
    func prefixNamespaces() throws {
        #expect(try CountdownAddress.resolvePrefix("otp:", requester: 1000) == "1000/otp:")
        #expect(try CountdownAddress.resolvePrefix("1000/otp:", requester: 1000) == "1000/otp:")
        #expect(throws: ProtocolError.self) { try CountdownAddress.resolvePrefix("1001/", requester: 1000) }
        #expect(try CountdownAddress.resolvePrefix("otp:", requester: 0) == "otp:")
        #expect(try CountdownAddress.resolvePrefix("1000/otp:", requester: 0) == "1000/otp:")
        #expect(try CountdownAddress.resolvePrefix("0/tea", requester: 0) == "tea")
        #expect(throws: ProtocolError.self, "0/ alone would be everyone's") { try CountdownAddress.resolvePrefix("0/", requester: 0) }
        // A name of the longest length is a prefix of itself.
        let longest = String(repeating: "a", count: 128)
        #expect(try CountdownAddress.validatePrefix(bytes: Array(longest.utf8)) == longest)
        // Whose keys a key prefix can reach: one user's, root's own, or (digits) anyone's.
        #expect(CountdownAddress.onlyOwner(ofKeysStartingWith: "1000/otp:") == 1000)
        #expect(CountdownAddress.onlyOwner(ofKeysStartingWith: "otp:") == 0)
        #expect(CountdownAddress.onlyOwner(ofKeysStartingWith: "10") == nil)
        #expect(CountdownAddress.onlyOwner(ofKeysStartingWith: "") == nil)
    }

    @Test("less than a millisecond says so, not 'more than zero'")
    func belowAMillisecond() {
        for text in ["0.5ms", "0.0001s"] {
            do {
                _ = try CountdownDuration.parse(text)
                Issue.record("'\(text)' was accepted")
            } catch {
                #expect(error.code == .badDuration && error.message.contains("less than a millisecond"), "\(error)")
            }
        }
        #expect(CountdownDuration.isWellFormed("0.5ms") && CountdownDuration.isWellFormed("367d") && !CountdownDuration.isWellFormed("tea"))
    }
}
