import CountdownClient
import CountdownCore
import Foundation
import Testing

extension Integration {
    @Suite("Wire protocol against the real daemon")
    struct ProtocolTests {
        @Test("the greeting names the protocol and the daemon version")
        func greeting() throws {
            let daemon = try DaemonProcess()
            let connection = try daemon.connect()
            #expect(connection.protocolVersion == 1)
            #expect(connection.daemonVersion == CountdownVersion.current)
        }

        @Test("ERR busy says the time left for programs: remaining_ms and state after the message, which reads as before")
        func busyFields() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            _ = try c.request("START otp:+4915112345678 60")
            try c.send("START otp:+4915112345678 60\n")
            let line = try #require(try c.readLine(timeout: 30))
            let match = try #require(line.wholeMatch(of: #/ERR busy 'otp:\+4915112345678' is running with 0:0[01]:\d\d left; .* REPLACE remaining_ms=(\d+) state=running advice=wait-cancel-or-replace/#), "\(line)")
            let remaining = try #require(Int(match.1))
            #expect(remaining > 0 && remaining <= 60_000)
            // The Swift client hands the fields over apart, and the message without them.
            let reply = try c.request("START otp:+4915112345678 60")
            #expect(reply.errorFields["state"] == "running" && Int(reply.errorFields["remaining_ms"] ?? "").map { $0 <= remaining } == true)
            guard case .error(.busy?, _, let message) = reply.outcome else {
                Issue.record("\(reply.outcome)")
                return
            }
            #expect(message.hasSuffix("START it with REPLACE"), "\(message)")
        }

        @Test("SUBSCRIBE PREFIX follows every countdown whose name starts with it, present and future; snapshots and SINCE too")
        func subscribePrefix() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            _ = try c.request("START otp:old 1h")
            _ = try c.request("START tea 1h")
            let follower = try daemon.connect()
            let subscribed = try follower.request("SUBSCRIBE PREFIX otp: EVENTS lifecycle,snapshot")
            guard case .ok(let text) = subscribed.outcome, text.hasPrefix("subscribed 1 seq ") else {
                Issue.record("\(subscribed.outcome)")
                return
            }
            let snapshot = try follower.waitForEvent(timeout: 30) { _ in true }
            #expect(snapshot.kind == .snapshot && snapshot.name == "otp:old")
            _ = try c.request("START otp:+49151 1h")
            _ = try c.request("START other 1h")
            _ = try c.request("CANCEL tea")
            _ = try c.request("CANCEL otp:old")
            var seen: [String] = []
            while seen.last != "cancelled otp:old" {
                let event = try follower.waitForEvent(timeout: 30) { _ in true }
                seen.append("\(event.kind.rawValue) \(event.name)")
            }
            #expect(seen == ["started otp:+49151", "cancelled otp:old"])
            // A second prefix on the same connection is refused; names and everything there too, and
            // a prefix on a connection that follows everything.
            for line in ["SUBSCRIBE PREFIX x", "SUBSCRIBE tea", "SUBSCRIBE"] {
                guard case .error(.badRequest?, _, _) = try follower.request(line).outcome else {
                    Issue.record("\(line) was taken on a prefix's connection")
                    return
                }
            }
            let everything = try daemon.connect()
            _ = try everything.request("SUBSCRIBE EVENTS lifecycle")
            guard case .error(.badRequest?, _, _) = try everything.request("SUBSCRIBE PREFIX otp:").outcome else {
                Issue.record("a prefix was taken on a connection that follows everything")
                return
            }
            // A prefix subscriber that takes ticks makes its countdowns tick (nobody else asks).
            let ticker = try daemon.connect()
            _ = try ticker.request("SUBSCRIBE PREFIX t: EVENTS tick")
            _ = try c.request("START t:x 1h")
            let tick = try ticker.waitForEvent(timeout: 30) { _ in true }
            #expect(tick.kind == .tick && tick.name == "t:x")
            // A replay of the prefix only, from before any of it.
            let replayer = try daemon.connect()
            _ = try replayer.request("SUBSCRIBE PREFIX otp: EVENTS lifecycle SINCE 0")
            var replayed: [String] = []
            while replayed.last != "cancelled otp:old" {
                let event = try replayer.waitForEvent(timeout: 30) { _ in true }
                replayed.append("\(event.kind.rawValue) \(event.name)")
            }
            #expect(replayed == ["started otp:old", "started otp:+49151", "cancelled otp:old"])
        }

        @Test("every verb answers with the documented shape")
        func replyShapes() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            let countdownFields = #/^(OK|COUNTDOWN) tea (running|paused|done|cancelled) \d+ \d+ (\d{13}|-) \d+$/#

            try c.send("START tea 3m\n")
            let started = try #require(try c.readLine(timeout: 30))
            #expect(started.wholeMatch(of: countdownFields) != nil, "\(started)")
            let fields = started.split(separator: " ")
            #expect(fields[2] == "running" && fields[3] == "180000" && fields[4] == "180000")
            let deadline = try #require(Double(fields[5]))
            #expect(abs(deadline - (unixNowMilliseconds() + 180_000)) < 1000)
            #expect(fields[6] == "\(getuid())")

            try c.send("STATUS tea\n")
            let status = try #require(try c.readLine(timeout: 30))
            #expect(status.wholeMatch(of: countdownFields) != nil && status.hasPrefix("COUNTDOWN tea running"), "\(status)")
            #expect(try c.readLine(timeout: 30) == "OK 1")

            _ = try c.request("START zz 10")
            try c.send("LIST\n")
            #expect(try c.readLine(timeout: 30)?.hasPrefix("COUNTDOWN tea running") == true)
            #expect(try c.readLine(timeout: 30)?.hasPrefix("COUNTDOWN zz running") == true)
            #expect(try c.readLine(timeout: 30) == "OK 2")

            try c.send("PAUSE tea\n")
            let paused = try #require(try c.readLine(timeout: 30))
            #expect(paused.wholeMatch(of: countdownFields) != nil && paused.contains(" paused ") && paused.contains(" - "), "\(paused)")
            let pausedRemaining = try #require(Int(paused.split(separator: " ")[3]))

            try c.send("RESUME tea\n")
            let resumed = try #require(try c.readLine(timeout: 30))
            #expect(resumed.contains(" running ") && Int(resumed.split(separator: " ")[3]) == pausedRemaining, "\(resumed)")

            try c.send("EXTEND tea 1m\n")
            let extended = try #require(try c.readLine(timeout: 30))
            #expect(extended.split(separator: " ")[4] == "240000", "\(extended)")

            try c.send("CANCEL tea\n")
            let cancelled = try #require(try c.readLine(timeout: 30))
            #expect(cancelled.wholeMatch(of: countdownFields) != nil && cancelled.contains(" cancelled "), "\(cancelled)")

            #expect(try c.request("PING").outcome == .ok("pong"))
            #expect(try c.request("UNSUBSCRIBE").outcome == .ok("unsubscribed"))
        }

        @Test("START on a running name is busy until it finishes; REPLACE overrides")
        func busyAndReplace() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            #expect(try c.request("START otp:+4915112345678 1500ms").countdown?.state == .running)
            let busy = try c.request("START otp:+4915112345678 60")
            guard case .error(.busy?, _, let message) = busy.outcome else {
                Issue.record("expected ERR busy, got \(busy)")
                return
            }
            #expect(message.contains("REPLACE"))
            let replaced = try c.request("START otp:+4915112345678 2s REPLACE")
            #expect(replaced.countdown?.totalMilliseconds == 2000)
            // Once it has finished, the name is startable again.
            _ = try c.request("SUBSCRIBE otp:+4915112345678")
            _ = try c.waitForEvent { $0.kind == .done }
            #expect(try c.request("START otp:+4915112345678 60").countdown?.state == .running)
        }

        @Test("bad input gets the right ERR code and the connection keeps working", arguments: [
            ("FROB", "unknown-command"),
            ("START", "bad-request"),
            ("START tea 5 6", "bad-request"),
            ("LIST all", "bad-request"),
            ("START bad/name 5", "bad-name"),
            ("START <129-byte name> 5", "bad-name"),
            ("START tea 0", "bad-duration"),
            ("START tea 367d", "bad-duration"),
            ("START tea 99999999999999999999999999", "bad-duration"),
            ("STATUS nosuch", "not-found"),
            ("CANCEL nosuch", "not-found"),
            ("START <5000-byte name> 5", "line-too-long"),
        ])
        func errors(template: String, code: String) throws {
            // Long names are spelled out here, not in the arguments, so test names stay readable.
            let line = template
                .replacingOccurrences(of: "<129-byte name>", with: String(repeating: "n", count: 129))
                .replacingOccurrences(of: "<5000-byte name>", with: String(repeating: "x", count: 5000))
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            try c.send(line + "\n")
            let reply = try #require(try c.readLine(timeout: 30))
            #expect(reply.hasPrefix("ERR \(code) "), "\(line.prefix(40)) -> \(reply)")
            #expect(reply.count > "ERR \(code) ".count + 10, "the message explains the error")
            #expect(try c.request("PING").outcome == .ok("pong"))
        }

        @Test("NUL bytes, control characters and invalid UTF-8 are rejected without harm")
        func hostileBytes() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            let cases: [([UInt8], String)] = [
                (Array("START te".utf8) + [0] + Array("a 5\n".utf8), "ERR bad-name"),
                (Array("START te".utf8) + [0x1B] + Array("a 5\n".utf8), "ERR bad-name"),
                (Array("START ".utf8) + [0xC3, 0x28] + Array(" 5\n".utf8), "ERR bad-name"),
                ([0xFF, 0xFE, 0x0A], "ERR unknown-command"),
                (Array("START tea 5".utf8) + [0xE2, 0x82, 0x0A], "ERR bad-duration"),
            ]
            for (bytes, prefix) in cases {
                try c.sendBytes(bytes)
                let reply = try #require(try c.readLine(timeout: 30))
                #expect(reply.hasPrefix(prefix), "\(bytes) -> \(reply)")
            }
            #expect(try c.request("PING").outcome == .ok("pong"))
            #expect(try c.request("LIST").countdowns.isEmpty)
        }

        @Test("pipelined requests are answered in order, in one write")
        func pipelining() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            var batch = ""
            for index in 0..<300 {
                batch += "START p\(index) \(index + 10)\n"
                batch += index % 3 == 0 ? "STATUS p\(index)\n" : "PING\n"
            }
            try c.send(batch)
            for index in 0..<300 {
                let started = try c.readReply(timeout: 10)
                #expect(started.countdown?.name == "p\(index)" && started.countdown?.totalMilliseconds == Int64(index + 10) * 1000)
                let second = try c.readReply(timeout: 10)
                if index % 3 == 0 {
                    #expect(second.countdowns.first?.name == "p\(index)" && second.outcome == .ok("1"))
                } else {
                    #expect(second.outcome == .ok("pong"))
                }
            }
        }

        @Test("a client that half-closes after sending still gets every reply")
        func halfClose() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            try c.send("START a 5\nSTART b 5\nLIST\n")
            c.finishSending()
            #expect(try c.readReply().countdown?.name == "a")
            #expect(try c.readReply().countdown?.name == "b")
            #expect(try c.readReply().outcome == .ok("2"))
            #expect(try c.readLine(timeout: 30) == nil, "then the daemon closes")
        }

        @Test("QUIT answers OK bye and closes; requests after it are not run")
        func quit() throws {
            let daemon = try DaemonProcess()
            let c = try daemon.connect()
            try c.send("QUIT\nSTART never 5\n")
            #expect(try c.readLine(timeout: 30) == "OK bye")
            #expect(try c.readLine(timeout: 30) == nil)
            #expect(try daemon.connect().request("LIST").countdowns.isEmpty)
        }
    }
}
