import FoundationEssentials

/// One line of the gateway's watch stream (`/v3/watch`), decoded with `JSONDecoder`: a result
/// with its events, or an error. Its key-values and header are `EtcdAnswer`'s, as in every other
/// answer. (`JSONSerialization`, bridged value by value, was a tenth of the daemon's CPU while a
/// watch brought thousands of changes a second.)
struct EtcdWatchLine: Decodable {
    struct Failure: Decodable {
        var grpcCode: Int?
        var message: String?

        enum CodingKeys: String, CodingKey {
            case grpcCode = "grpc_code", message
        }
    }

    struct Event: Decodable {
        var type: String?
        var kv: EtcdAnswer.KeyValue?
    }

    struct Body: Decodable {
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
