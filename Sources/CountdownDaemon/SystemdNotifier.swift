import CSystemd
import Glibc

/// Talks to the service manager through libsystemd's `sd_notify`. Without `NOTIFY_SOCKET` every
/// call is a cheap no-op, so the daemon calls it unconditionally.
struct SystemdNotifier {
    /// Sends one notification, e.g. `READY=1` or `STATUS=…`.
    /// - Returns: whether it was sent (false when not under systemd, or on error).
    @discardableResult
    func notify(_ state: String) -> Bool {
        sd_notify(0, state) > 0
    }
}

extension SystemdNotifier {
    /// The watchdog interval systemd asks for (`WATCHDOG_USEC`, for this process), in
    /// microseconds, or `nil` when the watchdog is off.
    func watchdogInterval() -> UInt64? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return microseconds
    }
}
