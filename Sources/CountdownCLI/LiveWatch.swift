import CLinuxShims
import CountdownClient
import CountdownCore
import Glibc

/// `cdctl watch` on a terminal: one live line per countdown, redrawn in place ten times a second,
/// with the remaining time interpolated locally between the daemon's ticks.
///
/// A frame never has more lines than the terminal has rows, and no newline after its last line,
/// so it never scrolls: what does not fit is counted ("+3 more"), and the next frame starts
/// where this one did, whatever row of the terminal that is.
struct LiveWatch {
    /// What the display knows of one countdown.
    struct Row {
        var name: String
        var state: CountdownState
        /// Remaining milliseconds when the last event arrived.
        var remainingAtEvent: Int64
        var total: Int64
        /// When the last event arrived, in monotonic seconds.
        var eventTime: Double

        /// Remaining milliseconds at `now`, counting down locally while running.
        func remaining(at now: Double) -> Int64 {
            guard state == .running else { return remainingAtEvent }
            return max(0, remainingAtEvent - Int64((now - eventTime) * 1000))
        }
    }

    var connection: CountdownConnection
    let console: Console
    let names: [String]
    /// Connects and subscribes again after the daemon went away (a restart), or gives up with
    /// `nil`; the display then carries on from the new snapshots.
    var reconnect: () -> CountdownConnection? = { nil }

    /// How long a finished countdown stays on screen.
    static let finishedLinger = 3.0
    /// Redraws per second.
    static let framesPerSecond = 10.0

    /// Runs until Ctrl-C (which restores the terminal), or until the daemon is gone for good.
    mutating func run() throws(ClientError) -> ExitCode {
        installTerminalRestore()
        console.out("\u{1B}[?25l")  // Hide the cursor while drawing.
        defer { console.out("\u{1B}[?25h") }
        var rows: [String: Row] = [:]
        var finishedAt: [String: Double] = [:]
        var drawnLines = 0
        var nextFrame = 0.0
        while true {
            let now = monotonicSeconds()
            if now >= nextFrame {
                for (name, time) in finishedAt where now - time > Self.finishedLinger {
                    rows[name] = nil
                    finishedAt[name] = nil
                }
                drawnLines = draw(rows: rows, now: now, replacing: drawnLines)
                nextFrame = now + 1 / Self.framesPerSecond
            }
            if !connection.hasBufferedInput {
                var poller = pollfd(fd: connection.fileDescriptor, events: Int16(POLLIN), revents: 0)
                let waitMs = Int32(max(0, (nextFrame - monotonicSeconds()) * 1000))
                if poll(&poller, 1, waitMs) <= 0 { continue }
            }
            let next: EventInfo?
            do throws(ClientError) {
                next = try connection.nextEvent(timeout: 0.5)
            } catch .timedOut {
                continue
            }
            guard let event = next else {
                // A restart: the countdowns survive it; say so while reconnecting, then draw
                // again from the new snapshots.
                drawnLines = draw(rows: rows, now: monotonicSeconds(), replacing: drawnLines, status: "countdownd went away; reconnecting…")
                guard let fresh = reconnect() else {
                    console.out("\ncountdownd closed the connection and did not come back\n")
                    return .unavailable
                }
                connection = fresh
                rows = [:]  // The snapshots that follow are the state now.
                finishedAt = [:]
                nextFrame = 0
                continue
            }
            let arrived = monotonicSeconds()
            var row = rows[event.name] ?? Row(name: event.name, state: .running, remainingAtEvent: 0, total: 0, eventTime: arrived)
            row.remainingAtEvent = event.remainingMilliseconds
            row.total = event.totalMilliseconds
            row.eventTime = arrived
            switch event.kind {
            case .started, .tick, .resumed, .extended, .phase: row.state = .running
            case .changed: break  // A setting: its state and time are as they were.
            case .paused: row.state = .paused
            case .done: row.state = .done
            case .cancelled: row.state = .cancelled
            case .snapshot: row.state = event.state ?? .running
            case .removed:
                rows[event.name] = nil
                finishedAt[event.name] = nil
                continue
            }
            rows[event.name] = row
            if row.state.isActive {
                finishedAt[event.name] = nil
            } else {
                finishedAt[event.name] = arrived
            }
            nextFrame = 0  // Show every change at once.
        }
    }

    /// Draws all rows over the previous frame (with `status` as a last line, if given); returns
    /// how many lines were drawn.
    private func draw(rows: [String: Row], now: Double, replacing previous: Int, status: String? = nil) -> Int {
        let columns = Int(countdownd_terminal_columns(STDOUT_FILENO))
        let width = columns > 0 ? columns : 80
        let height = Int(countdownd_terminal_rows(STDOUT_FILENO))
        let lines = frameLines(rows: rows, now: now, width: width, height: height > 0 ? height : 24, status: status)
        // Back to the start of the previous frame (the cursor is on its last line), then each line
        // written over the old one, the rest of it erased. Never "erase the screen" from its
        // top-left corner: tmux (scroll-on-clear) moves the whole screen into the scrollback
        // for that, and a watch started on a pane's top row flooded it.
        var frame = "\r" + (previous > 1 ? "\u{1B}[\(previous - 1)A" : "")
        frame += lines.map { $0 + "\u{1B}[K" }.joined(separator: "\n")
        if lines.count < previous {
            frame += "\u{1B}[J"  // The old frame's last lines, below this one's last.
        }
        console.out(frame)
        return lines.count
    }

    /// The lines of one frame: at most `height` of them (the last one says how many rows did not
    /// fit), each cut to `width`.
    func frameLines(rows: [String: Row], now: Double, width: Int, height: Int, status: String? = nil) -> [String] {
        var lines: [String] = []
        if rows.isEmpty {
            lines.append(names.isEmpty ? "watching all countdowns; none running" : "waiting for \(names.joined(separator: ", "))")
        }
        let nameWidth = min(rows.keys.map(\.count).max() ?? 0, max(8, width / 3))
        let sorted = rows.values.sorted { NaturalOrder.precedes($0.name, $1.name) }
        let room = max(1, height - (status == nil ? 0 : 1))
        let shown = sorted.count <= room ? sorted.count : room - 1
        for row in sorted.prefix(shown) {
            lines.append(render(row, now: now, width: width, nameWidth: nameWidth))
        }
        if shown < sorted.count {
            lines.append(String("+\(sorted.count - shown) more (a taller terminal shows them; cdctl list shows all)".prefix(max(width - 1, 1))))
        }
        if let status {
            lines.append(String(status.prefix(max(width - 1, 1))))
        }
        return Array(lines.prefix(max(height, 1)))
    }

    /// `name  [#####-----]  0:01:23  running`, never wider than the terminal (no wrapping, so the
    /// cursor arithmetic of the next frame stays right after a resize).
    func render(_ row: Row, now: Double, width: Int, nameWidth: Int) -> String {
        let remaining = row.remaining(at: now)
        let clock = CountdownDuration.clock(milliseconds: remaining)
        let state = row.state.rawValue
        let name = row.name.count > nameWidth ? String(row.name.prefix(max(nameWidth - 1, 1))) + "~" : row.name.padded(to: nameWidth)
        let fixed = nameWidth + 2 + 2 + clock.count + 2 + 9
        let barWidth = min(40, width - 1 - fixed - 2)
        let bar = barWidth >= 3 ? Formatting.bar(remaining: remaining, total: row.total, width: barWidth, filled: "█", empty: "░") + "  " : ""
        var line = "\(name)  \(bar)\(clock)  \(colored(state, row.state))"
        let visible = nameWidth + 2 + (barWidth >= 3 ? barWidth + 4 : 0) + clock.count + 2 + state.count
        if visible > width - 1 {
            line = String("\(name)  \(clock)  \(state)".prefix(max(width - 1, 0)))
        }
        return line
    }

    private func colored(_ text: String, _ state: CountdownState) -> String {
        guard console.isTerminal, colorAllowed else { return text }
        let code: String
        switch state {
        case .running: code = "32"
        case .paused: code = "33"
        // Bold in the terminal's own colour: readable on dark and light backgrounds alike (blue
        // on black was not).
        case .done: code = "1"
        case .cancelled: code = "31"
        }
        return "\u{1B}[\(code)m\(text)\u{1B}[0m"
    }

    var colorAllowed = true

    /// Ctrl-C and SIGTERM show the cursor again and end the line before exiting.
    private func installTerminalRestore() {
        let restore: @convention(c) (Int32) -> Void = { signalNumber in
            let text: StaticString = "\u{1B}[?25h\u{1B}[0m\n"
            // Ignored on purpose: in a signal handler, just before _exit; nothing else can be done.
            _ = write(STDOUT_FILENO, text.utf8Start, text.utf8CodeUnitCount)
            _exit(128 + signalNumber)
        }
        signal(SIGINT, restore)
        signal(SIGTERM, restore)
        // A parent may have left these blocked (a thread pool's mask is inherited); unblock them
        // so Ctrl-C always reaches the handler.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        sigprocmask(SIG_UNBLOCK, &signals, nil)
    }
}
