@testable import CountdownDaemon
import Foundation
import Testing

@Suite("The gateway's watch lines, decoded")
struct EtcdWatchLineTests {
    func decode(_ text: String) throws -> EtcdWatchLine {
        try JSONDecoder().decode(EtcdWatchLine.self, from: Data(text.utf8))
    }

    @Test("a put and a delete, with their revisions written as strings; the creation line and a progress notification carry none")
    func events() throws {
        let key = Data("/countdownd/tea".utf8).base64EncodedString(), value = Data(#"{"v":1}"#.utf8).base64EncodedString()
        let line = try decode(#"""
            {"result":{"header":{"cluster_id":"1","member_id":"2","revision":"7","raft_term":"2"},"events":[{"kv":{"key":"\#(key)","create_revision":"6","mod_revision":"6","version":"1","value":"\#(value)"}},{"type":"DELETE","kv":{"key":"\#(key)","mod_revision":"7"}}]}}
            """#)
        let changes = try #require(line.result?.changes)
        #expect(changes == [
            EtcdWatchEvent(kind: .put, keyValue: EtcdKeyValue(key: "/countdownd/tea", value: Array(#"{"v":1}"#.utf8), createRevision: 6, modRevision: 6)),
            EtcdWatchEvent(kind: .delete, keyValue: EtcdKeyValue(key: "/countdownd/tea", value: [], createRevision: 0, modRevision: 7)),
        ])
        #expect(line.result?.header?.revision?.value == 7 && line.result?.created == nil && line.error == nil)
        let created = try decode(#"{"result":{"header":{"revision":"5"},"created":true}}"#)
        #expect(created.result?.created == true && created.result?.changes.isEmpty == true)
        let progress = try decode(#"{"result":{"header":{"revision":"9"}}}"#)
        #expect(progress.result?.header?.revision?.value == 9 && progress.result?.created == nil)
    }

    @Test("a compaction, a cancellation and an error say so; a number written as a number is read too")
    func ends() throws {
        let compacted = try decode(#"{"result":{"header":{"revision":"30"},"compact_revision":"25","canceled":true}}"#)
        #expect(compacted.result?.compactRevision?.value == 25 && compacted.result?.canceled == true)
        let cancelled = try decode(#"{"result":{"header":{"revision":30},"canceled":true,"cancel_reason":"permission denied"}}"#)
        #expect(cancelled.result?.header?.revision?.value == 30 && cancelled.result?.cancelReason == "permission denied")
        let failure = try decode(#"{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}}"#)
        #expect(failure.error?.grpcCode == 14 && failure.error?.message == "etcdserver: no leader" && failure.result == nil)
    }
}
