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

/// How `stats` prints the daemon's counters.
public enum StatsFormat: Equatable, Sendable {
    /// `key  value` lines for people.
    case table
    /// One JSON object: numbers as numbers.
    case json
    /// Prometheus's text exposition format.
    case prometheus
}

/// What a `cdctl` command line asks for, validated.
public enum CdctlCommand: Equatable, Sendable {
    /// `start NAME [DURATION | --at TIME | --cycle PHASES | --pomodoro] [--repeat N|forever]
    /// [--replace | --if-idle] [--wait] [--then COMMAND] [--pause-on-suspend | --count-on-suspend]`;
    /// `atUnixMilliseconds` for a countdown to a wall-clock time; `pauseOnSuspend` `nil` keeps
    /// what the name had (a new one counts on); `cycle` the words after `CYCLE` in the protocol
    /// (`25m:work,5m:break REPEAT 4`).
    case start(
        name: String, milliseconds: Int64?, replace: Bool, ifIdle: Bool, wait: Bool, then: String? = nil, atUnixMilliseconds: Int64? = nil,
        pauseOnSuspend: Bool? = nil, cycle: String? = nil, thenEach: String? = nil
    )
    /// `__each-phase NAME SEQ COMMAND` (hidden): what `--then-each` leaves running: `COMMAND`
    /// at each phase of the cycle `NAME` that begins after event `SEQ`, until it finishes.
    case eachPhase(name: String, since: UInt64, command: String)
    /// `skip NAME`: end a cycle's running phase now and start the next.
    case skip(name: String)
    /// `set NAME --pause-on-suspend | --count-on-suspend`: change what a running or paused
    /// countdown does while the machine sleeps.
    case set(name: String, pauseOnSuspend: Bool)
    /// `status [NAME] [--json | --format T] [--follow]`; no name shows all.
    case status(name: String?, style: OutputStyle, follow: Bool)
    /// `list [--json | --format T] [--state STATE] [--prefix PREFIX]`
    case list(style: OutputStyle, states: [CountdownState] = [], prefix: String? = nil)
    /// `cancel NAME`
    case cancel(name: String)
    /// `pause NAME`
    case pause(name: String)
    /// `resume NAME`
    case resume(name: String)
    /// `extend NAME DURATION`
    case extend(name: String, milliseconds: Int64)
    /// `toggle NAME`: pause a running countdown, resume a paused one (one key on a bar).
    case toggle(name: String)
    /// `rm NAME`: forget a finished countdown now instead of after its retention.
    case remove(name: String)
    /// `watch [NAME…] [--json] [--since SEQ] [--events KINDS]`
    case watch(names: [String], json: Bool, since: UInt64?, events: String? = nil)
    /// `wait NAME…`
    case wait(names: [String])
    /// `stats [--json | --prometheus]`
    case stats(format: StatsFormat)
    /// `help`, `--help`
    case help
    /// `help COMMAND`: that command's usage and what it does.
    case helpTopic(String)
    /// `--version`
    case version
    /// `__complete names`: the names of existing countdowns, for shell completion (hidden).
    case completeNames
}

/// A parsed `cdctl` invocation: the command and where to reach the daemon.
public struct CdctlInvocation: Equatable, Sendable {
    /// The command.
    public var command: CdctlCommand
    /// The daemon's socket: the first of `socketCandidates`.
    public var socketPath: String
    /// The sockets to try, in order: `--socket` or `$COUNTDOWND_SOCKET` alone, else the user's own
    /// daemon's, then the system daemon's (`SocketPath.clientCandidates`).
    public var socketCandidates: [String] = []
    /// `--verbose`: say on stderr which socket was used.
    public var verbose = false
    /// Whether colour is allowed (a terminal, no `--no-color`, no `NO_COLOR`).
    public var colorAllowed: Bool
    /// Notes for the person, printed on stderr before the command runs (an ambiguous `--at`).
    public var notes: [String] = []
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
          start NAME [DURATION | --at TIME | --cycle PHASES | --pomodoro]
                [--repeat N|forever] [--replace | --if-idle] [--wait]
                [--then COMMAND] [--then-each COMMAND]
                [--pause-on-suspend | --count-on-suspend]
                                 start a countdown (default 60s), or one until a time
                                 of day (--at 09:30, 'tomorrow 09:30', '2026-12-24
                                 18:00', 'now + 3 min'; it follows the wall clock if
                                 that is set), or a cycle of phases that run one
                                 after the other (--cycle 25m:work,5m:break; each
                                 DURATION[:LABEL]), --pomodoro for four 25m work
                                 phases with 5m breaks and a 15m long break;
                                 --repeat runs the cycle N times, or forever;
                                 --then-each runs COMMAND at each new phase (with
                                 COUNTDOWN_LABEL, COUNTDOWN_PHASE set);
                                 --replace restarts a running one;
                                 --if-idle leaves a running one alone and succeeds;
                                 --wait blocks until it finishes; --then runs COMMAND
                                 (a shell line) when it is done, from your user
                                 manager, with no terminal kept open;
                                 --pause-on-suspend stands still while the machine
                                 sleeps (a pomodoro), instead of counting on, and
                                 --count-on-suspend counts on; without either, a
                                 name started again keeps its setting
          status [NAME] [--json | --format TEMPLATE] [--follow]
                                 show one countdown, or all; --follow prints again on
                                 every change (every second while running), for bars
          list [--json | --format TEMPLATE] [--state STATE[,STATE...]]
                [--prefix PREFIX]
                                 show all countdowns, or those running, paused, done
                                 or cancelled, or those whose names start with PREFIX
                                 (sorted by name, numbers by value)
          cancel NAME            cancel a running or paused countdown
          pause NAME             pause a running countdown
          resume NAME            resume a paused countdown
          extend NAME DURATION   add time to a running or paused countdown
          toggle NAME            pause a running countdown, resume a paused one
          skip NAME              end a cycle's phase now and start the next
          set NAME --pause-on-suspend | --count-on-suspend
                                 change what a running or paused countdown does
                                 while the machine sleeps, without restarting it
          rm NAME                forget a finished countdown now (it frees the name's
                                 slot; finished ones are otherwise kept 10 minutes)
          watch [NAME...] [--json] [--since SEQ] [--events KINDS]
                                 follow countdowns: a live display on a terminal,
                                 one line per event otherwise; --since first replays
                                 the lifecycle events after event number SEQ;
                                 --events only these kinds, one line each (such as
                                 lifecycle, or done,cancelled: no ticks)
          wait NAME...           block until every NAME finishes (survives a daemon
                                 restart: reconnects for up to 30 s)
          stats [--json | --prometheus]
                                 the daemon's counts, events, lateness and storage;
                                 --prometheus for node_exporter's textfile collector
          help [COMMAND]         this text, or one command's

        Durations: 90 (seconds), 90s, 1m30s, 1500ms, 2h, 1d, and systemd's 5min,
        '1h 30min', '2 days', 1week; at most 366d.
        Names: 1-128 of A-Z a-z 0-9 . _ : @ + -

        Options:
          --socket PATH          the daemon's socket (default: $COUNTDOWND_SOCKET, else
                                 your own daemon's, $XDG_RUNTIME_DIR/countdownd/
                                 countdownd.sock, then the system daemon's,
                                 /run/countdownd/countdownd.sock, for its group)
          -v, --verbose          say which socket was used (on stderr)
          --json                 machine-readable output (status, list, watch)
          --format TEMPLATE      one line per countdown (status, list), with {name}
                                 {state} {remaining} {remaining_s} {total} {progress}
                                 {percent} {bar} {on_suspend}, and for a cycle {phase}
                                 {phases} {label} {round}; {{ and }} for braces
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
        .init(["--then"], takesValue: true),
        .init(["--then-each"], takesValue: true),
        .init(["--at"], takesValue: true),
        .init(["--pause-on-suspend"]),
        .init(["--cycle"], takesValue: true),
        .init(["--pomodoro"]),
        .init(["--repeat"], takesValue: true),
        .init(["--count-on-suspend"]),
        .init(["--since"], takesValue: true),
        .init(["--state"], takesValue: true),
        .init(["--prefix"], takesValue: true),
        .init(["--events"], takesValue: true),
        .init(["--prometheus"]),
        .init(["--no-color"]),
        .init(["--verbose", "-v"]),
        .init(["--help", "-h"]),
        .init(["--version", "-V"]),
    ])

    /// An option cdctl does not know, in cdctl's words: a negative duration says so (`-5s` is not
    /// an option), a typo gets the option meant.
    static func explain(_ failure: ArgumentParser.Failure, verb: String?) -> String {
        guard case .unknownOption(let spelling) = failure else { return "\(failure); see cdctl --help" }
        let unsigned = String(spelling.dropFirst())
        if !unsigned.hasPrefix("-"), CountdownDuration.isWellFormed(unsigned) {
            if verb == "start" || verb == "extend" {
                return "a duration cannot be negative ('\(spelling)'): a countdown runs for a time to come, such as \(unsigned)"
            }
            if let verb {
                return "unknown option '\(spelling)'; a NAME that begins with '-' goes after '--': cdctl \(verb) -- \(spelling)"
            }
        }
        let known = parser.spellings.filter { $0.hasPrefix("--") }
        if spelling.hasPrefix("--"), let meant = Suggestion.closest(to: spelling, among: known) {
            return "unknown option '\(spelling)'; did you mean '\(meant)'? see cdctl --help"
        }
        return "\(failure); see cdctl --help"
    }

    /// Parses arguments (without the program name).
    /// - Throws: `UsageError` naming the problem.
    public static func parse(
        _ arguments: [String], environment: [String: String], uid: UInt32, stdoutIsTerminal: Bool
    ) throws(UsageError) -> CdctlInvocation {
        let parsed: ArgumentParser.Result
        do {
            parsed = try parser.parse(arguments)
        } catch {
            throw UsageError(Self.explain(error, verb: arguments.first { !$0.hasPrefix("-") }))
        }
        let socketCandidates = parsed.value("socket").map { [$0] } ?? SocketPath.clientCandidates(environment: environment, uid: uid)
        let socketPath = socketCandidates[0]
        let verbose = parsed.has("verbose")
        let noColor = parsed.has("no-color") || !(environment["NO_COLOR"] ?? "").isEmpty
        var notes: [String] = []
        func invocation(_ command: CdctlCommand) -> CdctlInvocation {
            CdctlInvocation(command: command, socketPath: socketPath, socketCandidates: socketCandidates,
                            verbose: verbose, colorAllowed: stdoutIsTerminal && !noColor, notes: notes)
        }
        if parsed.has("help") {
            // `cdctl start --help` is `cdctl help start`.
            if let verb = parsed.operands.first, commandHelp(verb) != nil { return invocation(.helpTopic(verb)) }
            return invocation(.help)
        }
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
            allowedFlags = ["replace", "wait", "if-idle", "then", "then-each", "at", "pause-on-suspend", "count-on-suspend", "cycle", "pomodoro", "repeat"]
            let startUsage = "start NAME [DURATION | --at TIME | --cycle PHASES | --pomodoro] [--repeat N|forever] [--replace | --if-idle] [--wait] [--then COMMAND] [--pause-on-suspend | --count-on-suspend]"
            guard !operands.isEmpty else {
                throw UsageError("start needs a NAME, as in cdctl start tea 3m or cdctl start standup --at 09:30; usage: cdctl \(startUsage)")
            }
            if operands.count > 2, (try? CountdownDuration.parse(operands.dropFirst().joined())) != nil {
                let words = operands.dropFirst().joined(separator: " ")
                throw UsageError("a duration is one argument: quote it, as in cdctl start \(operands[0]) '\(words)'")
            }
            var at: Int64?
            if let text = parsed.value("at") {
                guard operands.count == 1 else {
                    throw UsageError("give a DURATION or --at TIME, not both")
                }
                do {
                    let chosen = try LocalTime.resolve(text, now: SystemLocalZone.nowUnixMilliseconds(), zone: SystemLocalZone())
                    at = chosen.unixMilliseconds
                    if let note = chosen.note { notes.append(note) }
                } catch {
                    throw UsageError("bad --at: \(error)")
                }
            }
            try expect(operands, 1...2, usage: startUsage)
            if let then = parsed.value("then"), then.allSatisfy({ $0 == " " }) {
                throw UsageError("--then needs a command, such as --then 'notify-send \"tea is ready\"'")
            }
            guard at == nil || !parsed.has("pause-on-suspend") else {
                throw UsageError("--pause-on-suspend does not go with --at: a time of day comes whether the machine sleeps or not; give a DURATION")
            }
            guard !(parsed.has("pause-on-suspend") && parsed.has("count-on-suspend")) else {
                throw UsageError("--pause-on-suspend and --count-on-suspend exclude each other: give the one you want")
            }
            guard !(parsed.has("replace") && parsed.has("if-idle")) else {
                throw UsageError("--replace and --if-idle exclude each other: one restarts a running countdown, the other leaves it alone")
            }
            let cycle = try cycleWords(parsed, operands: operands, at: at)
            if let each = parsed.value("then-each") {
                guard !each.allSatisfy({ $0 == " " }) else {
                    throw UsageError("--then-each needs a command, such as --then-each 'notify-send \"$COUNTDOWN_LABEL\"'")
                }
                guard operands.count == 1, at == nil else {
                    throw UsageError("--then-each runs at each phase of a cycle (--cycle or --pomodoro); for a plain countdown use --then, which runs when it is done")
                }
            }
            command = .start(
                name: try name(operands[0]),
                milliseconds: try operands.count > 1 ? duration(operands[1]) : nil,
                replace: parsed.has("replace"),
                ifIdle: parsed.has("if-idle"),
                wait: parsed.has("wait"),
                then: parsed.value("then"),
                atUnixMilliseconds: at,
                pauseOnSuspend: parsed.has("pause-on-suspend") ? true : parsed.has("count-on-suspend") ? false : nil,
                cycle: cycle,
                thenEach: parsed.value("then-each")
            )
        case "status":
            allowedFlags = ["json", "format", "follow"]
            try expect(operands, 0...1, usage: "status [NAME] [--json | --format TEMPLATE] [--follow]")
            command = .status(name: try operands.first.map(name), style: style, follow: parsed.has("follow"))
        case "list", "ls":
            allowedFlags = ["json", "format", "state", "prefix"]
            try expect(operands, 0...0, usage: "list [--json | --format TEMPLATE] [--state STATE[,STATE...]] [--prefix PREFIX]")
            // `--state running,paused`, or `--state` given again: every state named.
            var states: [CountdownState] = []
            for text in (parsed.values["state"] ?? []).flatMap({ $0.split(separator: ",", omittingEmptySubsequences: false) }) {
                guard let value = CountdownState(rawValue: text.lowercased()) else {
                    throw UsageError("--state '\(text)' is not one of running, paused, done, cancelled (several: --state running,paused)")
                }
                if !states.contains(value) { states.append(value) }
            }
            var prefix: String?
            if let text = parsed.value("prefix") {
                guard !text.isEmpty, (try? CountdownAddress.validatePrefix(bytes: Array(text.utf8))) != nil else {
                    throw UsageError("--prefix '\(text)' cannot start a name; names are \(CountdownName.allowedCharactersDescription)")
                }
                prefix = text
            }
            command = .list(style: style, states: states, prefix: prefix)
        case "cancel", "pause", "resume":
            allowedFlags = []
            try expect(operands, 1...1, usage: "\(verb) NAME")
            let target = try name(operands[0])
            command = verb == "cancel" ? .cancel(name: target) : verb == "pause" ? .pause(name: target) : .resume(name: target)
        case "extend":
            allowedFlags = []
            try expect(operands, 2...2, usage: "extend NAME DURATION")
            command = .extend(name: try name(operands[0]), milliseconds: try duration(operands[1]))
        case "set":
            allowedFlags = ["pause-on-suspend", "count-on-suspend"]
            try expect(operands, 1...1, usage: "set NAME --pause-on-suspend | --count-on-suspend")
            guard parsed.has("pause-on-suspend") != parsed.has("count-on-suspend") else {
                throw UsageError("set needs one of --pause-on-suspend (stand still while the machine sleeps) or --count-on-suspend (count on through it)")
            }
            command = .set(name: try name(operands[0]), pauseOnSuspend: parsed.has("pause-on-suspend"))
        case "skip":
            allowedFlags = []
            try expect(operands, 1...1, usage: "skip NAME")
            command = .skip(name: try name(operands[0]))
        case "toggle":
            allowedFlags = []
            try expect(operands, 1...1, usage: "toggle NAME")
            command = .toggle(name: try name(operands[0]))
        case "rm", "remove":
            allowedFlags = []
            try expect(operands, 1...1, usage: "rm NAME")
            command = .remove(name: try name(operands[0]))
        case "watch":
            allowedFlags = ["json", "since", "events"]
            var since: UInt64?
            if let text = parsed.value("since") {
                guard let value = UInt64(text) else {
                    throw UsageError("--since '\(text)' is not an event number; use the seq of the last event you saw (0 for all that are kept)")
                }
                since = value
            }
            var events: String?
            if let text = parsed.value("events") {
                guard (try? EventKindSet.parse(bytes: Array(text.utf8))) != nil else {
                    throw UsageError("--events '\(text)' is not a list of event kinds; use a comma-separated list of: \(EventKindSet.spellings.joined(separator: " "))")
                }
                events = text
            }
            command = .watch(names: try operands.map(name), json: json, since: since, events: events)
        case "wait":
            allowedFlags = []
            try expect(operands, 1...Int.max, usage: "wait NAME...")
            command = .wait(names: try operands.map(name))
        case "stats":
            allowedFlags = ["json", "prometheus"]
            try expect(operands, 0...0, usage: "stats [--json | --prometheus]")
            guard !(json && parsed.has("prometheus")) else {
                throw UsageError("--json and --prometheus exclude each other; pick one")
            }
            command = .stats(format: json ? .json : parsed.has("prometheus") ? .prometheus : .table)
        case "help":
            guard let topic = operands.first else { return invocation(.help) }
            guard commandHelp(topic) != nil else {
                throw UsageError("no help for '\(topic)'\(suggestion(for: topic)); commands: \(commands.joined(separator: " "))")
            }
            return invocation(.helpTopic(topic))
        case "__each-phase":
            // Hidden: what --then-each leaves running (ThenAction).
            guard operands.count == 3, let since = UInt64(operands[1]) else {
                throw UsageError("usage: cdctl __each-phase NAME SEQ COMMAND (what --then-each runs)")
            }
            return invocation(.eachPhase(name: try name(operands[0]), since: since, command: operands[2]))
        case "__complete":
            // Hidden: used by the shell completions to offer live countdown names.
            return invocation(.completeNames)
        default:
            throw UsageError("unknown command '\(verb)'\(suggestion(for: verb)); commands: \(commands.joined(separator: " "))")
        }
        for flag in ["json", "format", "follow", "if-idle", "replace", "wait", "since", "state", "prefix", "events", "prometheus", "then", "then-each", "at", "pause-on-suspend", "count-on-suspend", "cycle", "pomodoro", "repeat"] where parsed.has(flag) && !allowedFlags.contains(flag) {
            throw UsageError("option '--\(flag)' does not apply to '\(verb)'; see cdctl --help")
        }
        return invocation(command)
    }

    private static func expect(_ operands: [String], _ range: ClosedRange<Int>, usage: String) throws(UsageError) {
        guard range.contains(operands.count) else {
            throw UsageError("wrong number of arguments; usage: cdctl \(usage)")
        }
    }

    /// A countdown name, or (for root) another user's as `<uid>/<name>`.
    private static func name(_ text: String) throws(UsageError) -> String {
        do {
            return try CountdownAddress.validate(bytes: Array(text.utf8))
        } catch {
            throw UsageError("bad name '\(ProtocolText.sanitized(Array(text.utf8)))': \(error.message)")
        }
    }

    /// A duration; blanks inside are dropped, so systemd's `'1h 30min'` and `'2 days'` work.
    private static func duration(_ text: String) throws(UsageError) -> Int64 {
        do {
            return try CountdownDuration.parse(text.filter { $0 != " " && $0 != "\t" })
        } catch {
            throw UsageError("bad duration: \(error.message)")
        }
    }

    /// The commands, for messages and completion.
    public static let commands = ["start", "status", "list", "cancel", "pause", "resume", "extend", "toggle", "skip", "set", "rm", "watch", "wait", "stats", "help"]

    /// The phases of `--pomodoro`: four 25-minute work phases, a 5-minute break after each of
    /// the first three and a 15-minute long break after the fourth.
    public static let pomodoroPhases = "25m:work,5m:break,25m:work,5m:break,25m:work,5m:break,25m:work,15m:long-break"

    /// What follows `CYCLE` in the protocol for `--cycle`/`--pomodoro` and `--repeat`, checked
    /// here so that a mistake is told in cdctl's words; `nil` for a plain countdown.
    private static func cycleWords(_ parsed: ArgumentParser.Result, operands: [String], at: Int64?) throws(UsageError) -> String? {
        let phases = parsed.has("pomodoro") ? pomodoroPhases : parsed.value("cycle")
        guard let phases else {
            if parsed.has("repeat") {
                throw UsageError("--repeat repeats a cycle: give it --cycle PHASES or --pomodoro, as in cdctl start focus --pomodoro --repeat forever")
            }
            return nil
        }
        guard !(parsed.has("pomodoro") && parsed.has("cycle")) else {
            throw UsageError("--pomodoro and --cycle exclude each other: --pomodoro is --cycle \(pomodoroPhases)")
        }
        guard at == nil else {
            throw UsageError("a cycle's phases give its durations: --at does not go with \(parsed.has("pomodoro") ? "--pomodoro" : "--cycle"); drop one")
        }
        guard operands.count == 1 else {
            throw UsageError("a cycle's phases give its durations: drop the DURATION '\(operands[1])', or drop \(parsed.has("pomodoro") ? "--pomodoro" : "--cycle")")
        }
        do {
            // Parsed only to refuse a bad list here, in cdctl's words; the daemon parses it again.
            _ = try CountdownCycle.parsePhases(bytes: Array(phases.utf8))
        } catch {
            throw UsageError("bad --cycle: \(error.message)")
        }
        guard let text = parsed.value("repeat") else { return phases }
        if text == "forever" { return phases + " REPEAT" }
        guard let rounds = UInt32(text), rounds >= 1, rounds <= CountdownCycle.maximumRounds else {
            throw UsageError("--repeat '\(text)' is not a number of rounds from 1 to \(CountdownCycle.maximumRounds), nor 'forever'")
        }
        return phases + " REPEAT \(rounds)"
    }

    /// `; did you mean 'start'?` for a mistyped command, or nothing: a command spelled in
    /// capitals (as in the protocol) is named in lower case, the start of some commands names
    /// them, and otherwise the closest by edit distance.
    static func suggestion(for verb: String) -> String {
        let lower = verb.lowercased()
        if lower != verb, commands.contains(lower) || lower == "ls" {
            return "; commands are lower case: did you mean '\(lower)'?"
        }
        let starting = commands.filter { $0.hasPrefix(lower) && $0 != lower }
        if !lower.isEmpty, !starting.isEmpty, starting.count <= 3 {
            return "; did you mean " + starting.map { "'\($0)'" }.joined(separator: " or ") + "?"
        }
        return Suggestion.closest(to: lower, among: commands).map { "; did you mean '\($0)'?" } ?? ""
    }

    /// One command's part of the help text: its usage line and the lines under it.
    public static func commandHelp(_ command: String) -> String? {
        let name = command == "ls" ? "list" : command == "remove" ? "rm" : command
        var lines: [Substring] = []
        for line in help.split(separator: "\n", omittingEmptySubsequences: false) {
            if lines.isEmpty {
                if line.hasPrefix("  \(name) ") || line == "  \(name)" { lines.append(line) }
            } else if line.hasPrefix("   ") {
                lines.append(line)  // Its usage's second line, or its description.
            } else {
                break
            }
        }
        guard !lines.isEmpty else { return nil }
        return "Usage: cdctl " + lines.map { $0.trimmingPrefix(while: { $0 == " " }) }.joined(separator: "\n       ") + "\n"
    }
}
