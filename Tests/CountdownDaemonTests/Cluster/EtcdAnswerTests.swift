@testable import CountdownDaemon
import Foundation
import Testing

@Suite("The gateway's unary answers, decoded")
struct EtcdAnswerTests {
    let key = Data("/countdownd/tea".utf8).base64EncodedString()
    let slot = Data("/countdownd.slots/all/7".utf8).base64EncodedString()
    let value = Data(#"{"v":1}"#.utf8).base64EncodedString()

    func answer(_ text: String, status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, body: Array(text.utf8))
    }

    func transaction(_ text: String) throws -> EtcdTransactionResult {
        let body = try EtcdClient.accepted(answer(text), from: "m0").get()
        return try EtcdClient.decode(body, as: EtcdAnswer.Transaction.self, from: "m0").get().result
    }

    @Test("a transaction that held: succeeded, its revision, and no ranges for its puts and deletes")
    func transactionHeld() throws {
        let result = try transaction(#"""
            {"header":{"cluster_id":"1","member_id":"2","revision":"41","raft_term":"3"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"41"}}},{"response_delete_range":{"header":{"revision":"41"},"deleted":"1"}}]}
            """#)
        #expect(result.succeeded && result.revision == 41 && result.ranges.isEmpty)
    }

    @Test("a transaction that failed: `succeeded` left out means false, and each read-back is in order, an absent key as an empty range")
    func transactionFailed() throws {
        let result = try transaction(#"""
            {"header":{"revision":"52"},"responses":[{"response_range":{"header":{"revision":"52"},"kvs":[{"key":"\#(key)","create_revision":"40","mod_revision":"50","version":"2","value":"\#(value)"}],"count":"1"}},{"response_range":{"header":{"revision":"52"}}},{"response_range":{"header":{"revision":"52"},"kvs":[{"key":"\#(slot)","create_revision":"51","mod_revision":"51","version":"1","value":"\#(Data("other".utf8).base64EncodedString())"}],"count":"1"}}]}
            """#)
        #expect(!result.succeeded && result.revision == 52)
        #expect(result.ranges == [
            [EtcdKeyValue(key: "/countdownd/tea", value: Array(#"{"v":1}"#.utf8), createRevision: 40, modRevision: 50)],
            [],
            [EtcdKeyValue(key: "/countdownd.slots/all/7", value: Array("other".utf8), createRevision: 51, modRevision: 51)],
        ])
    }

    @Test("a range: its key-values and the revision it was read at; an empty one has neither kvs nor count")
    func range() throws {
        let body = try EtcdClient.accepted(answer(#"{"header":{"revision":"9"},"kvs":[{"key":"\#(key)","create_revision":"8","mod_revision":"9","version":"2","value":"\#(value)"}],"count":"1"}"#), from: "m0").get()
        let read = try EtcdClient.decode(body, as: EtcdAnswer.Range.self, from: "m0").get()
        #expect(read.header?.revision?.value == 9)
        #expect(read.keyValues == [EtcdKeyValue(key: "/countdownd/tea", value: Array(#"{"v":1}"#.utf8), createRevision: 8, modRevision: 9)])
        let empty = try EtcdClient.decode(Array(#"{"header":{"revision":"3"}}"#.utf8), as: EtcdAnswer.Range.self, from: "m0").get()
        #expect(empty.keyValues.isEmpty && empty.header?.revision?.value == 3)
    }

    @Test("a refusal keeps etcd's gRPC code and message (before its error text); an odd field or none still makes a refusal; a body that is not JSON, or not the answer's shape, is malformed and says so")
    func refusals() {
        let noLeader = EtcdClient.accepted(answer(#"{"error":"no leader (error)","code":14,"message":"etcdserver: no leader"}"#, status: 503), from: "m0")
        #expect(noLeader == .failure(.server(code: 14, message: "etcdserver: no leader")))
        let onlyError = EtcdClient.accepted(answer(#"{"error":"etcdserver: request timed out"}"#, status: 500), from: "m0")
        #expect(onlyError == .failure(.server(code: -1, message: "etcdserver: request timed out")))
        let odd = EtcdClient.accepted(answer(#"{"code":"16","message":"etcdserver: invalid auth token"}"#, status: 401), from: "m0")
        #expect(odd == .failure(.server(code: -1, message: "etcdserver: invalid auth token")))
        #expect(EtcdClient.accepted(answer("{}", status: 503), from: "m0") == .failure(.server(code: -1, message: "HTTP 503")))
        guard case .failure(.malformed(let why)) = EtcdClient.accepted(answer("<html>bad gateway</html>", status: 502), from: "m0") else {
            Issue.record("an HTML error page was not reported malformed")
            return
        }
        #expect(why.contains("m0") && why.contains("HTTP 502"))
        guard case .failure(.malformed(let shape)) = EtcdClient.decode(Array(#"{"succeeded":"yes"}"#.utf8), as: EtcdAnswer.Transaction.self, from: "m1") else {
            Issue.record("a transaction answer of the wrong shape was not reported malformed")
            return
        }
        #expect(shape.contains("m1") && shape.contains("Transaction"))
    }

    @Test("each request body has exactly the field names of etcd's protos (the gateway ignores a misspelt one, so no real etcd would catch it)")
    func requestFieldNames() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        func json(_ body: some Encodable) throws -> String { String(decoding: try encoder.encode(body), as: UTF8.self) }
        let k = EtcdClient.encode("k"), v = EtcdClient.encode(bytes: [1])
        #expect(try json(EtcdClient.TransactionRequest(
            compare: [.absent("k"), .modifiedAt("k", 7), .valueEquals("k", [1])],
            success: [.put("k", [1], lease: 5), .put("k", [1], lease: nil), .delete("k")], failure: [.get("k")]
        )) == #"{"compare":[{"create_revision":"0","key":"\#(k)","result":"EQUAL","target":"CREATE"},{"key":"\#(k)","mod_revision":"7","result":"EQUAL","target":"MOD"},{"key":"\#(k)","result":"EQUAL","target":"VALUE","value":"\#(v)"}],"failure":[{"request_range":{"key":"\#(k)"}}],"success":[{"request_put":{"key":"\#(k)","lease":"5","value":"\#(v)"}},{"request_put":{"key":"\#(k)","value":"\#(v)"}},{"request_delete_range":{"key":"\#(k)"}}]}"#)
        #expect(try json(EtcdClient.RangeRequest(key: k, rangeEnd: "bA==")) == #"{"key":"\#(k)","range_end":"bA=="}"#)
        #expect(try json(EtcdClient.WatchRequest(createRequest: .init(key: k, rangeEnd: "bA==", startRevision: "12", progressNotify: true)))
            == #"{"create_request":{"key":"\#(k)","progress_notify":true,"range_end":"bA==","start_revision":"12"}}"#)
        #expect(try json(EtcdClient.CompactionRequest(revision: "40", physical: true)) == #"{"physical":true,"revision":"40"}"#)
        #expect(try json(EtcdClient.Credentials(name: "countdownd", password: "secret")) == #"{"name":"countdownd","password":"secret"}"#)
    }

    @Test("a transaction's body written by hand means what JSONEncoder writes of it: every kind of compare and operation, and 200 random transactions (keys with slashes and non-ASCII names, values of any bytes, leases, revisions up to Int64.max)")
    func handWrittenTransaction() throws {
        /// Objects' members in name order, so that two texts of one meaning compare equal.
        func normalized(_ value: JSONValue) -> JSONValue {
            switch value {
            case .object(let members):
                return .object(members.map { JSONValue.Member(name: $0.name, value: normalized($0.value)) }.sorted { $0.name < $1.name })
            case .array(let elements):
                return .array(elements.map(normalized))
            default:
                return value
            }
        }
        func check(_ request: EtcdClient.TransactionRequest) throws {
            let hand = try #require(JSONReader.read(request.json[...]), "\(String(decoding: request.json, as: UTF8.self))")
            let reference = try #require(JSONReader.read(Array(try JSONEncoder().encode(request))[...]))
            #expect(normalized(hand) == normalized(reference), "\(String(decoding: request.json, as: UTF8.self))")
        }
        try check(EtcdClient.TransactionRequest(
            compare: [.absent("k"), .modifiedAt("k", 7), .valueEquals("k", [1])],
            success: [.put("k", [1], lease: 5), .put("k", [1], lease: nil), .delete("k")], failure: [.get("k")]
        ))
        try check(EtcdClient.TransactionRequest(compare: [], success: [], failure: []))
        var random = SplitMix64(state: 21)
        func key() -> String { "/countdownd/" + ["1000/otp:+49", "é/名", "tea", ".slots/all/3", "a\"b\\c"].randomElement(using: &random)! + "\(Int.random(in: 0...99, using: &random))" }
        func bytes() -> [UInt8] { (0..<Int.random(in: 0...300, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) } }
        for _ in 0..<200 {
            let compares: [EtcdClient.Compare] = (0..<Int.random(in: 0...10, using: &random)).map { _ in
                switch Int.random(in: 0..<3, using: &random) {
                case 0: .absent(key())
                case 1: .modifiedAt(key(), Int64.random(in: 0...Int64.max, using: &random))
                default: .valueEquals(key(), bytes())
                }
            }
            let operations: [EtcdClient.Operation] = (0..<Int.random(in: 0...10, using: &random)).map { _ in
                switch Int.random(in: 0..<4, using: &random) {
                case 0: .put(key(), bytes(), lease: nil)
                case 1: .put(key(), bytes(), lease: Int64.random(in: 1...Int64.max, using: &random))
                case 2: .delete(key())
                default: .get(key())
                }
            }
            try check(EtcdClient.TransactionRequest(compare: compares, success: operations, failure: operations.reversed()))
        }
    }
}
