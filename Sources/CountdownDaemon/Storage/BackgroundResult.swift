import Dispatch

/// Work run on a thread of its own, whose result the caller waits for once: recovery reads the
/// journal this way while it restores the snapshot's countdowns.
///
/// The result is written before `finished` is signalled and read only after it is waited for,
/// so the two threads never touch it at once: the reason this class may be `@unchecked Sendable`.
final class BackgroundResult<Value: Sendable, Failure: Error>: @unchecked Sendable {
    private var result: Result<Value, Failure>?
    private let finished = DispatchSemaphore(value: 0)

    /// Starts `work` at once on a thread named `thread`.
    ///
    /// At the default quality of service: asking for a higher one makes libdispatch try to raise
    /// its worker's priority, which systemd's sandbox refuses, and libdispatch says so in the
    /// journal at every start.
    init(thread: ThreadName, _ work: @escaping @Sendable () throws(Failure) -> Value) {
        DispatchQueue(label: "countdownd.\(thread.rawValue)").async { [self] in
            thread.apply()
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
