import CountdownCore

/// A `--format` template for status bars: text with `{placeholder}`s, `{{` and `}}` for braces.
///
///     cdctl status tea --follow --format '{name} {remaining} {bar}'
public struct OutputTemplate: Equatable, Sendable {
    /// The placeholders, with what they stand for (shown in `--help` and the man page).
    public enum Field: String, CaseIterable, Sendable {
        /// The countdown's name.
        case name
        /// `running`, `paused`, `done` or `cancelled`.
        case state
        /// Time left, compact: `2:41`, `1:02:41`.
        case remaining
        /// Whole seconds left, rounded up: `161`.
        case remainingSeconds = "remaining_s"
        /// The total duration, compact like `remaining`.
        case total
        /// Percent of the time elapsed, 0–100: a bar that fills up.
        case progress
        /// Percent of the time left, 0–100: a bar that empties.
        case percent
        /// A 10-cell bar of the time left: `█████░░░░░`.
        case bar
        /// What it does while the machine sleeps: `pause` or `count`.
        case onSuspend = "on_suspend"
        /// A cycle's running phase, from 1 (empty for a plain countdown).
        case phase
        /// How many phases a cycle's round has (empty for a plain countdown).
        case phases
        /// The running phase's label (empty without one).
        case label
        /// A repeating cycle's round, from 1 (empty otherwise).
        case round
    }

    enum Part: Equatable, Sendable {
        case literal(String)
        case field(Field)
    }

    let parts: [Part]

    /// Parses a template.
    /// - Throws: `UsageError` for an unknown placeholder or an unclosed brace, listing the valid ones.
    public init(parsing text: String) throws(UsageError) {
        var parts: [Part] = []
        var literal = ""
        var index = text.startIndex
        let known = Field.allCases.map { "{\($0.rawValue)}" }.joined(separator: " ")
        while index < text.endIndex {
            let character = text[index]
            let next = text.index(after: index)
            if character == "{" && next < text.endIndex && text[next] == "{" {
                literal.append("{")
                index = text.index(after: next)
            } else if character == "}" && next < text.endIndex && text[next] == "}" {
                literal.append("}")
                index = text.index(after: next)
            } else if character == "{" {
                guard let close = text[next...].firstIndex(of: "}") else {
                    throw UsageError("--format: '{' at offset \(text.distance(from: text.startIndex, to: index)) is not closed; write '{{' for a brace")
                }
                let name = String(text[next..<close])
                guard let field = Field(rawValue: name) else {
                    throw UsageError("--format: unknown placeholder '{\(name)}'; known: \(known)")
                }
                if !literal.isEmpty {
                    parts.append(.literal(literal))
                    literal = ""
                }
                parts.append(.field(field))
                index = text.index(after: close)
            } else {
                literal.append(character)
                index = next
            }
        }
        if !literal.isEmpty {
            parts.append(.literal(literal))
        }
        self.parts = parts
    }

    /// The template filled in for one countdown.
    public func render(_ countdown: CountdownInfo) -> String {
        var out = ""
        for part in parts {
            switch part {
            case .literal(let text):
                out += text
            case .field(let field):
                out += value(of: field, for: countdown)
            }
        }
        return out
    }

    private func value(of field: Field, for countdown: CountdownInfo) -> String {
        let remaining = countdown.remainingMilliseconds
        let total = countdown.totalMilliseconds
        switch field {
        case .name: return countdown.name
        case .state: return countdown.state.rawValue
        case .remaining: return Formatting.compactClock(milliseconds: remaining)
        case .remainingSeconds: return "\(remaining <= 0 ? 0 : (remaining + 999) / 1000)"
        case .total: return Formatting.compactClock(milliseconds: total)
        case .progress: return "\(100 - Formatting.percentLeft(remaining: remaining, total: total))"
        case .percent: return "\(Formatting.percentLeft(remaining: remaining, total: total))"
        case .bar:
            let bar = Formatting.bar(remaining: remaining, total: total, width: 10, filled: "█", empty: "░")
            return String(bar.dropFirst().dropLast())
        case .onSuspend: return countdown.pausesOnSuspend == true ? SuspendPolicy.pause.rawValue : SuspendPolicy.count.rawValue
        case .phase: return countdown.cycle.map { "\($0.phase)" } ?? ""
        case .phases: return countdown.cycle.map { "\($0.phases)" } ?? ""
        case .label: return countdown.cycle?.label ?? ""
        case .round: return countdown.cycle?.round.map { "\($0)" } ?? ""
        }
    }
}
