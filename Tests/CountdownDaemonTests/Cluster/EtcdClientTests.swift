@testable import CountdownDaemon
import Dispatch
import EtcdTestSupport
import Foundation
import Glibc
import Testing

@Suite(
    "etcd through libcurl's multi-socket interface on the daemon's poller, against a real 3-member cluster",
    .enabled(if: EtcdCluster.isInstalled, "etcd is not installed (Debian's etcd-server; make test installs it as root), so the etcd client cannot be checked"),
    .serialized
)
struct EtcdClientTests {
    @Test("create-if-absent races: of two transactions for one fresh key, exactly one wins, 200 rounds")
    func createIfAbsentRaces() throws {
        let cluster = try EtcdCluster()
        let etcd = try EtcdTestClient(endpoints: cluster.endpoints)
        #expect(etcd.waitUntilReady(), "the cluster elected no leader")
        for round in 0..<200 {
            let key = "/race/\(round)"
            let outcomes: [Result<EtcdTransactionResult, EtcdError>]? = etcd.wait { client, done in
                var results: [Result<EtcdTransactionResult, EtcdError>] = []
                // Both are in flight at once: sent before either answer is read.
                for contender in ["a", "b"] {
                    client.transaction(
                        if: [.absent(key)], then: [.put(key, Array(contender.utf8), lease: nil)], else: [.get(key)]
                    ) { result in
                        results.append(result)
                        if results.count == 2 { done(results) }
                    }
                }
            }
            let results = try #require(outcomes, "round \(round) timed out")
            let won = results.compactMap { try? $0.get() }
            #expect(won.count == 2, "round \(round): \(results)")
            #expect(won.filter(\.succeeded).count == 1, "round \(round): exactly one OK")
            // The loser read the winner's value in the same transaction.
            if let loser = won.first(where: { !$0.succeeded }) {
                #expect(loser.ranges.first?.first.map { String(decoding: $0.value, as: UTF8.self) } != nil)
            }
        }
    }

    @Test("a watch delivers every change in order from its revision, and resumes from where it stopped with no gap")
    func watchResumes() throws {
        let cluster = try EtcdCluster()
        let etcd = try EtcdTestClient(endpoints: cluster.endpoints)
        #expect(etcd.waitUntilReady())
        func put(_ key: String) -> Int64? {
            let result: Result<EtcdTransactionResult, EtcdError>? = etcd.wait { client, done in
                client.transaction(if: [], then: [.put(key, Array("v".utf8), lease: nil)], else: [], completion: done)
            }
            guard case .success(let outcome) = result else { return nil }
            return outcome.revision
        }
        let first = try #require(put("/w/0"))
        for index in 1..<50 { _ = put("/w/\(index)") }
        _ = put("/elsewhere")  // Outside the prefix: not seen.
        // Watch from the first put: all 50, in order.
        final class Seen: @unchecked Sendable { var keys: [String] = []; var watch: EtcdWatch? }
        let seen = Seen()
        let gotAll = DispatchSemaphore(value: 0)
        etcd.queue.sync {
            seen.watch = etcd.client.watch(prefix: "/w/", from: first, onEvents: { events, _ in
                seen.keys += events.map(\.keyValue.key)
                if seen.keys.count == 50 { gotAll.signal() }
            }, onEnd: { _ in })
        }
        #expect(gotAll.wait(timeout: .now() + 15) == .success)
        #expect(etcd.queue.sync { seen.keys } == (0..<50).map { "/w/\($0)" })
        let resumeAt = try #require(etcd.queue.sync { seen.watch?.revision })
        etcd.queue.sync { if let watch = seen.watch { etcd.client.cancel(watch) } }
        // Changes while nobody watches, then a watch resumed after the last revision seen.
        for index in 50..<70 { _ = put("/w/\(index)") }
        let resumed = Seen()
        let gotRest = DispatchSemaphore(value: 0)
        etcd.queue.sync {
            resumed.watch = etcd.client.watch(prefix: "/w/", from: resumeAt + 1, onEvents: { events, _ in
                resumed.keys += events.map(\.keyValue.key)
                if resumed.keys.count >= 20 { gotRest.signal() }
            }, onEnd: { _ in })
        }
        #expect(gotRest.wait(timeout: .now() + 15) == .success)
        #expect(etcd.queue.sync { resumed.keys } == (50..<70).map { "/w/\($0)" }, "exactly what happened meanwhile: no gap, no repeat")
    }

    @Test("a watch from a compacted revision ends saying so, and a fresh read gives the current state")
    func compactedWatch() throws {
        let cluster = try EtcdCluster()
        let etcd = try EtcdTestClient(endpoints: cluster.endpoints)
        #expect(etcd.waitUntilReady())
        var last: Int64 = 0
        for index in 0..<10 {
            let result: Result<EtcdTransactionResult, EtcdError>? = etcd.wait { client, done in
                client.transaction(if: [], then: [.put("/c/\(index % 3)", Array("\(index)".utf8), lease: nil)], else: [], completion: done)
            }
            last = try #require(try result?.get().revision)
        }
        let compacted: EtcdError?? = etcd.wait { client, done in client.compact(revision: last, completion: done) }
        #expect(compacted == .some(nil))
        let end: EtcdClient.WatchEnd? = etcd.wait { client, done in
            client.watch(prefix: "/c/", from: 2, onEvents: { _, _ in }, onEnd: done)
        }
        #expect(end == .compacted(at: last))
        let fresh: Result<(keyValues: [EtcdKeyValue], revision: Int64), EtcdError>? = etcd.wait { client, done in
            client.range(prefix: "/c/", completion: done)
        }
        let read = try #require(try fresh?.get())
        #expect(read.keyValues.map(\.key) == ["/c/0", "/c/1", "/c/2"] && read.revision == last)
    }

    @Test("a range of more keys than a page (2,500, pages of 1,000) comes whole: every key once, in key order, with the revision etcd was at for the first page; a key just past the prefix is not read")
    func pagedRange() throws {
        let cluster = try EtcdCluster()
        let etcd = try EtcdTestClient(endpoints: cluster.endpoints)
        #expect(etcd.waitUntilReady())
        let names = (0..<2_500).map { String(format: "/p/%05d", $0) }
        var last: Int64 = 0
        for group in stride(from: 0, to: names.count, by: 100) {
            let puts = names[group..<min(group + 100, names.count)].map { EtcdClient.Operation.put($0, Array($0.utf8), lease: nil) }
            let result: Result<EtcdTransactionResult, EtcdError>? = etcd.wait { client, done in
                client.transaction(if: [], then: puts, else: [], completion: done)
            }
            last = try #require(try result?.get().revision)
        }
        // A key just past the prefix's range is not read.
        let outside: Result<EtcdTransactionResult, EtcdError>? = etcd.wait { client, done in
            client.transaction(if: [], then: [.put("/q", [1], lease: nil)], else: [], completion: done)
        }
        #expect(try outside?.get().revision == last + 1)
        #expect(EtcdClient.rangePageKeys < names.count / 2, "three pages at least")
        let read: Result<(keyValues: [EtcdKeyValue], revision: Int64), EtcdError>? = etcd.wait { client, done in
            client.range(prefix: "/p/", completion: done)
        }
        let keyValues = try #require(try read?.get())
        #expect(keyValues.keyValues.map(\.key) == names, "\(keyValues.keyValues.count) keys")
        #expect(keyValues.keyValues.allSatisfy { $0.value == Array($0.key.utf8) })
        #expect(keyValues.revision == last + 1, "the first page's revision")
    }

    @Test("a killed member: calls go on through the others; with every member gone a call fails fast as unreachable")
    func failover() throws {
        let cluster = try EtcdCluster()
        let etcd = try EtcdTestClient(endpoints: cluster.endpoints)
        #expect(etcd.waitUntilReady())
        cluster.kill(0)  // The member the client tries first.
        // Twenty writes go through the two members left. A call that meets an election (the
        // killed member may have led; on a loaded machine a heartbeat missed can start another)
        // fails with an error, never without an answer, and is made again: how many meet one
        // is the machine's timing, not the client's doing. One that failed yet landed makes the
        // next try's compare fail: it went through all the same.
        var failures: [String] = []
        for index in 0..<20 {
            var landed = false
            for _ in 0..<20 where !landed {
                let result: Result<EtcdTransactionResult, EtcdError>? = etcd.wait { client, done in
                    client.transaction(if: [.absent("/f/\(index)")], then: [.put("/f/\(index)", [1], lease: nil)], else: [], completion: done)
                }
                switch result {
                case .success?: landed = true
                case .failure(let error)?: failures.append("\(index): \(error)")
                case nil: Issue.record("write \(index) got no answer within 15 s: the client hung on the killed member")
                }
            }
            #expect(landed, "write \(index) did not go through in twenty tries: \(failures)")
            guard landed else { break }
        }
        let written: Result<(keyValues: [EtcdKeyValue], revision: Int64), EtcdError>? = etcd.wait { client, done in
            client.range(prefix: "/f/", completion: done)
        }
        #expect(try #require(try written?.get()).keyValues.count == 20, "each of the twenty once; calls that met an election: \(failures)")
        #expect(etcd.queue.sync { etcd.client.currentEndpoint } != 0)
        cluster.kill(1)
        cluster.kill(2)
        let started = Date()
        let result: Result<EtcdTransactionResult, EtcdError>? = etcd.wait { client, done in
            client.transaction(if: [], then: [.put("/f/x", [1], lease: nil)], else: [], completion: done)
        }
        guard case .failure(.unreachable)? = result else {
            Issue.record("with no member, the call is unreachable, not \(String(describing: result))")
            return
        }
        #expect(Date().timeIntervalSince(started) < 5, "refused connections fail at once")
    }

    @Test(
        "TLS with client certificates (made in the test): a client with its certificate is served, one without is refused",
        .enabled(if: TestCertificates.canBeMade, "openssl is not installed, so no certificates can be made for the TLS test")
    )
    func mutualTLS() throws {
        let certificates = try TestCertificates(in: NSTemporaryDirectory() + "etcd-tls-" + UUID().uuidString.prefix(8))
        defer { try? FileManager.default.removeItem(atPath: certificates.directory) }
        let cluster = try EtcdCluster(tls: (certificates.serverCertificate, certificates.serverKey, certificates.authority))
        #expect(cluster.endpoints.allSatisfy { $0.hasPrefix("https://") })
        let trusted = try EtcdTestClient(endpoints: cluster.endpoints, tls: TLSFiles(
            certificateAuthority: certificates.authority, certificate: certificates.clientCertificate, key: certificates.clientKey
        ))
        #expect(trusted.waitUntilReady(), "the cluster answers over TLS")
        let put: Result<EtcdTransactionResult, EtcdError>? = trusted.wait { client, done in
            client.transaction(if: [.absent("/tls/a")], then: [.put("/tls/a", [1], lease: nil)], else: [], completion: done)
        }
        #expect((try? put?.get())?.succeeded == true)
        // Without a client certificate the server ends the handshake. (Under TLS 1.3 the client
        // has sent its request by then, so it cannot tell whether it arrived: ambiguous.)
        let stranger = try EtcdTestClient(endpoints: cluster.endpoints, tls: TLSFiles(certificateAuthority: certificates.authority))
        let refused: Result<(keyValues: [EtcdKeyValue], revision: Int64), EtcdError>? = stranger.wait { client, done in
            client.range(prefix: "/tls/", completion: done)
        }
        guard case .failure? = refused else {
            Issue.record("a client without a certificate is refused, not \(String(describing: refused))")
            return
        }
    }
}
