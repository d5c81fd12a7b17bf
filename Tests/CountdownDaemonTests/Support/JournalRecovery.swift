@testable import CountdownDaemon
import CountdownCore
import Dispatch

extension StateJournal {
    /// Recovers this journal on `queue` (the queue that owns it, as the daemon's does) with the
    /// system clock, then lets it write, as a start does; throws what recovery refused with.
    func recoverForTest(on queue: DispatchQueue, keepEvents: Int = 100) throws(StorageError) -> Recovered {
        let result: Result<Recovered, StorageError> = queue.sync {
            do throws(StorageError) {
                let recovered = try recover(clock: DaemonClock.system.mapping(), bootID: SystemClock.bootID, keepEvents: keepEvents)
                startWriting()
                return .success(recovered)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }
}
