/// JSON for cdctl's output, from a value's `Encodable` conformance (the `CodingKeys` in
/// CountdownCore stay the one list of field names): keys sorted, absent optionals left out, `/`
/// not escaped, integers exact. Only what cdctl prints needs to be encodable: strings, integers,
/// Booleans, and objects and arrays of them; floating point is written as Swift prints it.
///
/// cdctl's own, rather than Foundation's `JSONEncoder`: linking FoundationEssentials made the
/// binary 6 MB larger for this one use.
enum JSONOutput {
    /// The value as one line of JSON, without a newline.
    static func encode(_ value: some Encodable) -> String {
        let root = Node()
        do {
            try value.encode(to: TreeEncoder(node: root, codingPath: []))
        } catch {
            // TreeEncoder itself never throws; a value's own encode(to:) could: say so in JSON.
            return "null"
        }
        var out = ""
        root.write(to: &out)
        return out
    }

    /// A JSON value being built; containers hand out children by reference.
    final class Node {
        enum Content {
            case unset
            case literal(String)
            case array([Node])
            case object([String: Node])
        }

        var content = Content.unset

        func write(to out: inout String) {
            switch content {
            case .unset: out += "null"
            case .literal(let text): out += text
            case .array(let elements):
                out += "["
                for (index, element) in elements.enumerated() {
                    if index > 0 { out += "," }
                    element.write(to: &out)
                }
                out += "]"
            case .object(let members):
                out += "{"
                for (index, key) in members.keys.sorted().enumerated() {
                    if index > 0 { out += "," }
                    JSONOutput.quote(key, into: &out)
                    out += ":"
                    members[key]?.write(to: &out)
                }
                out += "}"
            }
        }

        func child(forKey key: String) -> Node {
            let node = Node()
            if case .object(var members) = content {
                members[key] = node
                content = .object(members)
            } else {
                content = .object([key: node])
            }
            return node
        }

        func appended() -> Node {
            let node = Node()
            if case .array(var elements) = content {
                elements.append(node)
                content = .array(elements)
            } else {
                content = .array([node])
            }
            return node
        }
    }

    /// `"text"` with JSON's escapes: quote, backslash and the control characters.
    static func quote(_ text: String, into out: inout String) {
        out += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }

    static func literal(of value: some Encodable) -> String? {
        switch value {
        case let text as String:
            var out = ""
            quote(text, into: &out)
            return out
        case let flag as Bool: return flag ? "true" : "false"
        case let number as any BinaryInteger: return "\(number)"
        case let number as Double: return number.isFinite ? "\(number)" : "null"
        case let number as Float: return number.isFinite ? "\(number)" : "null"
        default: return nil
        }
    }

    /// Writes any Encodable into a Node.
    struct TreeEncoder: Encoder {
        let node: Node
        var codingPath: [any CodingKey]
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
            if case .object = node.content {} else { node.content = .object([:]) }
            return KeyedEncodingContainer(KeyedContainer<Key>(node: node, codingPath: codingPath))
        }

        func unkeyedContainer() -> any UnkeyedEncodingContainer {
            if case .array = node.content {} else { node.content = .array([]) }
            return UnkeyedContainer(node: node, codingPath: codingPath)
        }

        func singleValueContainer() -> any SingleValueEncodingContainer {
            SingleValueContainer(node: node, codingPath: codingPath)
        }

        /// Encodes `value` into `node`: a scalar directly, anything else through its own encode(to:).
        static func put(_ value: some Encodable, into node: Node, codingPath: [any CodingKey]) throws {
            if let literal = JSONOutput.literal(of: value) {
                node.content = .literal(literal)
            } else {
                try value.encode(to: TreeEncoder(node: node, codingPath: codingPath))
            }
        }
    }

    struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let node: Node
        var codingPath: [any CodingKey]

        mutating func encodeNil(forKey key: Key) throws {
            node.child(forKey: key.stringValue).content = .literal("null")
        }

        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
            try TreeEncoder.put(value, into: node.child(forKey: key.stringValue), codingPath: codingPath + [key])
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
            TreeEncoder(node: node.child(forKey: key.stringValue), codingPath: codingPath + [key]).container(keyedBy: keyType)
        }

        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            TreeEncoder(node: node.child(forKey: key.stringValue), codingPath: codingPath + [key]).unkeyedContainer()
        }

        mutating func superEncoder() -> any Encoder {
            TreeEncoder(node: node.child(forKey: "super"), codingPath: codingPath)
        }

        mutating func superEncoder(forKey key: Key) -> any Encoder {
            TreeEncoder(node: node.child(forKey: key.stringValue), codingPath: codingPath + [key])
        }
    }

    struct UnkeyedContainer: UnkeyedEncodingContainer {
        let node: Node
        var codingPath: [any CodingKey]
        var count: Int {
            if case .array(let elements) = node.content { return elements.count }
            return 0
        }

        mutating func encodeNil() throws {
            node.appended().content = .literal("null")
        }

        mutating func encode<T: Encodable>(_ value: T) throws {
            try TreeEncoder.put(value, into: node.appended(), codingPath: codingPath)
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
            TreeEncoder(node: node.appended(), codingPath: codingPath).container(keyedBy: keyType)
        }

        mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
            TreeEncoder(node: node.appended(), codingPath: codingPath).unkeyedContainer()
        }

        mutating func superEncoder() -> any Encoder {
            TreeEncoder(node: node.appended(), codingPath: codingPath)
        }
    }

    struct SingleValueContainer: SingleValueEncodingContainer {
        let node: Node
        var codingPath: [any CodingKey]

        mutating func encodeNil() throws {
            node.content = .literal("null")
        }

        mutating func encode<T: Encodable>(_ value: T) throws {
            try TreeEncoder.put(value, into: node, codingPath: codingPath)
        }
    }
}
