@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Glibc
import Testing

extension BootClockSuites {
    @Suite("The wake-up timer: a CLOCK_BOOTTIME timerfd on the poller")
    struct WakeupTimerTests {
        /// What the timer's handler saw, touched only on the queue.
        final class Fired: @unchecked Sendable {
            var count = 0
        }

        /// A connected pair of stream sockets (close-on-exec). A socket is also a real descriptor
        /// the poller can watch and `timerfd_settime` refuses (EINVAL).
        static func socketPair() throws -> (Int32, Int32) {
            var ends: [Int32] = [0, 0]
            try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0)
            return (ends[0], ends[1])
        }

        /// Starts `poller`'s thread, each batch delivering the urgent registrations first, as
        /// the daemon's does.
        static func startPolling(_ poller: EventPoller) throws {
            try poller.start { batch in
                batch.deliverUrgent()
                batch.deliverOthers()
                return false
            }
        }

        /// Starts batches on a poller: each `poke` writes a byte to a socket pair whose other end
        /// the poller watches, and `body` runs within the batch that follows, on the queue, where
        /// the daemon arms its timer.
        final class BatchStarter: @unchecked Sendable {
            private let reading: Int32
            private let writing: Int32
            private let poller: EventPoller
            private let queue: DispatchQueue
            private var token: EventPoller.Token?

            init(poller: EventPoller, queue: DispatchQueue, body: @escaping (BatchStarter) -> Void) throws {
                (reading, writing) = try WakeupTimerTests.socketPair()
                self.poller = poller
                self.queue = queue
                let reading = reading
                token = try queue.sync { () throws(DaemonError) in
                    try poller.register(reading, interest: .readable) { [unowned self] _ in
                        var byte: UInt8 = 0
                        _ = read(reading, &byte, 1)  // Ignored on purpose: readiness was the message.
                        body(self)
                    }
                }
            }

            /// Starts one more batch; whether its byte was written.
            func poke() -> Bool {
                var byte: UInt8 = 1
                return write(writing, &byte, 1) == 1
            }

            /// Stops watching, and closes both ends.
            func stop() {
                if let token { queue.sync { poller.unregister(token) } }
                close(reading)
                close(writing)
            }
        }

        @Test("arming, re-arming earlier and later, and disarming reach the kernel; an armed instant fires the handler on the queue")
        func armAndFire() throws {
            let queue = DispatchQueue(label: "timer-test")
            let poller = try EventPoller(queue: queue)
            let fired = Fired()
            let firedSignal = DispatchSemaphore(value: 0)
            let timer = try #require(queue.sync {
                try? WakeupTimer(poller: poller) {
                    dispatchPrecondition(condition: .onQueue(queue))
                    fired.count += 1
                    firedSignal.signal()
                }
            })
            defer { queue.sync { timer.cancel() } }
            // The kernel's own view (timerfd_gettime), so nothing here waits for the clock.
            try queue.sync { () throws in
                let now = SystemClock.now()
                #expect(try timer.kernelTimeLeft() == nil, "a new timer is disarmed")
                try timer.arm(at: now.advanced(byMilliseconds: 3_600_000))
                let hour = try #require(try timer.kernelTimeLeft())
                #expect(hour > 3_000 * 1_000_000_000 && hour <= 3_600 * 1_000_000_000)
                try timer.arm(at: now.advanced(byMilliseconds: 60_000))  // Earlier: re-armed.
                let minute = try #require(try timer.kernelTimeLeft())
                #expect(minute > 0 && minute <= 60 * 1_000_000_000)
                try timer.arm(at: now.advanced(byMilliseconds: 7_200_000))  // Later: re-armed too.
                #expect(try #require(try timer.kernelTimeLeft()) > 3_600 * 1_000_000_000)
                // To the nanosecond, not the second: an instant .999 s past a whole second keeps it.
                let precise = Instant(nanoseconds: (now.nanoseconds / 1_000_000_000 + 100) * 1_000_000_000 + 999_000_000)
                try timer.arm(at: precise)
                let left = try #require(try timer.kernelTimeLeft())
                let expected = precise.nanoseconds - SystemClock.now().nanoseconds
                #expect(abs(left - expected) < 500_000_000, "the kernel's \(left) ns against \(expected) ns")
                try timer.arm(at: nil)
                #expect(try timer.kernelTimeLeft() == nil, "nil disarms")
            }
            try Self.startPolling(poller)
            // An instant already past fires at once, through the poller, on the queue.
            try queue.sync { () throws in try timer.arm(at: SystemClock.now()) }
            #expect(firedSignal.wait(timeout: .now() + 30) == .success, "the timer fired")
            queue.sync {
                #expect(fired.count == 1)
                timer.fired(at: SystemClock.now())
            }
            // The same instant again after firing arms again (a fired one-shot timer is disarmed).
            try queue.sync { () throws in try timer.arm(at: SystemClock.now()) }
            #expect(firedSignal.wait(timeout: .now() + 30) == .success, "the timer fired again")
            queue.sync { #expect(fired.count == 2) }
        }

        @Test("wake-ups are at least the minimum interval apart: an instant just after the last firing is moved")
        func minimumInterval() throws {
            let queue = DispatchQueue(label: "timer-interval-test")
            let poller = try EventPoller(queue: queue)
            let timer = try #require(queue.sync { try? WakeupTimer(poller: poller) {} })
            defer { queue.sync { timer.cancel() } }
            try queue.sync { () throws in
                let now = SystemClock.now()
                timer.fired(at: now.advanced(byMilliseconds: 10_000))  // As if it fired 10 s from now.
                try timer.arm(at: now)
                // Armed for the last firing plus the interval, ten seconds off, not for now: more
                // than nine left, however long this block took to get here.
                let left = try #require(try timer.kernelTimeLeft())
                #expect(left > 9_000 * 1_000_000, "armed for the last firing plus \(WakeupTimer.minimumWakeInterval) ns, not for now: \(left) ns")
            }
        }

        @Test("a failing timerfd_settime is reported, and the same instant asked again is tried again (not taken as armed)")
        func failedSettime() throws {
            let queue = DispatchQueue(label: "timer-failure-test")
            let poller = try EventPoller(queue: queue)
            // A socket, which timerfd_settime refuses.
            let (timerEnd, otherEnd) = try Self.socketPair()
            defer { close(otherEnd) }
            let timer = try #require(queue.sync { try? WakeupTimer(descriptor: timerEnd, poller: poller) {} })
            defer { queue.sync { timer.cancel() } }
            queue.sync {
                let instant = SystemClock.now().advanced(byMilliseconds: 1000)
                for attempt in 0..<2 {
                    do throws(DaemonError) {
                        try timer.arm(at: instant)
                        Issue.record("attempt \(attempt): arming a socket succeeded")
                    } catch {
                        #expect("\(error)".contains("timerfd_settime"), "\(error)")
                    }
                }
            }
        }

        /// Whether this kernel (and seccomp filter) has `epoll_pwait2`, which poll wake-ups need.
        static let pollWakeupsWork: Bool = {
            guard let poller = try? EventPoller(queue: DispatchQueue(label: "probe")) else { return false }
            return poller.servesPollWakeups
        }()

        /// What a poll wake-up test saw, touched only on the queue.
        final class NearWakeup: @unchecked Sendable {
            var requested: Instant?
            var firedAt: Instant?
            var batchesWoken = 0
            var wokeAgain = false
            var timerfdLeftAfterArming: Int64?? = .none
            var farTimerfdLeft: Int64?? = .none
        }

        @Test("an instant a few milliseconds off, armed within a batch, is served by the poll's own timeout: the timerfd is not armed, and the handler runs in a later batch, not in one that came before the instant",
              .enabled(if: pollWakeupsWork, "this kernel (or its seccomp filter) has no epoll_pwait2: every instant is served by the timerfd, as armAndFire tests"))
        func nearInstantServedByThePoll() throws {
            let queue = DispatchQueue(label: "timer-near-test")
            let poller = try EventPoller(queue: queue)
            let seen = NearWakeup()
            let firedSignal = DispatchSemaphore(value: 0)
            let armedSignal = DispatchSemaphore(value: 0)
            let timer = try #require(queue.sync {
                try? WakeupTimer(poller: poller) {
                    if seen.firedAt == nil {
                        seen.firedAt = SystemClock.now()
                        firedSignal.signal()
                    }
                }
            })
            defer { queue.sync { timer.cancel() } }
            // The first batch arms the timer from within it, as the daemon does at the end of each.
            let batches = try BatchStarter(poller: poller, queue: queue) { batches in
                seen.batchesWoken += 1
                // The second poke's batch comes before the instant (unless this machine took the
                // whole 15 ms to get there): a handler run early would show in firedAt.
                guard seen.batchesWoken == 1 else { return }
                do throws(DaemonError) {
                    // An hour off: beyond the horizon, so the timerfd.
                    try timer.arm(at: SystemClock.now().advanced(byMilliseconds: 3_600_000))
                    seen.farTimerfdLeft = .some(try timer.kernelTimeLeft())
                    let instant = SystemClock.now().advanced(byMilliseconds: 15)
                    seen.requested = instant
                    try timer.arm(at: instant)
                    try timer.arm(at: nil)  // Disarmed, then near: only the poll's wake-up stays.
                    try timer.arm(at: instant)
                    seen.timerfdLeftAfterArming = .some(try timer.kernelTimeLeft())
                    // Wakes the poll again at once, long before the instant.
                    seen.wokeAgain = batches.poke()
                } catch {
                    Issue.record("arming failed: \(error)")
                }
                armedSignal.signal()
            }
            defer { batches.stop() }
            try Self.startPolling(poller)
            #expect(batches.poke())
            #expect(armedSignal.wait(timeout: .now() + 30) == .success, "the batch armed the timer")
            #expect(firedSignal.wait(timeout: .now() + 30) == .success, "the near instant woke the poll")
            queue.sync {
                let far = seen.farTimerfdLeft.flatMap { $0 }
                #expect(far != nil && far! > 3_000 * 1_000_000_000, "an hour off is the timerfd's: \(String(describing: far))")
                #expect(seen.timerfdLeftAfterArming == .some(nil), "a near instant leaves the timerfd disarmed: \(String(describing: seen.timerfdLeftAfterArming))")
                #expect(seen.wokeAgain && seen.batchesWoken == 2, "the poll woke again before the instant: \(seen.batchesWoken) batches")
                if let requested = seen.requested, let firedAt = seen.firedAt {
                    #expect(firedAt >= requested, "fired at \(firedAt), before the instant armed, \(requested)")
                } else {
                    Issue.record("nothing armed or fired")
                }
            }
        }

        @Test("the poll waits until its wake-up, in nanoseconds: not at all with work left or once it passed, and no longer than the idle wake-up")
        func pollWaits() {
            let ms: Int64 = 1_000_000
            #expect(EventPoller.waitNanoseconds(workLeft: false, idleWakeMilliseconds: nil, wakeup: nil, now: 0) == -1)
            #expect(EventPoller.waitNanoseconds(workLeft: false, idleWakeMilliseconds: nil, wakeup: 1_000 + 5 * ms, now: 1_000) == 5 * ms)
            #expect(EventPoller.waitNanoseconds(workLeft: false, idleWakeMilliseconds: nil, wakeup: 1_000, now: 1_000 + 5 * ms) == 0)
            #expect(EventPoller.waitNanoseconds(workLeft: true, idleWakeMilliseconds: nil, wakeup: 1_000 + 5 * ms, now: 1_000) == 0)
            #expect(EventPoller.waitNanoseconds(workLeft: false, idleWakeMilliseconds: 1, wakeup: 1_000 + 5 * ms, now: 1_000) == ms)
            #expect(EventPoller.waitNanoseconds(workLeft: false, idleWakeMilliseconds: 10, wakeup: 1_000 + 5 * ms, now: 1_000) == 5 * ms)
            #expect(EventPoller.waitNanoseconds(workLeft: false, idleWakeMilliseconds: 1, wakeup: nil, now: 0) == ms)
        }

        /// What the refusal test saw, touched only on the queue.
        final class Refusals: @unchecked Sendable {
            var answers: [String] = []
        }

        @Test("once timerfd_settime failed, a near instant armed within a batch is refused too (not taken as the timer working again), until the kernel takes one",
              .enabled(if: pollWakeupsWork, "this kernel (or its seccomp filter) has no epoll_pwait2: no instant is the poll's"))
        func refusedStaysRefused() throws {
            let queue = DispatchQueue(label: "timer-refused-test")
            let poller = try EventPoller(queue: queue)
            // A socket, which timerfd_settime refuses.
            let (timerEnd, otherEnd) = try Self.socketPair()
            defer { close(otherEnd) }
            let timer = try #require(queue.sync { try? WakeupTimer(descriptor: timerEnd, poller: poller) {} })
            defer { queue.sync { timer.cancel() } }
            let seen = Refusals()
            let done = DispatchSemaphore(value: 0)
            let batches = try BatchStarter(poller: poller, queue: queue) { _ in
                let now = SystemClock.now()
                for (label, instant) in [("far", now.advanced(byMilliseconds: 60_000)), ("near", now.advanced(byMilliseconds: 5)),
                                         ("far again", now.advanced(byMilliseconds: 60_000)), ("near again", now.advanced(byMilliseconds: 5))] {
                    do throws(DaemonError) {
                        try timer.arm(at: instant)
                        seen.answers.append("\(label): armed")
                    } catch {
                        seen.answers.append("\(label): refused")
                    }
                }
                done.signal()
            }
            defer { batches.stop() }
            try Self.startPolling(poller)
            #expect(batches.poke())
            #expect(done.wait(timeout: .now() + 30) == .success, "the batch ran")
            queue.sync {
                #expect(seen.answers == ["far: refused", "near: refused", "far again: refused", "near again: refused"], "\(seen.answers)")
            }
        }
    }
}
