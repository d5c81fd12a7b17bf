/// What cluster mode asks of etcd: the seam between `ClusterReplica` and `EtcdClient`. The
/// daemon always uses `EtcdClient`; the replica's tests drive its retry and duplicate paths with
/// a scripted store, and its other paths against a real etcd.
///
/// Confined to the daemon's queue, like everything in cluster mode.
protocol EtcdTransport: AnyObject {
    /// The members' client URLs.
    var endpoints: [String] { get }
    /// The member tried first now.
    var currentEndpoint: Int { get }

    /// Logs in with the configured credentials, if any.
    func authenticate(completion: @escaping (EtcdError?) -> Void)
    /// One transaction: if every compare holds, `success`, else `failure`; atomically.
    func transaction(
        if compares: [EtcdClient.Compare], then success: [EtcdClient.Operation], else failure: [EtcdClient.Operation],
        timeoutMilliseconds: Int, completion: @escaping (Result<EtcdTransactionResult, EtcdError>) -> Void
    )
    /// Every key under `prefix`, and the revision they were read at.
    func range(prefix: String, completion: @escaping (Result<(keyValues: [EtcdKeyValue], revision: Int64), EtcdError>) -> Void)
    /// Watches every key under `prefix` from `revision` on, with no gap.
    @discardableResult
    func watch(
        prefix: String, from revision: Int64, onEvents: @escaping ([EtcdWatchEvent], Int64) -> Void,
        onEnd: @escaping (EtcdClient.WatchEnd) -> Void
    ) -> EtcdWatch
    /// Ends a watch; its `onEnd` runs with `failed`.
    func cancel(_ watch: EtcdWatch)
    /// A stream from `endpoint` broke: the next call goes to another member.
    func rotateAfterFailure(of endpoint: String)
}

extension EtcdTransport {
    /// A transaction with the usual deadline (3 s).
    func transaction(
        if compares: [EtcdClient.Compare], then success: [EtcdClient.Operation], else failure: [EtcdClient.Operation],
        completion: @escaping (Result<EtcdTransactionResult, EtcdError>) -> Void
    ) {
        transaction(if: compares, then: success, else: failure, timeoutMilliseconds: 3000, completion: completion)
    }
}

extension EtcdClient: EtcdTransport {}
