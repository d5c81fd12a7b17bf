/// The rules for countdown names: 1–128 bytes of `A–Z a–z 0–9 . _ : @ + -`.
///
/// The alphabet is ASCII only and has no space or control character, so a valid name never needs
/// quoting on the wire, in a shell or in a journal field.
public enum CountdownName {
    /// The longest name, in bytes.
    public static let maximumLength = 128

    /// The characters a name may contain, for messages.
    public static let allowedCharactersDescription = "A-Z a-z 0-9 . _ : @ + -"

    /// Whether `byte` may appear in a name.
    @inlinable
    public static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"),
             UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: ":"),
             UInt8(ascii: "@"), UInt8(ascii: "+"), UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    /// Validates raw bytes as a name.
    /// - Returns: the name as a `String`.
    /// - Throws: `ProtocolError` with code `bad-name`, saying which rule was broken.
    public static func validate<Bytes: Collection<UInt8>>(bytes: Bytes) throws(ProtocolError) -> String {
        if bytes.isEmpty {
            throw ProtocolError(.badName, "name is empty; use 1-\(maximumLength) of \(allowedCharactersDescription)")
        }
        if bytes.count > maximumLength {
            throw ProtocolError(
                .badName,
                "name is \(bytes.count) bytes long; the limit is \(maximumLength) bytes of \(allowedCharactersDescription)"
            )
        }
        for byte in bytes where !isAllowed(byte) {
            throw ProtocolError(
                .badName,
                "name contains \(ProtocolText.describe(byte: byte)); use only \(allowedCharactersDescription)"
            )
        }
        // All bytes are ASCII, checked above, so this decoding cannot fail or repair anything.
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Validates a name given as a string.
    /// - Throws: `ProtocolError` with code `bad-name`.
    public static func validate(_ name: String) throws(ProtocolError) -> String {
        try validate(bytes: Array(name.utf8))
    }
}

/// Helpers for putting untrusted bytes into human-readable messages.
public enum ProtocolText {
    /// Describes one byte for an error message: `'x'`, or `byte 0x00` for anything unprintable.
    public static func describe(byte: UInt8) -> String {
        if byte >= 0x21 && byte < 0x7F {
            return "'\(Character(Unicode.Scalar(byte)))'"
        }
        if byte == 0x20 {
            return "a space"
        }
        return "byte 0x\(hex(byte))"
    }

    /// Renders untrusted bytes printable, escaping everything outside visible ASCII as `\xNN`, and
    /// truncating to `limit` bytes so an error message never echoes a whole hostile line.
    public static func sanitized<Bytes: Collection<UInt8>>(_ bytes: Bytes, limit: Int = 32) -> String {
        var out = ""
        for byte in bytes.prefix(limit) {
            if byte >= 0x20 && byte < 0x7F && byte != UInt8(ascii: "\\") {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += "\\x" + hex(byte)
            }
        }
        if bytes.count > limit {
            out += "..."
        }
        return out
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789abcdef")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
    }
}
