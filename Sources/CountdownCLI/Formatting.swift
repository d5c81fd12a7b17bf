import CountdownCore

/// How `cdctl` renders countdowns for people and for programs.
public enum Formatting {
    /// A progress bar that empties as time runs out: `[#######---]` at 70 % left.
    /// - Parameters:
    ///   - remaining: milliseconds left.
    ///   - total: the total, in milliseconds.
    ///   - width: cells between the brackets; 0 or less gives an empty string.
    public static func bar(remaining: Int64, total: Int64, width: Int, filled: Character = "#", empty: Character = "-") -> String {
        guard width > 0 else { return "" }
        let cells = filledCells(remaining: remaining, total: total, width: width)
        return "[" + String(repeating: filled, count: cells) + String(repeating: empty, count: width - cells) + "]"
    }

    /// How many of `width` cells are filled for `remaining` of `total`, rounding up so that any time
    /// left shows at least one cell and only a finished countdown shows none.
    public static func filledCells(remaining: Int64, total: Int64, width: Int) -> Int {
        guard width > 0, total > 0, remaining > 0 else { return 0 }
        let clamped = min(remaining, total)
        // 128-bit-safe: width is small, clamped <= 366 days in ms (< 2^35).
        return Int((Int64(width) * clamped + total - 1) / total)
    }

    /// Whole percent of time left, 0–100, rounded up like the bar.
    public static func percentLeft(remaining: Int64, total: Int64) -> Int {
        filledCells(remaining: remaining, total: total, width: 100)
    }

    /// A clock without leading zero hours, for status bars: `0:05`, `2:41`, `1:02:41`.
    public static func compactClock(milliseconds: Int64) -> String {
        let full = CountdownDuration.clock(milliseconds: milliseconds)
        return full.hasPrefix("0:") ? String(full.dropFirst(2)).replacingFirstZero() : full
    }

    /// `running`, with what else matters in brackets: a cycle's phase (`running (break 2/8)`),
    /// and whether it stands still while the machine sleeps.
    static func stateCell(_ countdown: CountdownInfo) -> String {
        var notes: [String] = []
        if let cycle = countdown.cycle {
            notes.append((cycle.label.map { "\($0) " } ?? "phase ") + "\(cycle.phase)/\(cycle.phases)")
        }
        if countdown.pausesOnSuspend == true && countdown.state.isActive {
            notes.append("pauses on suspend")
        }
        return countdown.state.rawValue + (notes.isEmpty ? "" : " (" + notes.joined(separator: ", ") + ")")
    }

    /// An aligned table of countdowns, with a header, for `status` and `list`. The last column is
    /// the time left, as the same bar `watch` draws and the same percent as `{percent}`.
    public static func table(_ countdowns: [CountdownInfo]) -> String {
        let header = ["NAME", "STATE", "REMAINING", "TOTAL", "LEFT"]
        var rows = [header]
        for countdown in countdowns {
            rows.append([
                countdown.name,
                stateCell(countdown),
                CountdownDuration.clock(milliseconds: countdown.remainingMilliseconds),
                CountdownDuration.clock(milliseconds: countdown.totalMilliseconds),
                bar(remaining: countdown.remainingMilliseconds, total: countdown.totalMilliseconds, width: 20, filled: "█", empty: "░")
                    + " \(percentLeft(remaining: countdown.remainingMilliseconds, total: countdown.totalMilliseconds))%",
            ])
        }
        var widths = [Int](repeating: 0, count: header.count)
        for row in rows {
            for (column, cell) in row.enumerated() {
                widths[column] = max(widths[column], cell.count)
            }
        }
        return rows.map { row in
            row.enumerated().map { column, cell in
                column == row.count - 1 ? cell : cell.padded(to: widths[column])
            }.joined(separator: "  ")
        }.joined(separator: "\n") + "\n"
    }

    /// One JSON document: an object for one countdown, an array for several.
    public static func json<Value: Encodable>(_ value: Value) -> String {
        JSONOutput.encode(value) + "\n"
    }

    /// One event as a stable, space-separated line for `while read` loops:
    /// `<seq> <kind> <name> <remaining_ms> <total_ms>`, plus `<state>` for a snapshot,
    /// `suspend` for a `paused` or `resumed` that the machine's sleep caused, and `late <ms>` for
    /// a `done` or `phase` announced late (the daemon was down, or the machine asleep, when it
    /// was due).
    public static func eventLine(_ event: EventInfo) -> String {
        var line = "\(event.sequence) \(event.kind.rawValue) \(event.name) \(event.remainingMilliseconds) \(event.totalMilliseconds)"
        if event.kind == .snapshot, let state = event.state {
            line += " \(state.rawValue)"
        } else if event.causedBySuspend == true {
            line += " suspend"
        } else if event.kind == .done || event.kind == .phase, let late = event.lateMilliseconds {
            line += " late \(late)"
        }
        return line + "\n"
    }
}

extension String {
    /// The text followed by spaces up to `width` characters (unchanged when it is as long).
    func padded(to width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }

    /// `05:00` -> `5:00`; `00:05` -> `0:05`.
    func replacingFirstZero() -> String {
        hasPrefix("0") && count > 4 ? String(dropFirst()) : self
    }
}
