/// A change a store took and will decide later (etcd), for the connection that asked: its
/// replies wait behind it (`ClientTable.hold`, `ClientOutput.answer`).
struct StoreTicket: Equatable, Sendable {
    let number: Int
}

/// One connection's replies in request order while changes of its wait for the store: a reply
/// that waits for its ticket, and the replies of requests served beside it, ready but waiting
/// for those before them. Empty (`isHeld` false) on a daemon of its own.
struct ReplyOrder {
    /// The changes the store has not decided yet, oldest first, with the key each changes.
    private(set) var changesInFlight: [(ticket: StoreTicket, key: String)] = []
    /// Replies in request order: one with a ticket waits for it; the others are ready.
    private var replies: [(ticket: StoreTicket?, bytes: [UInt8])] = []

    /// Whether a change waits for the store.
    var isHeld: Bool { !changesInFlight.isEmpty }

    /// Whether a change of `key` waits for the store.
    func isChanging(_ key: String) -> Bool {
        changesInFlight.contains { $0.key == key }
    }

    /// A change of `key` waits for `ticket`: its reply takes its place in request order.
    mutating func hold(_ ticket: StoreTicket, changing key: String) {
        changesInFlight.append((ticket, key))
        replies.append((ticket, []))
    }

    /// A reply of a request handled now.
    /// - Returns: whether it goes out now (nothing waits before it); otherwise it is kept in
    ///   its place.
    mutating func take(_ bytes: [UInt8]) -> Bool {
        guard !replies.isEmpty else { return true }
        if !bytes.isEmpty { replies.append((nil, bytes)) }
        return false
    }

    /// The store decided `ticket`: its reply takes its place.
    /// - Returns: the replies now ready at the front, in order; `nil` when `ticket` is not held.
    mutating func answer(_ ticket: StoreTicket, with bytes: [UInt8]) -> [[UInt8]]? {
        guard let held = changesInFlight.firstIndex(where: { $0.ticket == ticket }),
              let place = replies.firstIndex(where: { $0.ticket == ticket }) else {
            return nil
        }
        changesInFlight.remove(at: held)
        replies[place] = (nil, bytes)
        var ready: [[UInt8]] = []
        while let first = replies.first, first.ticket == nil {
            ready.append(first.bytes)
            replies.removeFirst()
        }
        return ready
    }
}
