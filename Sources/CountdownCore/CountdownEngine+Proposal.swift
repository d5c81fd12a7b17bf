/// What a change would make of one countdown: its state afterwards (`nil`: gone), the lifecycle
/// event it announces, and the reply.
public struct CountdownProposal: Sendable, Equatable {
    /// The countdown after the change.
    public var state: Countdown?
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
    ///   made over it would hide that (a `START` would restart it, and its `done` would be lost);
    ///   `bad-request` for a countdown that would pause while the machine sleeps (`ON-SUSPEND
    ///   pause`): a fleet's countdowns do not follow one machine's sleep; and for a cycle of
    ///   phases, which the shared store does not keep (yet).
    public func proposal(
        for key: String, now: Instant, pending: PendingCreations = PendingCreations(),
        _ change: (inout CountdownEngine, inout [CountdownEvent]) throws(ProtocolError) -> CountdownSnapshot
    ) throws(ProtocolError) -> CountdownProposal {
        var scratch = Self.scratch(for: key, from: self, now: now)
        var events: [CountdownEvent] = []
        scratch.advance(to: now, events: &events)
        if let due = events.first(where: { $0.kind.isLifecycle }) {
            let (what, decision) = due.kind == .done ? ("reached its deadline", "done") : ("reached the end of its retention", "removal")
            throw ProtocolError(
                .busy,
                "'\(key)' \(what) a moment ago, and the cluster is deciding its \(decision); try again in a moment",
                fields: [.init("remaining_ms", "0"), .init("state", persistentState(of: key)?.state.rawValue ?? "running")]
            )
        }
        let reply = try change(&scratch, &events)
        guard scratch.persistentState(of: key)?.pausesOnSuspend != true else {
            // The shared store has no notion of one machine's sleep, and a fleet's countdowns
            // must not move because one host was suspended.
            throw ProtocolError(
                .badRequest,
                "ON-SUSPEND pause is not available in cluster mode: a countdown shared by the fleet does not follow one machine's sleep; start it without ON-SUSPEND"
            )
        }
        guard scratch.persistentState(of: key)?.cycle == nil else {
            // The scratch engine decides locally, so its own rule (`checkCycle`) let it pass.
            throw ProtocolError(
                .badRequest,
                "cycles are not available in cluster mode yet; start each phase as a countdown of its own, or run the cycle on a daemon that is not in a cluster"
            )
        }
        if record(named: key) == nil, let created = scratch.persistentState(of: key) {
            try checkRoom(forNewCountdownOf: created.owner, pending: pending)
        }
        let lifecycle = events.filter(\.kind.isLifecycle)
        guard let last = lifecycle.last?.kind, last != .changed else {
            // `SET … ON-SUSPEND`: a fleet's countdowns do not follow one machine's sleep, so
            // there is nothing for the shared store to keep (and no event to announce).
            throw ProtocolError(
                .badRequest,
                "SET ON-SUSPEND is not available in cluster mode: a countdown shared by the fleet does not follow one machine's sleep"
            )
        }
        let replaced = lifecycle.count >= 2 && lifecycle[lifecycle.count - 2].kind == .cancelled ? lifecycle[lifecycle.count - 2] : nil
        return CountdownProposal(state: scratch.persistentState(of: key), event: lifecycle.last, replaced: replaced, reply: reply)
    }

    /// The `done` of the running countdown `key`, past its deadline by `now`, by the engine's own
    /// rules (`late_ms` and all), computed on a scratch copy: for a replica, whose engine decides
    /// neither, to propose to the shared store. However long ago the deadline was, this is the
    /// `done` alone: the end of its retention is a change of its own, due once the `done` is
    /// applied. `nil` when the countdown is not running past its deadline.
    public func dueDone(for key: String, now: Instant) -> CountdownProposal? {
        // A retention without end on the scratch copy: with the deadline further back than the
        // retention, advancing it would forget the countdown in the same step, and no `done`
        // would ever be proposed (the countdown would stay running in the store).
        var scratch = Self.scratch(for: key, from: self, retentionMilliseconds: Self.unendingRetentionMilliseconds, now: now)
        var events: [CountdownEvent] = []
        scratch.advance(to: now, events: &events)
        guard let event = events.last(where: { $0.kind == .done }), let state = scratch.persistentState(of: key), state.state == .done,
              let reply = try? status(of: key, now: now) else { return nil }
        return CountdownProposal(state: state, event: event, reply: reply)
    }

    /// A hundred years: longer than any deadline lies in the past, short enough to add to an
    /// instant in nanoseconds (the most is about 292 years).
    private static let unendingRetentionMilliseconds: Int64 = 100 * 366 * 86_400_000

    /// A scratch engine holding only `key` as `engine` holds it, deciding locally (with the
    /// engine's retention unless told another).
    private static func scratch(
        for key: String, from engine: CountdownEngine, retentionMilliseconds: Int64? = nil, now: Instant
    ) -> CountdownEngine {
        let retention = retentionMilliseconds ?? engine.configuration.retentionMilliseconds
        var scratch = CountdownEngine(configuration: EngineConfiguration(retentionMilliseconds: retention))
        scratch.revert(key, to: engine.persistentState(of: key), now: now)
        return scratch
    }
}
