import CountdownCore
import Foundation
import Glibc
import Testing

extension Integration {
    @Suite("cdctl for scripts and status bars: --format, --follow, --if-idle, --json, completion")
    struct CdctlOutputTests {
        @Test("--format renders one line per countdown, golden")
        func format() throws {
            let daemon = try DaemonProcess()
            let s = daemon.socketPath
            _ = try cdctl(["start", "tea", "3m"], socket: s)
            _ = try cdctl(["start", "pomodoro", "25m"], socket: s)
            _ = try cdctl(["pause", "pomodoro"], socket: s)
            let one = try cdctl(["status", "tea", "--format", "{name} {state} {total} [{percent}%]"], socket: s)
            #expect(one.status == 0 && one.stdout == "tea running 3:00 [100%]\n", "\(one.stdout)")
            let all = try cdctl(["list", "--format", "{name}:{state}"], socket: s)
            #expect(all.stdout == "pomodoro:paused\ntea:running\n")
            let bad = try cdctl(["list", "--format", "{eta}"], socket: s)
            #expect(bad.status == 2 && bad.stderr.contains("unknown placeholder '{eta}'"))
        }

        @Test("--json is golden: keys, types, one document")
        func json() throws {
            let daemon = try DaemonProcess()
            _ = try cdctl(["start", "tea", "3m"], socket: daemon.socketPath)
            _ = try cdctl(["pause", "tea"], socket: daemon.socketPath)
            let result = try cdctl(["status", "tea", "--json"], socket: daemon.socketPath)
            // Paused: no deadline; remaining is what was left at the pause, so normalise it.
            let normalised = result.stdout.replacingOccurrences(of: #""remaining_ms":\d+"#, with: #""remaining_ms":N"#, options: .regularExpression)
            #expect(normalised == #"{"name":"tea","owner_uid":\#(getuid()),"remaining_ms":N,"state":"paused","total_ms":180000}"# + "\n")
        }

        @Test("status --follow prints on every change: one line a second, then done")
        func follow() throws {
            let daemon = try DaemonProcess()
            _ = try cdctl(["start", "tea", "1h"], socket: daemon.socketPath)
            let directory = TemporaryDirectory()
            let outPath = directory.file("follow.out")
            let out = open(outPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            let follower = try ChildProcess(
                TestBinaries.cdctl, ["--socket", daemon.socketPath, "status", "tea", "--follow", "--format", "{name} {remaining_s} {state}"],
                environment: ProcessInfo.processInfo.environment, stdout: out
            )
            close(out)
            defer {
                follower.signal(SIGKILL)
                follower.wait()
            }
            func lines() -> [String] {
                ((try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            }
            // Following once its first line is out; only then is tea started anew, for 3 s: its
            // lines come whenever the follower started.
            try waitUntil(timeout: 30) { lines().first == "tea 3600 running" }
            _ = try cdctl(["start", "tea", "3s", "--replace"], socket: daemon.socketPath)
            try waitUntil(timeout: 30) { lines().last == "tea 0 done" }
            let shown = lines()
            let restart = try #require(shown.lastIndex(of: "tea 3 running"), "the new start is shown: \(shown)")
            #expect(Array(shown[restart...]) == ["tea 3 running", "tea 2 running", "tea 1 running", "tea 0 done"], "one line a second, then done: \(shown)")
        }

        @Test("status --follow --json: every line has the deadline and the owner, as status --json has them")
        func followJSON() throws {
            let daemon = try DaemonProcess()
            _ = try cdctl(["start", "tea", "1h"], socket: daemon.socketPath)
            let once = try #require(try JSONSerialization.jsonObject(with: Data(try cdctl(["status", "tea", "--json"], socket: daemon.socketPath).stdout.utf8)) as? [String: Any])
            let deadline = try #require(once["deadline_unix_ms"] as? Int64)
            let lines = try outputLines(of: TestBinaries.cdctl, ["--socket", daemon.socketPath, "status", "tea", "--follow", "--json"], timeout: 60) { $0.count >= 3 }
            try #require(lines.count >= 3, "\(lines)")
            var deadlines: Set<Int64> = []
            for line in lines.prefix(3) {
                let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
                #expect(object["owner_uid"] as? Int == Int(getuid()), "\(line)")
                deadlines.insert(try #require(object["deadline_unix_ms"] as? Int64, "\(line)"))
            }
            // The snapshot's deadline, kept through the ticks. (The daemon maps its clock to the
            // wall clock afresh for each reply: status --json's is the same to within that.)
            #expect(deadlines.count == 1 && abs((deadlines.first ?? 0) - deadline) < 60_000, "\(deadlines) against \(deadline)")
        }

        @Test("start --if-idle leaves a running countdown alone and succeeds")
        func ifIdle() throws {
            let daemon = try DaemonProcess()
            let first = try cdctl(["start", "build", "10m", "--if-idle"], socket: daemon.socketPath)
            #expect(first.status == 0 && first.stdout.hasPrefix("build: running, 0:10:00"))
            let second = try cdctl(["start", "build", "1m", "--if-idle"], socket: daemon.socketPath)
            #expect(second.status == 0 && second.stderr.isEmpty)
            #expect(second.stdout.hasSuffix("left of 0:10:00\n"), "the running one is untouched: \(second.stdout)")
            let plain = try cdctl(["start", "build", "1m"], socket: daemon.socketPath)
            #expect(plain.status == 4)
        }

        @Test("watch --json and the plain event lines are stable for scripts")
        func watchLines() throws {
            let daemon = try DaemonProcess()
            _ = try cdctl(["start", "a", "1h"], socket: daemon.socketPath)
            let plain = try firstLines(1, of: TestBinaries.cdctl, ["--socket", daemon.socketPath, "watch", "a"])
            let first = plain.first ?? ""
            #expect(first.wholeMatch(of: #/1 snapshot a \d+ 3600000 running/#) != nil, "\(plain)")
            let json = try firstLines(1, of: TestBinaries.cdctl, ["--socket", daemon.socketPath, "watch", "--json", "a"])
            let firstLine = json.first ?? ""
            let object = try #require(try JSONSerialization.jsonObject(with: Data(firstLine.utf8)) as? [String: Any])
            #expect(object["kind"] as? String == "snapshot")
            #expect(object["state"] as? String == "running")
            #expect((object["seq"] as? Int ?? 0) >= 1)
        }

        @Test(
            "bash completion offers commands, options and live countdown names, names with ':' included, and no name where a DURATION goes",
            .enabled(if: toolExists("/bin/bash"), "bash is not installed")
        )
        func bashCompletion() throws {
            let daemon = try DaemonProcess()
            _ = try cdctl(["start", "pomodoro", "25m"], socket: daemon.socketPath)
            _ = try cdctl(["start", "tea", "3m"], socket: daemon.socketPath)
            _ = try cdctl(["start", "otp:+4915112345678", "1m"], socket: daemon.socketPath)
            /// Completes `line` as bash does: COMP_LINE and COMP_POINT, and COMP_WORDS split at
            /// blanks and at the characters of COMP_WORDBREAKS (':' among them).
            func complete(_ line: String, withLine: Bool = true) throws -> String {
                var words: [String] = []
                var current = ""
                for character in line {
                    if character == " " {
                        if !current.isEmpty { words.append(current) }
                        current = ""
                    } else if character == ":" {
                        if !current.isEmpty { words.append(current) }
                        words.append(":")
                        current = ""
                    } else {
                        current.append(character)
                    }
                }
                words.append(current)
                let quoted = words.map { "'\($0)'" }.joined(separator: " ")
                let script = """
                    source '\(packageRoot)/completions/cdctl.bash'
                    PATH='\(TestBinaries.directory)':$PATH
                    export COUNTDOWND_SOCKET='\(daemon.socketPath)'
                    \(withLine ? "COMP_LINE='\(line)'; COMP_POINT=${#COMP_LINE}" : "unset COMP_LINE COMP_POINT")
                    COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1)
                    _cdctl
                    printf '%s\\n' "${COMPREPLY[@]}" | sort
                    """
                return try runCommand("/bin/bash", ["-c", script]).stdout
            }
            #expect(try complete("cdctl st") == "start\nstats\nstatus\n")
            #expect(try complete("cdctl cancel ") == "otp:+4915112345678\npomodoro\ntea\n")
            #expect(try complete("cdctl --socket \(daemon.socketPath) cancel p") == "pomodoro\n")
            #expect(try complete("cdctl status --f") == "--follow\n--format\n")
            // After "otp:" bash replaces only what follows the colon.
            #expect(try complete("cdctl cancel otp:") == "+4915112345678\n")
            #expect(try complete("cdctl wait tea otp:+49") == "+4915112345678\n")
            // start NAME DURATION: durations, not names, in the second place.
            #expect(try complete("cdctl start tea ") == "10m\n1h\n1m\n25m\n30s\n5m\n")
            #expect(try complete("cdctl cancel tea ") == "\n", "cancel takes one name")
            #expect(try complete("cdctl start tea --").contains("--at\n") && complete("cdctl start tea --").contains("--then\n"))
            #expect(try complete("cdctl start tea --p") == "--pause-on-suspend\n--pomodoro\n")
            #expect(try complete("cdctl start focus --cycle ") == "25m:work,5m:break\n50m:work,10m:break\n52m:work,17m:break\n")
            #expect(try complete("cdctl start focus --pomodoro --repeat ") == "2\n4\nforever\n")
            #expect(try complete("cdctl sk") == "skip\n")
            #expect(try complete("cdctl start standup --at ") == "09:30\n17:00\nnow+1h\nnow+25min\n", "whole one-word times")
            // From COMP_WORDS alone (a wrapper that sets no COMP_LINE): the same answers.
            #expect(try complete("cdctl st", withLine: false) == "start\nstats\nstatus\n")
            #expect(try complete("cdctl cancel otp:", withLine: false) == "+4915112345678\n")
            #expect(try complete("cdctl cancel ", withLine: false) == "otp:+4915112345678\npomodoro\ntea\n")
        }

        @Test(
            "fish completion offers live names, names with ':' included, and no name where a DURATION goes",
            .enabled(if: toolExists("/usr/bin/fish"), "fish is not installed, so cdctl.fish cannot be checked here")
        )
        func fishNameCompletion() throws {
            let daemon = try DaemonProcess()
            _ = try cdctl(["start", "otp:+4915112345678", "1m"], socket: daemon.socketPath)
            _ = try cdctl(["start", "tea", "3m"], socket: daemon.socketPath)
            func complete(_ line: String) throws -> String {
                let script = "set -gx PATH '\(TestBinaries.directory)' $PATH; set -gx COUNTDOWND_SOCKET '\(daemon.socketPath)'; "
                    + "source '\(packageRoot)/completions/cdctl.fish'; complete -C '\(line)'"
                let output = try runCommand("/usr/bin/fish", ["--no-config", "-c", script]).stdout
                return output.split(separator: "\n").map { String($0.split(separator: "\t").first ?? "") }.sorted().joined(separator: "\n")
            }
            #expect(try complete("cdctl cancel otp:") == "otp:+4915112345678")
            #expect(try complete("cdctl wait tea ") == "otp:+4915112345678\ntea")
            #expect(try !complete("cdctl start tea ").contains("otp:"), "no names where the DURATION goes")
            let options = try complete("cdctl start tea --")
            #expect(options.contains("--at") && options.contains("--then") && options.contains("--pause-on-suspend"), "\(options)")
            // --socket on the line: names from that daemon, not from $COUNTDOWND_SOCKET's.
            let other = try DaemonProcess()
            _ = try cdctl(["start", "elsewhere", "1h"], socket: other.socketPath)
            #expect(try complete("cdctl --socket \(other.socketPath) cancel ") == "elsewhere")
        }

        @Test(
            "the man pages render without warnings and the bash completion parses",
            .enabled(if: toolExists("/usr/bin/groff"), "groff is not installed, so the man pages cannot be checked")
        )
        func manPagesAndCompletions() throws {
            for page in ["cdctl.1", "countdownd.8"] {
                let result = try runCommand("/usr/bin/groff", ["-man", "-Tutf8", "-ww", "-z", "\(packageRoot)/docs/man/\(page)"])
                #expect(result.status == 0 && result.stderr.isEmpty, "\(page): \(result.stderr)")
            }
            // Each command's tag renders on one line, its description below it.
            let text = try runCommand("/usr/bin/groff", ["-man", "-Tascii", "-P", "-cbou", "\(packageRoot)/docs/man/cdctl.1"]).stdout
            let lines = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            for tag in ["status [NAME] [--json | --format TEMPLATE] [--follow]", "list [--json | --format TEMPLATE] [--state STATE] [--prefix PREFIX]", "watch [NAME...] [--json] [--since SEQ] [--events KINDS]", "stats [--json | --prometheus]", "help [COMMAND]"] {
                #expect(lines.contains(tag), "cdctl.1 does not render '\(tag)' on a line of its own")
            }
            let syntax = try runCommand("/bin/bash", ["-n", "\(packageRoot)/completions/cdctl.bash"])
            #expect(syntax.status == 0, "\(syntax.stderr)")
        }

        @Test(
            "mandoc -Tlint finds nothing to warn about in either man page",
            .enabled(if: toolExists("/usr/bin/mandoc"), "mandoc is not installed; make test installs it as root")
        )
        func manPagesLint() throws {
            for page in ["cdctl.1", "countdownd.8"] {
                let result = try runCommand("/usr/bin/mandoc", ["-Tlint", "-W", "warning", "\(packageRoot)/docs/man/\(page)"])
                #expect(result.status == 0 && result.stdout.isEmpty && result.stderr.isEmpty, "\(page): \(result.stdout)\(result.stderr)")
            }
        }

        @Test(
            "zsh completion, typed in a real zsh on a terminal (tmux): a name with ':' completes whole",
            .enabled(if: toolExists("/usr/bin/zsh") && toolExists("/usr/bin/tmux"), "zsh or tmux is not installed")
        )
        func zshNameCompletion() throws {
            let daemon = try DaemonProcess()
            _ = try cdctl(["start", "otp:+4915112345678", "1h"], socket: daemon.socketPath)
            let tmux = Tmux(socket: daemon.directory.file("tmux.sock"))
            // zsh reads .zshrc from ZDOTDIR.
            try """
                fpath=('\(packageRoot)/completions' $fpath)
                autoload -Uz compinit && compinit -u
                PATH='\(TestBinaries.directory)':$PATH
                export COUNTDOWND_SOCKET='\(daemon.socketPath)'
                PROMPT='%% '
                """.write(toFile: daemon.directory.file(".zshrc"), atomically: true, encoding: .utf8)
            try tmux.run(["new-session", "-d", "-s", tmux.session, "-x", "120", "-y", "10", "env", "ZDOTDIR=\(daemon.directory.path)", "TERM=xterm-256color", "/usr/bin/zsh", "-i"])
            defer { _ = try? tmux.run(["kill-server"]) }
            // The prompt (capture-pane drops its trailing blank).
            _ = try tmux.waitForScreen(timeout: 10) { $0.split(separator: "\n").contains { $0.hasPrefix("%") } }
            // Type, see it echoed (the line editor is ready), then ask for completion.
            try tmux.run(["send-keys", "-t", tmux.session, "cdctl cancel otp:"])
            _ = try tmux.waitForScreen(timeout: 10) { $0.contains("cdctl cancel otp:") }
            try tmux.run(["send-keys", "-t", tmux.session, "Tab"])
            let screen = try tmux.waitForScreen(timeout: 10) { $0.contains("otp:+4915112345678") }
            #expect(screen.contains("cdctl cancel otp:+4915112345678"), "\(screen)")
        }

        @Test(
            "the zsh completion parses",
            .enabled(if: toolExists("/usr/bin/zsh"), "zsh is not installed, so _cdctl cannot be checked here")
        )
        func zshCompletion() throws {
            let result = try runCommand("/usr/bin/zsh", ["-n", "\(packageRoot)/completions/_cdctl"])
            #expect(result.status == 0, "\(result.stderr)")
        }

        @Test(
            "the fish completion parses",
            .enabled(if: toolExists("/usr/bin/fish"), "fish is not installed, so cdctl.fish cannot be checked here")
        )
        func fishCompletion() throws {
            let result = try runCommand("/usr/bin/fish", ["--no-execute", "\(packageRoot)/completions/cdctl.fish"])
            #expect(result.status == 0, "\(result.stderr)")
        }

        @Test("countdownd --help and countdownd(8) document the same options")
        func daemonHelpMatchesManPage() throws {
            let help = try runCommand(TestBinaries.countdownd, ["--help"]).stdout
            let manual = try String(contentsOfFile: "\(packageRoot)/docs/man/countdownd.8", encoding: .utf8)
            let options = help.matches(of: #/--[a-z][a-z-]+/#).map { String($0.output) }
            #expect(options.count >= 10)
            for option in Set(options) {
                #expect(manual.contains(option.replacingOccurrences(of: "-", with: "\\-")), "countdownd(8) lacks \(option)")
            }
        }

        @Test("--help lists every command and exit code the man page documents")
        func helpMatchesManPage() throws {
            let help = try runCommand(TestBinaries.cdctl, ["--help"]).stdout
            let manual = try String(contentsOfFile: "\(packageRoot)/docs/man/cdctl.1", encoding: .utf8)
            for command in ["start", "status", "list", "cancel", "pause", "resume", "extend", "watch", "wait"] {
                #expect(help.contains("  \(command) "), "--help lacks \(command)")
                #expect(manual.contains(command), "the man page lacks \(command)")
            }
            for option in ["--socket", "--json", "--format", "--follow", "--if-idle", "--replace", "--wait", "--no-color", "--verbose"] {
                #expect(help.contains(option), "--help lacks \(option)")
                #expect(manual.contains(option.replacingOccurrences(of: "-", with: "\\-")), "the man page lacks \(option)")
            }
            for code in 0...6 {
                #expect(help.contains("  \(code)  "), "--help lacks exit code \(code)")
                #expect(manual.contains(".B \(code)\n"), "the man page lacks exit code \(code)")
            }
        }
    }
}
