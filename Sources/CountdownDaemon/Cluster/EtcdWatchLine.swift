import Foundation

/// One line of the gateway's watch stream (`/v3/watch`), decoded with `JSONDecoder`: a result
/// with its events, or an error. (`JSONSerialization`, bridged value by value, was a tenth of the
/// daemon's CPU while a watch brought thousands of changes a second.)
struct EtcdWatchLine: Decodable {
    /// A number the gateway writes as a decimal string (int64 fields), or as a JSON number.
    struct GatewayInteger: Decodable {
        var value: Int64

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let text = try? container.decode(String.self) {
                value = Int64(text) ?? 0
            } else {
                value = try container.decode(Int64.self)
            }
        }
    }

    struct Failure: Decodable {
        var grpcCode: Int?
        var message: String?

        enum CodingKeys: String, CodingKey {
            case grpcCode = "grpc_code", message
        }
    }

    struct Header: Decodable {
        var revision: GatewayInteger?
    }

    struct KeyValue: Decodable {
        var key: String?
        var value: String?
        var createRevision: GatewayInteger?
        var modRevision: GatewayInteger?

        enum CodingKeys: String, CodingKey {
            case key, value, createRevision = "create_revision", modRevision = "mod_revision"
        }

        /// The key-value with its bytes decoded; `nil` without a readable key.
        var decoded: EtcdKeyValue? {
            guard let key = key.flatMap({ Data(base64Encoded: $0) }) else { return nil }
            return EtcdKeyValue(
                key: String(decoding: key, as: UTF8.self), value: value.flatMap { Data(base64Encoded: $0) }.map(Array.init) ?? [],
                createRevision: createRevision?.value ?? 0, modRevision: modRevision?.value ?? 0
            )
        }
    }

    struct Event: Decodable {
        var type: String?
        var kv: KeyValue?
    }

    struct Body: Decodable {
        var header: Header?
        var events: [Event]?
        var compactRevision: GatewayInteger?
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
