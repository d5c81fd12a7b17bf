/// Parsing and rendering of countdown durations.
///
/// Accepted forms: a bare number means seconds (`90`); otherwise one or more `<number><unit>`
/// with units `ms`, `s`, `m`, `h`, `d`, `w` and systemd.time(7)'s spellings of them (`msec`,
/// `sec`, `min`, `hr`, `hours`, `days`, `weeks`, …): `90s`, `1m30s`, `1500ms`, `5min`,
/// `1h30min`. A number may have a decimal fraction, as in systemd (`1.5h`, `.5min`): the whole
/// is floored once, to the millisecond. The result must be more than zero and at most 366 days.
public enum CountdownDuration {
    /// The longest duration accepted, 366 days, in milliseconds.
    public static let maximumMilliseconds: Int64 = 366 * 86_400_000

    /// The default duration of `START` without one: 60 seconds, like a "resend code" button.
    public static let defaultMilliseconds: Int64 = 60_000

    /// The accepted forms, for error messages and `--help`.
    public static let acceptedForms =
        "a number of seconds (90) or <number><unit> parts with units ms, s, m, h, d, w or their systemd spellings (90s, 1m30s, 1500ms, 5min, 1h30min, 1.5h, 2days), more than 0 and at most 366d"

    /// Parses a duration.
    /// - Returns: the duration in milliseconds.
    /// - Throws: `ProtocolError` with code `bad-duration`, naming the problem and the accepted forms.
    public static func parse<Bytes: Collection<UInt8>>(bytes: Bytes) throws(ProtocolError) -> Int64 {
        guard let milliseconds = milliseconds(parsing: bytes) else {
            throw ProtocolError(
                .badDuration,
                "'\(ProtocolText.sanitized(bytes))' is not a duration; use \(acceptedForms)"
            )
        }
        if milliseconds == 0 {
            if bytes.contains(where: { $0 >= UInt8(ascii: "1") && $0 <= UInt8(ascii: "9") }) {
                throw ProtocolError(.badDuration, "'\(ProtocolText.sanitized(bytes))' is less than a millisecond; a countdown lasts at least 1ms")
            }
            throw ProtocolError(.badDuration, "duration must be more than zero; use \(acceptedForms)")
        }
        if milliseconds > maximumMilliseconds {
            throw ProtocolError(.badDuration, "duration is longer than 366 days; use \(acceptedForms)")
        }
        return milliseconds
    }

    /// Parses a duration given as a string.
    /// - Throws: `ProtocolError` with code `bad-duration`.
    public static func parse(_ text: String) throws(ProtocolError) -> Int64 {
        try parse(bytes: Array(text.utf8))
    }

    /// The duration in milliseconds, or `nil` when the text is malformed or overflows.
    ///
    /// Zero is returned as zero; range checks are `parse`'s job. Anything that would exceed the
    /// maximum is clamped to just above it, so that huge numbers are "too long", never a crash.
    static func milliseconds<Bytes: Collection<UInt8>>(parsing bytes: Bytes) -> Int64? {
        if bytes.isEmpty {
            return nil
        }
        let tooLong = maximumMilliseconds + 1
        let fractionOne: Int64 = 1_000_000_000_000_000_000  // Fractions are kept to 18 digits.
        var total: Int64 = 0
        // The parts' fractions of a millisecond, in units of 10^-18 ms, carried into `total`: the
        // sum is floored once, so `0.5s0.5ms` is 500 ms, and a week's fraction loses nothing.
        var below: Int64 = 0
        var index = bytes.startIndex
        var sawUnit = false
        while index != bytes.endIndex {
            // Digits.
            var value: Int64 = 0
            var digits = 0
            while index != bytes.endIndex, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                value = min(value * 10 + Int64(bytes[index] - UInt8(ascii: "0")), tooLong)
                digits += 1
                index = bytes.index(after: index)
            }
            // A fraction: `.` and at least one digit (`1.5h`, `.5s`, as systemd.time takes them);
            // digits past the 18th are read and dropped.
            var fraction: Int64 = 0
            var fractionDigits = 0
            if index != bytes.endIndex, bytes[index] == UInt8(ascii: ".") {
                index = bytes.index(after: index)
                while index != bytes.endIndex, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                    if fractionDigits < 18 {
                        fraction = fraction * 10 + Int64(bytes[index] - UInt8(ascii: "0"))
                        fractionDigits += 1
                    }
                    index = bytes.index(after: index)
                }
                if fractionDigits == 0 {
                    return nil
                }
            }
            if digits == 0 && fractionDigits == 0 {
                return nil
            }
            for _ in fractionDigits..<18 { fraction *= 10 }  // Now in units of 10^-18.
            // Unit.
            let unitStart = index
            while index != bytes.endIndex, bytes[index] >= UInt8(ascii: "a"), bytes[index] <= UInt8(ascii: "z") {
                index = bytes.index(after: index)
            }
            let unit = bytes[unitStart..<index]
            let scale: Int64
            if unit.isEmpty {
                // A bare number is seconds, but only as the whole text: "1m30" is malformed.
                guard !sawUnit, index == bytes.endIndex else { return nil }
                scale = 1000
            } else if let known = units.first(where: { unit.elementsEqual(UnsafeBufferPointer(start: $0.name.utf8Start, count: $0.name.utf8CodeUnitCount)) }) {
                scale = known.milliseconds
            } else {
                return nil
            }
            sawUnit = true
            // value <= tooLong, but a week's scale times that passes Int64.max: clamp, never trap.
            let (product, overflow) = value.multipliedReportingOverflow(by: scale)
            // fraction × scale in 128 bits: whole milliseconds, and what is left below one.
            let wide = fraction.multipliedFullWidth(by: scale)
            let (wholeOfFraction, rest) = fractionOne.dividingFullWidth((high: wide.high, low: wide.low))
            below += rest
            var carried: Int64 = 0
            if below >= fractionOne {
                below -= fractionOne
                carried = 1
            }
            let part = overflow ? tooLong : min(product, tooLong) + wholeOfFraction + carried
            total = min(total + min(part, tooLong), tooLong)
        }
        return total
    }

    /// Whether `text` is written as a duration (`5s`, `1.5h`), whatever its value: for messages
    /// that must tell a mistyped duration from something else.
    public static func isWellFormed(_ text: String) -> Bool {
        milliseconds(parsing: Array(text.utf8)) != nil
    }

    /// The units, with systemd.time(7)'s spellings (`5min`, `1h30min`, `2days`, `1week`); the
    /// short ones first, as they are the most used.
    static let units: [(name: StaticString, milliseconds: Int64)] = [
        ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("ms", 1), ("d", 86_400_000),
        ("min", 60_000), ("sec", 1000), ("msec", 1), ("hr", 3_600_000), ("w", 604_800_000),
        ("second", 1000), ("seconds", 1000), ("secs", 1000),
        ("minute", 60_000), ("minutes", 60_000), ("mins", 60_000),
        ("hour", 3_600_000), ("hours", 3_600_000), ("hrs", 3_600_000),
        ("day", 86_400_000), ("days", 86_400_000),
        ("week", 604_800_000), ("weeks", 604_800_000),
    ]

    /// Renders milliseconds compactly in the accepted syntax: `1m30s`, `1500ms`, `2h`.
    public static func format(milliseconds: Int64) -> String {
        if milliseconds <= 0 {
            return "0s"
        }
        var rest = milliseconds
        var out = ""
        for (unit, scale) in [("d", Int64(86_400_000)), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)] {
            let count = rest / scale
            if count > 0 {
                out += "\(count)\(unit)"
                rest -= count * scale
            }
        }
        return out
    }

    /// Renders milliseconds as a clock, `h:mm:ss` (with days folded into hours), rounding up so a
    /// countdown with 0.4 s left shows `0:00:01`, not `0:00:00`.
    public static func clock(milliseconds: Int64) -> String {
        let seconds = milliseconds <= 0 ? 0 : (milliseconds + 999) / 1000
        let hours = seconds / 3600
        let minutes = (seconds % 3600) / 60
        let secs = seconds % 60
        return "\(hours):\(minutes < 10 ? "0" : "")\(minutes):\(secs < 10 ? "0" : "")\(secs)"
    }
}
