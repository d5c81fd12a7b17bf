import CountdownClient
import Foundation
import Glibc
import Testing

/// The documentation's examples, run: the README's `console` blocks through a shell with the
/// real `cdctl`, and PROTOCOL.md's example session over a raw socket, each against a fresh
/// daemon, compared line by line with what the docs show, allowing only for time values.
enum DocExamples {
    /// What may differ between the docs and a run: clocks, milliseconds, deadlines, percentages
    /// and bars. Sequence numbers, names, states, words and the order of lines may not.
    static func normalized(_ line: String) -> String {
        // The docs' examples are uid 1000's; a run is the test's own uid: the owner field of
        // countdown lines and snapshots, and owner_uid in JSON, stand for any uid.
        var words = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        let states: Set<String> = ["running", "paused", "done", "cancelled"]
        if ["OK", "COUNTDOWN"].contains(words.first ?? ""), words.count >= 7, states.contains(words[2]) {
            words[6] = "UID"
        } else if words.first == "EVENT", words.count >= 9, words[2] == "snapshot" {
            words[8] = "UID"
        }
        var text = words.joined(separator: " ")
        text = text.replacing(#/"owner_uid":\d+/#) { _ in "\"owner_uid\":UID" }
        text = text.replacing(#/\d+:\d\d:\d\d/#) { _ in "CLOCK" }
        text = text.replacing(#/\[[█░#-]+\]/#) { _ in "[BAR]" }
        text = text.replacing(#/\d+%/#) { _ in "P%" }
        text = text.replacing(#/remaining_ms=\d+/#) { _ in "remaining_ms=MS" }
        // Milliseconds and deadlines: every number of four digits or more.
        text = text.replacing(#/\b\d{4,}\b/#) { _ in "N" }
        return text
    }

    /// `(command, expected output lines)` of each `$ ` line of the ```console blocks in `text`.
    static func consoleSteps(in text: String) -> [[(command: String, output: [String])]] {
        var blocks: [[(command: String, output: [String])]] = []
        var current: [(command: String, output: [String])]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line == "```console" {
                current = []
            } else if line == "```", let block = current {
                blocks.append(block)
                current = nil
            } else if current != nil {
                if line.hasPrefix("$ ") {
                    current?.append((String(line.dropFirst(2)), []))
                } else if var steps = current, !steps.isEmpty {
                    steps[steps.count - 1].output.append(line)
                    current = steps
                }
            }
        }
        return blocks
    }

    /// Minutes in a command become tens of seconds (`3m` is 30 s): the examples then run in
    /// seconds, with room to spare between commands, and only time values change.
    static func scaled(_ command: String) -> String {
        command.replacing(#/\b(\d+)m\b/#) { "\(Int($0.1)! * 10)s" }
    }
}

extension Integration {
    @Suite("The docs' examples, run against the real binaries")
    struct DocsTests {
        @Test("README's console blocks print what the README shows, but for time values")
        func readmeConsole() throws {
            let readme = try String(contentsOfFile: "\(packageRoot)/README.md", encoding: .utf8)
            let blocks = DocExamples.consoleSteps(in: readme)
            try #require(blocks.count >= 2 && blocks.allSatisfy { !$0.isEmpty }, "the README has its console blocks")
            let daemon = try DaemonProcess()
            // notify-send stands for any command run after `cdctl wait`.
            let tools = daemon.directory.file("bin")
            try FileManager.default.createDirectory(atPath: tools, withIntermediateDirectories: true)
            try "#!/bin/sh\nexit 0\n".write(toFile: tools + "/notify-send", atomically: true, encoding: .utf8)
            chmod(tools + "/notify-send", 0o755)
            let environment = [
                "PATH": "\(TestBinaries.directory):\(tools):/usr/bin:/bin",
                "COUNTDOWND_SOCKET": daemon.socketPath,
                "NO_COLOR": "1",
            ]
            for block in blocks {
                for step in block {
                    let command = DocExamples.scaled(step.command)
                    // One stream, in the order a terminal shows it.
                    let result = try runCommand("/bin/bash", ["-c", "exec 2>&1\n" + command], environment: environment, timeout: 120)
                    let printed = result.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
                    let got = (printed.last == "" ? Array(printed.dropLast()) : printed).map { DocExamples.normalized($0) }
                    let shown = step.output.map { DocExamples.normalized($0) }
                    #expect(got == shown, "$ \(step.command)\nthe README shows:\n\(step.output.joined(separator: "\n"))\nit printed:\n\(result.stdout)\(result.stderr)")
                }
            }
        }

        @Test("ARCHITECTURE.md stays one page (at most 600 words), and every type, member and module it names in backticks is declared in the code: a renamed or removed one fails here, not in a newcomer's search")
        func architectureMapIsTrue() throws {
            let map = try String(contentsOfFile: "\(packageRoot)/docs/ARCHITECTURE.md", encoding: .utf8)
            let words = map.split(whereSeparator: \.isWhitespace).count
            #expect(words <= 600, "\(words) words")
            var code = try String(contentsOfFile: "\(packageRoot)/Package.swift", encoding: .utf8)
            let sources = try #require(FileManager.default.enumerator(atPath: "\(packageRoot)/Sources"))
            for case let path as String in sources where path.hasSuffix(".swift") {
                code += try String(contentsOfFile: "\(packageRoot)/Sources/\(path)", encoding: .utf8)
            }
            // Comments do not declare anything (a `case` or `let` in a sentence would pass).
            code = code.split(separator: "\n").map { line in line.firstRange(of: "//").map { String(line[..<$0.lowerBound]) } ?? String(line) }
                .joined(separator: "\n")
            // The system's names, and the protocol's words, are not the code's to declare.
            let foreign: Set<String> = ["CLOCK_BOOTTIME", "DispatchQueue", "OK"]
            let named = map.matches(of: #/`([A-Za-z][A-Za-z0-9_.]*)(\([^`]*\))?`/#).map { String($0.1) }
            try #require(named.count >= 40, "the map names the code")
            // Every name the code declares, and the targets Package.swift names, read once.
            var declared = Set(code.matches(of: #/(?:struct|class|enum|protocol|typealias|actor|func|var|let|case)\s+(\w+)/#).map { String($0.1) })
            declared.formUnion(code.matches(of: #/name:\s*"(\w+)"/#).map { String($0.1) })
            for name in Set(named).subtracting(foreign) {
                // `Daemon.Phase`: both the type and its member; `journal.note`: the member.
                let parts = name.split(separator: ".").map(String.init)
                let checked = parts.enumerated().filter { $0.offset == parts.count - 1 || $0.element.first?.isUppercase == true }.map(\.element)
                let declared = checked.allSatisfy(declared.contains)
                #expect(declared, "ARCHITECTURE.md names `\(name)`, which the code does not declare")
            }
        }

        @Test("PROTOCOL.md's example session is what the daemon answers, line by line, but for time values")
        func protocolSession() throws {
            let protocolText = try String(contentsOfFile: "\(packageRoot)/docs/PROTOCOL.md", encoding: .utf8)
            let section = try #require(protocolText.components(separatedBy: "## Example session").dropFirst().first)
            let lines = section.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
                .prefix { !$0.hasPrefix("## ") }
                .filter { $0.hasPrefix("-> ") || $0.hasPrefix("<- ") }
            try #require(lines.count > 10 && lines.first?.hasPrefix("<- HELLO") == true)
            let daemon = try DaemonProcess()
            let connection = try daemon.connect()
            // Ticks come at their second, replies at once: on a slow machine a tick may come
            // before a reply the docs show first. So ticks are matched in order among ticks, and
            // everything else in order among the rest.
            var unmatched: [String] = []
            func next(tick: Bool, for expected: String) throws -> String {
                while true {
                    if let index = unmatched.firstIndex(where: { $0.contains(" tick ") == tick }) {
                        return unmatched.remove(at: index)
                    }
                    let got = try #require(try connection.readLine(timeout: 60), "no line where the docs show: \(expected)")
                    unmatched.append(got)
                }
            }
            for line in lines.dropFirst() {
                let text = String(line.dropFirst(3))
                if line.hasPrefix("-> ") {
                    try connection.send(text + "\n")
                } else {
                    let got = try next(tick: text.contains(" tick "), for: line)
                    #expect(DocExamples.normalized(got) == DocExamples.normalized(text), "the docs show \(line)\nthe daemon sent <- \(got)")
                }
            }
            #expect(unmatched.isEmpty, "lines the docs do not show: \(unmatched)")
        }
    }
}
