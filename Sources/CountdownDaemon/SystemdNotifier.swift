import CSystemd
import Dispatch
import Glibc
import Synchronization

/// Talks to the service manager through libsystemd's `sd_notify`. Without `NOTIFY_SOCKET` every
/// call is a cheap no-op, so the daemon calls it unconditionally.
///
/// `sd_notify` sends a datagram with a blocking `sendmsg`: if the manager does not read its
/// socket, the sender waits. `READY=1`, `STOPPING=1` and `WATCHDOG=1` are sent from the daemon's
/// queue on purpose (order matters; a wedged queue must stop the watchdog pings). `STATUS=` is
/// informational and frequent, so it goes out from a queue of its own, coalesced to the latest
/// text: a slow reader can delay the status line, never the countdowns.
final class SystemdNotifier: Sendable {
    private let statusQueue = DispatchQueue(label: "countdownd.status")
    private let pendingStatus = Mutex<String?>(nil)

    /// Sends one notification now, e.g. `READY=1`.
    /// - Returns: whether it was sent (false when not under systemd, or on error).
    @discardableResult
    func notify(_ state: String) -> Bool {
        sd_notify(0, state) > 0
    }

    /// Sends `STATUS=<text>` from the status queue; if one is already waiting, it is replaced.
    func updateStatus(_ text: String) {
        let wasIdle = pendingStatus.withLock { pending in
            defer { pending = text }
            return pending == nil
        }
        guard wasIdle else { return }
        statusQueue.async { [self] in
            guard let latest = pendingStatus.withLock({ pending in
                defer { pending = nil }
                return pending
            }) else { return }
            _ = sd_notify(0, "STATUS=" + latest)
        }
    }

    /// The watchdog interval systemd asks for (`WATCHDOG_USEC`, for this process), in
    /// microseconds, or `nil` when the watchdog is off.
    func watchdogInterval() -> UInt64? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return microseconds
    }
}
