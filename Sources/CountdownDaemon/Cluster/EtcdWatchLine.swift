import FoundationEssentials

/// One line of the gateway's watch stream (`/v3/watch`): a result with its events, or an error.
/// Its key-values and header are `EtcdAnswer`'s, as in every other answer. Read by hand
/// (`read`, through `JSONReader`) as `JSONDecoder` reads its `Decodable` form, which stays the
/// reference the tests hold it to. (`JSONSerialization`, bridged value by value, was a tenth of
/// the daemon's CPU while a watch brought thousands of changes a second; `JSONDecoder` was
/// still a tenth in a burst of 100,000 deadlines.)
struct EtcdWatchLine: Decodable, Equatable {
    struct Failure: Decodable, Equatable {
        var grpcCode: Int?
        var message: String?

        enum CodingKeys: String, CodingKey {
            case grpcCode = "grpc_code", message
        }
    }

    struct Event: Decodable, Equatable {
        var type: String?
        var kv: EtcdAnswer.KeyValue?
    }

    struct Body: Decodable, Equatable {
        var header: EtcdAnswer.Header?
        var events: [Event]?
        var compactRevision: EtcdAnswer.GatewayInteger?
        var created: Bool?
        var canceled: Bool?
        var cancelReason: String?

        enum CodingKeys: String, CodingKey {
            case header, events, compactRevision = "compact_revision", created, canceled, cancelReason = "cancel_reason"
        }

        /// The changes it carries, in order.
        var changes: [EtcdWatchEvent] {
            (events ?? []).compactMap { event in
                event.kv?.decoded.map { EtcdWatchEvent(kind: event.type == "DELETE" ? .delete : .put, keyValue: $0) }
            }
        }
    }

    var result: Body?
    var error: Failure?
}

extension EtcdWatchLine {
    /// The line `bytes` hold, as `JSONDecoder` would decode it: every field optional (`null` is
    /// absent), a field of the wrong kind makes the line unreadable (`nil`), unknown fields are
    /// passed over.
    static func read(_ bytes: ArraySlice<UInt8>) -> EtcdWatchLine? {
        guard let json = JSONReader.read(bytes), case .object = json else { return nil }
        var line = EtcdWatchLine()
        guard Self.field(json["result"], into: &line.result, Body.init),
              Self.field(json["error"], into: &line.error, Failure.init) else { return nil }
        return line
    }

    /// Reads an optional field: absent or `null` leaves `nil`; `false` when `make` cannot read it.
    fileprivate static func field<T>(_ json: JSONValue?, into target: inout T?, _ make: (JSONValue) -> T?) -> Bool {
        guard let json, json != .null else { return true }
        guard let value = make(json) else { return false }
        target = value
        return true
    }

    fileprivate static func string(_ json: JSONValue) -> String? { json.string }
    fileprivate static func boolean(_ json: JSONValue) -> Bool? { json.boolean }
    fileprivate static func integer(_ json: JSONValue) -> Int? {
        if case .integer(let number) = json { return Int(exactly: number) }
        return nil
    }
}

extension EtcdWatchLine.Failure {
    init?(_ json: JSONValue) {
        guard case .object = json else { return nil }
        self.init()
        guard EtcdWatchLine.field(json["grpc_code"], into: &grpcCode, EtcdWatchLine.integer),
              EtcdWatchLine.field(json["message"], into: &message, EtcdWatchLine.string) else { return nil }
    }
}

extension EtcdWatchLine.Event {
    init?(_ json: JSONValue) {
        guard case .object = json else { return nil }
        self.init()
        guard EtcdWatchLine.field(json["type"], into: &type, EtcdWatchLine.string),
              EtcdWatchLine.field(json["kv"], into: &kv, EtcdAnswer.KeyValue.init) else { return nil }
    }
}

extension EtcdWatchLine.Body {
    init?(_ json: JSONValue) {
        guard case .object = json else { return nil }
        self.init()
        guard EtcdWatchLine.field(json["header"], into: &header, EtcdAnswer.Header.init),
              EtcdWatchLine.field(json["events"], into: &events, { value in
                  guard let elements = value.array else { return nil }
                  var events: [EtcdWatchLine.Event] = []
                  events.reserveCapacity(elements.count)
                  for element in elements {
                      guard let event = EtcdWatchLine.Event(element) else { return nil }
                      events.append(event)
                  }
                  return events
              }),
              EtcdWatchLine.field(json["compact_revision"], into: &compactRevision, EtcdAnswer.GatewayInteger.init),
              EtcdWatchLine.field(json["created"], into: &created, EtcdWatchLine.boolean),
              EtcdWatchLine.field(json["canceled"], into: &canceled, EtcdWatchLine.boolean),
              EtcdWatchLine.field(json["cancel_reason"], into: &cancelReason, EtcdWatchLine.string) else { return nil }
    }
}

extension EtcdAnswer.Header {
    init?(_ json: JSONValue) {
        guard case .object = json else { return nil }
        self.init()
        guard EtcdWatchLine.field(json["revision"], into: &revision, EtcdAnswer.GatewayInteger.init) else { return nil }
    }
}

extension EtcdAnswer.KeyValue {
    init?(_ json: JSONValue) {
        guard case .object = json else { return nil }
        self.init()
        guard EtcdWatchLine.field(json["key"], into: &key, { $0.string }),
              EtcdWatchLine.field(json["value"], into: &value, { $0.string }),
              EtcdWatchLine.field(json["create_revision"], into: &createRevision, EtcdAnswer.GatewayInteger.init),
              EtcdWatchLine.field(json["mod_revision"], into: &modRevision, EtcdAnswer.GatewayInteger.init) else { return nil }
    }
}
