@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Glibc

extension StateJournal {
    /// Recovers this journal on `queue` (the queue that owns it, as the daemon's does) with the
    /// system clock, then lets it write, as a start does; throws what recovery refused with.
    ///
    /// A directory whose last journal was just let go can stay locked for a moment: a process
    /// another test spawns at that instant holds a copy of the lock's descriptor (and so the
    /// `flock`) until its `exec` closes it. Unless `waitingOutForks` is false (a test of the lock
    /// itself), a `.locked` refusal is retried for up to 30 s; any other is thrown at once.
    func recoverForTest(on queue: DispatchQueue, replayDepth: Int = 100, waitingOutForks: Bool = true) throws(StorageError) -> Recovered {
        var waited: UInt32 = 0
        while true {
            let result: Result<Recovered, StorageError> = queue.sync {
                do throws(StorageError) {
                    let recovered = try recover(clock: DaemonClock.system.mapping(), bootID: SystemClock.bootID, replayDepth: replayDepth)
                    startWriting()
                    return .success(recovered)
                } catch {
                    return .failure(error)
                }
            }
            if case .failure(.locked) = result, waitingOutForks, waited < 30_000 {
                usleep(1_000)
                waited += 1
                continue
            }
            return try result.get()
        }
    }
}
