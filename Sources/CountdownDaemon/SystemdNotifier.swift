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
