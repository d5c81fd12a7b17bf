import CountdownClient
import CountdownCore
import Foundation

/// `CountdownConnection` (cdctl's client) behind the conformance suite's driver protocol
/// (clients/conformance/README.md): JSON lines in on stdin, one reply line per command on stdout.
///
/// It offers what the connection itself promises: requests with a timeout, and no reply read as
/// another request's after one timed out (the connection shuts itself down; the driver then
/// connects again, as the error says to). It is one connection for one thread, without
/// reconnection, waiting or subscriptions of its own (cdctl builds those on it), so those cases
/// are skipped and say so.
@main
struct ConformanceDriver {
    static let changes: Set<String> = ["start", "cancel", "pause", "resume", "extend", "remove", "skip"]

    var socketPath = ""
    var connection: CountdownConnection?

    static func main() {
        var driver = ConformanceDriver()
        write(["hello": "swift-countdownclient", "capabilities": ["requests", "timeouts", "cycles"]])
        while let line = readLine(strippingNewline: true) {
            guard let data = line.data(using: .utf8),
                  let command = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
                FileHandle.standardError.write("conformance-driver: unreadable command\n".data(using: .utf8)!)
                exit(2)
            }
            var reply = driver.handle(command)
            reply["id"] = command["id"]
            write(reply)
        }
    }

    static func write(_ object: [String: Any]) {
        // Every value put in here is a JSON type, so serialization cannot fail.
        var data = try! JSONSerialization.data(withJSONObject: object)
        data.append(UInt8(ascii: "\n"))
        FileHandle.standardOutput.write(data)
    }

    mutating func handle(_ command: [String: Any]) -> [String: Any] {
        switch command["op"] as? String {
        case "connect":
            socketPath = command["socket"] as? String ?? ""
            connection = nil
            return ["ok": NSNull()]
        case "reset":
            connection = nil
            return ["ok": NSNull()]
        case "call":
            return call(command)
        default:
            return ["error": ["kind": "unsupported", "message": "not offered by CountdownConnection"]]
        }
    }

    mutating func call(_ command: [String: Any]) -> [String: Any] {
        let method = command["method"] as? String ?? ""
        let name = command["name"] as? String ?? ""
        let timeout = (command["timeout_ms"] as? Double).map { $0 / 1000 }
        var words = [method.uppercased()]
        if method != "ping" && method != "list" { words.append(name) }
        if let duration = command["duration"] as? String { words.append(duration) }
        if method == "start", let cycle = command["cycle"] as? String {
            words += ["CYCLE", cycle]
            // A number of rounds (the cases give no `true`: Foundation reads JSON's true and 1 alike).
            if let rounds = command["repeat"] as? Int { words += ["REPEAT", "\(rounds)"] }
        }
        if method == "start", command["replace"] as? Bool == true { words.append("REPLACE") }
        if method == "list", let prefix = command["prefix"] as? String { words += ["PREFIX", prefix] }
        var sent = false
        do throws(ClientError) {
            if connection == nil || connection?.isUsable == false {
                connection = try CountdownConnection(path: socketPath, timeout: timeout ?? 30)
            }
            guard let connection else { return ["error": ["kind": "connection-lost", "message": "no connection"]] }
            try connection.send(words.joined(separator: " ") + "\n")
            sent = true
            let reply = try connection.readReply(timeout: timeout ?? 30)
            switch reply.outcome {
            case .ok:
                if method == "list" { return ["ok": reply.countdowns.map(Self.describe)] }
                if let countdown = reply.countdowns.first ?? reply.countdown { return ["ok": Self.describe(countdown)] }
                return ["ok": NSNull()]
            case .error(_, let rawCode, let message):
                var error: [String: Any] = ["kind": rawCode, "message": message, "maybe_applied": false]
                if let remaining = reply.errorFields["remaining_ms"].flatMap(Int.init) { error["remaining_ms"] = remaining }
                return ["error": error]
            }
        } catch {
            // The connection is kept, as a careless caller would keep it: the library must
            // refuse to read the late answer as the next request's (isUsable turns false).
            let maybeApplied = sent && Self.changes.contains(method)
            let kind: String
            switch error {
            case .timedOut: kind = "timeout"
            case .connectionLost where maybeApplied: kind = "outcome-unknown"
            default: kind = "connection-lost"
            }
            return ["error": ["kind": kind, "message": error.description, "maybe_applied": maybeApplied]]
        }
    }

    static func describe(_ countdown: CountdownInfo) -> [String: Any] {
        var described: [String: Any] = [
            "name": countdown.name, "state": countdown.state.rawValue,
            "remaining_ms": countdown.remainingMilliseconds, "total_ms": countdown.totalMilliseconds,
        ]
        if let cycle = countdown.cycle {
            described["phase"] = cycle.phase
            described["phases"] = cycle.phases
            described["label"] = cycle.label ?? NSNull()
            described["round"] = cycle.round ?? NSNull()
        }
        return described
    }
}
