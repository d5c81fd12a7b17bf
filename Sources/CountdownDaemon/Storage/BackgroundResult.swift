import Dispatch

/// Work run on a thread of its own, whose result the caller waits for once: recovery reads the
/// journal this way while it restores the snapshot's countdowns.
///
/// The result is written before `finished` is signalled and read only after it is waited for,
/// so the two threads never touch it at once: the reason this class may be `@unchecked Sendable`.
final class BackgroundResult<Value: Sendable, Failure: Error>: @unchecked Sendable {
    private var result: Result<Value, Failure>?
    private let finished = DispatchSemaphore(value: 0)

    /// Starts `work` on a queue named `label`, at once.
    init(label: String, _ work: @escaping @Sendable () throws(Failure) -> Value) {
        DispatchQueue(label: label, qos: .userInitiated).async { [self] in
            result = Result { () throws(Failure) -> Value in try work() }
            finished.signal()
        }
    }

    /// Waits for the work to end, then returns what it returned or throws what it threw.
    /// Call it once.
    func wait() throws(Failure) -> Value {
        finished.wait()
        guard let result else { preconditionFailure("signalled without a result") }
        return try result.get()
    }
}
