@testable import CountdownDaemon
import Foundation
import Testing

@Suite("The gateway's watch lines, decoded")
struct EtcdWatchLineTests {
    /// The line as `JSONDecoder` decodes its `Decodable` form (the reference), checked to be what
    /// the daemon's own reader (`EtcdWatchLine.read`) makes of it.
    func decode(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> EtcdWatchLine {
        let reference = try JSONDecoder().decode(EtcdWatchLine.self, from: Data(text.utf8))
        #expect(EtcdWatchLine.read(Array(text.utf8)[...]) == reference, sourceLocation: sourceLocation)
        return reference
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

    @Test("the reader and JSONDecoder agree on lines of every shape the gateway writes and some it does not: nulls, unknown members, numbers for strings, wrong kinds", arguments: [
        #"{"result":{"header":{"revision":"7"},"events":[{"kv":{"key":"YQ==","mod_revision":"7","version":"1","lease":"0"}}],"fragment":false}}"#,
        #"{"result":{"header":{"revision":"7","raft_term":"2"},"events":[],"watch_id":"0"}}"#,
        #"{"result":null,"error":null}"#, #"{}"#, #"{"result":{}}"#, #"{"result":{"events":null,"header":null}}"#,
        #"{"result":{"header":{"revision":"x"}}}"#, #"{"result":{"header":{"revision":"12","extra":{"a":[1,2.5]}}}}"#,
        #"{"result":{"events":[{"type":null,"kv":{"key":"YQ==","value":null,"create_revision":3,"mod_revision":"4"}}]}}"#,
        #"{"error":{"grpc_code":"14","message":"x"}}"#, #"{"error":{"grpc_code":14.5}}"#, #"{"error":{"grpc_code":14,"message":7}}"#,
        #"{"result":{"header":{"revision":true}}}"#, #"{"result":{"created":"true"}}"#, #"{"result":{"events":{}}}"#,
        #"{"result":{"events":[7]}}"#, #"{"result":{"events":[{"kv":[]}]}}"#, #"{"result":"x"}"#, #"[]"#, #"7"#,
        #"{"result":{"compact_revision":2.5}}"#, #"{"result":{"cancel_reason":["a"]}}"#,
    ])
    func agreesWithJSONDecoder(_ text: String) {
        let reference = try? JSONDecoder().decode(EtcdWatchLine.self, from: Data(text.utf8))
        #expect(EtcdWatchLine.read(Array(text.utf8)[...]) == reference)
    }

    @Test("stricter than JSONDecoder: an integer written with a fraction (25.0), which the gateway never writes, makes the line unreadable")
    func integralFraction() {
        let text = #"{"result":{"compact_revision":25.0}}"#
        #expect(EtcdWatchLine.read(Array(text.utf8)[...]) == nil)
        #expect((try? JSONDecoder().decode(EtcdWatchLine.self, from: Data(text.utf8)))?.result?.compactRevision?.value == 25, "JSONDecoder reads it; if no longer, the two agree")
    }

    @Test("300 random lines of puts and deletes, in several answers: the reader and JSONDecoder make the same line of each, and the same changes")
    func randomLines() throws {
        var random = SplitMix64(state: 38)
        for _ in 0..<300 {
            let events = (0..<Int.random(in: 0...20, using: &random)).map { _ in
                let key = Data("/countdownd/k\(Int.random(in: 0...999, using: &random))".utf8).base64EncodedString()
                let value = Data((0..<Int.random(in: 0...200, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }).base64EncodedString()
                let revision = Int64.random(in: 1...Int64.max, using: &random)
                if Bool.random(using: &random) {
                    return #"{"type":"DELETE","kv":{"key":"\#(key)","mod_revision":"\#(revision)"}}"#
                }
                return #"{"kv":{"key":"\#(key)","create_revision":"\#(revision / 2)","mod_revision":"\#(revision)","version":"3","value":"\#(value)"}}"#
            }
            let text = #"{"result":{"header":{"cluster_id":"14841639068965178418","revision":"\#(Int.random(in: 1...1_000_000, using: &random))"},"events":[\#(events.joined(separator: ","))]}}"#
            let line = try decode(text)
            #expect(EtcdWatchLine.read(Array(text.utf8)[...])?.result?.changes == line.result?.changes)
        }
    }
}
