/// What a change would make of one countdown: its state afterwards (`nil`: gone), the lifecycle
/// event it announces, and the reply.
public struct CountdownProposal: Sendable, Equatable {
    /// The countdown after the change.
    public var state: PersistedCountdown?
    /// The last lifecycle event the change caused (`started` for a `START … REPLACE`).
    public var event: CountdownEvent?
    /// The `cancelled` a `START … REPLACE` of a running or paused countdown caused before it.
    public var replaced: CountdownEvent? = nil
    /// What the client is told.
    public var reply: CountdownSnapshot
}

extension CountdownEngine {
    /// Computes a change to the countdown `key` without making it: the change runs, with the
    /// engine's own rules and errors, on a scratch engine holding only that countdown as it is
    /// here; a change that would create the countdown must also fit in this engine, beside the
    /// creations still in flight (`pending`)
    /// (`checkRoom`). A replica (cluster mode) proposes changes this way and lets the shared
    /// store decide.
    /// - Parameter change: the mutation, as the engine's API makes it.
    /// - Throws: whatever the mutation throws (`busy`, `not-found`, `bad-duration`, `forbidden`),
    ///   and `limit`; `busy` for a countdown whose deadline or end of retention has passed
    ///   while the shared store has not yet decided it: time changes it first, and a change
    ///   made over it would hide that (a `START` would restart it, and its `done` would be lost).
    public func proposal(
        for key: String, now: Instant, pending: PendingCreations = PendingCreations(),
        _ change: (inout CountdownEngine, inout [CountdownEvent]) throws(ProtocolError) -> CountdownSnapshot
    ) throws(ProtocolError) -> CountdownProposal {
        var scratch = Self.scratch(for: key, from: self, now: now)
        var events: [CountdownEvent] = []
        scratch.advance(to: now, events: &events)
        if let due = events.first(where: { $0.kind.isLifecycle }) {
            let what = due.kind == .done ? "reached its deadline" : "reached the end of its retention"
            throw ProtocolError(
                .busy,
                "'\(key)' \(what) a moment ago, and the cluster is deciding its \(due.kind.rawValue); try again in a moment",
                fields: [.init("remaining_ms", "0"), .init("state", persistentState(of: key)?.state.rawValue ?? "running")]
            )
        }
        let reply = try change(&scratch, &events)
        if record(named: key) == nil, let created = scratch.persistentState(of: key) {
            try checkRoom(forNewCountdownOf: created.owner, pending: pending)
        }
        let lifecycle = events.filter(\.kind.isLifecycle)
        let replaced = lifecycle.count >= 2 && lifecycle[lifecycle.count - 2].kind == .cancelled ? lifecycle[lifecycle.count - 2] : nil
        return CountdownProposal(state: scratch.persistentState(of: key), event: lifecycle.last, replaced: replaced, reply: reply)
    }

    /// What time does to the countdown `key` by `now`, by the engine's own rules (a `done` with
    /// `late_ms`, or its removal at the end of retention), computed on a scratch copy: for a
    /// replica, whose engine decides neither, to propose to the shared store. `nil` when time
    /// changes nothing.
    public func dueChange(for key: String, now: Instant) -> CountdownProposal? {
        var scratch = Self.scratch(for: key, from: self, now: now)
        var events: [CountdownEvent] = []
        scratch.advance(to: now, events: &events)
        guard let event = events.last(where: { $0.kind.isLifecycle }), let reply = try? status(of: key, now: now) else { return nil }
        return CountdownProposal(state: scratch.persistentState(of: key), event: event, reply: reply)
    }

    /// A scratch engine holding only `key` as `engine` holds it, deciding locally.
    private static func scratch(for key: String, from engine: CountdownEngine, now: Instant) -> CountdownEngine {
        var scratch = CountdownEngine(configuration: EngineConfiguration(retentionMilliseconds: engine.configuration.retentionMilliseconds))
        scratch.revert(key, to: engine.persistentState(of: key), now: now)
        return scratch
    }
}
