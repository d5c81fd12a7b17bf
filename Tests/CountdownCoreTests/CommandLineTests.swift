import CountdownCLI
import CountdownCore
import Foundation
import Testing

@Suite("Argument parsing")
struct CommandLineTests {
    let parser = ArgumentParser(options: [.init(["--socket"], takesValue: true), .init(["--json"]), .init(["--help", "-h"])])

    @Test("options anywhere, both value forms, -- and - handled as users expect")
    func parserBasics() throws {
        let result = try parser.parse(["status", "--socket=/a", "tea", "--json", "--socket", "/b", "--", "--json", "-"])
        #expect(result.operands == ["status", "tea", "--json", "-"])
        #expect(result.values["socket"] == ["/a", "/b"])
        #expect(result.value("socket") == "/b")
        #expect(result.has("json"))
        #expect(try parser.parse(["-h"]).has("help"))
        #expect(try parser.parse(["--socket=a=b"]).value("socket") == "a=b")
    }

    @Test("usage errors", arguments: [
        (["--nope"], ArgumentParser.Failure.unknownOption("--nope")),
        (["--socket"], .missingValue("--socket")),
        (["--json=yes"], .unexpectedValue("--json")),
        (["-x"], .unknownOption("-x")),
    ])
    func parserErrors(arguments: [String], failure: ArgumentParser.Failure) {
        #expect(throws: failure) { try parser.parse(arguments) }
    }

    func cdctl(_ arguments: [String], env: [String: String] = ["XDG_RUNTIME_DIR": "/run/user/7"]) throws(UsageError) -> CdctlInvocation {
        try CdctlCommandLine.parse(arguments, environment: env, uid: 7, stdoutIsTerminal: false)
    }

    @Test("cdctl commands parse into validated values")
    func cdctlCommands() throws {
        #expect(try cdctl(["start", "tea", "3m"]).command == .start(name: "tea", milliseconds: 180_000, replace: false, ifIdle: false, wait: false))
        #expect(try cdctl(["start", "--replace", "tea", "--wait"]).command == .start(name: "tea", milliseconds: nil, replace: true, ifIdle: false, wait: true))
        #expect(try cdctl(["start", "otp:1", "60", "--if-idle"]).command == .start(name: "otp:1", milliseconds: 60_000, replace: false, ifIdle: true, wait: false))
        #expect(try cdctl(["start", "pomodoro", "25m", "--pause-on-suspend"]).command == .start(name: "pomodoro", milliseconds: 1_500_000, replace: false, ifIdle: false, wait: false, pauseOnSuspend: true))
        #expect(try cdctl(["start", "focus", "--pomodoro"]).command == .start(name: "focus", milliseconds: nil, replace: false, ifIdle: false, wait: false, cycle: CdctlCommandLine.pomodoroPhases))
        #expect(try cdctl(["start", "focus", "--cycle", "50m:work,10m:break", "--repeat", "forever", "--pause-on-suspend"]).command
            == .start(name: "focus", milliseconds: nil, replace: false, ifIdle: false, wait: false, pauseOnSuspend: true, cycle: "50m:work,10m:break REPEAT"))
        #expect(try cdctl(["start", "focus", "--pomodoro", "--repeat", "2", "--replace"]).command
            == .start(name: "focus", milliseconds: nil, replace: true, ifIdle: false, wait: false, cycle: CdctlCommandLine.pomodoroPhases + " REPEAT 2"))
        #expect(try cdctl(["skip", "focus"]).command == .skip(name: "focus"))
        #expect(try cdctl(["set", "focus", "--pause-on-suspend"]).command == .set(name: "focus", pauseOnSuspend: true))
        #expect(try cdctl(["set", "--count-on-suspend", "focus"]).command == .set(name: "focus", pauseOnSuspend: false))
        #expect(try cdctl(["status"]).command == .status(name: nil, style: .table, follow: false))
        #expect(try cdctl(["status", "tea", "--json"]).command == .status(name: "tea", style: .json, follow: false))
        #expect(try cdctl(["status", "tea", "-f", "--format", "{name}"]).command == .status(name: "tea", style: .template(try OutputTemplate(parsing: "{name}")), follow: true))
        #expect(try cdctl(["list", "--json"]).command == .list(style: .json))
        #expect(try cdctl(["list", "--state", "running"]).command == .list(style: .table, states: [.running]))
        #expect(try cdctl(["list", "--state", "running,paused"]).command == .list(style: .table, states: [.running, .paused]))
        #expect(try cdctl(["list", "--state", "done", "--state", "cancelled"]).command == .list(style: .table, states: [.done, .cancelled]), "a repeated --state adds")
        #expect(try cdctl(["list", "--prefix", "otp:"]).command == .list(style: .table, prefix: "otp:"))
        #expect(throws: UsageError.self) { try cdctl(["list", "--prefix", "a b"]) }
        #expect(try cdctl(["watch", "--events", "done,cancelled"]).command == .watch(names: [], json: false, since: nil, events: "done,cancelled"))
        #expect(throws: UsageError.self) { try cdctl(["watch", "--events", "dun"]) }
        #expect(throws: UsageError.self) { try cdctl(["list", "--state", "sleeping"]) }
        #expect(try cdctl(["toggle", "tea"]).command == .toggle(name: "tea"))
        #expect(try cdctl(["rm", "tea"]).command == .remove(name: "tea"))
        #expect(try cdctl(["stats", "--prometheus"]).command == .stats(format: .prometheus))
        #expect(try cdctl(["stats", "--json"]).command == .stats(format: .json))
        #expect(throws: UsageError.self) { try cdctl(["stats", "--json", "--prometheus"]) }
        #expect(try cdctl(["help", "start"]).command == .helpTopic("start"))
        #expect(try cdctl(["start", "tea", "1h 30min"]).command == .start(name: "tea", milliseconds: 5_400_000, replace: false, ifIdle: false, wait: false))
        #expect(try cdctl(["start", "tea", "2 days"]).command == .start(name: "tea", milliseconds: 172_800_000, replace: false, ifIdle: false, wait: false))
        #expect(try cdctl(["__complete", "names"]).command == .completeNames)
        #expect(try cdctl(["extend", "tea", "30s"]).command == .extend(name: "tea", milliseconds: 30_000))
        #expect(try cdctl(["watch"]).command == .watch(names: [], json: false, since: nil))
        #expect(try cdctl(["watch", "tea", "--since", "42"]).command == .watch(names: ["tea"], json: false, since: 42))
        #expect(throws: UsageError.self) { try cdctl(["watch", "--since", "x"]) }
        #expect(throws: UsageError.self) { try cdctl(["list", "--since", "1"]) }
        #expect(try cdctl(["wait", "a", "b"]).command == .wait(names: ["a", "b"]))
        // A mistyped command suggests the closest one.
        do {
            _ = try cdctl(["strat", "tea"])
            Issue.record("'strat' was accepted")
        } catch {
            #expect(error.description.contains("did you mean 'start'?"), "\(error)")
        }
        do {
            _ = try cdctl(["help", "staus"])
            Issue.record("help for 'staus' was accepted")
        } catch {
            #expect(error.description.contains("did you mean 'status'?"), "\(error)")
        }
        #expect(CdctlCommandLine.commandHelp("toggle")?.hasPrefix("Usage: cdctl toggle NAME") == true)
        #expect(CdctlCommandLine.commandHelp("list")?.contains("running, paused") == true)
        for command in CdctlCommandLine.commands {
            #expect(CdctlCommandLine.commandHelp(command) != nil, "no help for \(command)")
        }
        #expect(try cdctl(["--version"]).command == .version)
        #expect(try cdctl(["list"]).socketPath == "/run/user/7/countdownd/countdownd.sock")
        #expect(try cdctl(["--socket", "/x", "list"]).socketPath == "/x")
        // Without --socket: the user's own daemon's socket, then the system's (for its group).
        #expect(try cdctl(["list"]).socketCandidates == ["/run/user/7/countdownd/countdownd.sock", "/run/countdownd/countdownd.sock"])
        #expect(try cdctl(["--socket", "/x", "list"]).socketCandidates == ["/x"])
        #expect(SocketPath.clientCandidates(environment: ["COUNTDOWND_SOCKET": "/y"], uid: 7) == ["/y"])
        #expect(SocketPath.clientCandidates(environment: [:], uid: 0) == ["/run/countdownd/countdownd.sock"])
        #expect(SocketPath.clientCandidates(environment: [:], uid: 7) == ["/tmp/countdownd-7/countdownd.sock", "/run/countdownd/countdownd.sock"])
        #expect(try cdctl(["-v", "list"]).verbose && !(try cdctl(["list"]).verbose))
    }

    @Test("cdctl usage errors say what is wrong", arguments: [
        ([], "no command"), (["frobnicate"], "unknown command"), (["start"], "usage: cdctl start"),
        (["start", "a/b"], "bad name"), (["start", "tea", "5x"], "bad duration"), (["list", "--replace"], "does not apply"),
        (["wait"], "usage: cdctl wait"), (["status", "a", "b"], "usage"), (["--bogus", "list"], "unknown option"),
        (["list", "--follow"], "does not apply"), (["status", "--json", "--format", "{name}"], "exclude each other"),
        (["start", "a", "--replace", "--if-idle"], "exclude each other"), (["start", "a", "--at", "09:30", "--pause-on-suspend"], "does not go with --at"), (["list", "--pause-on-suspend"], "does not apply"), (["status", "--format", "{nope}"], "unknown placeholder"),
        (["status", "--format", "{name"], "not closed"), (["cancel", "a", "--if-idle"], "does not apply"),
        (["start", "tea3", "-5s"], "a duration cannot be negative ('-5s')"), (["start", "tea", "--replce"], "did you mean '--replace'?"),
        (["start", "a", "-367d"], "cannot be negative"), (["cancel", "-5s"], "goes after '--': cdctl cancel -- -5s"),
        (["--h"], "did you mean '--help'?"), (["list", "--st", "running"], "did you mean '--state'?"),
        (["start", "a", "--pause-on-suspend", "--count-on-suspend"], "exclude each other"),
        (["start", "a", "5m", "--pomodoro"], "drop the DURATION"), (["start", "a", "--at", "09:30", "--cycle", "1m"], "--at does not go with --cycle"),
        (["start", "a", "--pomodoro", "--cycle", "1m"], "exclude each other"), (["start", "a", "--repeat", "2"], "--repeat repeats a cycle"),
        (["start", "a", "--cycle", "1m:w,,2m"], "bad --cycle: phase 2 of the cycle is empty"), (["start", "a", "--cycle", "1x"], "bad --cycle: phase 1"),
        (["start", "a", "--pomodoro", "--repeat", "0"], "not a number of rounds"), (["start", "a", "--pomodoro", "--repeat", "always"], "nor 'forever'"),
        (["skip"], "usage: cdctl skip NAME"), (["set", "a"], "set needs one of --pause-on-suspend"),
        (["set", "a", "--pause-on-suspend", "--count-on-suspend"], "set needs one of"), (["set", "a", "--replace", "--pause-on-suspend"], "does not apply"), (["pause", "a", "--pomodoro"], "does not apply"),
    ] as [([String], String)])
    func cdctlUsageErrors(arguments: [String], fragment: String) {
        do {
            _ = try cdctl(arguments)
            Issue.record("\(arguments) parsed")
        } catch {
            #expect(error.description.contains(fragment), "\(error)")
        }
    }

    @Test("NO_COLOR and --no-color turn colour off even on a terminal")
    func color() throws {
        let on = try CdctlCommandLine.parse(["list"], environment: [:], uid: 7, stdoutIsTerminal: true)
        #expect(on.colorAllowed)
        #expect(try !CdctlCommandLine.parse(["list"], environment: ["NO_COLOR": "1"], uid: 7, stdoutIsTerminal: true).colorAllowed)
        #expect(try !CdctlCommandLine.parse(["--no-color", "list"], environment: [:], uid: 7, stdoutIsTerminal: true).colorAllowed)
        #expect(try !CdctlCommandLine.parse(["list"], environment: [:], uid: 7, stdoutIsTerminal: false).colorAllowed)
    }
}

@Suite("cdctl output formatting")
struct FormattingTests {
    @Test("the bar empties as time runs out, with exact boundaries", arguments: [
        (Int64(1000), Int64(1000), 10, "[##########]"),
        (0, 1000, 10, "[----------]"),
        (1, 1000, 10, "[#---------]"),
        (999, 1000, 10, "[##########]"),
        (500, 1000, 10, "[#####-----]"),
        (5000, 1000, 4, "[####]"),
        (1, 366 * 86_400_000, 20, "[#-------------------]"),
        (10, 0, 3, "[---]"),
    ] as [(Int64, Int64, Int, String)])
    func bar(remaining: Int64, total: Int64, width: Int, expected: String) {
        #expect(Formatting.bar(remaining: remaining, total: total, width: width) == expected)
    }

    @Test("a zero or negative width gives no bar at all")
    func zeroWidth() {
        #expect(Formatting.bar(remaining: 5, total: 10, width: 0) == "")
        #expect(Formatting.bar(remaining: 5, total: 10, width: -3) == "")
    }

    @Test("the table is aligned and golden")
    func table() {
        let rows = [
            CountdownInfo(name: "pomodoro", state: .running, remainingMilliseconds: 1_499_000, totalMilliseconds: 1_500_000, deadlineUnixMilliseconds: 1, owner: 1000),
            CountdownInfo(name: "tea", state: .paused, remainingMilliseconds: 90_000, totalMilliseconds: 180_000, owner: 1000),
            CountdownInfo(name: "x", state: .done, remainingMilliseconds: 0, totalMilliseconds: 3000, owner: 0),
        ]
        #expect(Formatting.table(rows) == """
            NAME      STATE    REMAINING  TOTAL    LEFT
            pomodoro  running  0:24:59    0:25:00  [████████████████████] 100%
            tea       paused   0:01:30    0:03:00  [██████████░░░░░░░░░░] 50%
            x         done     0:00:00    0:00:03  [░░░░░░░░░░░░░░░░░░░░] 0%

            """)
    }

    @Test("cdctl words the daemon's advice from its fields, never its English: each token, the since fields, an unknown token and none")
    func adviceInCdctlTerms() {
        func words(_ message: String, _ fields: [String: String]) -> String { Cdctl.inCdctlTerms(message, fields: fields, name: "tea") }
        #expect(words("a; b; CANCEL it first", ["advice": "cancel-first"]) == "a; b; cdctl cancel tea first")
        #expect(words("x; SUBSCRIBE with no names follows all", ["advice": "subscribe-everything"]) == "x; cdctl watch with no names follows all")
        #expect(words("SINCE 9 is ahead; SUBSCRIBE without SINCE for the current state", ["advice": "subscribe-without-since", "since": "9", "last_seq": "3"])
            == "--since 9 is ahead of the last event (3): this daemon's history never had it; cdctl watch without --since shows the current state")
        #expect(words("not in this host's copy, which trails etcd; ask again in a moment, or ask another host", ["advice": "ask-again", "behind": "true"])
            == "not in this host's copy, which trails etcd; run it again in a moment, or on another host of the cluster")
        #expect(words("x; FROB it", ["advice": "frob"]) == "x; FROB it", "a token this cdctl does not know: the message as it is")
        #expect(words("no advice; as is", [:]) == "no advice; as is")
        for advice in ProtocolError.Advice.allCases {
            let worded = words("what; PROTOCOL ADVICE", ["advice": advice.rawValue])
            #expect(worded.hasPrefix("what; cdctl ") || worded.hasPrefix("what; wait for it (cdctl wait tea)") || advice == .askAgain, "\(advice): \(worded)")
            #expect(!worded.contains("PROTOCOL ADVICE"), "\(advice): \(worded)")
        }
    }

    @Test("JSON output is golden: snake_case keys, sorted, absent fields omitted")
    func json() {
        let info = CountdownInfo(name: "tea", state: .paused, remainingMilliseconds: 90_000, totalMilliseconds: 180_000, owner: 1000)
        #expect(Formatting.json(info) == #"{"name":"tea","owner_uid":1000,"remaining_ms":90000,"state":"paused","total_ms":180000}"# + "\n")
        let event = EventInfo(sequence: 4, kind: .tick, name: "tea", remainingMilliseconds: 2000, totalMilliseconds: 3000)
        #expect(Formatting.json(event) == #"{"kind":"tick","name":"tea","remaining_ms":2000,"seq":4,"total_ms":3000}"# + "\n")
        #expect(Formatting.eventLine(event) == "4 tick tea 2000 3000\n")
        let late = EventInfo(sequence: 5, kind: .done, name: "tea", remainingMilliseconds: 0, totalMilliseconds: 3000, lateMilliseconds: 1537)
        #expect(Formatting.eventLine(late) == "5 done tea 0 3000 late 1537\n", "how late, where the wire says it")
        // Resuming after a restart: a lifecycle event's number counts; a tick's or a snapshot's
        // (the last change's, perhaps not read yet) does not.
        #expect(late.resumePoint(after: 4) == 5 && late.resumePoint(after: 9) == 9 && late.resumePoint(after: nil) == 5)
        #expect(event.resumePoint(after: 3) == 3 && event.resumePoint(after: nil) == nil, "a tick numbered 4 moves nothing")
        let snapshot = EventInfo(sequence: 7, kind: .snapshot, name: "tea", remainingMilliseconds: 1, totalMilliseconds: 2, state: .running)
        #expect(snapshot.resumePoint(after: 2) == 2)
        let phase = EventInfo(sequence: 6, kind: .phase, name: "focus", remainingMilliseconds: 300_000, totalMilliseconds: 300_000, lateMilliseconds: 20)
        #expect(Formatting.eventLine(phase) == "6 phase focus 300000 300000 late 20\n")
        #expect(Formatting.json(late) == #"{"kind":"done","late_ms":1537,"name":"tea","remaining_ms":0,"seq":5,"total_ms":3000}"# + "\n")
        // An array; Booleans; a name another uid's (its slash not escaped); every string escaped
        // as JSON asks, and the result read back by a JSON parser (Foundation's, in the test only).
        let pinned = CountdownInfo(
            name: "1000/otp:+49\"\\\u{1}x", state: .running, remainingMilliseconds: 1, totalMilliseconds: 2,
            deadlineUnixMilliseconds: 1_798_135_200_000, isPinned: true, pausesOnSuspend: false)
        let text = Formatting.json([pinned, info])
        #expect(text == #"[{"at":true,"deadline_unix_ms":1798135200000,"name":"1000/otp:+49\"\\\u0001x","remaining_ms":1,"state":"running","total_ms":2},"#
            + #"{"name":"tea","owner_uid":1000,"remaining_ms":90000,"state":"paused","total_ms":180000}]"# + "\n")
        let decoded = try? JSONDecoder().decode([CountdownInfo].self, from: Data(text.utf8))
        #expect(decoded == [pinned, info])
        #expect(Formatting.json([CountdownInfo]()) == "[]\n")
    }
}

@Suite("--format templates")
struct TemplateTests {
    let tea = CountdownInfo(name: "tea", state: .running, remainingMilliseconds: 161_000, totalMilliseconds: 180_000, owner: 1000)

    @Test("every placeholder, golden")
    func placeholders() throws {
        let template = try OutputTemplate(parsing: "{name}|{state}|{remaining}|{remaining_s}|{total}|{progress}|{percent}|{bar}")
        #expect(template.render(tea) == "tea|running|2:41|161|3:00|10|90|█████████░")  // 89.4 % left rounds up, like the bar
    }

    @Test("a cycle's placeholders: phase, phases, label, round; empty for a plain countdown")
    func cyclePlaceholders() throws {
        let template = try OutputTemplate(parsing: "{label} {phase}/{phases} r{round} {remaining}")
        var pomodoro = tea
        pomodoro.cycle = CyclePosition(phase: 3, phases: 8, label: "work", round: 2)
        #expect(template.render(pomodoro) == "work 3/8 r2 2:41")
        #expect(template.render(tea) == " / r 2:41")
    }

    @Test("literal text and escaped braces pass through")
    func literals() throws {
        #expect(try OutputTemplate(parsing: "⏲ {{{name}}} left: {remaining}").render(tea) == "⏲ {tea} left: 2:41")
        #expect(try OutputTemplate(parsing: "").render(tea) == "")
        #expect(try OutputTemplate(parsing: "plain }} text").render(tea) == "plain } text")
    }

    @Test("boundaries: finished, sub-second, hours, days")
    func boundaries() throws {
        let template = try OutputTemplate(parsing: "{remaining} {remaining_s} {percent} {progress} {bar}")
        let done = CountdownInfo(name: "x", state: .done, remainingMilliseconds: 0, totalMilliseconds: 3000)
        #expect(template.render(done) == "0:00 0 0 100 ░░░░░░░░░░")
        let almost = CountdownInfo(name: "x", state: .running, remainingMilliseconds: 1, totalMilliseconds: 3_600_000)
        #expect(template.render(almost) == "0:01 1 1 99 █░░░░░░░░░")
        let long = CountdownInfo(name: "x", state: .paused, remainingMilliseconds: 3_723_000, totalMilliseconds: 2 * 86_400_000)
        #expect(template.render(long) == "1:02:03 3723 3 97 █░░░░░░░░░")
        let full = CountdownInfo(name: "x", state: .running, remainingMilliseconds: 600_000, totalMilliseconds: 600_000)
        #expect(template.render(full) == "10:00 600 100 0 ██████████")
    }

    @Test("compact clock drops zero hours, keeps minutes")
    func compactClock() {
        #expect(Formatting.compactClock(milliseconds: 5000) == "0:05")
        #expect(Formatting.compactClock(milliseconds: 300_000) == "5:00")
        #expect(Formatting.compactClock(milliseconds: 3_599_000) == "59:59")
        #expect(Formatting.compactClock(milliseconds: 3_600_000) == "1:00:00")
    }
}
