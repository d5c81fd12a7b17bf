/// A point in wall-clock time for `START <name> AT <time>`: Unix milliseconds, or RFC 3339
/// (`2026-12-24T18:00:00Z`, `2026-12-24T18:00+01:00`, seconds and their fraction optional).
public enum WallClockTime {
    /// The accepted forms, for messages.
    public static let acceptedForms = "Unix milliseconds (1798135200000) or RFC 3339 with an offset (2026-12-24T18:00:00Z, 2026-12-24T18:00+01:00)"

    /// Parses a time.
    /// - Returns: Unix milliseconds.
    /// - Throws: `bad-duration` (the same family of error as a bad duration), naming the forms.
    public static func parse<Bytes: Collection<UInt8>>(bytes: Bytes) throws(ProtocolError) -> Int64 {
        let text = Array(bytes)
        if !text.isEmpty, text.count <= 15, text.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
           let value = Int64(String(decoding: text, as: UTF8.self)) {
            return value
        }
        guard let value = rfc3339(text) else {
            throw ProtocolError(.badDuration, "'\(ProtocolText.sanitized(text))' is not a time; use \(acceptedForms)")
        }
        return value
    }

    /// `YYYY-MM-DDTHH:MM[:SS[.fff]](Z|±HH:MM)`; `t` and a space may stand for `T`, `z` for `Z`.
    /// - Returns: Unix milliseconds, or `nil` when the text is not such a time.
    public static func rfc3339(_ text: [UInt8]) -> Int64? {
        var index = 0
        func number(_ digits: Int) -> Int? {
            guard index + digits <= text.count else { return nil }
            var value = 0
            for offset in 0..<digits {
                let byte = text[index + offset]
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            index += digits
            return value
        }
        func expect(_ characters: String) -> Bool {
            guard index < text.count, characters.utf8.contains(text[index]) else { return false }
            index += 1
            return true
        }
        guard let year = number(4), expect("-"), let month = number(2), expect("-"), let day = number(2),
              expect("Tt "), let hour = number(2), expect(":"), let minute = number(2) else { return nil }
        var second = 0
        var millisecond = 0
        if expect(":") {
            guard let value = number(2) else { return nil }
            second = value
            if expect(".") {
                var scale = 100
                var digits = 0
                while index < text.count, text[index] >= UInt8(ascii: "0"), text[index] <= UInt8(ascii: "9") {
                    millisecond += Int(text[index] - UInt8(ascii: "0")) * scale
                    scale /= 10
                    digits += 1
                    index += 1
                }
                guard digits > 0 else { return nil }
            }
        }
        var offsetMinutes = 0
        if expect("Zz") {
            offsetMinutes = 0
        } else if index < text.count, text[index] == UInt8(ascii: "+") || text[index] == UInt8(ascii: "-") {
            let sign = text[index] == UInt8(ascii: "-") ? -1 : 1
            index += 1
            guard let hours = number(2), expect(":"), let minutes = number(2), hours < 24, minutes < 60 else { return nil }
            offsetMinutes = sign * (hours * 60 + minutes)
        } else {
            return nil
        }
        guard index == text.count, (1...12).contains(month), day >= 1, day <= CivilTime.daysIn(month: month, year: year),
              hour < 24, minute < 60, second < 61 else { return nil }
        let days = CivilTime.daysFromCivil(year: year, month: month, day: day)
        let seconds = Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + min(second, 59)) - Int64(offsetMinutes * 60)
        return seconds * 1000 + Int64(millisecond)
    }
}
