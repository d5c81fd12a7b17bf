import CountdownCore

/// A manual clock driving a `CountdownEngine`, after swift-nio's `EmbeddedEventLoop`: time starts
/// at zero and moves only when the test says so; `advance(to:)` runs what is due, in order.
struct ManualClock {
    var engine: CountdownEngine
    private(set) var now = Instant.zero
    /// Every event so far, with the instant at which it was emitted.
    private(set) var log: [(at: Instant, event: CountdownEvent)] = []

    init(configuration: EngineConfiguration = EngineConfiguration()) {
        engine = CountdownEngine(configuration: configuration)
    }

    /// Moves time to `instant`, waking at every due instant on the way as the daemon would.
    mutating func advance(to instant: Instant) {
        while let due = engine.nextWakeup, due <= instant {
            now = max(now, due)
            var events: [CountdownEvent] = []
            engine.advance(to: now, events: &events)
            log += events.map { (now, $0) }
        }
        now = instant
    }

    /// Moves time forward by `milliseconds`.
    mutating func advance(byMilliseconds milliseconds: Int64) {
        advance(to: now.advanced(byMilliseconds: milliseconds))
    }

    /// Jumps to `instant` with a single late wake-up, as after a suspend or a stalled process.
    mutating func jump(to instant: Instant) {
        now = instant
        var events: [CountdownEvent] = []
        engine.advance(to: now, events: &events)
        log += events.map { (now, $0) }
    }

    /// The machine sleeps for `milliseconds` and wakes: the boot clock jumps, and the daemon's
    /// first batch after it tells the engine (`machineSlept`) before anything else runs.
    mutating func sleep(forMilliseconds milliseconds: Int64) {
        now = now.advanced(byMilliseconds: milliseconds)
        var events: [CountdownEvent] = []
        engine.machineSlept(for: milliseconds * 1_000_000, now: now, events: &events)
        engine.advance(to: now, events: &events)
        log += events.map { (now, $0) }
    }

    /// Runs a mutation at the current instant, logging the events it causes.
    @discardableResult
    mutating func perform(
        _ body: (inout CountdownEngine, Instant, inout [CountdownEvent]) throws(ProtocolError) -> CountdownSnapshot
    ) throws(ProtocolError) -> CountdownSnapshot {
        var events: [CountdownEvent] = []
        defer { log += events.map { (now, $0) } }
        return try body(&engine, now, &events)
    }

    /// Starts a countdown owned by `uid` at the current instant.
    @discardableResult
    mutating func start(
        _ name: String, _ milliseconds: Int64, replace: Bool = false, uid: UInt32 = 1000, onSuspend: SuspendPolicy? = nil
    ) throws(ProtocolError) -> CountdownSnapshot {
        try perform { engine, now, events throws(ProtocolError) in
            try engine.start(name, milliseconds: milliseconds, replace: replace, requester: uid, onSuspend: onSuspend, now: now, events: &events)
        }
    }

    /// Events of one countdown, as (instant, kind, remaining).
    func events(of name: String) -> [(Instant, EventKind, Int64)] {
        log.filter { $0.event.name == name }.map { ($0.at, $0.event.kind, $0.event.remainingMilliseconds) }
    }

    /// Clears the log.
    mutating func clearLog() {
        log.removeAll()
    }
}
