@testable import CountdownDaemon
import CountdownCore
import Foundation
import Testing

/// The hand-written codec of cluster values (`JSONReader`, `FlatJSONWriter`) held to
/// `Codable`'s form as `JSONEncoder` writes it and `JSONDecoder` reads it: what older versions
/// wrote is read, and what this one writes, they read.
@Suite("Cluster values: the hand-written JSON codec reads and writes what JSONDecoder and JSONEncoder do")
struct ClusterValueCodecTests {
    static func number(_ random: inout SplitMix64) -> Int64 {
        switch Int.random(in: 0..<6, using: &random) {
        case 0: return .min
        case 1: return .max
        case 2: return 0
        case 3: return -Int64.random(in: 1...1_000_000, using: &random)
        default: return Int64.random(in: 0...2_000_000_000_000, using: &random)
        }
    }

    static func optionalNumber(_ random: inout SplitMix64) -> Int64? {
        Bool.random(using: &random) ? nil : number(&random)
    }

    /// Operation ids with what a host name or a state directory may hold: quotes, backslashes,
    /// slashes, control characters, non-ASCII letters and scalars beyond the BMP.
    static func operation(_ random: inout SplitMix64) -> String {
        let pieces = ["host", ":", "/var/lib/countdownd", "~", "\"", "\\", "\u{01}", "\n", "\t", "\u{1F}", "é", "名", "🍵", " ", "-7f3a", "\u{7F}"]
        return (0..<Int.random(in: 0...12, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
    }

    static func value(_ random: inout SplitMix64) -> ClusterValue {
        ClusterValue(
            version: Int.random(in: 0...3, using: &random), state: CountdownState.allCases.randomElement(using: &random)!,
            totalMilliseconds: number(&random), deadlineUnixMilliseconds: optionalNumber(&random), remainingMilliseconds: optionalNumber(&random),
            finishedUnixMilliseconds: optionalNumber(&random), owner: [0, 1000, UInt32.max].randomElement(using: &random)!,
            pinned: [nil, true, false].randomElement(using: &random)!, lateMilliseconds: optionalNumber(&random),
            event: EventKind.allCases.randomElement(using: &random)!, eventRemainingMilliseconds: number(&random),
            replacedRemainingMilliseconds: optionalNumber(&random), operation: operation(&random), writtenUnixMilliseconds: optionalNumber(&random)
        )
    }

    /// What `JSONDecoder` makes of `bytes` (the reference).
    static func reference(_ bytes: [UInt8]) -> ClusterValue? {
        try? JSONDecoder().decode(ClusterValue.self, from: Data(bytes))
    }

    @Test("2,000 random values: each reads back as itself, JSONDecoder reads what the codec writes, and the codec reads what JSONEncoder writes")
    func roundTrips() throws {
        var random = SplitMix64(state: 38)
        for _ in 0..<2000 {
            let value = Self.value(&random)
            let written = value.encoded
            #expect(ClusterValue.decode(written) == value, "\(String(decoding: written, as: UTF8.self))")
            #expect(Self.reference(written) == value, "\(String(decoding: written, as: UTF8.self))")
            let referenceWritten = Array(try JSONEncoder().encode(value))
            #expect(ClusterValue.decode(referenceWritten) == value, "\(String(decoding: referenceWritten, as: UTF8.self))")
        }
    }

    @Test("every cut of a written value, short of its end, is refused, as JSONDecoder refuses it")
    func truncations() {
        var random = SplitMix64(state: 7)
        for _ in 0..<20 {
            let written = Self.value(&random).encoded
            for length in 0..<written.count {
                let cut = Array(written.prefix(length))
                #expect(ClusterValue.decode(cut) == nil, "\(String(decoding: cut, as: UTF8.self))")
                #expect(Self.reference(cut) == nil)
            }
        }
    }

    /// A running countdown's members, as text.
    static let members: [(String, String)] = [
        ("v", "1"), ("state", #""running""#), ("total_ms", "60000"), ("deadline_unix_ms", "1798135200000"), ("owner", "1000"),
        ("event", #""started""#), ("event_remaining_ms", "60000"), ("op", #""h:/s~1-1""#),
    ]

    /// The object of `members`, each named one given the text instead (`nil`: left out), and
    /// the others after them.
    static func object(_ changes: KeyValuePairs<String, String?> = [:], separator: String = ",") -> String {
        var pairs = members.compactMap { name, text in
            let changed = changes.first { $0.key == name }
            return changed.map { $0.value.map { (name, $0) } } ?? (name, text)
        }
        pairs += changes.filter { name, _ in !members.contains { $0.0 == name } }.compactMap { name, text in text.map { (name, $0) } }
        return "{" + pairs.map { "\"\($0.0)\":\($0.1)" }.joined(separator: separator) + "}"
    }

    static let base = object()

    @Test("the codec and JSONDecoder agree: whitespace, a later version's members of any kind, null for optional members, and what makes a value unreadable", arguments: [
        // Read by both.
        object(), " \n" + object(separator: " ,\t") + " \r\n",
        object(["future": #"{"a":[1,2.5e-3,{"b":null}],"c":"x"}"#, "more": "[true,false]", "ratio": "0.25", "big": "123456789012345678901234567890"]),
        object(["late_ms": "null", "pinned": "null", "written_unix_ms": "-5", "deadline_unix_ms": "null"]),
        object(["op": #""\u00e9\ud83c\udf75\/\b\f\n\r\t\"\\""#, "pinned": "true"]),
        object(["state": #""done""#, "event": #""done""#, "late_ms": "1500", "finished_unix_ms": "1798135201500"]),
        // Refused by both.
        "", "{}", "[]", object() + " x", object() + ",", String(object().dropLast()), object(["v": nil]), object(["op": nil]),
        object(["owner": "-1"]), object(["owner": "4294967296"]), object(["total_ms": #""60000""#]), object(["state": #""sleeping""#]),
        object(["event": #""nap""#]), object(["op": "null"]), object(["op": "7"]), object(["total_ms": "null"]),
        object(["deadline_unix_ms": #""soon""#]), object(["pinned": "1"]), object(["total_ms": "0123"]),
        object(["total_ms": "9223372036854775808"]), object(["x": "tru"]), object(["x": #""\u12""#]),
        object(["x": ".5"]), object().replacingOccurrences(of: ",\"owner\"", with: " \"owner\""),
        object().replacingOccurrences(of: "\"owner\":", with: "\"owner\" "), object().replacingOccurrences(of: "\"owner\"", with: "owner"),
    ])
    func agreesWithJSONDecoder(_ text: String) {
        let bytes = Array(text.utf8)
        let ours = ClusterValue.decode(bytes), theirs = Self.reference(bytes)
        #expect(ours == theirs, "codec: \(String(describing: ours)); JSONDecoder: \(String(describing: theirs))")
    }

    @Test("refused by the codec, which JSONDecoder passes over in a member it does not read: text that is not JSON (a trailing comma, an unknown escape, a raw control character, a number without digits)", arguments: [
        "[1,]", #""\q""#, "\"a\u{01}b\"", "-", "1.", "1e",
    ])
    func invalidJSONInAnUnknownMember(_ text: String) {
        let bytes = Array(Self.object(["x": text]).utf8)
        #expect(ClusterValue.decode(bytes) == nil)
        #expect(Self.reference(bytes) != nil, "JSONDecoder is this lenient: if no longer, move the case to the agreement test")
    }

    @Test("refused by the codec: invalid UTF-8, a lone surrogate, nesting past 512 levels (as JSONDecoder); a name given twice counts its last value")
    func stricterCases() throws {
        let open = String(Self.base.dropLast()) + ","
        let prefix = Array((open + "\"x\":\"").utf8)
        #expect(ClusterValue.decode(prefix + [0xC3, 0x28] + Array("\"}".utf8)) == nil, "invalid UTF-8")
        #expect(ClusterValue.decode(Array((open + #""x":"\udc00"}"#).utf8)) == nil, "a lone low surrogate")
        #expect(ClusterValue.decode(Array((open + #""x":"\ud800x"}"#).utf8)) == nil, "a high surrogate alone")
        let deep = String(repeating: "[", count: 600) + String(repeating: "]", count: 600)
        #expect(ClusterValue.decode(Array((open + "\"x\":\(deep)}").utf8)) == nil)
        let shallow = String(repeating: "[", count: 500) + String(repeating: "]", count: 500)
        #expect(ClusterValue.decode(Array((open + "\"x\":\(shallow)}").utf8)) != nil)
        let twice = try #require(ClusterValue.decode(Array((String(Self.base.dropLast()) + #","owner":7}"#).utf8)))
        #expect(twice.owner == 7)
    }

    @Test("5,000 damaged values (bytes flipped, cut, doubled, brackets and quotes put in): the reader never traps, and whatever it reads, JSONDecoder reads as the same value")
    func damagedValues() {
        var random = SplitMix64(state: 99)
        let noise = Array("{}[]\",:\\u0-9eE.tfn \u{00}".utf8) + [0xC3, 0xFF, 0x80]
        for _ in 0..<5000 {
            var bytes = Self.value(&random).encoded
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                let at = Int.random(in: 0..<max(1, bytes.count), using: &random)
                switch Int.random(in: 0..<4, using: &random) {
                case 0 where !bytes.isEmpty: bytes[at] = noise.randomElement(using: &random)!
                case 1: bytes.insert(noise.randomElement(using: &random)!, at: min(at, bytes.count))
                case 2 where !bytes.isEmpty: bytes.removeSubrange(at...)
                default: bytes.insert(contentsOf: bytes.prefix(at), at: min(at, bytes.count))
                }
            }
            if let ours = ClusterValue.decode(bytes) {
                #expect(Self.reference(bytes) == ours, "\(String(decoding: bytes, as: UTF8.self))")
            }
        }
    }
}
