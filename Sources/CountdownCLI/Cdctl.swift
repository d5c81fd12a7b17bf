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
        switch invocation.command {
        case .help:
            console.out(CdctlCommandLine.help + "\n")
            return .success
        case .version:
            console.out("cdctl \(CountdownVersion.current)\n")
            return .success
        default:
            break
        }
        do {
            let connection = try CountdownConnection(path: invocation.socketPath)
            return try execute(on: connection)
        } catch {
            console.error("cdctl: \(error)\n")
            return .unavailable
        }
    }

    private func execute(on connection: CountdownConnection) throws(ClientError) -> ExitCode {
        switch invocation.command {
        case .start(let name, let milliseconds, let replace, let ifIdle, let wait):
            if wait {
                try subscribe(connection, to: [name])
            }
            var line = "START \(name) \(milliseconds ?? CountdownDuration.defaultMilliseconds)ms"
            if replace { line += " REPLACE" }
            var code = try mutation(line, on: connection, name: name, quietWhenBusy: ifIdle)
            if code == .busy && ifIdle {
                // Already counting: leave it alone, say where it stands, and succeed.
                let status = try connection.request("STATUS \(name)")
                if let countdown = status.countdowns.first {
                    console.out(describe(countdown))
                }
                code = .success
            }
            guard code == .success, wait else { return code }
            return try waitForAll([name], on: connection, subscribed: true)
        case .cancel(let name):
            return try mutation("CANCEL \(name)", on: connection, name: name)
        case .pause(let name):
            return try mutation("PAUSE \(name)", on: connection, name: name)
        case .resume(let name):
            return try mutation("RESUME \(name)", on: connection, name: name)
        case .extend(let name, let milliseconds):
            return try mutation("EXTEND \(name) \(milliseconds)ms", on: connection, name: name)
        case .status(let name, let style, true):
            return try follow(name, style: style, on: connection)
        case .status(let name?, let style, false):
            let reply = try connection.request("STATUS \(name)")
            if case .error = reply.outcome {
                return report(reply, on: connection, name: name)
            }
            console.out(render(reply.countdowns, style: style, single: true))
            return .success
        case .status(nil, let style, false), .list(let style):
            let reply = try connection.request("LIST")
            if case .error = reply.outcome {
                return report(reply, on: connection, name: nil)
            }
            if case .table = style, reply.countdowns.isEmpty {
                console.out("no countdowns\n")
            } else {
                console.out(render(reply.countdowns, style: style, single: false))
            }
            return .success
        case .completeNames:
            let reply = try connection.request("LIST")
            console.out(reply.countdowns.map { $0.name + "\n" }.joined())
            return .success
        case .watch(let names, let json, let since):
            if let since {
                // A replay is a log of lines, not a live display.
                let reply = try connection.request((["SUBSCRIBE"] + names + ["SINCE", "\(since)"]).joined(separator: " "))
                if case .error = reply.outcome {
                    return report(reply, on: connection, name: nil)
                }
            } else {
                try subscribe(connection, to: names)
            }
            if console.isTerminal && !json && since == nil {
                var display = LiveWatch(connection: connection, console: console, names: names)
                display.colorAllowed = invocation.colorAllowed
                return try display.run()
            }
            while let event = try connection.nextEvent() {
                console.out(json ? Formatting.json(event) : Formatting.eventLine(event))
            }
            console.error("cdctl: countdownd closed the connection\(connection.shutdownReason.map { " (\($0))" } ?? "")\n")
            return .unavailable
        case .wait(let names):
            return try waitForAll(names, on: connection, subscribed: false)
        case .help, .version:
            return .success
        }
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
    /// second while running), for waybar, polybar, i3blocks and tmux. Runs until interrupted.
    private func follow(_ name: String?, style: OutputStyle, on connection: CountdownConnection) throws(ClientError) -> ExitCode {
        try subscribe(connection, to: name.map { [$0] } ?? [])
        if let name {
            // A finished countdown has no snapshot event; show its final state once.
            let reply = try connection.request("STATUS \(name)")
            if let countdown = reply.countdowns.first, !countdown.state.isActive {
                console.out(followLine(countdown, style: style))
            }
        }
        while let event = try connection.nextEvent() {
            let state: CountdownState
            switch event.kind {
            case .snapshot: state = event.state ?? .running
            case .paused: state = .paused
            case .done: state = .done
            case .cancelled: state = .cancelled
            case .started, .tick, .resumed, .extended: state = .running
            }
            let countdown = CountdownInfo(
                name: event.name, state: state,
                remainingMilliseconds: event.remainingMilliseconds, totalMilliseconds: event.totalMilliseconds,
                deadlineUnixMilliseconds: event.deadlineUnixMilliseconds
            )
            console.out(followLine(countdown, style: style))
        }
        console.error("cdctl: countdownd closed the connection\(connection.shutdownReason.map { " (\($0))" } ?? "")\n")
        return .unavailable
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
        "\(countdown.name): \(countdown.state.rawValue), \(CountdownDuration.clock(milliseconds: countdown.remainingMilliseconds)) left of \(CountdownDuration.clock(milliseconds: countdown.totalMilliseconds))\n"
    }

    /// Subscribes, optionally replaying what happened after event `since`.
    /// - Returns: the number of the last event as of the subscription (from `OK subscribed … seq N`),
    ///   or `nil` when a replay was refused as too old (`ERR gone`).
    @discardableResult
    private func subscribe(_ connection: CountdownConnection, to names: [String], since: UInt64? = nil) throws(ClientError) -> UInt64? {
        let reply = try connection.request((["SUBSCRIBE"] + names + (since.map { ["SINCE", "\($0)"] } ?? [])).joined(separator: " "))
        switch reply.outcome {
        case .ok(let text):
            let words = text.split(separator: " ")
            if let index = words.firstIndex(of: "seq"), index + 1 < words.count, let sequence = UInt64(words[index + 1]) {
                return sequence
            }
            return since ?? 0
        case .error(.gone?, _, _) where since != nil:
            return nil
        case .error(_, let code, let message):
            throw .protocolViolation("SUBSCRIBE was refused: \(code) \(message)")
        }
    }

    /// Sends a mutation and reports its outcome: one line for a person on success.
    private func mutation(
        _ line: String, on connection: CountdownConnection, name: String, quietWhenBusy: Bool = false
    ) throws(ClientError) -> ExitCode {
        let reply = try connection.request(line)
        guard case .ok = reply.outcome, let countdown = reply.countdown else {
            if quietWhenBusy, case .error(.busy?, _, _) = reply.outcome {
                return .busy
            }
            return report(reply, on: connection, name: name)
        }
        console.out(describe(countdown))
        return .success
    }

    /// Explains an `ERR` reply on stderr and maps it to an exit code. For an unknown name, it
    /// suggests the closest existing one.
    private func report(_ reply: Reply, on connection: CountdownConnection, name: String?) -> ExitCode {
        guard case .error(let code, let rawCode, let message) = reply.outcome else {
            console.error("cdctl: unexpected reply from countdownd\n")
            return .refused
        }
        var text = "cdctl: \(message) (\(rawCode))"
        if code == .notFound, let name, !message.contains("finished"),
           let list = try? connection.request("LIST"),
           let suggestion = Suggestion.closest(to: name, among: list.countdowns.map(\.name)) {
            text += "; did you mean '\(suggestion)'?"
        }
        console.error(text + "\n")
        return ExitCode(errorCode: code)
    }

    /// Blocks until every name is finished: `success` if all are done, `cancelled` if any was
    /// cancelled, `notFound` at once for a name that does not exist.
    private func waitForAll(_ names: [String], on first: CountdownConnection, subscribed: Bool) throws(ClientError) -> ExitCode {
        var connection = first
        var needsSubscription = !subscribed
        var outstanding = Set(names)
        var anyCancelled = false
        /// The last event number seen: after a reconnect, what happened meanwhile is replayed
        /// from there, so a `done` while disconnected is never missed, even if the name was
        /// started again or purged since.
        var lastSequence: UInt64?
        while true {
            var replayed = false
            if needsSubscription {
                // Subscribe before asking, so an event between the two is not missed.
                if let since = lastSequence, try subscribe(connection, to: outstanding.sorted(), since: since) != nil {
                    replayed = true
                } else {
                    lastSequence = try subscribe(connection, to: outstanding.sorted())
                }
            }
            if !replayed {
                for name in outstanding.sorted() {
                    let reply = try connection.request("STATUS \(name)")
                    if case .error = reply.outcome {
                        return report(reply, on: connection, name: name)
                    }
                    if let state = reply.countdowns.first?.state, !state.isActive {
                        outstanding.remove(name)
                        anyCancelled = anyCancelled || state == .cancelled
                    }
                }
            }
            while !outstanding.isEmpty, let event = try connection.nextEvent() {
                lastSequence = max(lastSequence ?? 0, event.sequence)
                guard outstanding.contains(event.name) else { continue }
                if event.kind == .done || event.kind == .cancelled {
                    outstanding.remove(event.name)
                    anyCancelled = anyCancelled || event.kind == .cancelled
                }
            }
            if outstanding.isEmpty { break }
            // The daemon went away mid-wait (a restart, an upgrade). Countdowns survive restarts,
            // so reconnect and carry on: a script's `cdctl wait build && …` should not fail.
            guard let next = reconnect(reason: connection.shutdownReason, waitingFor: outstanding) else {
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

    /// How long `wait` keeps trying to reach a daemon that went away.
    static let reconnectWindow = 30.0

    /// Tries to connect again for up to `reconnectWindow` seconds, backing off from 50 ms to 1 s.
    private func reconnect(reason: String?, waitingFor names: Set<String>) -> CountdownConnection? {
        console.error("cdctl: countdownd went away\(reason.map { " (\($0))" } ?? ""); reconnecting to keep waiting for \(names.sorted().joined(separator: ", "))\n")
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
