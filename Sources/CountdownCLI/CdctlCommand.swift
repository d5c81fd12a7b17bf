import CountdownCore

/// How `status` and `list` print countdowns.
public enum OutputStyle: Equatable, Sendable {
    /// An aligned table for people.
    case table
    /// JSON: one document (or, with `--follow`, one object per line).
    case json
    /// One line per countdown from a `--format` template.
    case template(OutputTemplate)
}

/// What a `cdctl` command line asks for, validated.
public enum CdctlCommand: Equatable, Sendable {
    /// `start NAME [DURATION] [--replace | --if-idle] [--wait]`
    case start(name: String, milliseconds: Int64?, replace: Bool, ifIdle: Bool, wait: Bool)
    /// `status [NAME] [--json | --format T] [--follow]`; no name shows all.
    case status(name: String?, style: OutputStyle, follow: Bool)
    /// `list [--json | --format T]`
    case list(style: OutputStyle)
    /// `cancel NAME`
    case cancel(name: String)
    /// `pause NAME`
    case pause(name: String)
    /// `resume NAME`
    case resume(name: String)
    /// `extend NAME DURATION`
    case extend(name: String, milliseconds: Int64)
    /// `watch [NAME…] [--json] [--since SEQ]`
    case watch(names: [String], json: Bool, since: UInt64?)
    /// `wait NAME…`
    case wait(names: [String])
    /// `help`, `--help`
    case help
    /// `--version`
    case version
    /// `__complete names`: the names of existing countdowns, for shell completion (hidden).
    case completeNames
}

/// A parsed `cdctl` invocation: the command and where to reach the daemon.
public struct CdctlInvocation: Equatable, Sendable {
    /// The command.
    public var command: CdctlCommand
    /// The daemon's socket.
    public var socketPath: String
    /// Whether colour is allowed (a terminal, no `--no-color`, no `NO_COLOR`).
    public var colorAllowed: Bool
}

/// A `cdctl` usage error: what was wrong, for stderr, with exit code 2.
public struct UsageError: Error, Equatable, CustomStringConvertible {
    /// What was wrong and what to do.
    public var description: String

    init(_ description: String) {
        self.description = description
    }
}

/// Parses `cdctl`'s command line.
public enum CdctlCommandLine {
    /// The help text, kept in step with the man page and README.
    public static let help = """
        Usage: cdctl [--socket PATH] COMMAND [ARGS]

        Commands:
          start NAME [DURATION] [--replace | --if-idle] [--wait]
                                 start a countdown (default 60s); --replace restarts a
                                 running one; --if-idle leaves a running one alone and
                                 succeeds; --wait blocks until it finishes
          status [NAME] [--json | --format TEMPLATE] [--follow]
                                 show one countdown, or all; --follow prints again on
                                 every change (every second while running), for bars
          list [--json | --format TEMPLATE]
                                 show all countdowns
          cancel NAME            cancel a running or paused countdown
          pause NAME             pause a running countdown
          resume NAME            resume a paused countdown
          extend NAME DURATION   add time to a running or paused countdown
          watch [NAME...] [--json] [--since SEQ]
                                 follow countdowns: a live display on a terminal,
                                 one line per event otherwise; --since first replays
                                 the lifecycle events after event number SEQ
          wait NAME...           block until every NAME finishes (survives a daemon
                                 restart: reconnects for up to 30 s)

        Durations: 90 (seconds), 90s, 1m30s, 1500ms, 2h, 1d; at most 366d.
        Names: 1-128 of A-Z a-z 0-9 . _ : @ + -

        Options:
          --socket PATH          the daemon's socket (default: $COUNTDOWND_SOCKET, else
                                 $XDG_RUNTIME_DIR/countdownd/countdownd.sock, else
                                 /run/countdownd/countdownd.sock for root)
          --json                 machine-readable output (status, list, watch)
          --format TEMPLATE      one line per countdown (status, list), with {name}
                                 {state} {remaining} {remaining_s} {total} {progress}
                                 {percent} {bar}; {{ and }} for braces
          --no-color             no colour (also when NO_COLOR is set)
          -h, --help             show this help
          -V, --version          show the version

        Exit codes:
          0  success (wait: all done)      4  busy (already running, or wrong state)
          1  refused by the daemon         5  wait: a countdown was cancelled
          2  usage error                   6  daemon unreachable or connection lost
          3  no such countdown
        """

    private static let parser = ArgumentParser(options: [
        .init(["--socket"], takesValue: true),
        .init(["--json"]),
        .init(["--format"], takesValue: true),
        .init(["--follow", "-f"]),
        .init(["--if-idle"]),
        .init(["--replace"]),
        .init(["--wait"]),
        .init(["--since"], takesValue: true),
        .init(["--no-color"]),
        .init(["--help", "-h"]),
        .init(["--version", "-V"]),
    ])

    /// Parses arguments (without the program name).
    /// - Throws: `UsageError` naming the problem.
    public static func parse(
        _ arguments: [String], environment: [String: String], uid: UInt32, stdoutIsTerminal: Bool
    ) throws(UsageError) -> CdctlInvocation {
        let parsed: ArgumentParser.Result
        do {
            parsed = try parser.parse(arguments)
        } catch {
            throw UsageError("\(error); see cdctl --help")
        }
        let socketPath = parsed.value("socket") ?? SocketPath.resolve(environment: environment, uid: uid)
        let noColor = parsed.has("no-color") || !(environment["NO_COLOR"] ?? "").isEmpty
        func invocation(_ command: CdctlCommand) -> CdctlInvocation {
            CdctlInvocation(command: command, socketPath: socketPath, colorAllowed: stdoutIsTerminal && !noColor)
        }
        if parsed.has("help") { return invocation(.help) }
        if parsed.has("version") { return invocation(.version) }
        guard let verb = parsed.operands.first else {
            throw UsageError("no command given; see cdctl --help")
        }
        let operands = Array(parsed.operands.dropFirst())
        let json = parsed.has("json")
        var style = OutputStyle.table
        if let format = parsed.value("format") {
            guard !json else { throw UsageError("--json and --format exclude each other; pick one") }
            style = .template(try OutputTemplate(parsing: format))
        } else if json {
            style = .json
        }
        let allowedFlags: Set<String>
        let command: CdctlCommand
        switch verb {
        case "start":
            allowedFlags = ["replace", "wait", "if-idle"]
            try expect(operands, 1...2, usage: "start NAME [DURATION] [--replace | --if-idle] [--wait]")
            guard !(parsed.has("replace") && parsed.has("if-idle")) else {
                throw UsageError("--replace and --if-idle exclude each other: one restarts a running countdown, the other leaves it alone")
            }
            command = .start(
                name: try name(operands[0]),
                milliseconds: try operands.count > 1 ? duration(operands[1]) : nil,
                replace: parsed.has("replace"),
                ifIdle: parsed.has("if-idle"),
                wait: parsed.has("wait")
            )
        case "status":
            allowedFlags = ["json", "format", "follow"]
            try expect(operands, 0...1, usage: "status [NAME] [--json | --format TEMPLATE] [--follow]")
            command = .status(name: try operands.first.map(name), style: style, follow: parsed.has("follow"))
        case "list", "ls":
            allowedFlags = ["json", "format"]
            try expect(operands, 0...0, usage: "list [--json | --format TEMPLATE]")
            command = .list(style: style)
        case "cancel", "pause", "resume":
            allowedFlags = []
            try expect(operands, 1...1, usage: "\(verb) NAME")
            let target = try name(operands[0])
            command = verb == "cancel" ? .cancel(name: target) : verb == "pause" ? .pause(name: target) : .resume(name: target)
        case "extend":
            allowedFlags = []
            try expect(operands, 2...2, usage: "extend NAME DURATION")
            command = .extend(name: try name(operands[0]), milliseconds: try duration(operands[1]))
        case "watch":
            allowedFlags = ["json", "since"]
            var since: UInt64?
            if let text = parsed.value("since") {
                guard let value = UInt64(text) else {
                    throw UsageError("--since '\(text)' is not an event number; use the seq of the last event you saw (0 for all that are kept)")
                }
                since = value
            }
            command = .watch(names: try operands.map(name), json: json, since: since)
        case "wait":
            allowedFlags = []
            try expect(operands, 1...Int.max, usage: "wait NAME...")
            command = .wait(names: try operands.map(name))
        case "help":
            return invocation(.help)
        case "__complete":
            // Hidden: used by the shell completions to offer live countdown names.
            return invocation(.completeNames)
        default:
            throw UsageError("unknown command '\(verb)'; commands: start status list cancel pause resume extend watch wait")
        }
        for flag in ["json", "format", "follow", "if-idle", "replace", "wait", "since"] where parsed.has(flag) && !allowedFlags.contains(flag) {
            throw UsageError("option '--\(flag)' does not apply to '\(verb)'; see cdctl --help")
        }
        return invocation(command)
    }

    private static func expect(_ operands: [String], _ range: ClosedRange<Int>, usage: String) throws(UsageError) {
        guard range.contains(operands.count) else {
            throw UsageError("wrong number of arguments; usage: cdctl \(usage)")
        }
    }

    private static func name(_ text: String) throws(UsageError) -> String {
        do {
            return try CountdownName.validate(text)
        } catch {
            throw UsageError("bad name '\(ProtocolText.sanitized(Array(text.utf8)))': \(error.message)")
        }
    }

    private static func duration(_ text: String) throws(UsageError) -> Int64 {
        do {
            return try CountdownDuration.parse(text)
        } catch {
            throw UsageError("bad duration: \(error.message)")
        }
    }
}
