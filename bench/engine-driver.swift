// engine-driver: the hot path without I/O, for `valgrind --tool=callgrind` (make bench-instructions).
// Starts N countdowns of 1-5 s (the benchmark's spread) on a manual clock, with ticks on, then
// wakes the engine at every due instant until all are done, encoding every event into one reused
// buffer as the fan-out does. Instructions per event = (Ir of a full run - Ir with --setup-only)
// / events; both runs are printed by the Makefile target.
//
//   engine-driver N [--setup-only]

@main
struct EngineDriver {
    static func main() {
        let arguments = CommandLine.arguments
        let count = arguments.count > 1 ? Int(arguments[1]) ?? 100_000 : 100_000
        let setupOnly = arguments.contains("--setup-only")
        var engine = CountdownEngine(configuration: EngineConfiguration())
        var now = Instant.zero
        var events: [CountdownEvent] = []
        engine.setTicksEnabled(true, now: now)
        var random: UInt64 = 0x9E37_79B9_7F4A_7C15
        for index in 0..<count {
            random = random &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let milliseconds = 1000 + Int64((random >> 33) % 4000)
            events.removeAll(keepingCapacity: true)
            // The names are valid and unique: a start cannot fail.
            _ = try? engine.start("c\(index)", milliseconds: milliseconds, requester: 0, now: now, events: &events)
        }
        if setupOnly {
            print("setup \(count)")
            return
        }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(1 << 20)
        var delivered = 0
        var bytes = 0
        while let due = engine.nextWakeup {
            now = max(now, due)
            events.removeAll(keepingCapacity: true)
            engine.advance(to: now, events: &events)
            for event in events {
                buffer.removeAll(keepingCapacity: true)
                WireEncoder.appendEvent(event, name: event.name, seenBy: 0, to: &buffer)
                bytes &+= buffer.count
            }
            delivered += events.count
            if engine.runningCount == 0 { break }
        }
        print("events \(delivered) bytes \(bytes)")
    }
}
