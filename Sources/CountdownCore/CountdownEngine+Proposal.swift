/// What a change would make of one countdown: its state afterwards (`nil`: gone), the lifecycle
/// event it announces, and the reply.
public struct CountdownProposal: Sendable, Equatable {
    /// The countdown after the change.
    public var state: PersistedCountdown?
    /// The last lifecycle event the change caused (`started` for a `START … REPLACE`).
    public var event: CountdownEvent?
    /// What the client is told.
    public var reply: CountdownSnapshot
}

extension CountdownEngine {
    /// Computes a change to the countdown `key` without making it: the change runs, with the
    /// engine's own rules and errors, on a scratch engine holding only that countdown as it is
    /// here; a change that would create the countdown must also fit in this engine
    /// (`checkRoom`). A replica (cluster mode) proposes changes this way and lets the shared
    /// store decide.
    /// - Parameter change: the mutation, as the engine's API makes it.
    /// - Throws: whatever the mutation throws (`busy`, `not-found`, `bad-duration`, `forbidden`),
    ///   and `limit`.
    public func proposal(
        for key: String, now: Instant,
        _ change: (inout CountdownEngine, inout [CountdownEvent]) throws(ProtocolError) -> CountdownSnapshot
    ) throws(ProtocolError) -> CountdownProposal {
        var scratch = CountdownEngine(configuration: EngineConfiguration(retentionMilliseconds: configuration.retentionMilliseconds))
        scratch.revert(key, to: persistentState(of: key), now: now)
        var events: [CountdownEvent] = []
        let reply = try change(&scratch, &events)
        if record(named: key) == nil, let created = scratch.persistentState(of: key) {
            try checkRoom(forNewCountdownOf: created.owner)
        }
        return CountdownProposal(state: scratch.persistentState(of: key), event: events.last { $0.kind.isLifecycle }, reply: reply)
    }
}
