import CountdownCore

/// Makes equal phase lists read from storage share one array: every stored event of a cycle
/// carries the cycle's phases (up to 64 with labels, some 2.6 KB), and decoded one by one, a
/// replay history of 4,096 events a user held a copy each (19 MB a user after a restart, where
/// the running daemon held one). Recovery passes each decoded cycle through here.
struct CyclePhaseInterner {
    private var known: [[CountdownCycle.Phase]: [CountdownCycle.Phase]] = [:]

    /// `cycle` with its phases replaced by an equal list seen before, if there was one.
    mutating func intern(_ cycle: inout CountdownCycle?) {
        guard let phases = cycle?.phases else { return }
        if let shared = known[phases] {
            cycle?.phases = shared
        } else {
            known[phases] = phases
        }
    }
}
