import Dispatch
import FoundationEssentials

/// What a transaction did: which branch ran, at which revision, and the branch's answers.
struct EtcdTransactionResult {
    /// The compares held, so the success branch ran.
    var succeeded: Bool
    /// The store's revision after it.
    var revision: Int64
    /// The key-values of each `request_range` in the branch that ran, in order.
    var ranges: [[EtcdKeyValue]]
}

/// A watch in progress; `EtcdClient.cancel` ends it.
final class EtcdWatch {
    fileprivate var transfer: CurlDriver.TransferID?
    fileprivate var pending: [UInt8] = []
    /// The last revision whose events were all delivered: where to resume.
    fileprivate(set) var revision: Int64
    fileprivate var ended = false
    /// The member it streams from.
    let endpoint: String

    /// A watch from just after `revision` on `endpoint` (made by `EtcdClient.watch`, or a
    /// test's store).
    init(revision: Int64, endpoint: String) {
        self.revision = revision
        self.endpoint = endpoint
    }
}

extension EtcdClient {
    /// One comparison of a transaction, encoded as the gateway's JSON.
    enum Compare: Encodable {
        /// The key does not exist (its create revision is 0).
        case absent(String)
        /// The key was last changed at this revision.
        case modifiedAt(String, Int64)
        /// The key holds exactly these bytes.
        case valueEquals(String, [UInt8])

        private enum CodingKeys: String, CodingKey {
            case key, target, result, value
            case createRevision = "create_revision", modRevision = "mod_revision"
        }

        /// Its JSON, as `encode(to:)` writes it (base64 needs no escape).
        func writeJSON(into out: inout [UInt8]) {
            let (key, target, field, operand): (String, String, String, String)
            switch self {
            case .absent(let name): (key, target, field, operand) = (name, "CREATE", "create_revision", "0")
            case .modifiedAt(let name, let revision): (key, target, field, operand) = (name, "MOD", "mod_revision", String(revision))
            case .valueEquals(let name, let value): (key, target, field, operand) = (name, "VALUE", "value", EtcdClient.encode(bytes: value))
            }
            out.append(contentsOf: #"{"key":""#.utf8)
            out.append(contentsOf: EtcdClient.encode(key).utf8)
            out.append(contentsOf: #"","target":""#.utf8)
            out.append(contentsOf: target.utf8)
            out.append(contentsOf: #"","result":"EQUAL",""#.utf8)
            out.append(contentsOf: field.utf8)
            out.append(contentsOf: #"":""#.utf8)
            out.append(contentsOf: operand.utf8)
            out.append(contentsOf: #""}"#.utf8)
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode("EQUAL", forKey: .result)
            switch self {
            case .absent(let key):
                try container.encode(EtcdClient.encode(key), forKey: .key)
                try container.encode("CREATE", forKey: .target)
                try container.encode("0", forKey: .createRevision)
            case .modifiedAt(let key, let revision):
                try container.encode(EtcdClient.encode(key), forKey: .key)
                try container.encode("MOD", forKey: .target)
                try container.encode(String(revision), forKey: .modRevision)
            case .valueEquals(let key, let value):
                try container.encode(EtcdClient.encode(key), forKey: .key)
                try container.encode("VALUE", forKey: .target)
                try container.encode(EtcdClient.encode(bytes: value), forKey: .value)
            }
        }
    }

    /// One operation of a transaction's branch, encoded as the gateway's JSON.
    enum Operation: Encodable {
        case put(String, [UInt8], lease: Int64?)
        case delete(String)
        case get(String)

        private enum CodingKeys: String, CodingKey {
            case requestPut = "request_put", requestDeleteRange = "request_delete_range", requestRange = "request_range"
        }

        private enum FieldKeys: String, CodingKey {
            case key, value, lease
        }

        /// Its JSON, as `encode(to:)` writes it (base64 needs no escape).
        func writeJSON(into out: inout [UInt8]) {
            let (request, key): (String, String)
            switch self {
            case .put(let name, _, _): (request, key) = ("request_put", name)
            case .delete(let name): (request, key) = ("request_delete_range", name)
            case .get(let name): (request, key) = ("request_range", name)
            }
            out.append(contentsOf: #"{""#.utf8)
            out.append(contentsOf: request.utf8)
            out.append(contentsOf: #"":{"key":""#.utf8)
            out.append(contentsOf: EtcdClient.encode(key).utf8)
            out.append(UInt8(ascii: "\""))
            if case .put(_, let value, let lease) = self {
                out.append(contentsOf: #","value":""#.utf8)
                out.append(contentsOf: EtcdClient.encode(bytes: value).utf8)
                out.append(UInt8(ascii: "\""))
                if let lease {
                    out.append(contentsOf: #","lease":""#.utf8)
                    out.append(contentsOf: String(lease).utf8)
                    out.append(UInt8(ascii: "\""))
                }
            }
            out.append(contentsOf: "}}".utf8)
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            switch self {
            case .put(let key, let value, let lease):
                var put = container.nestedContainer(keyedBy: FieldKeys.self, forKey: .requestPut)
                try put.encode(EtcdClient.encode(key), forKey: .key)
                try put.encode(EtcdClient.encode(bytes: value), forKey: .value)
                if let lease { try put.encode(String(lease), forKey: .lease) }
            case .delete(let key):
                var delete = container.nestedContainer(keyedBy: FieldKeys.self, forKey: .requestDeleteRange)
                try delete.encode(EtcdClient.encode(key), forKey: .key)
            case .get(let key):
                var range = container.nestedContainer(keyedBy: FieldKeys.self, forKey: .requestRange)
                try range.encode(EtcdClient.encode(key), forKey: .key)
            }
        }
    }

    /// A transaction's request body: written by hand (`HandWrittenJSON`), as `JSONEncoder`
    /// writes its `Encodable` form (which the tests hold it to): a burst's transactions of 128
    /// compares, puts and reads each were most of the rest of a host's JSON time.
    struct TransactionRequest: Encodable, HandWrittenJSON {
        var compare: [Compare]
        var success: [Operation]
        var failure: [Operation]

        var json: [UInt8] {
            var out: [UInt8] = []
            out.reserveCapacity(64 + 120 * compare.count + 400 * success.count + 80 * failure.count)
            func list<T>(_ name: String, _ items: [T], _ write: (T, inout [UInt8]) -> Void) {
                out.append(contentsOf: "\"\(name)\":[".utf8)
                for (index, item) in items.enumerated() {
                    if index > 0 { out.append(UInt8(ascii: ",")) }
                    write(item, &out)
                }
                out.append(UInt8(ascii: "]"))
            }
            out.append(UInt8(ascii: "{"))
            list("compare", compare) { $0.writeJSON(into: &$1) }
            out.append(UInt8(ascii: ","))
            list("success", success) { $0.writeJSON(into: &$1) }
            out.append(UInt8(ascii: ","))
            list("failure", failure) { $0.writeJSON(into: &$1) }
            out.append(UInt8(ascii: "}"))
            return out
        }
    }

    /// One etcd transaction: if every compare holds, `success`, else `failure`; atomically.
    ///
    /// The body is encoded with `JSONEncoder` (`JSONSerialization` of the same dictionaries,
    /// bridged value by value, took half of the daemon's CPU under pipelined cluster `START`s),
    /// and the answer decoded as `EtcdAnswer.Transaction`. An answer that cannot be read is
    /// `ambiguous`: a member that answered at all may have run the transaction, so a change is
    /// never reported "not made" on it.
    func transaction(
        if compares: [Compare], then success: [Operation], else failure: [Operation], timeoutMilliseconds: Int,
        completion: @escaping (Result<EtcdTransactionResult, EtcdError>) -> Void
    ) {
        call(
            "/v3/kv/txn", TransactionRequest(compare: compares, success: success, failure: failure),
            answer: EtcdAnswer.Transaction.self, timeoutMilliseconds: timeoutMilliseconds
        ) { result in
            completion(result.map(\.result).mapError { error in
                if case .malformed(let why) = error { return .ambiguous("its answer could not be read: \(why)") }
                return error
            })
        }
    }

    /// A compaction's body.
    struct CompactionRequest: Encodable {
        var revision: String
        var physical: Bool
    }

    /// A range request's body: every key from `key` up to `range_end`.
    struct RangeRequest: Encodable {
        var key: String
        var rangeEnd: String
        /// At most this many keys (a decimal string, as the gateway writes int64 fields).
        var limit: String?
        /// As of this revision; now without one.
        var revision: String?

        enum CodingKeys: String, CodingKey {
            case key, rangeEnd = "range_end", limit, revision
        }
    }

    /// How many keys one page of a range asks for: about 400 KB of the gateway's JSON for
    /// countdowns. A prefix of 30,000 read in one answer (12 MB) did not come within its 10 s
    /// while a burst kept etcd busy, and every retry asked for all of it again.
    static let rangePageKeys = 1_000

    /// What a range read in pages has gathered so far.
    private final class PagedRange {
        var keyValues: [EtcdKeyValue] = []
        /// The revision every page is read at: the first page's.
        var revision: Int64 = 0
    }

    /// Every key under `prefix`, and the revision they were read at: in pages of
    /// `rangePageKeys` keys in key order, each a call of its own (10 s), all at the first page's
    /// revision, so the keys are one consistent view however many pages it takes, and no page
    /// is an answer a busy etcd cannot give in time or one decoding that holds the queue long.
    /// A failed page fails the read (also a revision etcd compacted between two pages: etcd
    /// refuses it), and the caller reads again.
    func range(prefix: String, completion: @escaping (Result<(keyValues: [EtcdKeyValue], revision: Int64), EtcdError>) -> Void) {
        readPage(from: Array(prefix.utf8), to: EtcdClient.prefixEnd(prefix), gathered: PagedRange(), completion: completion)
    }

    private func readPage(
        from start: [UInt8], to end: String, gathered: PagedRange,
        completion: @escaping (Result<(keyValues: [EtcdKeyValue], revision: Int64), EtcdError>) -> Void
    ) {
        let request = RangeRequest(
            key: EtcdClient.encode(bytes: start), rangeEnd: end, limit: String(Self.rangePageKeys),
            revision: gathered.revision > 0 ? String(gathered.revision) : nil
        )
        call("/v3/kv/range", request, answer: EtcdAnswer.Range.self, timeoutMilliseconds: 10_000) { [self] result in
            switch result {
            case .failure(let error):
                completion(.failure(error))
            case .success(let answer):
                if gathered.revision == 0 {
                    // Without it the later pages could not be read at the first one's revision.
                    guard let revision = answer.header?.revision?.value, revision > 0 else {
                        completion(.failure(.malformed("a range's first page came without the revision it was read at")))
                        return
                    }
                    gathered.revision = revision
                }
                gathered.keyValues.append(contentsOf: answer.keyValues)
                // The next page starts just after the last key read: its bytes as etcd has them
                // (a key that is not UTF-8 is read as text with replacements) and a 0 byte.
                guard answer.more == true else {
                    completion(.success((gathered.keyValues, gathered.revision)))
                    return
                }
                guard let last = answer.kvs?.last?.key.flatMap({ Data(base64Encoded: $0) }).map(Array.init),
                      start.lexicographicallyPrecedes(last + [0]) else {
                    completion(.failure(.malformed("a page of the range under \(String(decoding: start, as: UTF8.self)) said more keys follow but gave no key after the page's start")))
                    return
                }
                readPage(from: last + [0], to: end, gathered: gathered, completion: completion)
            }
        }
    }

    /// Compacts the store's history up to `revision` (for tests and operators).
    func compact(revision: Int64, completion: @escaping (EtcdError?) -> Void) {
        call("/v3/kv/compaction", CompactionRequest(revision: String(revision), physical: true), answer: EtcdAnswer.Headed.self) { result in
            if case .failure(let error) = result { completion(error) } else { completion(nil) }
        }
    }

    /// Watches every key under `prefix`, from `revision` on (inclusive), with no gap: each
    /// answer's events go to `onEvents` in order, with etcd's revision when it sent the answer
    /// (its header): an event at that revision came live, an older one is history replayed.
    /// `onEnd` runs once when the watch ends: cancelled, the stream broke, or `compacted` (the
    /// history from `revision` is gone, and the caller must read the prefix afresh).
    @discardableResult
    func watch(
        prefix: String, from revision: Int64,
        onEvents: @escaping ([EtcdWatchEvent], Int64) -> Void,
        onEnd: @escaping (WatchEnd) -> Void
    ) -> EtcdWatch {
        let endpoint = endpoints[currentEndpoint]
        let watch = EtcdWatch(revision: revision - 1, endpoint: endpoint)
        let create = WatchRequest(createRequest: .init(
            key: EtcdClient.encode(prefix), rangeEnd: EtcdClient.prefixEnd(prefix), startRevision: String(revision), progressNotify: true
        ))
        guard let body = try? JSONEncoder().encode(create) else {
            onEnd(.failed(.malformed("the watch request could not be encoded")))
            return watch
        }
        let request = HTTPRequest(url: endpoint + "/v3/watch", body: Array(body), headers: headers(), tls: tlsFiles)
        func end(_ reason: WatchEnd) {
            guard !watch.ended else { return }
            watch.ended = true
            onEnd(reason)
        }
        watch.transfer = startStream(request, onData: { bytes in
            guard !watch.ended else { return }
            watch.pending.append(contentsOf: bytes)
            // The gateway writes one JSON object per line. The lines read are removed once, after
            // the last (one removal a line moved the rest of a large answer each time).
            var start = watch.pending.startIndex
            defer { if !watch.ended { watch.pending.removeSubrange(..<start) } }
            while let newline = watch.pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
                let line = watch.pending[start..<newline]
                start = newline + 1
                guard let object = EtcdWatchLine.read(line) else { continue }
                if let error = object.error {
                    end(.failed(.server(code: error.grpcCode ?? -1, message: error.message ?? "watch error")))
                    return
                }
                guard let result = object.result else { continue }
                let compacted = result.compactRevision?.value ?? 0
                if compacted > 0 {
                    end(.compacted(at: compacted))
                    return
                }
                let events = result.changes
                let header = result.header?.revision?.value ?? 0
                if let last = events.last?.keyValue.modRevision {
                    watch.revision = max(watch.revision, last)
                }
                if events.isEmpty && header > watch.revision && result.created == nil {
                    watch.revision = header  // A progress notification: nothing before it is missing.
                }
                onEvents(events, max(header, watch.revision))
                if result.canceled == true {
                    end(.failed(.server(code: -1, message: result.cancelReason ?? "the watch was cancelled by etcd")))
                    return
                }
            }
        }, completion: { [self] result in
            switch result {
            case .success:
                end(.failed(.unreachable("\(endpoint) ended the watch stream")))
            case .failure(let failure):
                rotateAfterFailure(of: endpoint)
                end(.failed(.unreachable("\(endpoint): \(failure.message)")))
            }
        })
        return watch
    }

    /// A watch's opening request.
    struct WatchRequest: Encodable {
        struct Create: Encodable {
            var key: String
            var rangeEnd: String
            var startRevision: String
            var progressNotify: Bool

            enum CodingKeys: String, CodingKey {
                case key, rangeEnd = "range_end", startRevision = "start_revision", progressNotify = "progress_notify"
            }
        }

        var createRequest: Create

        enum CodingKeys: String, CodingKey {
            case createRequest = "create_request"
        }
    }

    /// How a watch ended.
    enum WatchEnd: Equatable {
        /// Its start revision was compacted away; read the prefix again and watch from there.
        case compacted(at: Int64)
        /// It broke (a member went away, etcd cancelled it, `cancel`): resume from its revision.
        case failed(EtcdError)
    }

    /// Ends a watch; its `onEnd` runs with `failed`.
    func cancel(_ watch: EtcdWatch) {
        if let transfer = watch.transfer {
            cancelStream(transfer)
        }
    }
}
