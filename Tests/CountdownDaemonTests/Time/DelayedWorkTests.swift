@testable import CountdownDaemon
import CountdownCore
import Dispatch
import Testing

@Suite("Delayed work: run after a batch, in deadline order, never early, never in a loop")
struct DelayedWorkTests {
    final class Log: @unchecked Sendable { var entries: [String] = [] }

    @Test("work runs in deadline order, ties in the order scheduled, only once due, each with the batch's now")
    func order() {
        let queue = DispatchQueue(label: "delayed-work-test")
        let later = DelayedWork(queue: queue)
        let log = Log()
        queue.sync {
            for (name, milliseconds) in [("c", 30), ("a", 10), ("b1", 20), ("b2", 20), ("d", 40)] {
                later.schedule(at: .milliseconds(Int64(milliseconds))) { now in log.entries.append("\(name)@\(now)") }
            }
            #expect(later.nextDeadline == .milliseconds(10))
            #expect(later.runDue(now: .milliseconds(9)) == 0)
            #expect(later.runDue(now: .milliseconds(25)) == 3)
            #expect(later.runDue(now: .milliseconds(30)) == 1)
            #expect(later.nextDeadline == .milliseconds(40))
        }
        #expect(log.entries == ["a@\(Instant.milliseconds(25))", "b1@\(Instant.milliseconds(25))", "b2@\(Instant.milliseconds(25))", "c@\(Instant.milliseconds(30))"])
    }

    @Test("work that schedules itself again, already due, waits for the next call")
    func noLoop() {
        let queue = DispatchQueue(label: "delayed-work-loop-test")
        let later = DelayedWork(queue: queue)
        let log = Log()
        queue.sync {
            func again(_ now: Instant) {
                log.entries.append("ran")
                later.schedule(at: now) { again($0) }
            }
            later.schedule(at: .zero) { again($0) }
            #expect(later.runDue(now: .milliseconds(1_000)) == 1)
            #expect(later.runDue(now: .milliseconds(1_000)) == 1)
            #expect(later.count == 1)
        }
        #expect(log.entries.count == 2)
    }

    @Test("the owner of the timer hears of each new earliest deadline, and only of those")
    func earlierDeadline() {
        let queue = DispatchQueue(label: "delayed-work-earliest-test")
        let later = DelayedWork(queue: queue)
        let log = Log()
        queue.sync {
            later.onEarlierDeadline = { log.entries.append("\(later.nextDeadline!)") }
            later.schedule(at: .milliseconds(50)) { _ in }
            later.schedule(at: .milliseconds(70)) { _ in }
            later.schedule(at: .milliseconds(20)) { _ in }
            later.schedule(at: .milliseconds(20)) { _ in }
        }
        #expect(log.entries == ["\(Instant.milliseconds(50))", "\(Instant.milliseconds(20))"])
    }

    @Test("a thousand pieces of work scheduled in random order run sorted")
    func heapOrder() {
        let queue = DispatchQueue(label: "delayed-work-heap-test")
        let later = DelayedWork(queue: queue)
        final class Times: @unchecked Sendable { var values: [Int64] = [] }
        let times = Times()
        var generator = SystemRandomNumberGenerator()
        let deadlines = (0..<1_000).map { _ in Int64.random(in: 0..<10_000, using: &generator) }
        queue.sync {
            for deadline in deadlines {
                later.schedule(at: .milliseconds(deadline)) { _ in times.values.append(deadline) }
            }
            var now: Int64 = 0
            while later.count > 0 {
                later.runDue(now: .milliseconds(now))
                now += 97
            }
        }
        #expect(times.values == deadlines.sorted())
    }
}
