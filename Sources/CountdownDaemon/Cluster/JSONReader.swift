/// Reads JSON text (RFC 8259) by hand into `JSONValue`s: what countdownd reads most often, cluster
/// values and etcd's watch lines, which every host reads for every change the watch brings.
/// (`JSONDecoder` on them was most of a host's CPU in a burst of deadlines.) Strict: strings must
/// be valid UTF-8 with JSON's escapes (surrogate pairs joined), numbers must follow the grammar,
/// and nothing may follow the value but whitespace; objects and arrays nest at most 512 deep
/// (`JSONDecoder`'s limit).
struct JSONReader {
    /// How deep objects and arrays may nest before the text is refused.
    static let maximumDepth = 512

    /// The value `bytes` hold, or `nil` when they are not exactly one JSON value.
    static func read(_ bytes: ArraySlice<UInt8>) -> JSONValue? {
        var reader = JSONReader(bytes: bytes)
        guard let value = reader.value(depth: 0), reader.atEnd else { return nil }
        return value
    }

    private let bytes: ArraySlice<UInt8>
    private var index: Int

    private init(bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        index = bytes.startIndex
    }

    private var atEnd: Bool {
        mutating get {
            skipWhitespace()
            return index == bytes.endIndex
        }
    }

    private mutating func skipWhitespace() {
        while index < bytes.endIndex, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
            index += 1
        }
    }

    /// Consumes `byte` (after whitespace) if it is next.
    private mutating func take(_ byte: UInt8) -> Bool {
        skipWhitespace()
        guard index < bytes.endIndex, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    /// A value, its objects and arrays `depth` deep already.
    private mutating func value(depth: Int) -> JSONValue? {
        skipWhitespace()
        guard index < bytes.endIndex, depth <= Self.maximumDepth else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "\""): return string().map { .string($0) }
        case UInt8(ascii: "t"): return literal("true") ? .boolean(true) : nil
        case UInt8(ascii: "f"): return literal("false") ? .boolean(false) : nil
        case UInt8(ascii: "n"): return literal("null") ? .null : nil
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
        case UInt8(ascii: "{"):
            index += 1
            var members: [JSONValue.Member] = []
            if take(UInt8(ascii: "}")) { return .object(members) }
            repeat {
                skipWhitespace()
                guard let name = string(), take(UInt8(ascii: ":")), let value = value(depth: depth + 1) else { return nil }
                members.append(JSONValue.Member(name: name, value: value))
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "}")) ? .object(members) : nil
        case UInt8(ascii: "["):
            index += 1
            var elements: [JSONValue] = []
            if take(UInt8(ascii: "]")) { return .array(elements) }
            repeat {
                guard let element = value(depth: depth + 1) else { return nil }
                elements.append(element)
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "]")) ? .array(elements) : nil
        default:
            return nil
        }
    }

    private mutating func literal(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.endIndex else { return false }
        let matches = word.withUTF8Buffer { expected in
            (0..<count).allSatisfy { bytes[index + $0] == expected[$0] }
        }
        if matches { index += count }
        return matches
    }

    /// A number by JSON's grammar: an integer that fits `Int64`, else `number`.
    private mutating func number() -> JSONValue? {
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        let digitsStart = index
        while index < bytes.endIndex, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") { index += 1 }
        let digits = bytes[digitsStart..<index]
        // At least one digit, and no leading zero before others.
        guard let first = digits.first, first != UInt8(ascii: "0") || digits.count == 1 else { return nil }
        var integral = true
        if index < bytes.endIndex, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard skipDigits() else { return nil }
            integral = false
        }
        if index < bytes.endIndex, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.endIndex, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard skipDigits() else { return nil }
            integral = false
        }
        guard integral else { return .number }
        // Accumulated negatively, so that Int64.min fits.
        var value: Int64 = 0
        for digit in digits {
            let (shifted, overflowShift) = value.multipliedReportingOverflow(by: 10)
            let (next, overflowAdd) = shifted.subtractingReportingOverflow(Int64(digit - UInt8(ascii: "0")))
            guard !overflowShift, !overflowAdd else { return .number }
            value = next
        }
        if negative { return .integer(value) }
        return value == .min ? .number : .integer(-value)
    }

    /// One or more digits.
    private mutating func skipDigits() -> Bool {
        let start = index
        while index < bytes.endIndex, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") { index += 1 }
        return index > start
    }

    /// A string (the opening quote next), its escapes undone; `nil` if it is not valid.
    private mutating func string() -> String? {
        guard index < bytes.endIndex, bytes[index] == UInt8(ascii: "\"") else { return nil }
        index += 1
        let start = index
        // The common case: no escape, copied at once.
        while index < bytes.endIndex, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\"), bytes[index] >= 0x20 {
            index += 1
        }
        guard index < bytes.endIndex else { return nil }
        if bytes[index] == UInt8(ascii: "\"") {
            index += 1
            return String(validating: bytes[start..<(index - 1)], as: UTF8.self)
        }
        var unescaped = Array(bytes[start..<index])
        while index < bytes.endIndex {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(validating: unescaped, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard index < bytes.endIndex else { return nil }
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
    private mutating func hexQuad() -> UInt32? {
        guard index + 4 <= bytes.endIndex else { return nil }
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
