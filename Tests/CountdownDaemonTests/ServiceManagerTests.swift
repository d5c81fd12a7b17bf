@testable import CountdownDaemon
import Dispatch
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

@Suite("The service manager: notify messages, STATUS= rate limit, watchdog")
struct ServiceManagerTests {
    func counts(_ running: Int) -> StatusCounts {
        StatusCounts(running: running, paused: 0, subscribers: 0, connections: 1, storage: nil, cluster: nil)
    }

    @Test("READY=1 carries the first status; STOPPING=1 is sent as such")
    func readyAndStopping() throws {
        let socket = try NotifySocket()
        let queue = DispatchQueue(label: "service-test")
        let service = ServiceManager(queue: queue, statusInterval: 250, logger: Logger(threshold: .error, environment: [:]), notifier: SystemdNotifier(transport: socket.transport()))
        queue.sync { service.ready(status: counts(3)) }
        #expect(socket.receive() == "READY=1\nSTATUS=3 running, 0 paused, 0 subscribers, 1 connections")
        queue.sync { service.stopping() }
        #expect(socket.receive() == "STOPPING=1")
    }

    @Test("fifty changes at once send one STATUS= now and one with the last counts after the interval, never more")
    func statusRateLimit() throws {
        let socket = try NotifySocket()
        let queue = DispatchQueue(label: "service-status-test")
        let service = ServiceManager(queue: queue, statusInterval: 200, logger: Logger(threshold: .error, environment: [:]), notifier: SystemdNotifier(transport: socket.transport()))
        // Inside one block on the queue no deferred report can run in between, whatever the
        // machine's speed: the first change goes out, the other 49 wait for the interval.
        queue.sync {
            for running in 1...50 { service.report(counts(running)) }
        }
        #expect(socket.receive() == "STATUS=1 running, 0 paused, 0 subscribers, 1 connections")
        #expect(socket.receive() == "STATUS=50 running, 0 paused, 0 subscribers, 1 connections", "the last word is the truth")
        // Nothing changed since: a report of the same counts sends nothing; a new one goes out.
        queue.sync { service.report(counts(50)) }
        queue.sync { service.report(counts(51)) }
        #expect(socket.receive() == "STATUS=51 running, 0 paused, 0 subscribers, 1 connections")
        #expect(socket.drain().isEmpty, "\(socket.drain())")
    }

    @Test("the watchdog is pinged from the queue at half the interval systemd asks for")
    func watchdog() throws {
        let socket = try NotifySocket()
        let queue = DispatchQueue(label: "service-watchdog-test")
        let service = ServiceManager(
            queue: queue, statusInterval: 250, logger: Logger(threshold: .error, environment: [:]),
            notifier: SystemdNotifier(transport: socket.transport(watchdogMicroseconds: 100_000))
        )
        queue.sync { service.startWatchdog() }
        for ping in 0..<3 {
            #expect(socket.receive() == "WATCHDOG=1", "ping \(ping)")
        }
    }

    @Test("no watchdog asked for: no ping")
    func noWatchdog() throws {
        let socket = try NotifySocket()
        let queue = DispatchQueue(label: "service-no-watchdog-test")
        let service = ServiceManager(queue: queue, statusInterval: 250, logger: Logger(threshold: .error, environment: [:]), notifier: SystemdNotifier(transport: socket.transport()))
        queue.sync {
            service.startWatchdog()
            service.ready(status: counts(0))
            // A witness on the same queue, later than a first ping would be (at once): the next
            // datagram after READY=1 is its STOPPING=1, so no ping came between.
            queue.asyncAfter(deadline: .now() + .milliseconds(300)) { service.stopping() }
        }
        #expect(socket.receive() == "READY=1\nSTATUS=0 running, 0 paused, 0 subscribers, 1 connections")
        #expect(socket.receive() == "STOPPING=1", "no WATCHDOG=1 before it")
    }
}
