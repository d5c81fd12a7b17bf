import CountdownClient
import CountdownCore
import Glibc

/// Runs one `cdctl` invocation against the daemon.
public struct Cdctl {
    /// What to do.
    public var invocation: CdctlInvocation
    /// Where to write.
    public var console: Console

    /// Creates a runner.
    public init(invocation: CdctlInvocation, console: Console) {
        self.invocation = invocation
        self.console = console
    }

    /// Runs the command and returns the exit code; every failure has been explained on stderr.
    public func run() -> ExitCode {
        for note in invocation.notes {
            console.error("cdctl: note: \(note)\n")
        }
        switch invocation.command {
        case .help:
            console.out(CdctlCommandLine.help + "\n")
            return .success
        case .helpTopic(let topic):
            console.out(CdctlCommandLine.commandHelp(topic) ?? CdctlCommandLine.help + "\n")
            return .success
        case .version:
            console.out("cdctl \(CountdownVersion.current)\n")
            return .success
        default:
            break
        }
        do {
            let candidates = invocation.socketCandidates.isEmpty ? [invocation.socketPath] : invocation.socketCandidates
            let connection = try CountdownConnection.connectFirst(of: candidates)
            if invocation.verbose {
                console.error("cdctl: using countdownd \(connection.daemonVersion ?? "") at \(connection.path)\n")
            }
            // Reconnections and --then use the socket that answered.
            var connected = self
            connected.invocation.socketPath = connection.path
            connected.invocation.socketCandidates = [connection.path]
            return try connected.execute(on: connection)
        } catch {
            console.error("cdctl: \(error)\n")
            return .unavailable
        }
    }

    private func execute(on connection: CountdownConnection) throws(ClientError) -> ExitCode {
        switch invocation.command {
        case .start(let name, let milliseconds, let replace, let ifIdle, let wait, let then, let at, let pauseOnSuspend, let cycle, let thenEach):
            // Subscribed before the START, so that no phase or done of it can come first.
            var since: UInt64?
            if wait || thenEach != nil {
                since = try subscribe(connection, to: [name], events: "lifecycle")
            }
            // Without a DURATION none is sent: the daemon's default, or a cycle's phases again.
            var line = at.map { "START \(name) AT \($0)" } ?? milliseconds.map { "START \(name) \($0)ms" } ?? "START \(name)"
            if let cycle { line = "START \(name) CYCLE \(cycle)" }
            // A countdown to a time of day always counts on: --count-on-suspend says nothing more.
            if let pauseOnSuspend, at == nil || pauseOnSuspend {
                line += pauseOnSuspend ? " ON-SUSPEND pause" : " ON-SUSPEND count"
            }
            // --replace says whether it replaced anything.
            var replacing: CountdownInfo?
            if replace {
                line += " REPLACE"
                replacing = try connection.request("STATUS \(name)").countdowns.first.flatMap { $0.state.isActive ? $0 : nil }
            }
            var code = try mutation(
                line, on: connection, name: name, quietWhenBusy: ifIdle,
                describedAs: replacing.map { old in { "\(name): restarted (the \(old.state.rawValue) one, with \(CountdownDuration.clock(milliseconds: old.remainingMilliseconds)) left, was cancelled); " + timeLeft($0) } }
            )
            if code == .busy && ifIdle {
                // Already counting: leave it alone, say so and where it stands, and succeed.
                let status = try connection.request("STATUS \(name)")
                if let countdown = status.countdowns.first {
                    console.out("\(name): already \(countdown.state.rawValue), left alone; " + timeLeft(countdown))
                }
                code = .success
            }
            if code == .success, let thenEach {
                code = launchThen(thenEach, name: name, when: .eachPhase(since: since ?? 0))
            }
            if code == .success, let then {
                code = launchThen(then, name: name)
            }
            guard code == .success, wait else { return code }
            return try waitForAll([name], on: connection, subscribed: true)
        case .cancel(let name):
            return try mutation("CANCEL \(name)", on: connection, name: name)
        case .pause(let name):
            return try mutation("PAUSE \(name)", on: connection, name: name)
        case .skip(let name):
            return try mutation("SKIP \(name)", on: connection, name: name)
        case .set(let name, let pauseOnSuspend):
            return try mutation("SET \(name) ON-SUSPEND \(pauseOnSuspend ? "pause" : "count")", on: connection, name: name)
        case .eachPhase(let name, let since, let command):
            return try runEachPhase(name, since: since, command: command, on: connection)
        case .resume(let name):
            return try mutation("RESUME \(name)", on: connection, name: name)
        case .extend(let name, let milliseconds):
            return try mutation("EXTEND \(name) \(milliseconds)ms", on: connection, name: name)
        case .toggle(let name):
            let reply = try connection.request("STATUS \(name)")
            guard let countdown = reply.countdowns.first else {
                return report(reply, on: connection, name: name)
            }
            switch countdown.state {
            case .running: return try mutation("PAUSE \(name)", on: connection, name: name)
            case .paused: return try mutation("RESUME \(name)", on: connection, name: name)
            case .done, .cancelled:
                console.error("cdctl: '\(name)' already finished (\(countdown.state.rawValue)); there is nothing to toggle; cdctl start \(name) starts it again\n")
                return .notFound
            }
        case .remove(let name):
            let reply = try connection.request("REMOVE \(name)")
            guard case .ok = reply.outcome else {
                return report(reply, on: connection, name: name)
            }
            console.out("\(name): removed\n")
            return .success
        case .status(let name, let style, true):
            return try follow(name, style: style, on: connection)
        case .status(let name?, let style, false):
            let reply = try connection.request("STATUS \(name)")
            if case .error = reply.outcome {
                return report(reply, on: connection, name: name)
            }
            console.out(render(reply.countdowns, style: style, single: true))
            noteIfBehind(reply)
            return .success
        case .status(nil, let style, false):
            return try list(style: style, states: [], prefix: nil, on: connection)
        case .list(let style, let states, let prefix):
            return try list(style: style, states: states, prefix: prefix, on: connection)
        case .completeNames:
            let reply = try connection.request("LIST")
            console.out(reply.countdowns.map { $0.name + "\n" }.joined())
            return .success
        case .watch(let names, let json, let since, let events):
            let options = (events.map { ["EVENTS", $0] } ?? []) + (since.map { ["SINCE", "\($0)"] } ?? [])
            // Sent as is, so a refused SINCE or EVENTS is reported in the daemon's words.
            let reply = try connection.request((["SUBSCRIBE"] + names + options).joined(separator: " "))
            if case .error = reply.outcome {
                return report(reply, on: connection, name: nil)
            }
            if console.isTerminal && !json && since == nil && events == nil {
                var display = LiveWatch(connection: connection, console: console, names: names)
                display.colorAllowed = invocation.colorAllowed
                display.reconnect = {
                    guard let fresh = reconnect(reason: nil, purpose: "keep watching", quiet: true),
                          (try? subscribe(fresh, to: names)) != nil else { return nil }
                    return fresh
                }
                return try display.run()
            }
            // One line per event, for as long as it takes: across a daemon restart too, resuming
            // after the last event printed, or, with none yet, from where the subscription began
            // (a restart announces late `done`s before it listens), so a script's log has no gap
            // and no repeat.
            var current = connection
            var lastSequence = since
            if since == nil, case .ok(let text) = reply.outcome {
                lastSequence = Self.subscribedSequence(in: text)
            }
            while true {
                while let event = try current.nextEvent() {
                    lastSequence = event.resumePoint(after: lastSequence)
                    console.out(json ? Formatting.json(event) : Formatting.eventLine(event))
                }
                guard let next = reconnect(reason: current.shutdownReason, purpose: "follow \(names.isEmpty ? "every countdown" : names.joined(separator: ", "))") else {
                    console.error("cdctl: countdownd closed the connection\(current.shutdownReason.map { " (\($0))" } ?? "") and did not come back within \(Int(Self.reconnectWindow)) s\n")
                    return .unavailable
                }
                current = next
                var resumed = false
                if let since = lastSequence {
                    resumed = try subscribe(current, to: names, since: since, events: events) != nil
                    if !resumed {
                        // Said, not skipped over: a log read later must not look whole.
                        console.error("cdctl: countdownd no longer has the events after \(since) (its history moved on, or its state was lost); some may be missing here; following from now\n")
                    }
                }
                if !resumed {
                    lastSequence = try subscribe(current, to: names, events: events)
                }
            }
        case .wait(let names):
            return try waitForAll(names, on: connection, subscribed: false)
        case .stats(let format):
            return try stats(format: format, on: connection)
        case .help, .helpTopic, .version:
            return .success
        }
    }

    /// Sets up `--then`, and says where it waits and where its output goes.
    private func launchThen(_ command: String, name: String, when: ThenAction.When = .done) -> ExitCode {
        let moment = when == .done ? "when done" : "at each phase"
        switch ThenAction.launch(command: command, name: name, when: when, socket: invocation.socketPath, environment: ProcessEnvironment.current()) {
        case .success(.unit(let unit)):
            console.out("\(name): then runs '\(command)' \(moment), from \(unit) (journalctl --user -u \(unit); systemctl --user stop \(unit) to drop it)\n")
            return .success
        case .success(.detached(let pid)):
            console.out("\(name): then runs '\(command)' \(moment), from process \(pid) (no user manager: it survives this terminal, not a logout; its output is discarded)\n")
            return .success
        case .failure(let error):
            let option = when == .done ? "--then" : "--then-each"
            let yourself = when == .done ? "cdctl wait \(name) && \(command)" : "cdctl watch \(name) --events phase"
            console.error("cdctl: the countdown runs, but \(option) could not be set up: \(error); run it yourself: \(yourself)\n")
            return .refused
        }
    }

    /// `__each-phase`: runs `command` at each `phase` event of `name` after event `since`, with
    /// where the cycle is in its environment, one at a time, until the cycle is done, cancelled
    /// or forgotten; across daemon restarts, as `wait` does (a phase while it was away is
    /// replayed, never run twice).
    private func runEachPhase(_ name: String, since: UInt64, command: String, on first: CountdownConnection) throws(ClientError) -> ExitCode {
        var connection = first
        var last = since
        while true {
            guard try subscribe(connection, to: [name], since: last, events: "lifecycle") != nil else {
                console.error("cdctl: the daemon no longer keeps the events of '\(name)' since \(last); --then-each stops\n")
                return .unavailable
            }
            while let event = try connection.nextEvent() {
                last = max(last, event.sequence)
                guard event.name == name else { continue }
                switch event.kind {
                case .phase:
                    var environment = ProcessEnvironment.current()
                    environment["COUNTDOWN_NAME"] = name
                    environment["COUNTDOWN_PHASE"] = event.cycle.map { "\($0.phase)" } ?? ""
                    environment["COUNTDOWN_PHASES"] = event.cycle.map { "\($0.phases)" } ?? ""
                    environment["COUNTDOWN_LABEL"] = event.cycle?.label ?? ""
                    environment["COUNTDOWN_ROUND"] = event.cycle?.round.map { "\($0)" } ?? ""
                    ThenAction.run(command, environment: environment)
                case .done, .cancelled, .removed:
                    return .success
                default:
                    continue
                }
            }
            guard let next = reconnect(reason: connection.shutdownReason, purpose: "follow the phases of \(name)") else {
                console.error("cdctl: countdownd closed the connection and did not come back within \(Int(Self.reconnectWindow)) s; --then-each stops\n")
                return .unavailable
            }
            connection = next
        }
    }

    /// `list`: every countdown, or those in `states`.
    /// Filtered by the daemon (`LIST STATE … PREFIX …`), sorted by name here as people sort
    /// (`many2` before `many10`): the daemon sends countdowns in its own order, so that a million
    /// never hold it up.
    private func list(style: OutputStyle, states: [CountdownState], prefix: String?, on connection: CountdownConnection) throws(ClientError) -> ExitCode {
        let options = (states.isEmpty ? [] : ["STATE", states.map(\.rawValue).joined(separator: ",")]) + (prefix.map { ["PREFIX", $0] } ?? [])
        let reply = try connection.request((["LIST"] + options).joined(separator: " "))
        if case .error = reply.outcome {
            return report(reply, on: connection, name: nil)
        }
        let countdowns = reply.countdowns.sorted { NaturalOrder.precedes($0.name, $1.name) }
        if case .table = style, countdowns.isEmpty {
            let which = [states.isEmpty ? nil : states.map(\.rawValue).joined(separator: " or "), prefix.map { "'\($0)…'" }].compactMap { $0 }.joined(separator: " ")
            console.out(which.isEmpty ? "no countdowns\n" : "no \(which) countdowns\n")
        } else {
            console.out(render(countdowns, style: style, single: false))
        }
        noteIfBehind(reply)
        return .success
    }

    /// A read answered by a cluster host whose copy knows it trails etcd (`OK … replica <revision>
    /// behind`): said on standard error, since what was shown may be out of date.
    private func noteIfBehind(_ reply: Reply) {
        guard case .ok(let text) = reply.outcome, text.split(separator: " ").last == "behind" else { return }
        console.error("cdctl: this countdownd's copy of the cluster trails etcd, so what it shows may be out of date (a finished countdown may still show as running); ask again in a moment, or another host\n")
    }

    /// Countdowns in the chosen style: a table, JSON (an object for one, an array for several),
    /// or one template line each.
    private func render(_ countdowns: [CountdownInfo], style: OutputStyle, single: Bool) -> String {
        switch style {
        case .table:
            return Formatting.table(countdowns)
        case .json:
            if single, let first = countdowns.first {
                return Formatting.json(first)
            }
            return Formatting.json(countdowns)
        case .template(let template):
            return countdowns.map { template.render($0) + "\n" }.joined()
        }
    }

    /// `status --follow`: the current state, then a line on every change (every tick, so once a
    /// second while running), for waybar, polybar, i3blocks and tmux. Runs until interrupted,
    /// across daemon restarts (it reconnects as `wait` does). A countdown that is removed prints
    /// a final line (empty for a template, `{"name":…,"state":"gone"}` in JSON), so a bar blanks.
    private func follow(_ name: String?, style: OutputStyle, on first: CountdownConnection) throws(ClientError) -> ExitCode {
        let names = name.map { [$0] } ?? []
        var connection = first
        var lastSequence: UInt64?
        var known: [String: KnownCountdown] = [:]
        while true {
            if let since = lastSequence, try subscribe(connection, to: names, since: since) != nil {
                // Resumed after the last event shown: what happened meanwhile follows.
            } else {
                lastSequence = try subscribe(connection, to: names)
                if let name {
                    // A finished countdown has no snapshot event; show its final state once.
                    let reply = try connection.request("STATUS \(name)")
                    if let countdown = reply.countdowns.first, !countdown.state.isActive {
                        console.out(followLine(countdown, style: style))
                    }
                }
            }
            while let event = try connection.nextEvent() {
                lastSequence = event.resumePoint(after: lastSequence)
                let state: CountdownState
                switch event.kind {
                case .snapshot: state = event.state ?? .running
                case .paused: state = .paused
                case .done: state = .done
                case .cancelled: state = .cancelled
                case .started, .tick, .resumed, .extended, .phase: state = .running
                case .changed: state = known[event.name]?.state ?? .running  // A setting: the state it had.
                case .removed:
                    console.out(goneLine(event.name, style: style))
                    continue
                }
                // Every line carries the deadline and owner, as `status --json` does: the deadline
                // from the snapshot, kept through the ticks, the owner from the name; a start, resume or extension sets a new
                // deadline (now + time left, to the millisecond a tick is read).
                var shown = known[event.name] ?? KnownCountdown(owner: Self.owner(of: event.name))
                switch event.kind {
                case .snapshot:
                    shown.deadline = event.deadlineUnixMilliseconds
                    shown.isPinned = event.isPinned
                    shown.pausesOnSuspend = event.pausesOnSuspend
                case .started:
                    // A new countdown (perhaps a replacement): what kind it is comes with the
                    // next snapshot, not with this event.
                    shown.deadline = SystemLocalZone.nowUnixMilliseconds() + event.remainingMilliseconds
                    shown.isPinned = nil
                    shown.pausesOnSuspend = nil
                case .resumed, .extended, .phase:
                    shown.deadline = SystemLocalZone.nowUnixMilliseconds() + event.remainingMilliseconds
                case .tick:
                    // A tick goes out at its whole second, so it says where the deadline is. It
                    // corrects one that is unknown, or a second or more off: a `started` replayed
                    // after a reconnect (`SINCE`) was read later than it happened.
                    let estimate = SystemLocalZone.nowUnixMilliseconds() + event.remainingMilliseconds
                    if shown.deadline.map({ abs($0 - estimate) >= 1000 }) ?? true { shown.deadline = estimate }
                case .paused, .done, .cancelled, .removed:
                    shown.deadline = nil
                case .changed:
                    shown.pausesOnSuspend = event.pausesOnSuspend
                }
                shown.state = state
                known[event.name] = shown
                let countdown = CountdownInfo(
                    name: event.name, state: state,
                    remainingMilliseconds: event.remainingMilliseconds, totalMilliseconds: event.totalMilliseconds,
                    deadlineUnixMilliseconds: state == .running ? shown.deadline : nil,
                    owner: shown.owner, lateMilliseconds: event.lateMilliseconds, isPinned: shown.isPinned ?? false,
                    pausesOnSuspend: shown.pausesOnSuspend ?? false, cycle: event.cycle
                )
                console.out(followLine(countdown, style: style))
            }
            guard let next = reconnect(reason: connection.shutdownReason, purpose: "follow \(name ?? "every countdown")") else {
                console.error("cdctl: countdownd closed the connection\(connection.shutdownReason.map { " (\($0))" } ?? "") and did not come back within \(Int(Self.reconnectWindow)) s\n")
                return .unavailable
            }
            connection = next
        }
    }

    /// What `status --follow` remembers of a countdown between its events.
    private struct KnownCountdown {
        var state: CountdownState?
        var deadline: Int64?
        var owner: UInt32?
        var isPinned: Bool?
        var pausesOnSuspend: Bool?
    }

    /// Whose a name is, as this user wrote or was shown it: `1000/tea` is uid 1000's, a plain
    /// one the caller's own.
    private static func owner(of name: String) -> UInt32 {
        name.contains("/") ? CountdownAddress.split(name).owner : getuid()
    }

    /// `stats`: the daemon's counters as a table, JSON, or Prometheus's text format (for
    /// node_exporter's textfile collector).
    private func stats(format: StatsFormat, on connection: CountdownConnection) throws(ClientError) -> ExitCode {
        let reply = try connection.request("STATS")
        guard case .ok = reply.outcome else {
            return report(reply, on: connection, name: nil)
        }
        switch format {
        case .table:
            let width = reply.stats.map(\.key.count).max() ?? 0
            console.out(reply.stats.map { $0.key.padded(to: width) + "  " + $0.value + "\n" }.joined())
        case .json:
            console.out(StatsRendering.json(reply.stats))
        case .prometheus:
            console.out(StatsRendering.prometheus(reply.stats))
        }
        return .success
    }

    /// What a bar shows once its countdown is gone: nothing.
    private func goneLine(_ name: String, style: OutputStyle) -> String {
        switch style {
        case .json: return "{\"name\":\"\(name)\",\"state\":\"gone\"}\n"
        case .template: return "\n"
        case .table: return "\(name): gone\n"
        }
    }

    private func followLine(_ countdown: CountdownInfo, style: OutputStyle) -> String {
        switch style {
        case .json: return Formatting.json(countdown)
        case .template(let template): return template.render(countdown) + "\n"
        case .table: return describe(countdown)
        }
    }

    /// `tea: running, 0:02:41 left of 0:03:00`
    private func describe(_ countdown: CountdownInfo) -> String {
        "\(countdown.name): \(countdown.state.rawValue), " + timeLeft(countdown)
    }

    /// `0:02:41 left of 0:03:00`, with its newline; `…, until 09:30` for one to a time of day.
    private func timeLeft(_ countdown: CountdownInfo) -> String {
        var text = "\(CountdownDuration.clock(milliseconds: countdown.remainingMilliseconds)) left of \(CountdownDuration.clock(milliseconds: countdown.totalMilliseconds))"
        if let cycle = countdown.cycle {
            // `0:24:59 left of 0:25:00 in work, phase 1 of 8 (round 2 of 4)`
            text += " in " + (cycle.label.map { "\($0), " } ?? "") + "phase \(cycle.phase) of \(cycle.phases)"
            if let round = cycle.round {
                text += " (round \(round)" + (cycle.rounds.map { " of \($0))" } ?? ")")
            }
        }
        if countdown.isPinned == true, let deadline = countdown.deadlineUnixMilliseconds {
            let shown = LocalTime.shown(deadline, SystemLocalZone(), withZone: false).dropLast(3)
            text += ", until \(countdown.remainingMilliseconds < 86_400_000 ? shown.suffix(5) : shown)"
        }
        if countdown.pausesOnSuspend == true && countdown.state.isActive {
            text += "; stands still while the machine sleeps"
        }
        return text + "\n"
    }

    /// The number of the last event as of a subscription, from its `OK subscribed … seq N`.
    private static func subscribedSequence(in reply: String) -> UInt64? {
        let words = reply.split(separator: " ")
        guard let index = words.firstIndex(of: "seq"), index + 1 < words.count else { return nil }
        return UInt64(words[index + 1])
    }

    /// Subscribes, optionally replaying what happened after event `since`.
    /// - Returns: the number of the last event as of the subscription (from `OK subscribed … seq N`),
    ///   or `nil` when a replay was refused: too old (`ERR gone`), or after a number the daemon
    ///   never gave (its state was lost: `ERR bad-request` advising to subscribe without it).
    @discardableResult
    /// `events` limits the kinds received (`SUBSCRIBE … EVENTS`): `wait` takes no ticks, so the
    /// countdowns it waits for cost the daemon nothing per second.
    private func subscribe(
        _ connection: CountdownConnection, to names: [String], since: UInt64? = nil, events: String? = nil
    ) throws(ClientError) -> UInt64? {
        let options = (events.map { ["EVENTS", $0] } ?? []) + (since.map { ["SINCE", "\($0)"] } ?? [])
        let reply = try connection.request((["SUBSCRIBE"] + names + options).joined(separator: " "))
        switch reply.outcome {
        case .ok(let text):
            return Self.subscribedSequence(in: text) ?? since ?? 0
        case .error(.gone?, _, _) where since != nil:
            return nil
        case .error where since != nil && reply.errorFields["advice"] == ProtocolError.Advice.subscribeWithoutSince.rawValue:
            return nil
        case .error(_, let code, let message):
            throw .protocolViolation("SUBSCRIBE was refused: \(code) \(message)")
        }
    }

    /// Sends a mutation and reports its outcome: one line for a person on success.
    private func mutation(
        _ line: String, on connection: CountdownConnection, name: String, quietWhenBusy: Bool = false,
        describedAs description: ((CountdownInfo) -> String)? = nil
    ) throws(ClientError) -> ExitCode {
        let reply = try connection.request(line)
        guard case .ok = reply.outcome, let countdown = reply.countdown else {
            if quietWhenBusy, case .error(.busy?, _, _) = reply.outcome {
                return .busy
            }
            return report(reply, on: connection, name: name)
        }
        console.out(description?(countdown) ?? describe(countdown))
        return .success
    }

    /// Explains an `ERR` reply on stderr and maps it to an exit code. For an unknown name, it
    /// suggests the closest existing one.
    private func report(_ reply: Reply, on connection: CountdownConnection, name: String?) -> ExitCode {
        guard case .error(let code, let rawCode, let message) = reply.outcome else {
            console.error("cdctl: unexpected reply from countdownd\n")
            return .refused
        }
        let fields = reply.errorFields
        // A countdown that already finished exists: "not-found" would say the opposite.
        let finished = fields["state"].flatMap(CountdownState.init(rawValue:)).map { !$0.isActive } ?? false
        var text = "cdctl: \(Self.inCdctlTerms(message, fields: fields, name: name))" + (finished ? "" : " (\(rawCode))")
        // A copy that trails etcd may not have the name yet: no guess at another.
        if code == .notFound, let name, !finished, fields["behind"] != "true",
           let list = try? connection.request("LIST"),
           let suggestion = Suggestion.closest(to: name, among: list.countdowns.map(\.name)) {
            text += "; did you mean '\(suggestion)'?"
        }
        console.error(text + "\n")
        return ExitCode(errorCode: code)
    }

    /// The daemon's message as a person at cdctl should read it, decided by the error's fields,
    /// never by its English: with an `advice` field, the message's last clause (after its last
    /// `; `) is that advice in protocol terms (`CANCEL it first`), replaced here by the cdctl
    /// command to run next; a replay asked `--since` a number the daemon never had is worded
    /// from its `since` and `last_seq`. Anything else is shown as the daemon wrote it.
    public static func inCdctlTerms(_ message: String, fields: [String: String], name: String?) -> String {
        guard let token = fields["advice"], let advice = ProtocolError.Advice(rawValue: token) else { return message }
        let what: Substring
        if let since = fields["since"], let last = fields["last_seq"] {
            what = "--since \(since) is ahead of the last event (\(last)): this daemon's history never had it"
        } else if let cut = lastClauseStart(message) {
            what = message[..<cut]
        } else {
            return message
        }
        let target = name ?? "NAME"
        let words: String
        switch advice {
        case .waitCancelOrReplace:
            words = "wait for it (cdctl wait \(target)), cancel it (cdctl cancel \(target)), or restart it (cdctl start \(target) --replace)"
        case .list: words = "cdctl list shows the existing ones"
        case .resume: words = "cdctl resume \(target) continues it"
        case .startAgain: words = "cdctl start \(target) starts it again"
        case .cancelFirst: words = "cdctl cancel \(target) first"
        case .removeFinished: words = "cdctl rm finished ones"
        case .subscribeWithoutSince: words = "cdctl watch without --since shows the current state"
        case .subscribeEverything: words = "cdctl watch with no names follows all"
        case .askAgain: words = "run it again in a moment, or on another host of the cluster"
        }
        return what + "; " + words
    }

    /// Where the last `; ` of a message begins.
    private static func lastClauseStart(_ message: String) -> String.Index? {
        var index = message.endIndex
        while index > message.startIndex {
            index = message.index(before: index)
            if message[index] == ";", message.index(after: index) < message.endIndex, message[message.index(after: index)] == " " {
                return index
            }
        }
        return nil
    }

    /// Blocks until every name is finished: `success` if all are done, `cancelled` if any was
    /// cancelled, `notFound` at once for a name that does not exist.
    private func waitForAll(_ names: [String], on first: CountdownConnection, subscribed: Bool) throws(ClientError) -> ExitCode {
        var connection = first
        var needsSubscription = !subscribed
        var outstanding = Set(names)
        var anyCancelled = false
        let behindGiveUpAt = monotonicSeconds() + Self.behindPatience
        /// The last event number seen: after a reconnect, what happened meanwhile is replayed
        /// from there, so a `done` while disconnected is never missed, even if the name was
        /// started again or purged since.
        var lastSequence: UInt64?
        while true {
            var replayed = false
            if needsSubscription {
                // Subscribe before asking, so an event between the two is not missed.
                if let since = lastSequence, try subscribe(connection, to: outstanding.sorted(), since: since, events: "lifecycle,snapshot") != nil {
                    replayed = true
                } else {
                    lastSequence = try subscribe(connection, to: outstanding.sorted(), events: "lifecycle,snapshot")
                }
            }
            if !replayed {
                for name in outstanding.sorted() {
                    let reply = try statusOnceCurrent(name, on: connection, giveUpAt: behindGiveUpAt)
                    if case .error = reply.outcome {
                        let code = report(reply, on: connection, name: name)
                        // Still behind after the patience: not "no such countdown", but a host
                        // that cannot tell, as when it cannot be reached.
                        return reply.errorFields["behind"] == "true" ? .unavailable : code
                    }
                    if let state = reply.countdowns.first?.state, !state.isActive {
                        outstanding.remove(name)
                        anyCancelled = anyCancelled || state == .cancelled
                    }
                }
            }
            while !outstanding.isEmpty, let event = try connection.nextEvent() {
                lastSequence = event.resumePoint(after: lastSequence)
                guard outstanding.contains(event.name) else { continue }
                if event.kind == .done || event.kind == .cancelled {
                    outstanding.remove(event.name)
                    anyCancelled = anyCancelled || event.kind == .cancelled
                } else if event.kind == .snapshot, let state = event.state, !state.isActive {
                    // After a RESYNC (cluster mode): it finished while the daemon's copy was behind.
                    outstanding.remove(event.name)
                    anyCancelled = anyCancelled || state == .cancelled
                }
            }
            if outstanding.isEmpty { break }
            // The daemon went away mid-wait (a restart, an upgrade). Countdowns survive restarts,
            // so reconnect and carry on: a script's `cdctl wait build && …` should not fail.
            guard let next = reconnect(reason: connection.shutdownReason, purpose: "keep waiting for \(outstanding.sorted().joined(separator: ", "))") else {
                console.error("cdctl: countdownd closed the connection while waiting for \(outstanding.sorted().joined(separator: ", ")) and did not come back within \(Int(Self.reconnectWindow)) s\n")
                return .unavailable
            }
            connection = next
            needsSubscription = true
        }
        if anyCancelled {
            console.error("cdctl: \(names.count == 1 ? "'\(names[0])' was" : "a countdown was") cancelled\n")
            return .cancelled
        }
        return .success
    }

    /// How long `wait` asks again about a name a cluster host's copy does not have while that
    /// copy trails etcd (`behind=true`), before it reports the name as not found.
    static let behindPatience: Double = 30

    /// `STATUS name`, asked again every 200 ms (until `giveUpAt`, `behindPatience` after the
    /// wait began, whatever the number of names) while a cluster host answers not-found from a
    /// copy that trails etcd: the countdown may exist (started through another host), and
    /// `cdctl wait` should wait for it, not fail at once. Said once on stderr.
    private func statusOnceCurrent(_ name: String, on connection: CountdownConnection, giveUpAt: Double) throws(ClientError) -> Reply {
        var reply = try connection.request("STATUS \(name)")
        var said = false
        while case .error(.notFound?, _, _) = reply.outcome, reply.errorFields["behind"] == "true", monotonicSeconds() < giveUpAt {
            if !said {
                console.error("cdctl: this countdownd's copy of the cluster trails etcd and has no '\(name)' yet; asking again until it catches up (at most \(Int(Self.behindPatience)) s)\n")
                said = true
            }
            usleep(200_000)  // Interrupted by a signal: it only asks sooner.
            reply = try connection.request("STATUS \(name)")
        }
        return reply
    }

    /// How long `wait` keeps trying to reach a daemon that went away.
    static let reconnectWindow = 30.0

    /// Tries to connect again for up to `reconnectWindow` seconds, backing off from 50 ms to 1 s.
    private func reconnect(reason: String?, purpose: String, quiet: Bool = false) -> CountdownConnection? {
        if !quiet {
            console.error("cdctl: countdownd went away\(reason.map { " (\($0))" } ?? ""); reconnecting to \(purpose)\n")
        }
        let deadline = monotonicSeconds() + Self.reconnectWindow
        var pause: UInt32 = 50_000
        while true {
            if let connection = try? CountdownConnection(path: invocation.socketPath, timeout: 5) {
                return connection
            }
            if monotonicSeconds() >= deadline { return nil }
            usleep(pause)
            pause = min(pause * 2, 1_000_000)
        }
    }
}

/// "Did you mean …?" for mistyped names.
enum Suggestion {
    /// The existing name closest to `name` by edit distance, if it is close enough to be a typo.
    static func closest(to name: String, among candidates: [String]) -> String? {
        // What the word begins, when one candidate alone begins so: `--h` is `--help`.
        let extending = candidates.filter { $0.hasPrefix(name) && $0 != name }
        if extending.count == 1 { return extending[0] }
        let target = Array(name.utf8)
        let limit = max(2, target.count / 3)
        var best: (String, Int)?
        for candidate in candidates {
            let distance = editDistance(target, Array(candidate.utf8))
            if distance <= limit && distance < (best?.1 ?? Int.max) {
                best = (candidate, distance)
            }
        }
        return best?.0
    }

    static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        if a.isEmpty { return b.count }
        var previous = Array(0...b.count)
        var current = previous
        for i in 1...a.count {
            current[0] = i
            for j in stride(from: 1, through: b.count, by: 1) {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}
