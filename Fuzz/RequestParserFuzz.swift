// libFuzzer entry point for the request path of the protocol: framing, parsing, the engine and
// the encoder, exactly as the daemon chains them, with time advancing by input bytes.
// Built with swiftc together with Sources/CountdownCore (see Makefile: fuzz, fuzz-smoke).

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRequestPath(_ data: UnsafeRawPointer, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    var framer = LineFramer(maximumLineLength: 256)
    var engine = CountdownEngine(configuration: EngineConfiguration(retentionMilliseconds: 5000, maximumCountdowns: 64))
    var now = Instant.zero
    var events: [CountdownEvent] = []
    var out: [UInt8] = []
    let clock = WallClockMapping(monotonic: .zero, unixMilliseconds: 1_700_000_000_000)
    // Feed in uneven chunks, so partial lines and split CRLFs are exercised too.
    var offset = 0
    var chunk = 1
    while offset < bytes.count {
        let end = min(bytes.count, offset + chunk)
        framer.append(bytes[offset..<end])
        offset = end
        chunk = chunk % 7 + 1
        while let frame = framer.nextFrame() {
            guard case .line(let line) = frame else { continue }
            // Every line also moves time forward a little, by its first byte in milliseconds.
            now = now.advanced(byMilliseconds: Int64(line.first ?? 0) * 13)
            if line.count % 11 == 0 {
                // And some lines are a sleep of the machine, of their length in seconds.
                let slept = Int64(line.count) * 1_000_000_000
                now = now.advanced(byNanoseconds: slept)
                engine.machineSlept(for: slept, now: now, events: &events)
            }
            engine.advance(to: now, events: &events)
            do {
                guard let request = try RequestParser.parse(line) else { continue }
                let uid: UInt32 = line.count % 3 == 0 ? 0 : 1000
                switch request {
                case .start(let name, let ms, let replace, let onSuspend, let cycle):
                    WireEncoder.appendOK(
                        try engine.start(
                            name, milliseconds: ms ?? CountdownDuration.defaultMilliseconds, replace: replace, requester: uid, onSuspend: onSuspend,
                            cycle: cycle, keepsCycle: ms == nil, now: now, events: &events
                        ),
                        clock: clock, to: &out
                    )
                case .skip(let name):
                    WireEncoder.appendOK(try engine.skip(name, requester: uid, now: now, events: &events), clock: clock, to: &out)
                case .set(let name, let policy):
                    WireEncoder.appendOK(try engine.setSuspendPolicy(name, to: policy, requester: uid, now: now, events: &events), clock: clock, to: &out)
                case .startAt(let name, let unix, let replace):
                    let ms = unix - clock.unixMilliseconds(of: now)
                    WireEncoder.appendOK(try engine.start(name, milliseconds: ms, replace: replace, requester: uid, pinnedTo: unix, now: now, events: &events), clock: clock, to: &out)
                    _ = engine.wallClockChanged(to: WallClockMapping(monotonic: now, unixMilliseconds: clock.unixMilliseconds + Int64(line.count)), now: now)
                case .status(let name):
                    WireEncoder.appendCountdown(try engine.status(of: name, now: now), clock: clock, to: &out)
                case .list(let states, let prefix):
                    // In small slices, as the daemon does across batches.
                    var listing = engine.listing(ListFilter(viewer: uid, states: states, prefix: prefix), frozen: true, now: now)
                    while !listing.isFinished {
                        for snapshot in engine.nextSlice(of: &listing, limit: 3, now: now) {
                            WireEncoder.appendCountdown(snapshot, clock: clock, to: &out)
                        }
                    }
                case .cancel(let name):
                    WireEncoder.appendOK(try engine.cancel(name, requester: uid, now: now, events: &events), clock: clock, to: &out)
                case .pause(let name):
                    WireEncoder.appendOK(try engine.pause(name, requester: uid, now: now, events: &events), clock: clock, to: &out)
                case .resume(let name):
                    WireEncoder.appendOK(try engine.resume(name, requester: uid, now: now, events: &events), clock: clock, to: &out)
                case .extend(let name, let ms):
                    WireEncoder.appendOK(try engine.extend(name, by: ms, requester: uid, now: now, events: &events), clock: clock, to: &out)
                case .remove(let name):
                    WireEncoder.appendOK(try engine.remove(name, requester: uid, now: now, events: &events), clock: clock, to: &out)
                case .stats:
                    WireEncoder.appendStat("running", "\(engine.runningCount)", to: &out)
                case .subscribe(let names, _, _, _):
                    for snapshot in engine.activeSnapshots(matching: names.isEmpty ? nil : Set(names), now: now) {
                        WireEncoder.appendSnapshotEvent(sequence: engine.lastSequence, snapshot, clock: clock, to: &out)
                    }
                case .unsubscribe, .ping, .quit:
                    WireEncoder.appendOK("pong", to: &out)
                }
            } catch {
                WireEncoder.appendError(error, to: &out)
            }
            for event in events { WireEncoder.appendEvent(event, to: &out) }
            events.removeAll(keepingCapacity: true)
            // Every encoded line must read back: the codec never writes what it cannot parse.
            if out.count > 1 << 16 {
                checkEncodedLines(out)
                out.removeAll(keepingCapacity: true)
            }
        }
    }
    checkEncodedLines(out)
    // Invariants that must hold whatever the input was.
    precondition(engine.runningCount >= 0 && engine.pausedCount >= 0)
    precondition(engine.runningCount + engine.pausedCount <= engine.count)
    precondition(engine.count <= 64 || engine.count == 0)
    if let wake = engine.nextWakeup { precondition(wake >= Instant.zero) }
    return 0
}

private func checkEncodedLines(_ out: [UInt8]) {
    for line in out.split(separator: UInt8(ascii: "\n")) {
        if case .unrecognized(let text) = WireLine.parse(String(decoding: line, as: UTF8.self)) {
            preconditionFailure("encoder wrote a line the decoder cannot read: \(text)")
        }
    }
}
