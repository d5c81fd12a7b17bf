import Foundation
import Glibc
import Testing

/// A private tmux server (its own socket), so the test never touches a user's sessions.
struct Tmux {
    let socket: String
    let session = "watch"

    @discardableResult
    func run(_ arguments: [String]) throws -> CommandResult {
        try runCommand("/usr/bin/tmux", ["-S", socket] + arguments, timeout: 10)
    }

    func screen() throws -> String {
        try run(["capture-pane", "-p", "-t", session]).stdout
    }

    func value(_ format: String) throws -> String {
        try run(["display-message", "-p", "-t", session, format]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Polls the screen until `condition` holds (a pseudo-terminal has no events to wait on).
    func waitForScreen(timeout: Double, _ condition: (String) -> Bool) throws -> String {
        let deadline = monotonicNow() + timeout
        while true {
            let text = try screen()
            if condition(text) { return text }
            guard monotonicNow() < deadline else {
                throw HarnessError.unexpected("the screen never matched; last screen:\n\(text)")
            }
            usleep(50_000)
        }
    }
}

extension Integration {
    @Suite("cdctl watch on a real pseudo-terminal (tmux)")
    struct WatchTerminalTests {
        @Test(
            "more countdowns than rows: what fits, '+N more', and never a line into the scrollback; during a restart it says it is reconnecting",
            .enabled(if: toolExists("/usr/bin/tmux"), "tmux is not installed")
        )
        func moreRowsThanTerminal() throws {
            var daemon = try DaemonProcess()
            for index in 1...16 { _ = try cdctl(["start", "c\(index)", "1h"], socket: daemon.socketPath) }
            let tmux = Tmux(socket: daemon.directory.file("tmux.sock"))
            // On the pane's top row, in 8 rows.
            try tmux.run([
                "new-session", "-d", "-s", tmux.session, "-x", "80", "-y", "8",
                "env", "TERM=xterm-256color", TestBinaries.cdctl, "--socket", daemon.socketPath, "watch",
            ])
            defer { _ = try? tmux.run(["kill-server"]) }
            let first = try tmux.waitForScreen(timeout: 30) { $0.contains("+9 more") }
            let lines = first.split(separator: "\n", omittingEmptySubsequences: false)
            #expect(lines.first?.hasPrefix("c1 ") == true && lines[6].hasPrefix("c7 ") && lines[7].hasPrefix("+9 more"), "\(first)")
            // Frames go on (a clock changes), and none of them scrolled anything out.
            let firstClock = lines.first.map(String.init) ?? ""
            _ = try tmux.waitForScreen(timeout: 30) { $0.split(separator: "\n").first.map(String.init) != firstClock }
            #expect(try tmux.value("#{history_size}") == "0", "redraws went into the scrollback")
            // The daemon goes away: the display says so, then carries on from the new daemon.
            #expect(daemon.terminate() == 0)
            _ = try tmux.waitForScreen(timeout: 30) { $0.contains("reconnecting") }
            daemon = try DaemonProcess(directory: daemon.directory)
            let back = try tmux.waitForScreen(timeout: 60) { $0.contains("+9 more") && !$0.contains("reconnecting") }
            #expect(back.hasPrefix("c1 "))
            #expect(try tmux.value("#{history_size}") == "0")
        }

        @Test(
            "the bar shrinks, follows a resize, the countdown finishes on screen, and Ctrl-C leaves the terminal clean",
            .enabled(if: toolExists("/usr/bin/tmux"), "tmux is not installed")
        )
        func liveDisplay() throws {
            let daemon = try DaemonProcess()
            let tmux = Tmux(socket: daemon.directory.file("tmux.sock"))
            // A shell that ignores SIGINT stays alive after Ctrl-C, so the terminal's state after
            // cdctl has gone can be inspected (tmux reports no cursor for a dead pane). cdctl sets
            // its own SIGINT handler, which replaces the inherited "ignore".
            let script = "trap '' INT; '\(TestBinaries.cdctl)' --socket '\(daemon.socketPath)' watch; echo \"watch exited $?\"; exec sleep 60"
            try tmux.run([
                "new-session", "-d", "-s", tmux.session, "-x", "80", "-y", "10",
                "env", "TERM=xterm-256color", "/bin/sh", "-c", script,
            ])
            defer { _ = try? tmux.run(["kill-server"]) }
            _ = try tmux.waitForScreen(timeout: 30) { $0.contains("none running") }
            #expect(try tmux.value("#{cursor_flag}") == "0", "the cursor is hidden while drawing")

            // A minute: long enough for the bar and resize checks whatever the machine's pace;
            // then it is restarted for a second, to be seen finishing.
            _ = try cdctl(["start", "tea", "60s"], socket: daemon.socketPath)
            func filledCells(_ screen: String) -> Int {
                screen.split(separator: "\n").first { $0.hasPrefix("tea") }.map { $0.filter { $0 == "█" }.count } ?? -1
            }
            let early = try tmux.waitForScreen(timeout: 30) { filledCells($0) > 0 }
            let later = try tmux.waitForScreen(timeout: 30) { filledCells($0) > 0 && filledCells($0) < filledCells(early) }
            #expect(filledCells(later) < filledCells(early), "the bar shrinks: \(filledCells(early)) then \(filledCells(later))")
            #expect(later.contains("running"))
            // A narrower terminal: the next frames fit it, without wrapping.
            try tmux.run(["resize-window", "-t", tmux.session, "-x", "44", "-y", "10"])
            let narrow = try tmux.waitForScreen(timeout: 30) { screen in
                screen.split(separator: "\n").first { $0.hasPrefix("tea") }.map { $0.count <= 43 && $0.contains("█") } ?? false
            }
            #expect(narrow.split(separator: "\n").allSatisfy { $0.count <= 44 })
            _ = try cdctl(["start", "tea", "1s", "--replace"], socket: daemon.socketPath)
            let finished = try tmux.waitForScreen(timeout: 30) { $0.contains("tea") && $0.contains("done") }
            #expect(finished.contains("0:00:00"))

            try tmux.run(["send-keys", "-t", tmux.session, "C-c"])
            let after = try tmux.waitForScreen(timeout: 30) { $0.contains("watch exited") }
            #expect(after.contains("watch exited 130"), "Ctrl-C ends watch with 128 + SIGINT")
            #expect(try tmux.value("#{cursor_flag}") == "1", "the cursor is visible again")
            #expect(try tmux.value("#{pane_dead}") == "0")
        }

        @Test(
            "the live display rides through a daemon restart and redraws from the new snapshots",
            .enabled(if: toolExists("/usr/bin/tmux"), "tmux is not installed")
        )
        func liveDisplayAcrossRestart() throws {
            let daemon = try DaemonProcess()
            _ = try cdctl(["start", "bread", "1h"], socket: daemon.socketPath)
            let tmux = Tmux(socket: daemon.directory.file("tmux.sock"))
            let script = "'\(TestBinaries.cdctl)' --socket '\(daemon.socketPath)' watch; echo \"watch exited $?\"; exec sleep 60"
            try tmux.run(["new-session", "-d", "-s", tmux.session, "-x", "80", "-y", "10", "env", "TERM=xterm-256color", "/bin/sh", "-c", script])
            defer { _ = try? tmux.run(["kill-server"]) }
            _ = try tmux.waitForScreen(timeout: 10) { $0.contains("bread") && $0.contains("running") }
            #expect(daemon.terminate() == 0)
            let second = try DaemonProcess(directory: daemon.directory)
            _ = try cdctl(["pause", "bread"], socket: second.socketPath)
            let screen = try tmux.waitForScreen(timeout: 15) { $0.contains("bread") && $0.contains("paused") }
            #expect(!screen.contains("watch exited"), "it kept watching")
            #expect(!screen.contains("reconnecting"), "nothing printed over the display")
        }
    }
}
