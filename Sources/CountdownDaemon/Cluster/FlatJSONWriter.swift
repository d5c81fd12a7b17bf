/// Writes one flat JSON object by hand (`ClusterValue.encoded`): members are appended in the
/// order given; strings are escaped as RFC 8259 requires (the quote, the backslash and control
/// characters), everything else is written as it is (UTF-8).
struct FlatJSONWriter {
    private static let hex = Array("0123456789abcdef".utf8)

    /// The text so far; `bytes` closes the object.
    private var text: [UInt8] = [UInt8(ascii: "{")]

    init(capacity: Int = 256) {
        text.reserveCapacity(capacity)
    }

    /// The object written.
    var bytes: [UInt8] {
        text + [UInt8(ascii: "}")]
    }

    private mutating func name(_ name: StaticString) {
        if text.count > 1 { text.append(UInt8(ascii: ",")) }
        text.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { text.append(contentsOf: $0) }
        text.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
    }

    mutating func member(_ name: StaticString, _ value: Int64) {
        self.name(name)
        text.append(contentsOf: String(value).utf8)
    }

    /// Nothing is written for `nil`: a reader takes a missing member as `nil`.
    mutating func member(_ name: StaticString, _ value: Int64?) {
        if let value { member(name, value) }
    }

    mutating func member(_ name: StaticString, _ value: Bool?) {
        guard let value else { return }
        self.name(name)
        text.append(contentsOf: (value ? "true" : "false").utf8)
    }

    mutating func member(_ name: StaticString, _ value: String) {
        self.name(name)
        text.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                text.append(contentsOf: [UInt8(ascii: "\\"), byte])
            case 0..<0x20:
                text.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), Self.hex[Int(byte >> 4)], Self.hex[Int(byte & 0xF)]])
            default:
                text.append(byte)
            }
        }
        text.append(UInt8(ascii: "\""))
    }
}
