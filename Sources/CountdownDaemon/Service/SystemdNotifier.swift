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
    /// How notifications leave: through libsystemd (`systemd`), or, in the component tests, to
    /// a socket the test reads.
    struct Transport: Sendable {
        /// Sends one notification: `sd_notify`'s result (> 0 sent, 0 no manager, < 0 -errno).
        var send: @Sendable (String) -> Int32
        /// The watchdog interval asked for, in microseconds, or `nil`.
        var watchdogInterval: @Sendable () -> UInt64?

        /// libsystemd: `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` of this process.
        static let systemd = Transport(
            send: { sd_notify(0, $0) },
            watchdogInterval: {
                var microseconds: UInt64 = 0
                guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
                return microseconds
            }
        )
    }

    private let transport: Transport
    private let statusQueue = DispatchQueue(label: "countdownd.status")
    private let pendingStatus = Mutex<String?>(nil)

    init(transport: Transport = .systemd) {
        self.transport = transport
    }

    /// Sends one notification now, e.g. `READY=1`.
    /// - Returns: `sd_notify`'s result: > 0 sent, 0 not under a service manager, < 0 -errno.
    func notify(_ state: String) -> Int32 {
        transport.send(state)
    }

    /// Sends `STATUS=<text>` from the status queue; if one is already waiting, it is replaced.
    func updateStatus(_ text: String) {
        let wasIdle = pendingStatus.withLock { pending in
            defer { pending = text }
            return pending == nil
        }
        guard wasIdle else { return }
        statusQueue.async { [self] in
            ThreadName.status.apply()
            guard let latest = pendingStatus.withLock({ pending in
                defer { pending = nil }
                return pending
            }) else { return }
            // Ignored on purpose: the status line is informational, and the next update (or
            // the daemon's own log, for READY=1 and the watchdog) says what matters.
            _ = transport.send("STATUS=" + latest)
        }
    }

    /// The watchdog interval systemd asks for (`WATCHDOG_USEC`, for this process), in
    /// microseconds, or `nil` when the watchdog is off.
    func watchdogInterval() -> UInt64? {
        transport.watchdogInterval()
    }
}
