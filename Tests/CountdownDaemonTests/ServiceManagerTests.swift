@testable import CountdownDaemon
import Dispatch
import Foundation
import Glibc
import Testing

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

    @Test("fifty changes at once send at most two STATUS= (the first, and the last after the interval); the last word is the truth")
    func statusRateLimit() throws {
        let socket = try NotifySocket()
        let queue = DispatchQueue(label: "service-status-test")
        let service = ServiceManager(queue: queue, statusInterval: 200, logger: Logger(threshold: .error, environment: [:]), notifier: SystemdNotifier(transport: socket.transport()))
        // Inside one block on the queue no deferred report can run in between, whatever the
        // machine's speed: the first change goes out, the other 49 wait for the interval. (The
        // notifier's own queue may still replace the first by the last, if it had not sent it.)
        queue.sync {
            for running in 1...50 { service.report(counts(running)) }
        }
        var received: [String] = []
        while received.last != "STATUS=50 running, 0 paused, 0 subscribers, 1 connections", let message = socket.receive() {
            received.append(message)
        }
        #expect(received.last == "STATUS=50 running, 0 paused, 0 subscribers, 1 connections", "the last word is the truth: \(received)")
        #expect(received.count <= 2 && received.dropLast().allSatisfy { $0 == "STATUS=1 running, 0 paused, 0 subscribers, 1 connections" }, "\(received)")
        // The same counts again send nothing; new ones go out; a witness on the queue, later
        // than the interval, comes next: nothing else was sent in between.
        queue.sync {
            service.report(counts(50))
            service.report(counts(51))
            queue.asyncAfter(deadline: .now() + .milliseconds(400)) { service.stopping() }
        }
        #expect(socket.receive() == "STATUS=51 running, 0 paused, 0 subscribers, 1 connections")
        #expect(socket.receive() == "STOPPING=1", "no other STATUS= between")
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
