/// One JSON value as `JSONReader` reads it.
enum JSONValue: Equatable {
    /// One member of an object, in the text's order.
    struct Member: Equatable {
        let name: String
        let value: JSONValue
    }

    /// An object's members in the text's order (a name given twice appears twice).
    case object([Member])
    case array([JSONValue])
    case string(String)
    /// A number that is an integer within `Int64`.
    case integer(Int64)
    /// Any other number (a fraction, an exponent, an integer beyond `Int64`): read past, not kept.
    case number
    case boolean(Bool)
    case null

    /// An object's member `name` (the last, if given twice); `nil` for none, or for a value
    /// that is no object.
    subscript(name: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.last { $0.name == name }?.value
    }

    /// A string's text.
    var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    /// A boolean's value.
    var boolean: Bool? {
        if case .boolean(let flag) = self { return flag }
        return nil
    }

    /// An array's elements.
    var array: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }
}
