import CountdownCore
import Dispatch

/// The counts behind the `STATUS=` line systemd shows in `systemctl status`.
struct StatusCounts: Equatable, CustomStringConvertible {
    var running: Int
    var paused: Int
    var subscribers: Int
    var connections: Int

    var description: String {
        "\(running) running, \(paused) paused, \(subscribers) subscribers, \(connections) connections"
    }
}

extension Daemon {
    /// Tells systemd the new status if the counts changed, at most once per `--status-interval`
    /// (250 ms by default: cheap for systemd, fresh enough for a person); a change
    /// inside the quiet period is sent when it ends, so the last word is always the truth.
    func reportStatus() {
        dispatchPrecondition(condition: .onQueue(queue))
        let counts = statusCounts()
        guard counts != reportedStatus, !statusReportScheduled else { return }
        let now = SystemClock.now()
        let quiet = Int64(configuration.statusIntervalMilliseconds) * 1_000_000
        let sinceLast = now.nanoseconds(since: statusReportedAt)
        if sinceLast >= quiet {
            reportedStatus = counts
            statusReportedAt = now
            notifier.updateStatus(counts.description)
        } else {
            statusReportScheduled = true
            queue.asyncAfter(deadline: .now() + .nanoseconds(Int(quiet - sinceLast))) { [self] in
                statusReportScheduled = false
                reportStatus()
            }
        }
    }
}
