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

    @Test("a refusal keeps etcd's gRPC code and message; a body that is not JSON, or not the answer's shape, is malformed and says so")
    func refusals() {
        let noLeader = EtcdClient.accepted(answer(#"{"error":"etcdserver: no leader","code":14,"message":"etcdserver: no leader"}"#, status: 503), from: "m0")
        #expect(noLeader == .failure(.server(code: 14, message: "etcdserver: no leader")))
        let onlyError = EtcdClient.accepted(answer(#"{"error":"etcdserver: request timed out"}"#, status: 500), from: "m0")
        #expect(onlyError == .failure(.server(code: -1, message: "etcdserver: request timed out")))
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
}
