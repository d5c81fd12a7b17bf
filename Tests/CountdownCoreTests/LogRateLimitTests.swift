import CountdownCore
import Testing

@Suite("Log rate limit: a burst per window in full, the rest counted and said once")
struct LogRateLimitTests {
    @Test("one per window: the first is logged, the rest counted; the window's end says how many; the next opens a new window")
    func onePerWindow() {
        var limit = LogRateLimit(windowNanoseconds: 10_000)
        #expect(limit.occurrence(at: .init(nanoseconds: 100)) == .log(previouslySuppressed: 0))
        #expect(limit.occurrence(at: .init(nanoseconds: 200)) == .suppressed(firstInWindow: true, windowEnd: .init(nanoseconds: 10_100)))
        #expect(limit.occurrence(at: .init(nanoseconds: 300)) == .suppressed(firstInWindow: false, windowEnd: .init(nanoseconds: 10_100)))
        #expect(limit.occurrence(at: .init(nanoseconds: 10_099)) == .suppressed(firstInWindow: false, windowEnd: .init(nanoseconds: 10_100)))
        #expect(limit.endWindow(at: .init(nanoseconds: 10_100)) == 3)
        #expect(limit.endWindow(at: .init(nanoseconds: 10_100)) == 0, "said once")
        #expect(limit.occurrence(at: .init(nanoseconds: 10_100)) == .log(previouslySuppressed: 0))
    }

    @Test("a window whose end has not been said yet is said by the occurrence that opens the next; its late end then says nothing")
    func lateWindowEnd() {
        var limit = LogRateLimit(windowNanoseconds: 10_000)
        _ = limit.occurrence(at: .zero)
        _ = limit.occurrence(at: .init(nanoseconds: 5))
        _ = limit.occurrence(at: .init(nanoseconds: 6))
        #expect(limit.occurrence(at: .init(nanoseconds: 20_000)) == .log(previouslySuppressed: 2))
        #expect(limit.endWindow(at: .init(nanoseconds: 10_000)) == 0, "a later window began; nothing counted twice")
    }

    @Test("a burst of three per window")
    func burst() {
        var limit = LogRateLimit(windowNanoseconds: 10_000, burst: 3)
        let verdicts = (0..<5).map { limit.occurrence(at: .init(nanoseconds: Int64($0))) }
        #expect(verdicts == [
            .log(previouslySuppressed: 0), .log(previouslySuppressed: 0), .log(previouslySuppressed: 0),
            .suppressed(firstInWindow: true, windowEnd: .init(nanoseconds: 10_000)),
            .suppressed(firstInWindow: false, windowEnd: .init(nanoseconds: 10_000)),
        ])
        #expect(limit.endWindow(at: .init(nanoseconds: 10_000)) == 2)
    }
}
