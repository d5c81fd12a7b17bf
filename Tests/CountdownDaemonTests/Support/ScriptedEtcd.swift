@testable import CountdownDaemon

/// A scripted etcd: it records every call and answers only when the test says so, on the
/// queue. The one fake in the daemon's tests: the lost answers and lost races it scripts are
/// what a real cluster produces only by chance (the real-etcd tests cover the rest).
final class ScriptedEtcd: EtcdTransport {
    struct Transaction {
        var compares: [EtcdClient.Compare]
        var success: [EtcdClient.Operation]
        var failure: [EtcdClient.Operation]
        /// The time it was given, in milliseconds.
        var timeoutMilliseconds: Int = 3000
        var completion: (Result<EtcdTransactionResult, EtcdError>) -> Void

        /// The value the success branch puts, decoded.
        var putValue: ClusterValue? {
            for operation in success {
                if case .put(_, let bytes, _) = operation { return ClusterValue.decode(bytes) }
            }
            return nil
        }
    }

    struct Watch {
        var prefix: String
        var from: Int64
        var onEvents: ([EtcdWatchEvent], Int64) -> Void
        var onEnd: (EtcdClient.WatchEnd) -> Void
        var handle: EtcdWatch
    }

    let endpoints = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    private(set) var currentEndpoint = 0
    var transactions: [Transaction] = []
    var ranges: [(prefix: String, completion: (Result<(keyValues: [EtcdKeyValue], revision: Int64), EtcdError>) -> Void)] = []
    var watches: [Watch] = []
    var cancelled = 0

    func authenticate(completion: @escaping (EtcdError?) -> Void) { completion(nil) }

    func transaction(
        if compares: [EtcdClient.Compare], then success: [EtcdClient.Operation], else failure: [EtcdClient.Operation],
        timeoutMilliseconds: Int, completion: @escaping (Result<EtcdTransactionResult, EtcdError>) -> Void
    ) {
        transactions.append(Transaction(compares: compares, success: success, failure: failure, timeoutMilliseconds: timeoutMilliseconds, completion: completion))
    }

    func range(prefix: String, completion: @escaping (Result<(keyValues: [EtcdKeyValue], revision: Int64), EtcdError>) -> Void) {
        ranges.append((prefix, completion))
    }

    func watch(
        prefix: String, from revision: Int64, onEvents: @escaping ([EtcdWatchEvent], Int64) -> Void,
        onEnd: @escaping (EtcdClient.WatchEnd) -> Void
    ) -> EtcdWatch {
        let handle = EtcdWatch(revision: revision - 1, endpoint: endpoints[currentEndpoint])
        watches.append(Watch(prefix: prefix, from: revision, onEvents: onEvents, onEnd: onEnd, handle: handle))
        return handle
    }

    func cancel(_ watch: EtcdWatch) { cancelled += 1 }

    func rotateAfterFailure(of endpoint: String) {
        currentEndpoint = (currentEndpoint + 1) % endpoints.count
    }

    /// Answers the oldest transaction not yet answered.
    func answer(_ result: Result<EtcdTransactionResult, EtcdError>) {
        transactions.removeFirst().completion(result)
    }

    /// Answers every waiting heartbeat: a put (a heartbeat) refused with `refusal`, so nothing
    /// commits for a watch to bring; a read (the one that confirms etcd answers) at `revision`.
    func answerHeartbeats(refusingPutsWith refusal: EtcdError, readsAt revision: Int64) {
        while let call = transactions.first {
            if case .put? = call.success.first {
                answer(.failure(refusal))
            } else {
                answer(.success(EtcdTransactionResult(succeeded: true, revision: revision, ranges: [[]])))
            }
        }
    }
}

