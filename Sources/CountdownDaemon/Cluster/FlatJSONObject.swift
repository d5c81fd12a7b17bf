/// One flat JSON object, read by hand: cluster mode's values (`ClusterValue`), which every host
/// decodes for every change its watch brings. (With `JSONDecoder` that was a quarter of a
/// host's CPU in a burst of 30,000 deadlines.)
///
/// The whole text must be one object (whitespace around it allowed) of RFC 8259's grammar.
/// Members that are strings, integers, booleans or null are read; a member of another kind (an
/// object, an array, a number with a fraction or an exponent, or an integer beyond `Int64`: a
/// later version's) is `other`, read past and checked, so a later version's additions never
/// make a value unreadable. Strings must be valid UTF-8, with JSON's escapes. Numbers for
/// integer members must be written as integers (`60000`, not `6e4` or `60000.0`, which no
/// version writes).
struct FlatJSONObject {
    /// A member's value.
    enum Value: Equatable {
        case string(String)
        case integer(Int64)
        case boolean(Bool)
        case null
        /// An object, an array, or a number that is no `Int64`.
        case other
    }

    /// The members, in the text's order (a name given twice appears twice).
    let members: [(name: String, value: Value)]

    /// The object `bytes` holds, or `nil` when they are not exactly one JSON object.
    init?(_ bytes: [UInt8]) {
        var reader = Reader(bytes: bytes)
        guard let members = reader.object(), reader.atEnd else { return nil }
        self.members = members
    }

    /// How deep objects and arrays may nest inside a member before the text is refused
    /// (`JSONDecoder`'s limit).
    static let maximumDepth = 512

    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        var atEnd: Bool {
            mutating get {
                skipWhitespace()
                return index == bytes.count
            }
        }

        mutating func skipWhitespace() {
            while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
                index += 1
            }
        }

        /// Consumes `byte` (after whitespace) if it is next.
        mutating func take(_ byte: UInt8) -> Bool {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        mutating func object() -> [(name: String, value: Value)]? {
            guard take(UInt8(ascii: "{")) else { return nil }
            var members: [(name: String, value: Value)] = []
            if take(UInt8(ascii: "}")) { return members }
            repeat {
                skipWhitespace()
                guard let name = string(), take(UInt8(ascii: ":")), let value = value(depth: 0) else { return nil }
                members.append((name, value))
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "}")) ? members : nil
        }

        /// A value: read if scalar, checked and passed over (`other`) if not.
        mutating func value(depth: Int) -> Value? {
            skipWhitespace()
            guard index < bytes.count, depth <= FlatJSONObject.maximumDepth else { return nil }
            switch bytes[index] {
            case UInt8(ascii: "\""): return string().map { .string($0) }
            case UInt8(ascii: "t"): return literal("true") ? .boolean(true) : nil
            case UInt8(ascii: "f"): return literal("false") ? .boolean(false) : nil
            case UInt8(ascii: "n"): return literal("null") ? .null : nil
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
            case UInt8(ascii: "{"):
                index += 1
                if take(UInt8(ascii: "}")) { return .other }
                repeat {
                    skipWhitespace()
                    guard string() != nil, take(UInt8(ascii: ":")), value(depth: depth + 1) != nil else { return nil }
                } while take(UInt8(ascii: ","))
                return take(UInt8(ascii: "}")) ? .other : nil
            case UInt8(ascii: "["):
                index += 1
                if take(UInt8(ascii: "]")) { return .other }
                repeat {
                    guard value(depth: depth + 1) != nil else { return nil }
                } while take(UInt8(ascii: ","))
                return take(UInt8(ascii: "]")) ? .other : nil
            default:
                return nil
            }
        }

        mutating func literal(_ word: StaticString) -> Bool {
            let count = word.utf8CodeUnitCount
            guard index + count <= bytes.count else { return false }
            let matches = word.withUTF8Buffer { expected in
                (0..<count).allSatisfy { bytes[index + $0] == expected[$0] }
            }
            if matches { index += count }
            return matches
        }

        /// A number by JSON's grammar: an integer that fits `Int64`, else `other`.
        mutating func number() -> Value? {
            let negative = bytes[index] == UInt8(ascii: "-")
            if negative { index += 1 }
            let digitsStart = index
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") { index += 1 }
            let digits = bytes[digitsStart..<index]
            // At least one digit, and no leading zero before others.
            guard let first = digits.first, first != UInt8(ascii: "0") || digits.count == 1 else { return nil }
            var integral = true
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard skipDigits() else { return nil }
                integral = false
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard skipDigits() else { return nil }
                integral = false
            }
            guard integral else { return .other }
            // Accumulated negatively, so that Int64.min fits.
            var value: Int64 = 0
            for digit in digits {
                let (shifted, overflowShift) = value.multipliedReportingOverflow(by: 10)
                let (next, overflowAdd) = shifted.subtractingReportingOverflow(Int64(digit - UInt8(ascii: "0")))
                guard !overflowShift, !overflowAdd else { return .other }
                value = next
            }
            if negative { return .integer(value) }
            return value == .min ? .other : .integer(-value)
        }

        /// One or more digits.
        mutating func skipDigits() -> Bool {
            let start = index
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") { index += 1 }
            return index > start
        }

        /// A string (the opening quote next), its escapes undone; `nil` if it is not valid.
        mutating func string() -> String? {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            index += 1
            let start = index
            // The common case: no escape, copied at once.
            while index < bytes.count, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\"), bytes[index] >= 0x20 {
                index += 1
            }
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: "\"") {
                index += 1
                return String(validating: bytes[start..<(index - 1)], as: UTF8.self)
            }
            var unescaped = Array(bytes[start..<index])
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(validating: unescaped, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { return nil }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): unescaped.append(escape)
                    case UInt8(ascii: "b"): unescaped.append(0x08)
                    case UInt8(ascii: "f"): unescaped.append(0x0C)
                    case UInt8(ascii: "n"): unescaped.append(0x0A)
                    case UInt8(ascii: "r"): unescaped.append(0x0D)
                    case UInt8(ascii: "t"): unescaped.append(0x09)
                    case UInt8(ascii: "u"):
                        guard var scalar = hexQuad() else { return nil }
                        if (0xD800...0xDBFF).contains(scalar) {
                            // A high surrogate must be followed by an escaped low one.
                            guard literal("\\u"), let low = hexQuad(), (0xDC00...0xDFFF).contains(low) else { return nil }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let unicode = Unicode.Scalar(scalar) else { return nil }  // A lone low surrogate.
                        unescaped.append(contentsOf: Array(String(Character(unicode)).utf8))
                    default:
                        return nil
                    }
                default:
                    guard byte >= 0x20 else { return nil }  // Control characters must be escaped.
                    unescaped.append(byte)
                }
            }
            return nil
        }

        /// Four hexadecimal digits.
        mutating func hexQuad() -> UInt32? {
            guard index + 4 <= bytes.count else { return nil }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                index += 1
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt32(digit)
            }
            return value
        }
    }
}
