import CountdownCLI
import CountdownCore
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
        #expect(try cdctl(["start", "tea", "3m"]).command == .start(name: "tea", milliseconds: 180_000, replace: false, wait: false))
        #expect(try cdctl(["start", "--replace", "tea", "--wait"]).command == .start(name: "tea", milliseconds: nil, replace: true, wait: true))
        #expect(try cdctl(["status"]).command == .status(name: nil, json: false))
        #expect(try cdctl(["status", "tea", "--json"]).command == .status(name: "tea", json: true))
        #expect(try cdctl(["list", "--json"]).command == .list(json: true))
        #expect(try cdctl(["extend", "tea", "30s"]).command == .extend(name: "tea", milliseconds: 30_000))
        #expect(try cdctl(["watch"]).command == .watch(names: [], json: false))
        #expect(try cdctl(["wait", "a", "b"]).command == .wait(names: ["a", "b"]))
        #expect(try cdctl(["--version"]).command == .version)
        #expect(try cdctl(["list"]).socketPath == "/run/user/7/countdownd/countdownd.sock")
        #expect(try cdctl(["--socket", "/x", "list"]).socketPath == "/x")
    }

    @Test("cdctl usage errors say what is wrong", arguments: [
        ([], "no command"), (["frobnicate"], "unknown command"), (["start"], "usage: cdctl start"),
        (["start", "a/b"], "bad name"), (["start", "tea", "5x"], "bad duration"), (["list", "--replace"], "does not apply"),
        (["wait"], "usage: cdctl wait"), (["status", "a", "b"], "usage"), (["--bogus", "list"], "unknown option"),
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
            NAME      STATE    REMAINING  TOTAL    PROGRESS
            pomodoro  running  0:24:59    0:25:00  [####################] 100%
            tea       paused   0:01:30    0:03:00  [##########----------] 50%
            x         done     0:00:00    0:00:03  [--------------------] 0%

            """)
    }

    @Test("JSON output is golden: snake_case keys, sorted, absent fields omitted")
    func json() {
        let info = CountdownInfo(name: "tea", state: .paused, remainingMilliseconds: 90_000, totalMilliseconds: 180_000, owner: 1000)
        #expect(Formatting.json(info) == #"{"name":"tea","owner_uid":1000,"remaining_ms":90000,"state":"paused","total_ms":180000}"# + "\n")
        let event = EventInfo(sequence: 4, kind: .tick, name: "tea", remainingMilliseconds: 2000, totalMilliseconds: 3000)
        #expect(Formatting.json(event) == #"{"kind":"tick","name":"tea","remaining_ms":2000,"seq":4,"total_ms":3000}"# + "\n")
        #expect(Formatting.eventLine(event) == "4 tick tea 2000 3000\n")
    }
}
