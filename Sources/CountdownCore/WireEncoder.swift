/// Encodes replies and events of protocol v1 into bytes, appending to a caller's buffer.
///
/// Numbers are written digit by digit and strings as their UTF-8 bytes, so encoding does no
/// formatting through `String` and allocates nothing beyond the buffer's own growth. The daemon
/// encodes each event once and hands the same bytes to every subscriber.
public enum WireEncoder {
    /// The protocol version this codec speaks.
    public static let protocolVersion = 1

    /// `HELLO countdownd 1 <daemonVersion>`
    public static func appendGreeting(daemonVersion: String, to out: inout [UInt8]) {
        append("HELLO countdownd ", to: &out)
        appendDecimal(Int64(protocolVersion), to: &out)
        out.append(UInt8(ascii: " "))
        append(daemonVersion, to: &out)
        out.append(UInt8(ascii: "\n"))
    }

    /// `OK <text>`
    public static func appendOK(_ text: String, to out: inout [UInt8]) {
        append("OK ", to: &out)
        append(text, to: &out)
        out.append(UInt8(ascii: "\n"))
    }

    /// `OK <count>`: the end of a `LIST` or `STATUS` block.
    public static func appendOK(count: Int, to out: inout [UInt8]) {
        append("OK ", to: &out)
        appendDecimal(Int64(count), to: &out)
        out.append(UInt8(ascii: "\n"))
    }

    /// `OK <countdown fields>`: the reply to a mutation.
    public static func appendOK(_ snapshot: CountdownSnapshot, clock: WallClockMapping, to out: inout [UInt8]) {
        append("OK ", to: &out)
        appendFields(snapshot, clock: clock, to: &out)
        out.append(UInt8(ascii: "\n"))
    }

    /// `COUNTDOWN <countdown fields>`: one line of a `STATUS` or `LIST` block.
    public static func appendCountdown(_ snapshot: CountdownSnapshot, clock: WallClockMapping, to out: inout [UInt8]) {
        append("COUNTDOWN ", to: &out)
        appendFields(snapshot, clock: clock, to: &out)
        out.append(UInt8(ascii: "\n"))
    }

    /// `ERR <code> <message>[ <key>=<value>…]`; control characters in the message become spaces,
    /// so it stays one line.
    public static func appendError(_ error: ProtocolError, to out: inout [UInt8]) {
        append("ERR ", to: &out)
        append(error.code.rawValue, to: &out)
        out.append(UInt8(ascii: " "))
        for byte in error.message.utf8 {
            out.append(byte < 0x20 || byte == 0x7F ? UInt8(ascii: " ") : byte)
        }
        for field in error.fields {
            out.append(UInt8(ascii: " "))
            append(field.key, to: &out)
            out.append(UInt8(ascii: "="))
            append(field.value, to: &out)
        }
        out.append(UInt8(ascii: "\n"))
    }

    /// `EVENT <seq> <kind> <name> <remaining_ms> <total_ms> [<late_ms> | suspend]`: `late_ms` on
    /// a late `done`, `suspend` on a `paused` or `resumed` that the machine's sleep caused.
    /// As root sees it: the key for a name, the daemon-wide number.
    public static func appendEvent(_ event: CountdownEvent, to out: inout [UInt8]) {
        appendEvent(event, name: event.name, seenBy: 0, to: &out)
    }

    /// The same, as `viewer` sees it: with the name as the receiving client writes it (see
    /// `CountdownAddress`), and the number (`CountdownEvent.sequence(seenBy:)`).
    ///
    /// The daemon's hot path (each tick is one of these): the line is written into scratch
    /// memory and appended in one copy (`ScratchWriter`).
    public static func appendEvent(_ event: CountdownEvent, name: String, seenBy viewer: UInt32, to out: inout [UInt8]) {
        // The fields, taken out of the event so that the closures below capture no copy of it.
        let sequence = event.sequence(seenBy: viewer)
        let kind = wireName(of: event.kind)
        let remaining = event.remainingMilliseconds
        let total = event.totalMilliseconds
        let late = event.lateMilliseconds
        let suspend = event.causedBySuspend
        // Rare fields: a `changed`'s setting in the optional field's place, and a cycle's
        // (` - phase=2/8 label=break`) after it.
        var rareFields: [UInt8] = []
        if let policy = event.suspendPolicy {
            rareFields.append(contentsOf: (policy == .pause ? " pause-on-suspend" : " count-on-suspend").utf8)
        }
        if let cycle = event.cycle {
            if late == nil && !suspend && event.suspendPolicy == nil { rareFields.append(contentsOf: " -".utf8) }
            appendCycleFields(cycle, to: &rareFields)
        }
        var name = name
        name.withUTF8 { nameBytes in
            // "EVENT " + seq + " " + kind + " " + name + 3 × (" " + number) + " suspend" + "\n"
            // (a line has `late_ms` or ` suspend`, never both: both are counted, to be simple).
            let capacity = 6 + ScratchWriter.maximumDecimalLength + 1 + kind.utf8CodeUnitCount + 1 + nameBytes.count
                + 3 * (1 + ScratchWriter.maximumDecimalLength) + 8 + rareFields.count + 1
            ScratchWriter.append(capacity: capacity, to: &out) { line in
                line.write("EVENT ")
                line.writeDecimal(sequence)
                line.write(UInt8(ascii: " "))
                line.write(kind)
                line.write(UInt8(ascii: " "))
                line.write(nameBytes)
                line.write(UInt8(ascii: " "))
                line.writeDecimal(remaining)
                line.write(UInt8(ascii: " "))
                line.writeDecimal(total)
                if let late {
                    line.write(UInt8(ascii: " "))
                    line.writeDecimal(late)
                } else if suspend {
                    line.write(" suspend")
                }
                if !rareFields.isEmpty {
                    rareFields.withUnsafeBufferPointer { line.write($0) }
                }
                line.write(UInt8(ascii: "\n"))
            }
        }
    }

    /// An event kind as the wire writes it (its raw value), as a literal: no `String` to copy.
    private static func wireName(of kind: EventKind) -> StaticString {
        switch kind {
        case .started: "started"
        case .tick: "tick"
        case .paused: "paused"
        case .resumed: "resumed"
        case .extended: "extended"
        case .done: "done"
        case .cancelled: "cancelled"
        case .snapshot: "snapshot"
        case .removed: "removed"
        case .phase: "phase"
        case .changed: "changed"
        }
    }

    /// ` phase=<n>/<count>` (from 1), ` label=<label>` when it has one, and ` round=<n>` (from 1;
    /// `/<rounds>` when they are counted) when it repeats: where a cycle is.
    static func appendCycleFields(_ cycle: CountdownCycle, to out: inout [UInt8]) {
        append(" phase=", to: &out)
        appendDecimal(Int64(cycle.phaseIndex) + 1, to: &out)
        out.append(UInt8(ascii: "/"))
        appendDecimal(Int64(cycle.phases.count), to: &out)
        if !cycle.phase.label.isEmpty {
            append(" label=", to: &out)
            append(cycle.phase.label, to: &out)
        }
        if cycle.rounds != 1 {
            append(" round=", to: &out)
            appendDecimal(Int64(cycle.round) + 1, to: &out)
            if cycle.rounds != 0 {
                out.append(UInt8(ascii: "/"))
                appendDecimal(Int64(cycle.rounds), to: &out)
            }
        }
    }

    /// `EVENT <seq> snapshot <name> <remaining_ms> <total_ms> <state> <deadline_unix_ms> <owner_uid>
    /// [at | pause-on-suspend]`: the current state of a countdown, sent to a new subscriber. `seq`
    /// is the last emitted one.
    public static func appendSnapshotEvent(
        sequence: UInt64, _ snapshot: CountdownSnapshot, clock: WallClockMapping, to out: inout [UInt8]
    ) {
        append("EVENT ", to: &out)
        appendDecimal(sequence, to: &out)
        append(" snapshot ", to: &out)
        append(snapshot.name, to: &out)
        out.append(UInt8(ascii: " "))
        appendDecimal(snapshot.remainingMilliseconds, to: &out)
        out.append(UInt8(ascii: " "))
        appendDecimal(snapshot.totalMilliseconds, to: &out)
        out.append(UInt8(ascii: " "))
        append(snapshot.state.rawValue, to: &out)
        out.append(UInt8(ascii: " "))
        appendDeadline(snapshot, clock: clock, to: &out)
        out.append(UInt8(ascii: " "))
        appendDecimal(Int64(snapshot.owner), to: &out)
        appendMarker(snapshot, to: &out)
        if let cycle = snapshot.cycle {
            if snapshot.pinnedUnixMilliseconds == nil && !snapshot.pausesOnSuspend { append(" -", to: &out) }
            appendCycleFields(cycle, to: &out)
        }
        out.append(UInt8(ascii: "\n"))
    }

    /// `STAT <key> <value>`: one line of a `STATS` reply.
    public static func appendStat(_ key: String, _ value: String, to out: inout [UInt8]) {
        append("STAT ", to: &out)
        append(key, to: &out)
        out.append(UInt8(ascii: " "))
        append(value, to: &out)
        out.append(UInt8(ascii: "\n"))
    }

    /// `RESYNC <seq>`: what a subscriber knew may be out of date; snapshots follow.
    public static func appendResync(sequence: UInt64, to out: inout [UInt8]) {
        append("RESYNC ", to: &out)
        appendDecimal(sequence, to: &out)
        out.append(UInt8(ascii: "\n"))
    }

    /// `SHUTDOWN <reason>`: sent to every connection when the daemon stops; the server closes next.
    public static func appendShutdown(_ reason: String, to out: inout [UInt8]) {
        append("SHUTDOWN ", to: &out)
        append(reason, to: &out)
        out.append(UInt8(ascii: "\n"))
    }

    /// `<name> <state> <remaining_ms> <total_ms> <deadline_unix_ms|-> <owner_uid> [<late_ms>|-]
    /// [at | pause-on-suspend | -] [phase=<n>/<count> [label=<label>] [round=<n>[/<rounds>]]]`
    static func appendFields(_ snapshot: CountdownSnapshot, clock: WallClockMapping, to out: inout [UInt8]) {
        append(snapshot.name, to: &out)
        out.append(UInt8(ascii: " "))
        append(snapshot.state.rawValue, to: &out)
        out.append(UInt8(ascii: " "))
        appendDecimal(snapshot.remainingMilliseconds, to: &out)
        out.append(UInt8(ascii: " "))
        appendDecimal(snapshot.totalMilliseconds, to: &out)
        out.append(UInt8(ascii: " "))
        appendDeadline(snapshot, clock: clock, to: &out)
        out.append(UInt8(ascii: " "))
        appendDecimal(Int64(snapshot.owner), to: &out)
        if let late = snapshot.lateMilliseconds {
            out.append(UInt8(ascii: " "))
            appendDecimal(late, to: &out)
        } else if snapshot.pinnedUnixMilliseconds != nil || snapshot.pausesOnSuspend || snapshot.cycle != nil {
            append(" -", to: &out)
        }
        appendMarker(snapshot, to: &out)
        if let cycle = snapshot.cycle {
            if snapshot.pinnedUnixMilliseconds == nil && !snapshot.pausesOnSuspend { append(" -", to: &out) }
            appendCycleFields(cycle, to: &out)
        }
    }

    /// What kind of countdown it is, when not a plain one: ` at` for one to a wall-clock time,
    /// ` pause-on-suspend` for one that stands still while the machine sleeps (never both).
    private static func appendMarker(_ snapshot: CountdownSnapshot, to out: inout [UInt8]) {
        if snapshot.pinnedUnixMilliseconds != nil {
            append(" at", to: &out)
        } else if snapshot.pausesOnSuspend {
            append(" pause-on-suspend", to: &out)
        }
    }

    private static func appendDeadline(_ snapshot: CountdownSnapshot, clock: WallClockMapping, to out: inout [UInt8]) {
        if let pinned = snapshot.pinnedUnixMilliseconds {
            // The time asked for, exactly, whatever the clocks' mapping rounds to.
            appendDecimal(pinned, to: &out)
        } else if let deadline = snapshot.deadline {
            appendDecimal(clock.unixMilliseconds(of: deadline), to: &out)
        } else {
            out.append(UInt8(ascii: "-"))
        }
    }

    @inline(__always)
    static func append(_ text: String, to out: inout [UInt8]) {
        out.append(contentsOf: text.utf8)
    }

    /// Appends a signed decimal integer without going through `String`.
    static func appendDecimal(_ value: Int64, to out: inout [UInt8]) {
        ScratchWriter.append(capacity: ScratchWriter.maximumDecimalLength, to: &out) { $0.writeDecimal(value) }
    }

    /// Appends an unsigned decimal integer (a `seq`) without going through `String`.
    static func appendDecimal(_ value: UInt64, to out: inout [UInt8]) {
        ScratchWriter.append(capacity: ScratchWriter.maximumDecimalLength, to: &out) { $0.writeDecimal(value) }
    }
}
