@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Foundation
import Glibc
import Testing

/// The service manager against a real datagram socket standing in for systemd's, with its
/// delayed work run by hand at chosen instants: no sleeps, no timers.
@Suite("The service manager: notify messages, STATUS= rate limit, watchdog, storage retries")
struct ServiceManagerTests {
    func counts(_ running: Int) -> StatusCounts {
        StatusCounts(running: running, paused: 0, subscribers: 0, connections: 1, storage: nil, cluster: nil)
    }

    /// A service manager on its own queue, its delayed work, and the socket it talks to.
    struct Fixture {
        let queue = DispatchQueue(label: "service-test")
        let socket: NotifySocket
        let later: DelayedWork
        let service: ServiceManager

        init(statusInterval: Int = 250, watchdogMicroseconds: UInt64? = nil) throws {
            socket = try NotifySocket()
            later = DelayedWork(queue: queue)
            service = ServiceManager(
                queue: queue, later: later, statusInterval: statusInterval, logger: Logger(threshold: .error, environment: [:]),
                notifier: SystemdNotifier(transport: socket.transport(watchdogMicroseconds: watchdogMicroseconds))
            )
        }

        /// Runs what is due at `milliseconds`; returns how many pieces of work ran.
        func run(at milliseconds: Int64) -> Int {
            queue.sync { later.runDue(now: .milliseconds(milliseconds)) }
        }
    }

    @Test("READY=1 carries the first status; STOPPING=1 is sent as such")
    func readyAndStopping() throws {
        let fixture = try Fixture()
        fixture.queue.sync { fixture.service.ready(status: counts(3)) }
        #expect(fixture.socket.receive() == "READY=1\nSTATUS=3 running, 0 paused, 0 subscribers, 1 connections")
        fixture.queue.sync { fixture.service.stopping() }
        #expect(fixture.socket.receive() == "STOPPING=1")
    }

    @Test("fifty changes at once send the first, then the last once the interval has passed, and nothing between; the last word is the truth")
    func statusRateLimit() throws {
        let fixture = try Fixture(statusInterval: 200)
        fixture.queue.sync {
            for running in 1...50 { fixture.service.report(counts(running), now: .milliseconds(1_000)) }
        }
        #expect(fixture.socket.receive() == "STATUS=1 running, 0 paused, 0 subscribers, 1 connections")
        #expect(fixture.queue.sync { fixture.later.count } == 1, "one deferred report for the other 49")
        #expect(fixture.run(at: 1_199) == 0, "not before the interval ends")
        #expect(fixture.run(at: 1_200) == 1)
        #expect(fixture.socket.receive() == "STATUS=50 running, 0 paused, 0 subscribers, 1 connections")
        // The same counts again send nothing and schedule nothing; a change inside the quiet
        // period waits for its end, a change after it goes out at once.
        fixture.queue.sync {
            fixture.service.report(counts(50), now: .milliseconds(1_250))
            #expect(fixture.later.count == 0, "nothing new to say")
            fixture.service.report(counts(51), now: .milliseconds(1_250))
        }
        #expect(fixture.run(at: 1_399) == 0)
        #expect(fixture.run(at: 1_400) == 1)
        #expect(fixture.socket.receive() == "STATUS=51 running, 0 paused, 0 subscribers, 1 connections")
        fixture.queue.sync { fixture.service.report(counts(52), now: .milliseconds(5_000)) }
        #expect(fixture.socket.receive() == "STATUS=52 running, 0 paused, 0 subscribers, 1 connections")
        #expect(fixture.queue.sync { fixture.later.count } == 0)
    }

    @Test("the watchdog is pinged at once, then every half interval from when each ping was due, and once (not once per missed period) after a stall")
    func watchdog() throws {
        let fixture = try Fixture(watchdogMicroseconds: 100_000)
        fixture.queue.sync { fixture.service.startWatchdog(now: .milliseconds(1_000)) }
        #expect(fixture.socket.receive() == "WATCHDOG=1", "at once")
        #expect(fixture.queue.sync { fixture.later.nextDeadline } == .milliseconds(1_050))
        #expect(fixture.run(at: 1_049) == 0)
        // A late batch: the next ping stays on the grid, 1,100 ms, not 1,060 + 50.
        #expect(fixture.run(at: 1_060) == 1)
        #expect(fixture.socket.receive() == "WATCHDOG=1")
        #expect(fixture.queue.sync { fixture.later.nextDeadline } == .milliseconds(1_100))
        // A stall of a second: one ping, then the next a period after it.
        #expect(fixture.run(at: 2_100) == 1)
        #expect(fixture.socket.receive() == "WATCHDOG=1")
        #expect(fixture.queue.sync { fixture.later.nextDeadline } == .milliseconds(2_150))
        // Starting it again does not start a second chain.
        fixture.queue.sync { fixture.service.startWatchdog(now: .milliseconds(2_100)) }
        #expect(fixture.queue.sync { fixture.later.count } == 1)
    }

    @Test("no watchdog asked for: no ping, nothing scheduled")
    func noWatchdog() throws {
        let fixture = try Fixture()
        fixture.queue.sync {
            fixture.service.startWatchdog(now: .milliseconds(1_000))
            #expect(fixture.later.count == 0)
            fixture.service.ready(status: counts(0))
        }
        #expect(fixture.socket.receive() == "READY=1\nSTATUS=0 running, 0 paused, 0 subscribers, 1 connections", "the first datagram: no ping came before it")
    }

    @Test("failing storage is retried once a second, from each attempt, until an attempt says it works; starting again meanwhile changes nothing")
    func storageRetries() throws {
        let fixture = try Fixture()
        final class Attempts: @unchecked Sendable { var count = 0 }
        let attempts = Attempts()
        fixture.queue.sync {
            fixture.service.startRetrying(now: .milliseconds(1_000)) {
                attempts.count += 1
                return attempts.count < 3
            }
            fixture.service.startRetrying(now: .milliseconds(1_000)) { Issue.record("a second retry loop started"); return false }
        }
        #expect(fixture.run(at: 1_999) == 0)
        #expect(fixture.run(at: 2_500) == 1 && attempts.count == 1)
        #expect(fixture.queue.sync { fixture.later.nextDeadline } == .milliseconds(3_500), "a second after the attempt")
        #expect(fixture.run(at: 3_500) == 1 && attempts.count == 2)
        #expect(fixture.run(at: 4_500) == 1 && attempts.count == 3)
        #expect(fixture.queue.sync { fixture.later.count } == 0, "it works: no more attempts")
        // Once stopped, it can start again.
        fixture.queue.sync { fixture.service.startRetrying(now: .milliseconds(5_000)) { attempts.count += 1; return false } }
        #expect(fixture.run(at: 6_000) == 1 && attempts.count == 4)
    }
}
