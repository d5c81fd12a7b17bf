import Foundation
import Glibc

/// A test-side `NOTIFY_SOCKET`: an AF_UNIX datagram socket that collects what the daemon tells
/// systemd through libsystemd's `sd_notify` (`READY=1`, `STATUS=…`, `WATCHDOG=1`, `STOPPING=1`).
///
/// A thread of its own reads it all the time, as systemd does. Read only when a test looked, the
/// socket's queue (`net.unix.max_dgram_qlen`, 10 here) filled on a busy run: the daemon's
/// status thread then blocked in `sd_notify`, holding a socket a test counted as leaked.
final class NotifyListener {
    let path: String
    private let inbox: Inbox

    /// What the reader thread and the test share, under one condition.
    private final class Inbox: @unchecked Sendable {
        let descriptor: Int32
        let condition = NSCondition()
        var received: [String] = []
        /// Set while the reader has taken a datagram from the socket but not yet noted it.
        var reading = false
        var closed = false

        init(descriptor: Int32) {
            self.descriptor = descriptor
        }

        func readForever() {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                condition.lock()
                if closed {
                    condition.unlock()
                    close(descriptor)
                    return
                }
                condition.unlock()
                var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 100) > 0 else { continue }
                condition.lock()
                reading = true
                condition.unlock()
                let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                condition.lock()
                if count > 0 { received.append(String(decoding: buffer[0..<count], as: UTF8.self)) }
                reading = false
                condition.broadcast()
                condition.unlock()
            }
        }

        /// Whether a datagram waits in the socket, unread.
        var socketHasData: Bool {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            return poll(&poller, 1, 0) > 0
        }
    }

    init(path: String) {
        self.path = path
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        precondition(bound == 0, "cannot bind the notify socket at \(path): \(String(cString: strerror(errno)))")
        // A daemon run as another user (setpriv) must be able to send to it.
        chmod(path, 0o666)
        let inbox = Inbox(descriptor: descriptor)
        self.inbox = inbox
        Thread { inbox.readForever() }.start()
    }

    deinit {
        inbox.condition.lock()
        inbox.closed = true  // The reader closes the socket within its poll interval.
        inbox.condition.unlock()
        unlink(path)
    }

    /// Every datagram received so far, in order.
    var messages: [String] {
        inbox.condition.lock()
        defer { inbox.condition.unlock() }
        return inbox.received
    }

    /// Waits for a datagram containing a line that starts with `prefix` (among all received
    /// since the last `clear`); returns that line.
    /// - Returns: `nil` when `timeout` seconds pass first.
    func waitFor(_ prefix: String, timeout: Double) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        inbox.condition.lock()
        defer { inbox.condition.unlock() }
        var checked = 0
        while true {
            if let line = firstLine(withPrefix: prefix, in: inbox.received[checked...]) { return line }
            checked = inbox.received.count
            guard inbox.condition.wait(until: deadline) || inbox.received.count > checked else { return nil }
        }
    }

    /// Forgets what was received so far (after taking in what has arrived).
    func clear() {
        drain()
        inbox.condition.lock()
        inbox.received.removeAll()
        inbox.condition.unlock()
    }

    /// Returns once everything that has arrived in the socket is among `messages`.
    func drain() {
        inbox.condition.lock()
        defer { inbox.condition.unlock() }
        while inbox.reading || inbox.socketHasData {
            _ = inbox.condition.wait(until: Date().addingTimeInterval(0.01))
        }
    }

    /// Every line of every datagram so far that starts with `prefix`.
    func lines(withPrefix prefix: String) -> [String] {
        messages.flatMap { $0.split(separator: "\n").map(String.init) }.filter { $0.hasPrefix(prefix) }
    }

    private func firstLine(withPrefix prefix: String, in messages: ArraySlice<String>) -> String? {
        for message in messages {
            for line in message.split(separator: "\n") where line.hasPrefix(prefix) {
                return String(line)
            }
        }
        return nil
    }
}
