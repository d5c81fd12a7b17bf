import FoundationEssentials

/// The gateway's JSON answers that countdownd reads, decoded with `JSONDecoder`: one shape for a
/// key-value and a header, whether it comes in a transaction's answer, a range or a watch line
/// (`EtcdWatchLine`). The gateway leaves out fields at their zero value (`succeeded` when false,
/// `kvs` when empty, a revision of 0), so every field is optional.
enum EtcdAnswer {
    /// A number the gateway writes as a decimal string (int64 fields), or as a JSON number.
    struct GatewayInteger: Decodable, Equatable {
        var value: Int64

        /// As `init(from:)` reads it from `JSONReader`'s value: `nil` for another kind.
        init?(_ json: JSONValue) {
            switch json {
            case .string(let text): value = Int64(text) ?? 0
            case .integer(let number): value = number
            default: return nil
            }
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let text = try? container.decode(String.self) {
                value = Int64(text) ?? 0
            } else {
                value = try container.decode(Int64.self)
            }
        }
    }

    /// The header of every answer: the store's revision when it answered.
    struct Header: Decodable, Equatable {
        var revision: GatewayInteger?
    }

    /// One key's value and revisions, base64 as the gateway writes bytes.
    struct KeyValue: Decodable, Equatable {
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

    /// An answer that says nothing but its header (a compaction's).
    struct Headed: Decodable {
        var header: Header?
    }

    /// `/v3/kv/range`'s answer, and a transaction's `response_range`.
    struct Range: Decodable {
        var header: Header?
        var kvs: [KeyValue]?
        /// Whether keys past the limit asked for are left in the range.
        var more: Bool?

        /// Its key-values, each with a readable key.
        var keyValues: [EtcdKeyValue] { (kvs ?? []).compactMap(\.decoded) }
    }

    /// `/v3/kv/txn`'s answer: which branch ran, and each operation's answer in order.
    struct Transaction: Decodable {
        /// One operation's answer; only a range's is read.
        struct Response: Decodable {
            var responseRange: Range?

            enum CodingKeys: String, CodingKey {
                case responseRange = "response_range"
            }
        }

        var header: Header?
        var succeeded: Bool?
        var responses: [Response]?

        /// What the transaction did, each range's key-values in the order of the branch.
        var result: EtcdTransactionResult {
            EtcdTransactionResult(
                succeeded: succeeded ?? false, revision: header?.revision?.value ?? 0,
                ranges: (responses ?? []).compactMap(\.responseRange).map(\.keyValues)
            )
        }
    }

    /// `/v3/auth/authenticate`'s answer.
    struct Authentication: Decodable {
        var token: String?
    }

    /// What a member answers with a status other than 200. Each field is read if it can be, so
    /// that an odd one (a code written as a string) still leaves a refusal, never a malformed
    /// answer that would skip the re-login and the move to another member.
    struct Refusal: Decodable {
        var code: Int?
        var message: String?
        var error: String?

        enum CodingKeys: String, CodingKey {
            case code, message, error
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            code = (try? container.decodeIfPresent(Int.self, forKey: .code)) ?? nil
            message = (try? container.decodeIfPresent(String.self, forKey: .message)) ?? nil
            error = (try? container.decodeIfPresent(String.self, forKey: .error)) ?? nil
        }
    }
}
