@testable import CountdownDaemon
import Foundation
import Glibc
import Testing

/// A datagram socket standing in for systemd's notify socket, and a transport that sends to it
/// as `sd_notify` does (one datagram per notification). The test reads what arrives.
final class NotifySocket: @unchecked Sendable {
    let path: String
    private let descriptor: Int32

    init() throws {
        path = NSTemporaryDirectory() + "notify-test-\(getpid())-\(UUID().uuidString.prefix(8)).sock"
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        try #require(descriptor >= 0)
        let bound = Self.withAddress(path) { bind(descriptor, $0, $1) }
        try #require(bound == 0, "bind \(path): \(String(cString: strerror(errno)))")
    }

    deinit {
        close(descriptor)
        unlink(path)
    }

    static func withAddress(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// Sends to this socket from a socket of its own, as libsystemd does.
    func transport(watchdogMicroseconds: UInt64? = nil) -> SystemdNotifier.Transport {
        let path = self.path
        return SystemdNotifier.Transport(
            send: { text in
                let sender = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
                guard sender >= 0 else { return -errno }
                defer { close(sender) }
                let sent = NotifySocket.withAddress(path) { address, length in
                    Int32(sendto(sender, text, text.utf8.count, 0, address, length))
                }
                return sent < 0 ? -errno : 1
            },
            watchdogInterval: { watchdogMicroseconds }
        )
    }

    /// The next datagram, waiting up to `timeout` seconds.
    func receive(timeout: Double = 30) -> String? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(timeout * 1000)) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : nil
    }

    /// Whatever has arrived, without waiting.
    func drain() -> [String] {
        var messages: [String] = []
        while let message = receive(timeout: 0) { messages.append(message) }
        return messages
    }
}

