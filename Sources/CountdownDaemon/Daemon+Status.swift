import Dispatch
import Glibc

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
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        let now = Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
        let quiet = Double(configuration.statusIntervalMilliseconds) / 1000
        if now - statusReportedAt >= quiet {
            reportedStatus = counts
            statusReportedAt = now
            notifier.updateStatus(counts.description)
        } else {
            statusReportScheduled = true
            queue.asyncAfter(deadline: .now() + (quiet - (now - statusReportedAt))) { [self] in
                statusReportScheduled = false
                reportStatus()
            }
        }
    }
}
