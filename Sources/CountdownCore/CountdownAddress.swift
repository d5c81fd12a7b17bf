/// Names are per user: each uid has its own namespace, so two users can both have `tea` and
/// nobody can squat another's name. A client addresses its own countdowns by plain name; root
/// (uid 0) addresses anyone's as `<uid>/<name>` (`1000/tea`), and its own by plain name.
///
/// Inside the daemon a countdown is known by its **key**: the plain name for root's, and
/// `<uid>/<name>` for everyone else's. `/` is not a name character, so keys never collide.
/// Storage keeps the plain name and the owner; keys are rebuilt when state is restored.
public enum CountdownAddress {
    /// The key of `name` in `owner`'s namespace.
    public static func key(owner: UInt32, name: String) -> String {
        owner == 0 ? name : "\(owner)/\(name)"
    }

    /// The namespace and plain name of a key.
    public static func split(_ key: String) -> (owner: UInt32, name: String) {
        guard let slash = key.utf8.firstIndex(of: UInt8(ascii: "/")),
              let owner = UInt32(Substring(key.utf8[..<slash])) else { return (0, key) }
        return (owner, String(Substring(key.utf8[key.utf8.index(after: slash)...])))
    }

    /// How a key is shown to `viewer`: plain within its own namespace, `<uid>/<name>` to root
    /// for everyone else's.
    public static func display(_ key: String, owner: UInt32, to viewer: UInt32) -> String {
        guard owner != 0, owner == viewer else { return key }
        return split(key).name
    }

    /// Validates an address as a client may write it: a name, or `<uid>/<name>` (digits, a slash,
    /// a name). Returns it as written; `resolve` turns it into a key.
    /// - Throws: `bad-name`, saying which rule was broken.
    public static func validate<Bytes: Collection<UInt8>>(bytes: Bytes) throws(ProtocolError) -> String {
        guard let slash = bytes.firstIndex(of: UInt8(ascii: "/")) else {
            return try CountdownName.validate(bytes: bytes)
        }
        let uid = bytes[..<slash]
        guard !uid.isEmpty, uid.count <= 10, uid.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              UInt32(String(decoding: uid, as: UTF8.self)) != nil else {
            throw ProtocolError(
                .badName,
                "'\(ProtocolText.sanitized(bytes))' is not a name; another user's countdown is written <uid>/<name>, as in 1000/tea"
            )
        }
        let name = try CountdownName.validate(bytes: bytes[bytes.index(after: slash)...])
        return String(decoding: uid, as: UTF8.self) + "/" + name
    }

    /// Validates the start of a name, or of an address (`1000/`, `1000/te`), as `LIST … PREFIX`
    /// and `cdctl list --prefix` take it: name characters, and for root a uid and a slash first.
    /// - Throws: `bad-name`, saying what a name may hold.
    public static func validatePrefix<Bytes: Collection<UInt8>>(bytes: Bytes) throws(ProtocolError) -> String {
        // Any start of a valid address becomes a valid address once a name character is added;
        // a whole name of the longest length is a prefix too (of itself).
        do throws(ProtocolError) {
            if (try? validate(bytes: Array(bytes))) == nil {
                _ = try validate(bytes: Array(bytes) + [UInt8(ascii: "a")])  // Only whether it throws matters.
            }
        } catch {
            throw ProtocolError(
                .badName,
                "'\(ProtocolText.sanitized(bytes))' cannot start a name: names are \(CountdownName.allowedCharactersDescription) (root may write <uid>/ first)"
            )
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The key prefix a name prefix stands for, resolved as `resolve` resolves an address: a
    /// user's own namespace, plain or as `<uid>/…`; root's `<uid>/…` for another's (and `0/…` for
    /// its own).
    /// - Throws: `forbidden` for a non-root requester naming another uid's namespace.
    public static func resolvePrefix(_ prefix: String, requester: UInt32) throws(ProtocolError) -> String {
        guard prefix.utf8.contains(UInt8(ascii: "/")) else { return key(owner: requester, name: prefix) }
        let resolved = try resolve(prefix, requester: requester)
        // Root's own names carry no prefix of their own: `0/` alone would be every namespace.
        if resolved.key.isEmpty && requester == 0 {
            throw ProtocolError(.badName, "'\(prefix)' is no prefix: root's own names have nothing in common to start with; give the start of a name (0/otp: or otp:)")
        }
        return resolved.key
    }

    /// The one owner whose keys can start with `keyPrefix`, if only one's can: `1000/…` is uid
    /// 1000's; a prefix with a character no uid has (`otp:`) is root's own, whose keys have no
    /// `/`; digits alone (or nothing) may start anyone's.
    public static func onlyOwner(ofKeysStartingWith keyPrefix: String) -> UInt32? {
        if keyPrefix.utf8.contains(UInt8(ascii: "/")) { return split(keyPrefix).owner }
        return keyPrefix.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") } ? nil : 0
    }

    /// The key an address names for a client of uid `requester`.
    /// - Throws: `forbidden` when a non-root client names another user's countdown.
    public static func resolve(_ address: String, requester: UInt32) throws(ProtocolError) -> (key: String, owner: UInt32) {
        let (owner, name) = address.utf8.contains(UInt8(ascii: "/")) ? split(address) : (requester, address)
        guard requester == 0 || owner == requester else {
            throw ProtocolError(
                .forbidden,
                "'\(address)' is in uid \(owner)'s namespace; only root may address another user's countdowns"
            )
        }
        return (key(owner: owner, name: name), owner)
    }
}

extension CountdownSnapshot {
    /// The countdown as `viewer` sees it: named as that client would write it
    /// (`CountdownAddress.display`).
    public func shown(to viewer: UInt32) -> CountdownSnapshot {
        var copy = self
        copy.name = CountdownAddress.display(name, owner: owner, to: viewer)
        return copy
    }
}
