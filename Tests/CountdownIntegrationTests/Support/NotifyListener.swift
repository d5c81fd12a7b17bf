import Glibc

/// A test-side `NOTIFY_SOCKET`: an AF_UNIX datagram socket that collects what the daemon tells
/// systemd through libsystemd's `sd_notify` (`READY=1`, `STATUS=…`, `WATCHDOG=1`, `STOPPING=1`).
final class NotifyListener {
    let path: String
    private let descriptor: Int32
    /// Every datagram received so far, in order.
    private(set) var messages: [String] = []

    init(path: String) {
        self.path = path
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        precondition(bound == 0, "cannot bind the notify socket at \(path): \(String(cString: strerror(errno)))")
        // A daemon run as another user (setpriv) must be able to send to it.
        chmod(path, 0o666)
    }

    deinit {
        close(descriptor)
        unlink(path)
    }

    /// Waits for a datagram containing a line that starts with `prefix`; returns that line.
    /// - Returns: `nil` when `timeout` seconds pass first.
    func waitFor(_ prefix: String, timeout: Double) -> String? {
        if let line = firstLine(withPrefix: prefix, in: messages) { return line }
        let deadline = monotonicNow() + timeout
        while let message = receive(until: deadline) {
            messages.append(message)
            if let line = firstLine(withPrefix: prefix, in: [message]) { return line }
        }
        return nil
    }

    /// Forgets what was received so far.
    func clear() {
        drain()
        messages.removeAll()
    }

    /// Reads whatever has arrived, without waiting.
    func drain() {
        while let message = receive(until: monotonicNow()) {
            messages.append(message)
        }
    }

    /// Every line of every datagram so far that starts with `prefix`.
    func lines(withPrefix prefix: String) -> [String] {
        messages.flatMap { $0.split(separator: "\n").map(String.init) }.filter { $0.hasPrefix(prefix) }
    }

    private func firstLine(withPrefix prefix: String, in messages: [String]) -> String? {
        for message in messages {
            for line in message.split(separator: "\n") where line.hasPrefix(prefix) {
                return String(line)
            }
        }
        return nil
    }

    private func receive(until deadline: Double) -> String? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let waitMs = Int32(max(0, (deadline - monotonicNow()) * 1000))
        guard poll(&poller, 1, waitMs) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }
}
