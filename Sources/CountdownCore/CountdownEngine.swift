/// Limits and policies of the engine.
public struct EngineConfiguration: Sendable, Equatable {
    /// How long a finished (`done` or `cancelled`) countdown stays visible to STATUS and LIST.
    public var retentionMilliseconds: Int64
    /// The most countdowns held at once, finished ones included.
    public var maximumCountdowns: Int
    /// The most countdowns one non-root owner may hold, finished ones included: one user cannot
    /// take the whole daemon from the others. Root is not limited by it.
    public var maximumCountdownsPerOwner: Int
    /// Whether the engine itself finishes a countdown at its deadline and forgets it at the end
    /// of its retention. A replica (cluster mode) does not: it lists the countdowns due for
    /// either in `takeDue()`, and the change comes back from the shared store that decides.
    public var decidesLocally: Bool
    /// The most cycles of phases (`START … CYCLE`) one non-root owner may hold at once, finished
    /// ones included. A plain countdown fires once; a cycle that repeats fires at every phase
    /// for ever, so a user's cycles are bounded on their own (with each phase at least
    /// `CountdownCycle.minimumPhaseMilliseconds`, at most 1,000 phase events a second a user).
    public var maximumCyclesPerOwner: Int

    /// Creates a configuration; the defaults are the daemon's.
    public init(
        retentionMilliseconds: Int64 = 600_000, maximumCountdowns: Int = 1_000_000, maximumCountdownsPerOwner: Int = 100_000,
        decidesLocally: Bool = true, maximumCyclesPerOwner: Int = 100
    ) {
        self.retentionMilliseconds = retentionMilliseconds
        self.maximumCountdowns = maximumCountdowns
        self.maximumCountdownsPerOwner = maximumCountdownsPerOwner
        self.decidesLocally = decidesLocally
        self.maximumCyclesPerOwner = maximumCyclesPerOwner
    }
}

/// The deterministic heart of countdownd: every countdown, its schedule, and the events it causes.
///
/// The engine never reads a clock. Every operation takes `now`, an instant on the daemon's
/// monotonic clock, and first runs whatever was due by then, so events always come out in time
/// order. Ticks are derived from each countdown's absolute deadline (`deadline - k s`), never by
/// counting down, so nothing drifts however long a countdown runs.
///
/// Costs: `nextWakeup` is O(1); start, cancel, pause, resume, extend and each due event are
/// O(log n) in the number of running countdowns. Nothing scans all countdowns per tick.
public struct CountdownEngine {
    /// One countdown's stored state. Everything shown to users is derived from it.
    ///
    /// Packed: of the deadline, the finish time, the time left, the pinned wall-clock time and
    /// the lateness, no state needs more than two, so two words hold them (a million records
    /// are 32 bytes smaller each). Which field means what depends on `state`:
    ///
    /// | state | `instantField` | `numberField` |
    /// |---|---|---|
    /// | running | deadline | pinned wall-clock time (Unix ms) or `notPinned` |
    /// | paused | (unused) | nanoseconds left |
    /// | cancelled | when it finished | nanoseconds left when cancelled |
    /// | done | when it finished | how late its `done` came (ms) or `notPinned` |
    ///
    /// Set `state` before the fields that depend on it.
    struct Record: Sendable {
        var name: String
        var totalMilliseconds: Int64
        private var instantField: Int64
        private var numberField: Int64
        var owner: UInt32
        /// The state in the low 2 bits, `pausesOnSuspend` in the next, `isCycle` in the next,
        /// the generation above: 48 bytes a record, not 56.
        private var stateAndGeneration: UInt32

        /// Where the countdown is in its life.
        var state: CountdownState {
            get {
                switch stateAndGeneration & 3 {
                case 0: return .running
                case 1: return .paused
                case 2: return .done
                default: return .cancelled
                }
            }
            set {
                let code: UInt32
                switch newValue {
                case .running: code = 0
                case .paused: code = 1
                case .done: code = 2
                case .cancelled: code = 3
                }
                stateAndGeneration = (stateAndGeneration & ~3) | code
            }
        }

        /// Bumped on every change of schedule; heap entries with an older generation are stale.
        /// 28 bits: it wraps after a quarter of a billion changes of one countdown, and is only
        /// compared for equality with the heap entries of that countdown's current schedule.
        var generation: UInt32 {
            get { stateAndGeneration >> 4 }
            set { stateAndGeneration = (newValue << 4) | (stateAndGeneration & 15) }
        }

        /// Whether it is a cycle of phases, whose phases the engine keeps beside the records
        /// (`cycles`): a plain countdown pays nothing for them.
        var isCycle: Bool {
            get { stateAndGeneration & 8 != 0 }
            set { stateAndGeneration = newValue ? stateAndGeneration | 8 : stateAndGeneration & ~8 }
        }

        /// Whether it stands still while the machine sleeps (`START … ON-SUSPEND pause`).
        var pausesOnSuspend: Bool {
            get { stateAndGeneration & 4 != 0 }
            set { stateAndGeneration = newValue ? stateAndGeneration | 4 : stateAndGeneration & ~4 }
        }

        init(
            name: String, state: CountdownState, totalMilliseconds: Int64, deadline: Instant, remainingNanoseconds: Int64,
            finishedAt: Instant, owner: UInt32, generation: UInt32, lateMilliseconds: Int64?, pinned: Int64 = CountdownEngine.notPinned,
            pausesOnSuspend: Bool = false
        ) {
            self.name = name
            self.totalMilliseconds = totalMilliseconds
            self.owner = owner
            stateAndGeneration = 0
            (instantField, numberField) = (0, 0)
            self.state = state
            self.generation = generation
            self.pausesOnSuspend = pausesOnSuspend
            switch state {
            case .running: (instantField, numberField) = (deadline.nanoseconds, pinned)
            case .paused: (instantField, numberField) = (0, remainingNanoseconds)
            case .cancelled: (instantField, numberField) = (finishedAt.nanoseconds, remainingNanoseconds)
            case .done: (instantField, numberField) = (finishedAt.nanoseconds, lateMilliseconds ?? CountdownEngine.notPinned)
            }
        }

        /// A record of `countdown`, read from its status (the fields its state lacks are never
        /// read: `init(name:state:…)` keeps only its state's). Its cycle, if any, is the engine's
        /// to keep (`setCycle`), which every caller does next.
        init(_ countdown: Countdown, generation: UInt32) {
            var (deadline, finishedAt, remaining, late, pinned) = (Instant.zero, Instant.zero, Int64(0), Int64?.none, CountdownEngine.notPinned)
            switch countdown.status {
            case .running(let due, let pinnedTo): (deadline, pinned) = (due, pinnedTo ?? CountdownEngine.notPinned)
            case .paused(let left): remaining = left
            case .done(let at, let lateBy): (finishedAt, late) = (at, lateBy)
            case .cancelled(let left, let at): (remaining, finishedAt) = (left, at)
            }
            self.init(
                name: countdown.name, state: countdown.state, totalMilliseconds: countdown.totalMilliseconds, deadline: deadline,
                remainingNanoseconds: remaining, finishedAt: finishedAt, owner: countdown.owner, generation: generation,
                lateMilliseconds: late, pinned: pinned, pausesOnSuspend: countdown.pausesOnSuspend
            )
        }

        /// Running: the deadline.
        var deadline: Instant {
            get { Instant(nanoseconds: instantField) }
            set { instantField = newValue.nanoseconds }
        }
        /// Done or cancelled: when it finished, which starts the retention period.
        var finishedAt: Instant {
            get { Instant(nanoseconds: instantField) }
            set { instantField = newValue.nanoseconds }
        }
        /// Paused or cancelled: nanoseconds left.
        var remainingNanoseconds: Int64 {
            get { numberField }
            set { numberField = newValue }
        }
        /// Running: the wall-clock time it counts down to (Unix ms), or `notPinned`.
        var pinned: Int64 {
            get { state == .running ? numberField : CountdownEngine.notPinned }
            set { numberField = newValue }
        }
        /// Done: how late its `done` came, when the daemon was not running at the deadline.
        var lateMilliseconds: Int64? {
            get { state == .done && numberField != CountdownEngine.notPinned ? numberField : nil }
            set { numberField = newValue ?? CountdownEngine.notPinned }
        }

        /// Whether it is running with its deadline not after `now`: due, or (restored after a
        /// stop) late. The one rule recovery and the engine both ask.
        func isPastDeadline(at now: Instant) -> Bool {
            state == .running && deadline <= now
        }
    }

    /// Bytes of the engine's record for each countdown slot (48): the benchmark's memory figure
    /// starts here, and a test keeps it from growing unnoticed.
    public static var bytesPerRecord: Int { MemoryLayout<Record?>.stride }

    /// `Record.pinned` of a plain duration countdown (and `lateMilliseconds` of a timely `done`).
    static let notPinned = Int64.min

    /// The configuration in force.
    public let configuration: EngineConfiguration

    /// By slot; read by listings (`CountdownEngine+Listing.swift`), changed only in this file.
    private(set) var records = SlotTable<Record>()
    /// Slots freed, each with the first generation a record placed there may have: one past its
    /// last record's, so that wake-ups of that record still in the heap stay stale for the next.
    private var freeSlots: [(slot: Int32, generation: UInt32)] = []
    private var slotsByName = NameIndex()
    private var heap = TimerHeap()
    /// The phases of the countdowns that are cycles (`Record.isCycle`), by name.
    private(set) var cycles: [String: CountdownCycle] = [:]
    /// How many cycles each owner holds (absent: none), against `maximumCyclesPerOwner`.
    private var cyclesHeld: [UInt32: Int] = [:]
    /// What `readAhead` read, kept only so that its loads stay in the optimized code.
    private var readAheadSink: UInt32 = 0
    /// What each owner holds.
    private var tallies = OwnerTallies()

    /// The sequence number of the last lifecycle event (0 before the first). Only lifecycle events
    /// take a number: ticks and snapshots carry the last one, so numbers survive a restart exactly
    /// (ticks are never stored) and a gap never means a missed tick.
    public private(set) var lastSequence: UInt64 = 0
    /// Each user's own numbers (`CountdownEvent.ownerSequence`), on a host that decides; a
    /// replica's events carry the store's numbers, the same for everyone.
    public private(set) var ownerSequences = OwnerSequences()
    /// The last owner `emit` numbered an event of, and its last number: a tick of the same user
    /// as the event before (a user's countdowns often fall due together) needs no lookup. Only
    /// `emit` and `continueOwnerSequences` change `ownerSequences`.
    private var ownerSequenceMemo: (owner: UInt32, last: UInt64)?
    /// How many countdowns are running.
    public private(set) var runningCount = 0
    /// How many countdowns are paused.
    public private(set) var pausedCount = 0
    /// Whether ticks are scheduled and emitted for every countdown (someone follows them all).
    /// Lifecycle events are, always. Otherwise only countdowns someone follows tick: by key
    /// (`watch`) or by owner (`watchOwner`). 100,000 unobserved countdowns would otherwise cost
    /// 100,000 scheduler operations a second for nothing.
    public private(set) var ticksEnabled = true
    /// A replica's countdowns due to finish, and to be forgotten (`takeDue`).
    private var dueToFinish: [DueChange] = []
    private var dueToForget: [DueChange] = []
    /// Keys someone follows, with how many followers each.
    private var watchedKeys: [String: Int] = [:]
    /// Owners all of whose countdowns someone follows, with how many followers each.
    private var watchedOwners: [UInt32: Int] = [:]

    /// Creates an empty engine.
    public init(configuration: EngineConfiguration = EngineConfiguration()) {
        self.configuration = configuration
    }

    /// How many countdowns are held, finished ones included.
    public var count: Int { slotsByName.count }

    /// The slot of the countdown named `name`, if there is one.
    private func slot(named name: String) -> Int32? {
        slotsByName.find(hash: NameIndex.hash(name)) { records[Int($0)]?.name == name }
    }

    /// How many wake-ups are in the scheduler, stale ones included; bounded by twice the number of
    /// countdowns plus a constant, whatever the churn.
    public var scheduledEntryCount: Int { heap.count }

    /// How many finished countdowns are still held for their retention period.
    public var finishedCount: Int { slotsByName.count - runningCount - pausedCount }

    /// What one owner holds, for a non-root `STATS`. O(1).
    public func tally(of owner: UInt32) -> OwnerTally {
        tallies.tally(of: owner)
    }

    /// Counts a countdown of `owner` in or out of what it holds.
    private mutating func countHeld(by owner: UInt32, _ delta: Int) {
        tallies.update(owner) { $0.held += delta }
    }

    /// Counts a countdown of `owner` into (`delta` 1) or out of (-1) `state`, if it is active.
    private mutating func countState(_ state: CountdownState, of owner: UInt32, _ delta: Int) {
        switch state {
        case .running:
            runningCount += delta
            tallies.update(owner) { $0.running += delta }
        case .paused:
            pausedCount += delta
            tallies.update(owner) { $0.paused += delta }
        case .done, .cancelled:
            return
        }
    }

    /// When the engine next has something to do (a tick, a `done`, or dropping a finished
    /// countdown), or `nil` when nothing is scheduled. O(1).
    public var nextWakeup: Instant? {
        heap.minimum.map { Instant(nanoseconds: $0.due) }
    }

    // MARK: - Queries

    /// The countdown named `name`, as of `now`.
    /// - Throws: `not-found` when there is none.
    public func status(of name: String, now: Instant) throws(ProtocolError) -> CountdownSnapshot {
        guard let slot = slot(named: name), let record = records[Int(slot)] else {
            throw ProtocolError(.notFound, "no countdown named '\(name)'; LIST shows the existing ones", fields: [.advice(.list)])
        }
        return snapshot(of: record, now: now)
    }

    /// The running and paused countdowns, all or those named in `names`, sorted by name: what a new
    /// subscriber is shown right after its `OK`.
    public func activeSnapshots(matching names: Set<String>?, now: Instant) -> [CountdownSnapshot] {
        // Named: look each up (a subscriber follows a few names among many countdowns).
        let candidates: [Record] = names.map { $0.compactMap { record(named: $0) } } ?? records.compactMap { $0 }
        return candidates.filter(\.state.isActive).sorted { $0.name < $1.name }.map { snapshot(of: $0, now: now) }
    }

    /// The names of all countdowns (unsorted); for completion and suggestions.
    public var names: [String] { records.compactMap { $0?.name } }

    func record(named name: String) -> Record? {
        slot(named: name).flatMap { records[Int($0)] }
    }

    /// Turns ticks on or off. Turning them on schedules every running countdown's next tick at
    /// once (O(n log n)); turning them off lets each countdown's next wake-up be its deadline.
    public mutating func setTicksEnabled(_ enabled: Bool, now: Instant) {
        guard enabled != ticksEnabled else { return }
        ticksEnabled = enabled
        guard enabled else { return }
        for index in 0..<records.count {
            guard var record = records[index], record.state == .running else { continue }
            // Its entry for the deadline becomes stale; its next tick takes its place (a followed
            // one ticks already, and is rescheduled the same).
            record.generation &+= 1
            records[index] = record
            push(nextEntry(slot: Int32(index), record: record, now: now))
        }
        dropStaleTop()
    }

    /// Whether a countdown ticks: everything is followed, or its owner's countdowns are, or it is.
    /// The lookups are skipped while nobody follows by key or owner (the common server case).
    private func wantsTicks(_ record: Record) -> Bool {
        ticksEnabled
            || (!watchedOwners.isEmpty && watchedOwners[record.owner] != nil)
            || (!watchedKeys.isEmpty && watchedKeys[record.name] != nil)
    }

    /// Someone follows the countdown with this key (which may not exist yet): it ticks. O(log n).
    public mutating func watch(_ key: String, now: Instant) {
        watchedKeys[key, default: 0] += 1
        guard watchedKeys[key] == 1, !ticksEnabled, let slot = slot(named: key), var record = records[Int(slot)],
              record.state == .running, watchedOwners[record.owner] == nil else { return }
        // Its entry for the deadline becomes stale; its next tick takes its place.
        record.generation &+= 1
        records[Int(slot)] = record
        push(nextEntry(slot: slot, record: record, now: now))
        dropStaleTop()
    }

    /// One follower of `key` fewer. When none is left, it stops ticking after its next wake-up.
    public mutating func unwatch(_ key: String) {
        guard let count = watchedKeys[key] else { return }
        watchedKeys[key] = count > 1 ? count - 1 : nil
    }

    /// Someone follows every countdown of `owner`: they tick. O(n) the first time.
    public mutating func watchOwner(_ owner: UInt32, now: Instant) {
        watchedOwners[owner, default: 0] += 1
        guard watchedOwners[owner] == 1, !ticksEnabled else { return }
        for index in 0..<records.count {
            guard var record = records[index], record.state == .running, record.owner == owner,
                  watchedKeys.isEmpty || watchedKeys[record.name] == nil else { continue }
            record.generation &+= 1
            records[index] = record
            push(nextEntry(slot: Int32(index), record: record, now: now))
        }
        dropStaleTop()
    }

    /// One follower of `owner`'s countdowns fewer.
    public mutating func unwatchOwner(_ owner: UInt32) {
        guard let count = watchedOwners[owner] else { return }
        watchedOwners[owner] = count > 1 ? count - 1 : nil
    }

    // MARK: - Restoring

    /// Continues numbering events after `sequence`, so a restarted daemon's `seq` keeps increasing.
    public mutating func continueSequence(after sequence: UInt64) {
        lastSequence = max(lastSequence, sequence)
    }

    /// Continues each user's own numbering after what storage held.
    public mutating func continueOwnerSequences(_ stored: OwnerSequences) {
        ownerSequences.merge(stored)
        ownerSequenceMemo = nil
    }

    /// A batch was undone (its commit failed): gives back each user's numbers that its undone
    /// changes took, so the user's next event follows its last that stands and no number the
    /// user saw is ever given to another event, also after a crash (recovery knows only stored
    /// events). `undone` is every lifecycle event of the batch, in order; `standing` the events
    /// time caused in it, which stand: their lifecycle events keep their numbers (a refused
    /// change before one is a gap), and their ticks are lowered to the number their owner
    /// continues after. The daemon-wide numbers are not given back (root sees gaps). On a
    /// replica, nothing: the store numbers events.
    public mutating func giveBackOwnerSequences(undone: [CountdownEvent], standing: inout [CountdownEvent]) {
        guard configuration.decidesLocally else { return }
        var continuesAfter: [UInt32: UInt64] = [:]
        for event in undone where event.owner != 0 && event.kind.isLifecycle {
            continuesAfter[event.owner] = min(continuesAfter[event.owner] ?? .max, event.ownerSequence - 1)
        }
        guard !continuesAfter.isEmpty else { return }
        for event in standing where event.owner != 0 && event.kind.isLifecycle {
            if let after = continuesAfter[event.owner] { continuesAfter[event.owner] = max(after, event.ownerSequence) }
        }
        for (owner, sequence) in continuesAfter { ownerSequences.rewind(owner, to: sequence) }
        ownerSequenceMemo = nil
        for index in standing.indices where !standing[index].kind.isLifecycle {
            if let after = continuesAfter[standing[index].owner] {
                standing[index].ownerSequence = min(standing[index].ownerSequence, after)
            }
        }
    }

    /// The number of the last lifecycle event `viewer` may know of: for root, the daemon's
    /// last; for anyone else, its own last (on a replica, the store's, the same for everyone).
    public func lastSequence(seenBy viewer: UInt32) -> UInt64 {
        viewer == 0 || !configuration.decidesLocally ? lastSequence : ownerSequences.last(of: viewer)
    }

    /// Brings back a countdown from storage, as of `now`.
    ///
    /// A running countdown whose deadline passed while the daemon was not running becomes `done`
    /// here, once, with how late it is; the caller stores that, so it never fires twice. Paused
    /// ones keep their remaining time. A finished one past its retention is restored too, and
    /// forgotten by the next `advance` as at any end of retention: with a `removed` event, which
    /// the caller stores (dropped here unannounced, it stayed in storage, and came back under a
    /// longer `--retention`). Limits do not apply: a countdown that was acknowledged is never
    /// dropped.
    /// - Returns: `false` when the countdown was not restored (a name already present).
    @discardableResult
    public mutating func restore(_ persisted: Countdown, now: Instant, events: inout [CountdownEvent]) -> Bool {
        restore(persisted, hash: NameIndex.hash(persisted.name), now: now, events: &events)
    }

    /// `restore(_:now:events:)`, with the name's `NameIndex.hash` already computed: recovery
    /// hashes each of a million names once, for its own table and this one.
    @discardableResult
    public mutating func restore(_ persisted: Countdown, hash: UInt32, now: Instant, events: inout [CountdownEvent]) -> Bool {
        restore(persisted, hash: hash, homeSlot: slotsByName.homeSlot(of: hash), now: now, events: &events)
    }

    /// Restores a batch read from storage, in order, as of its `now`, as `restore(_:hash:now:events:)`
    /// does each. With `replacing`, whatever was restored before under each name goes first,
    /// silently (nothing was announced of it: a journal's record is later than a snapshot's
    /// row), and an entry without a countdown only does that.
    ///
    /// Each name's first bucket in the name index is read for 32 entries at a time before any of
    /// them is restored: at a million countdowns, each of those reads is a cache miss, and one
    /// waiting on another was a fifth of a launch.
    public mutating func restore(_ batch: RestoreBatch, replacing: Bool, events: inout [CountdownEvent]) {
        let now = batch.now
        var nextCycle = batch.cycles.startIndex
        withUnsafeTemporaryAllocation(of: Int32.self, capacity: Self.restoreWindow) { homeSlots in
            var start = 0
            while start < batch.count {
                let end = min(start + Self.restoreWindow, batch.count)
                batch.hashes.withUnsafeBufferPointer { hashes in
                    for index in start..<end {
                        homeSlots[index - start] = slotsByName.homeSlot(of: hashes[index])
                    }
                }
                // (Each record is read in place through the buffer: read through the array, each
                // was copied.)
                batch.records.withUnsafeBufferPointer { records in
                    for index in start..<end {
                        let hash = batch.hashes[index]
                        var homeSlot = homeSlots[index - start]
                        if replacing, homeSlot >= 0 || slotsByName.homeSlot(of: hash) >= 0 {
                            let name = records[index].name
                            if let existing = slotsByName.find(hash: hash, matches: { self.records[Int($0)]?.name == name }) {
                                erase(slot: existing, hash: hash)
                                homeSlot = slotsByName.homeSlot(of: hash)
                            }
                        }
                        let cycle = batch.cycle(at: index, cursor: &nextCycle)
                        restore(records[index], cycle: cycle, hash: hash, homeSlot: homeSlot, now: now, events: &events)
                    }
                }
                start = end
            }
        }
    }

    /// How many names' buckets `restore(_:replacing:events:)` reads ahead at a time: enough
    /// for their memory reads to overlap, few enough to stay in the cache until used.
    private static let restoreWindow = 32

    /// `restore(_:hash:now:events:)`, given what the bucket where a search for `hash` begins
    /// held a moment ago (`homeSlot`): if it was empty and still is, the name is not held, and
    /// no search is needed.
    @discardableResult
    private mutating func restore(
        _ persisted: Countdown, hash: UInt32, homeSlot: Int32, now: Instant, events: inout [CountdownEvent]
    ) -> Bool {
        restore(Record(persisted, generation: 0), cycle: persisted.cycle, hash: hash, homeSlot: homeSlot, now: now, events: &events)
    }

    /// `restore(_:hash:homeSlot:now:events:)`, given the countdown as a record of generation 0
    /// (`RestoreBatch` makes them as it is filled) and its cycle.
    @discardableResult
    private mutating func restore(
        _ restored: Record, cycle: CountdownCycle?, hash: UInt32, homeSlot: Int32, now: Instant, events: inout [CountdownEvent]
    ) -> Bool {
        guard restored.totalMilliseconds > 0 else { return false }
        // (Empty then and now: an insertion since could only have filled it.)
        let certainlyAbsent = homeSlot < 0 && slotsByName.homeSlot(of: hash) < 0
        guard certainlyAbsent || slotsByName.find(hash: hash, matches: { records[Int($0)]?.name == restored.name }) == nil else {
            return false
        }
        var record = restored
        setCycle(cycle, of: &record)
        var boundaryPassed: CountdownCycle?
        if !configuration.decidesLocally {
            // A replica restores what it held; the shared store finishes and forgets (`takeDue`).
        } else if record.isPastDeadline(at: now) {
            if let cycle, !cycle.isLastPhase {
                // Its next phases begin below, once it has its slot, each with how late.
                boundaryPassed = cycle
            } else {
                finishPastDeadline(&record, now: now, afterRestart: true)
            }
        }
        let (slot, firstGeneration) = allocateSlot()
        record.generation = record.generation &+ firstGeneration
        slotsByName.insert(hash: hash, slot: slot)
        countHeld(by: record.owner, 1)
        if record.state == .done && restored.state == .running {
            emit(in: slot, .done, record, remaining: 0, into: &events)
        }
        place(record, in: slot, now: now)
        if let cycle = boundaryPassed {
            // A phase's deadline passed while the daemon was down: the phases whose time came
            // begin now, each once, stored like a late `done` (the caller stores these events).
            push(beginNextPhases(slot: slot, record: record, cycle: cycle, now: now, afterRestart: true, events: &events))
            dropStaleTop()
        }
        return true
    }

    /// Makes room for `count` more countdowns at once, before restoring many: the name index
    /// and the scheduler then grow once instead of some twenty times.
    public mutating func reserveCapacity(forAdditional count: Int) {
        slotsByName.reserveCapacity(slotsByName.count + count)
        heap.reserveCapacity(heap.count + count)
    }

    // MARK: - Mutations

    /// Starts a countdown of `milliseconds`.
    ///
    /// A finished name starts afresh. A running or paused one answers `busy`, unless `replace` is
    /// set, in which case the old one is reported `cancelled` and the new one `started`. With
    /// `onSuspend: .pause` it stands still while the machine sleeps (`machineSlept(for:now:events:)`);
    /// a countdown to a wall-clock time (`pinnedTo`) cannot: the time of day comes regardless.
    /// Without `onSuspend`, a name started again (replaced, or after it finished) keeps the
    /// setting it had, so a status bar's restart click does not drop it; a new name counts on.
    /// With `cycle`, a cycle of phases (`milliseconds` is then ignored). With `keepsCycle` (no
    /// duration was given), a name that was a cycle runs its phases again from the first, so
    /// the restart click does not drop those either.
    /// - Throws: `bad-duration`, `bad-request` (`.pause` with `pinnedTo`, a cycle against its
    ///   rules), `busy`, `forbidden` (replacing someone else's), `limit`.
    @discardableResult
    public mutating func start(
        _ name: String,
        milliseconds: Int64,
        replace: Bool = false,
        requester: UInt32,
        pinnedTo pinnedUnixMilliseconds: Int64? = nil,
        onSuspend: SuspendPolicy? = nil,
        cycle: CountdownCycle? = nil,
        keepsCycle: Bool = false,
        now: Instant,
        events: inout [CountdownEvent]
    ) throws(ProtocolError) -> CountdownSnapshot {
        advance(to: now, events: &events)
        var milliseconds = milliseconds
        var cycle = cycle.map { CountdownCycle(phases: $0.phases, rounds: $0.rounds) }  // From its first phase.
        if let cycle {
            try checkCycle(cycle, pinned: pinnedUnixMilliseconds != nil)
            milliseconds = cycle.phase.milliseconds
        }
        guard milliseconds > 0, milliseconds <= CountdownDuration.maximumMilliseconds else {
            throw ProtocolError(.badDuration, "duration must be more than 0 and at most 366 days")
        }
        guard onSuspend != .pause || pinnedUnixMilliseconds == nil else {
            throw ProtocolError(
                .badRequest,
                "a countdown to a time of day (AT) cannot pause while the machine sleeps: that time comes regardless; give a duration for ON-SUSPEND pause"
            )
        }
        let slot: Int32
        var generation: UInt32 = 0
        var pausesOnSuspend = onSuspend == .pause
        let hash = NameIndex.hash(name)
        if let existing = slotsByName.find(hash: hash, matches: { records[Int($0)]?.name == name }),
           let old = records[Int(existing)] {
            if onSuspend == nil && pinnedUnixMilliseconds == nil {
                pausesOnSuspend = old.pausesOnSuspend
            }
            if cycle == nil && keepsCycle && pinnedUnixMilliseconds == nil, let kept = self.cycle(of: old) {
                cycle = CountdownCycle(phases: kept.phases, rounds: kept.rounds)
                milliseconds = kept.phases[0].milliseconds
            }
            if old.state.isActive {
                guard replace else {
                    let remaining = snapshot(of: old, now: now).remainingMilliseconds
                    let left = CountdownDuration.clock(milliseconds: remaining)
                    throw ProtocolError(
                        .busy,
                        "'\(name)' is \(old.state.rawValue) with \(left) left; wait for it, CANCEL it, or START it with REPLACE",
                        fields: [.init("remaining_ms", "\(remaining)"), .init("state", old.state.rawValue), .advice(.waitCancelOrReplace)]
                    )
                }
                try authorize(requester, toChange: old, verb: "replace")
            }
            // After `busy` (which says more), before anything changes.
            if cycle != nil && !old.isCycle { try checkRoom(forCycleOf: requester) }
            if old.state.isActive {
                emit(in: existing, .cancelled, old, remaining: snapshot(of: old, now: now).remainingMilliseconds, into: &events)
                countState(old.state, of: old.owner, -1)
            }
            if old.owner != requester {
                // Only outside the daemon, whose keys carry their owner: the slot changes hands.
                countHeld(by: old.owner, -1)
                countHeld(by: requester, 1)
            }
            slot = existing
            generation = old.generation &+ 1
        } else {
            try checkRoom(forNewCountdownOf: requester)
            if cycle != nil { try checkRoom(forCycleOf: requester) }
            (slot, generation) = allocateSlot()
            slotsByName.insert(hash: hash, slot: slot)
            countHeld(by: requester, 1)
        }
        var record = Record(
            name: name,
            state: .running,
            totalMilliseconds: milliseconds,
            deadline: now.advanced(byMilliseconds: milliseconds),
            remainingNanoseconds: 0,
            finishedAt: now,
            owner: requester,
            generation: generation,
            lateMilliseconds: nil,
            pinned: pinnedUnixMilliseconds ?? Self.notPinned,
            pausesOnSuspend: pausesOnSuspend
        )
        setCycle(cycle, of: &record)
        records[Int(slot)] = record
        countState(.running, of: record.owner, 1)
        emit(in: slot, .started, record, remaining: milliseconds, into: &events)
        scheduleNext(slot: slot, now: now)
        dropStaleTop()
        return snapshot(of: record, now: now)
    }

    /// The rules of a cycle's phases, checked before anything changes.
    /// - Throws: `bad-request` (cluster mode, a time of day, or a cycle out of its limits).
    private func checkCycle(_ cycle: CountdownCycle, pinned: Bool) throws(ProtocolError) {
        guard configuration.decidesLocally else {
            throw ProtocolError(
                .badRequest,
                "cycles are not available in cluster mode yet; start each phase as a countdown of its own, or run the cycle on a daemon that is not in a cluster"
            )
        }
        guard !pinned else {
            throw ProtocolError(.badRequest, "a countdown to a time of day (AT) cannot be a cycle; give CYCLE its phases instead of AT")
        }
        var first = cycle
        first.phaseIndex = 0
        first.round = 0
        guard first.isValid else {
            throw ProtocolError(
                .badRequest,
                "a cycle has 1 to \(CountdownCycle.maximumPhases) phases of at least \(CountdownCycle.minimumPhaseMilliseconds) ms and at most 366 days, labels of at most \(CountdownCycle.maximumLabelLength) characters of A-Z a-z 0-9 . _ -, and at most \(CountdownCycle.maximumRounds) rounds"
            )
        }
    }

    /// Whether one more cycle of `owner` fits (`maximumCyclesPerOwner`; root is not limited).
    /// - Throws: `limit`, saying what to do.
    private func checkRoom(forCycleOf owner: UInt32) throws(ProtocolError) {
        guard owner == 0 || cyclesHeld[owner, default: 0] < configuration.maximumCyclesPerOwner else {
            throw ProtocolError(
                .limit,
                "uid \(owner) already holds its maximum of \(configuration.maximumCyclesPerOwner) cycles (finished ones count until they are removed); CANCEL or REMOVE one, or start a plain countdown",
                fields: [.advice(.removeFinished)]
            )
        }
    }

    /// Makes `record` a cycle's (keeping `cycle`) or a plain countdown's. The one place, with
    /// `forgetCycle`, where `cycles` and `cyclesHeld` change.
    private mutating func setCycle(_ cycle: CountdownCycle?, of record: inout Record) {
        // Whether the name was a cycle: the record may be a new value for a slot whose old one
        // was (a key names its owner, so the owner is the same too).
        let had = !cycles.isEmpty && cycles[record.name] != nil
        if let cycle {
            cycles[record.name] = cycle
            if !had { cyclesHeld[record.owner, default: 0] += 1 }
        } else if had {
            forgetCycle(of: record.name, owner: record.owner)
        }
        record.isCycle = cycle != nil
    }

    /// The countdown `name` of `owner` is a cycle no more (replaced, purged, undone).
    private mutating func forgetCycle(of name: String, owner: UInt32) {
        guard cycles.removeValue(forKey: name) != nil else { return }
        let held = cyclesHeld[owner, default: 1] - 1
        cyclesHeld[owner] = held > 0 ? held : nil
    }

    /// The cycle of `record`, if it is one.
    private func cycle(of record: Record) -> CountdownCycle? {
        record.isCycle ? cycles[record.name] : nil
    }

    /// What storage keeps of `record`, its cycle included.
    func persisted(_ record: Record) -> Countdown {
        record.persisted(cycle: cycle(of: record))
    }

    /// Whether one more countdown of `owner` fits: `--max-countdowns` (less root's reserve for
    /// others) and `--max-countdowns-per-user`, counting finished ones until they are removed.
    /// A replica (cluster mode) holds the fleet's countdowns, so it counts the fleet's, and
    /// the creations it has in flight (`pending`) as if they were held.
    /// - Throws: `limit`, saying which one and what to do.
    public func checkRoom(forNewCountdownOf owner: UInt32, pending: PendingCreations = PendingCreations()) throws(ProtocolError) {
        let held = slotsByName.count + pending.total
        // A replica counts the fleet's countdowns, and the creations it has in flight, which
        // may yet fail: its messages say so.
        let holder = configuration.decidesLocally ? "the daemon" : "the fleet"
        let counted = configuration.decidesLocally ? "" : ", counting those being created"
        guard held < configuration.maximumCountdowns else {
            throw ProtocolError(
                .limit,
                "\(holder) already holds its maximum of \(configuration.maximumCountdowns) countdowns\(counted) (finished ones count for \(configuration.retentionMilliseconds / 1000) s unless removed; a higher --max-countdowns makes room); REMOVE finished ones",
                fields: [.advice(.removeFinished)]
            )
        }
        guard held < RootReserve.usable(of: configuration.maximumCountdowns, by: owner) else {
            throw ProtocolError(
                .limit,
                // Not how many it holds: what others hold is none of this user's business.
                "\(holder) has no room for more countdowns of users: of its \(configuration.maximumCountdowns)\(counted), the last \(RootReserve.share(of: configuration.maximumCountdowns)) are kept for root (a higher --max-countdowns makes room); REMOVE finished ones",
                fields: [.advice(.removeFinished)]
            )
        }
        guard owner == 0 || tally(of: owner).held + (pending.byOwner[owner] ?? 0) < configuration.maximumCountdownsPerOwner else {
            throw ProtocolError(
                .limit,
                "uid \(owner) already holds its maximum of \(configuration.maximumCountdownsPerOwner) countdowns\(configuration.decidesLocally ? "" : " across the fleet")\(counted) (finished ones count for \(configuration.retentionMilliseconds / 1000) s unless removed; a higher --max-countdowns-per-user allows more); REMOVE finished ones",
                fields: [.advice(.removeFinished)]
            )
        }
    }

    /// Cancels a running or paused countdown. It stays visible, `cancelled`, for the retention period.
    /// - Throws: `not-found` (also for a finished one), `forbidden`.
    @discardableResult
    public mutating func cancel(
        _ name: String, requester: UInt32, now: Instant, events: inout [CountdownEvent]
    ) throws(ProtocolError) -> CountdownSnapshot {
        advance(to: now, events: &events)
        let (slot, old) = try activeRecord(name, verb: "cancel")
        try authorize(requester, toChange: old, verb: "cancel")
        let remaining = snapshot(of: old, now: now).remainingMilliseconds
        var record = old
        countState(record.state, of: record.owner, -1)
        finish(&record, as: .cancelled, at: now)
        // A cancelled countdown keeps its remaining time for display; it is stored as if paused.
        record.remainingNanoseconds = remaining * 1_000_000
        records[Int(slot)] = record
        schedulePurge(slot: slot, record: record)
        emit(in: slot, .cancelled, record, remaining: remaining, into: &events)
        dropStaleTop()
        return snapshot(of: record, now: now)
    }

    /// Pauses a running countdown, keeping its remaining time to the nanosecond.
    /// - Throws: `not-found`, `busy` (already paused), `forbidden`.
    @discardableResult
    public mutating func pause(
        _ name: String, requester: UInt32, now: Instant, events: inout [CountdownEvent]
    ) throws(ProtocolError) -> CountdownSnapshot {
        advance(to: now, events: &events)
        let (slot, old) = try activeRecord(name, verb: "pause")
        guard old.state == .running else {
            throw ProtocolError(.busy, "'\(name)' is already paused; RESUME it to continue", fields: [.init("state", "paused"), .advice(.resume)])
        }
        try authorize(requester, toChange: old, verb: "pause")
        var record = old
        record.state = .paused
        // A paused countdown keeps its time left: it is no longer tied to a time of day.
        record.pinned = Self.notPinned
        record.remainingNanoseconds = record.deadline.nanoseconds(since: now)
        record.generation &+= 1
        records[Int(slot)] = record
        countState(.running, of: record.owner, -1)
        countState(.paused, of: record.owner, 1)
        let result = snapshot(of: record, now: now)
        emit(in: slot, .paused, record, remaining: result.remainingMilliseconds, into: &events)
        dropStaleTop()
        return result
    }

    /// Resumes a paused countdown with the time it had left.
    /// - Throws: `not-found`, `busy` (not paused), `forbidden`.
    @discardableResult
    public mutating func resume(
        _ name: String, requester: UInt32, now: Instant, events: inout [CountdownEvent]
    ) throws(ProtocolError) -> CountdownSnapshot {
        advance(to: now, events: &events)
        let (slot, old) = try activeRecord(name, verb: "resume")
        guard old.state == .paused else {
            throw ProtocolError(.busy, "'\(name)' is running, not paused; nothing to resume")
        }
        try authorize(requester, toChange: old, verb: "resume")
        var record = old
        record.state = .running
        record.deadline = now.advanced(byNanoseconds: record.remainingNanoseconds)
        record.pinned = Self.notPinned
        record.generation &+= 1
        records[Int(slot)] = record
        countState(.paused, of: record.owner, -1)
        countState(.running, of: record.owner, 1)
        let result = snapshot(of: record, now: now)
        emit(in: slot, .resumed, record, remaining: result.remainingMilliseconds, into: &events)
        scheduleNext(slot: slot, now: now)
        dropStaleTop()
        return result
    }

    /// Adds `milliseconds` to a running or paused countdown's remaining time and total.
    /// - Throws: `bad-duration` (the result would exceed 366 days), `not-found`, `forbidden`.
    @discardableResult
    public mutating func extend(
        _ name: String, by milliseconds: Int64, requester: UInt32, now: Instant, events: inout [CountdownEvent]
    ) throws(ProtocolError) -> CountdownSnapshot {
        advance(to: now, events: &events)
        let (slot, old) = try activeRecord(name, verb: "extend")
        try authorize(requester, toChange: old, verb: "extend")
        guard milliseconds > 0,
              old.totalMilliseconds + milliseconds <= CountdownDuration.maximumMilliseconds
        else {
            throw ProtocolError(
                .badDuration,
                "extending '\(name)' by \(CountdownDuration.format(milliseconds: milliseconds)) would make it longer than 366 days"
            )
        }
        var record = old
        record.totalMilliseconds += milliseconds
        if record.state == .running {
            record.deadline = record.deadline.advanced(byMilliseconds: milliseconds)
            if record.pinned != Self.notPinned {
                record.pinned += milliseconds
            }
            record.generation &+= 1
        } else {
            record.remainingNanoseconds += milliseconds * 1_000_000
        }
        records[Int(slot)] = record
        let result = snapshot(of: record, now: now)
        emit(in: slot, .extended, record, remaining: result.remainingMilliseconds, into: &events)
        if record.state == .running {
            scheduleNext(slot: slot, now: now)
            dropStaleTop()
        }
        return result
    }

    /// Ends a cycle's running (or paused) phase now and starts the next, running, with a `phase`
    /// event; after the last phase of the last round, the cycle is `done`.
    /// - Throws: `not-found`, `bad-request` (not a cycle), `forbidden`.
    @discardableResult
    public mutating func skip(
        _ name: String, requester: UInt32, now: Instant, events: inout [CountdownEvent]
    ) throws(ProtocolError) -> CountdownSnapshot {
        advance(to: now, events: &events)
        let (slot, old) = try activeRecord(name, verb: "skip")
        guard let cycle = cycle(of: old) else {
            throw ProtocolError(.badRequest, "'\(name)' is not a cycle, so it has no next phase; CANCEL it to end it")
        }
        try authorize(requester, toChange: old, verb: "skip")
        var record = old
        countState(old.state, of: old.owner, -1)
        if cycle.isLastPhase {
            finish(&record, as: .done, at: now)
            record.lateMilliseconds = nil
            records[Int(slot)] = record
            schedulePurge(slot: slot, record: record)
            emit(in: slot, .done, record, remaining: 0, into: &events)
            dropStaleTop()
            return snapshot(of: record, now: now)
        }
        let next = cycle.next
        record.state = .running
        record.totalMilliseconds = next.phase.milliseconds
        record.deadline = now.advanced(byMilliseconds: next.phase.milliseconds)
        record.pinned = Self.notPinned
        record.generation &+= 1
        cycles[name] = next
        records[Int(slot)] = record
        countState(.running, of: record.owner, 1)
        emit(in: slot, .phase, record, remaining: next.phase.milliseconds, into: &events)
        scheduleNext(slot: slot, now: now)
        dropStaleTop()
        return snapshot(of: record, now: now)
    }

    /// Changes what a running or paused countdown does while the machine sleeps, keeping its
    /// state, deadline and time left, with a `changed` event; setting what it already has
    /// changes nothing and announces nothing.
    /// - Throws: `not-found` (also for a finished one: its setting is given with the `START`
    ///   that starts it again), `bad-request` (`pause` for a countdown to a time of day),
    ///   `forbidden`.
    @discardableResult
    public mutating func setSuspendPolicy(
        _ name: String, to policy: SuspendPolicy, requester: UInt32, now: Instant, events: inout [CountdownEvent]
    ) throws(ProtocolError) -> CountdownSnapshot {
        advance(to: now, events: &events)
        let (slot, old) = try activeRecord(name, verb: "set")
        try authorize(requester, toChange: old, verb: "change")
        guard policy != .pause || old.pinned == Self.notPinned else {
            throw ProtocolError(
                .badRequest,
                "'\(name)' counts down to a time of day (AT), which comes whether the machine sleeps or not, so it cannot pause while it sleeps; START it again with a duration for that"
            )
        }
        guard old.pausesOnSuspend != (policy == .pause) else { return snapshot(of: old, now: now) }
        var record = old
        record.pausesOnSuspend = policy == .pause
        records[Int(slot)] = record
        let result = snapshot(of: record, now: now)
        emit(in: slot, .changed, record, remaining: result.remainingMilliseconds, into: &events)
        events[events.count - 1].suspendPolicy = policy
        return result
    }

    // MARK: - Wall clock

    /// The wall clock was set (NTP, `date -s`): countdowns to a time of day (`START … AT`) move
    /// their deadlines to where that time now is on the monotonic clock; plain durations do not
    /// move. One whose time has now passed is due at once.
    /// - Returns: how many countdowns moved.
    @discardableResult
    public mutating func wallClockChanged(to clock: WallClockMapping, now: Instant) -> Int {
        var moved = 0
        for index in 0..<records.count {
            guard var record = records[index], record.state == .running, record.pinned != Self.notPinned else { continue }
            let deadline = clock.instant(ofUnixMilliseconds: record.pinned)
            guard deadline != record.deadline else { continue }
            record.deadline = deadline
            // A time of day moved further away: the total grows, so progress stays within 100 %.
            record.totalMilliseconds = max(record.totalMilliseconds, deadline.nanoseconds(since: now).ceilingMillisecondsOfNanoseconds)
            record.generation &+= 1
            records[index] = record
            push(nextEntry(slot: Int32(index), record: record, now: now))
            moved += 1
        }
        dropStaleTop()
        return moved
    }

    // MARK: - Sleep

    /// The machine was suspended for `slept` nanoseconds, and has just woken (`now`). Countdowns
    /// that pause on suspend (`START … ON-SUSPEND pause`) are treated as paused for exactly that
    /// time: each gets a `paused` with the time it had left when the machine went to sleep, and
    /// a `resumed`, both marked `causedBySuspend`, and its deadline moves `slept` later. The
    /// others (`.count`) are left as they are: the time asleep passed for them, and whatever
    /// fell due meanwhile fires at the next `advance`, late.
    ///
    /// The sleep is taken to have ended at `now`, and to have begun `slept` before, but not
    /// before `awakeUntil`, when the caller last ran (it cannot have slept through its own
    /// work, nor through a countdown's start): what was due before it began runs first, as it
    /// would have. O(n) in the countdowns held, once per suspend.
    /// - Returns: how many countdowns stood still.
    @discardableResult
    public mutating func machineSlept(
        for slept: Int64, now: Instant, awakeUntil: Instant? = nil, events: inout [CountdownEvent]
    ) -> Int {
        guard slept > 0 else { return 0 }
        var fellAsleep = now.advanced(byNanoseconds: -slept)
        if let awakeUntil {
            fellAsleep = max(fellAsleep, min(awakeUntil, now))
        }
        advance(to: fellAsleep, events: &events)
        var moved = 0
        for index in 0..<records.count {
            guard var record = records[index], record.state == .running, record.pausesOnSuspend else { continue }
            let slot = Int32(index)
            let left = record.deadline.nanoseconds(since: fellAsleep).ceilingMillisecondsOfNanoseconds
            emit(in: slot, .paused, record, remaining: left, into: &events)
            events[events.count - 1].causedBySuspend = true
            record.deadline = record.deadline.advanced(byNanoseconds: slept)
            record.generation &+= 1
            records[index] = record
            emit(in: slot, .resumed, record, remaining: left, into: &events)
            events[events.count - 1].causedBySuspend = true
            push(nextEntry(slot: slot, record: record, now: now))
            moved += 1
        }
        dropStaleTop()
        return moved
    }

    // MARK: - Replica (cluster mode)

    /// How often a replica names a countdown again that is due to finish or to be forgotten,
    /// while the shared store has not done it (it could not be reached, or the change is late).
    static let replicaRetryNanoseconds: Int64 = 1_000_000_000

    /// A countdown a replica's engine found due (`takeDue`), and the instant it fell due: its
    /// deadline, or the end of its retention.
    public struct DueChange: Sendable, Equatable {
        public let name: String
        public let due: Instant
    }

    /// The countdowns that reached their deadline, and those at the end of their retention,
    /// since the last call, each with its due instant (a replica's engine does neither by
    /// itself; it names each again a second later until the shared store has).
    public mutating func takeDue() -> (finish: [DueChange], forget: [DueChange]) {
        defer {
            dueToFinish.removeAll(keepingCapacity: true)
            dueToForget.removeAll(keepingCapacity: true)
        }
        return (dueToFinish, dueToForget)
    }

    /// Applies a change decided by the shared store: the countdown `key` is now `state` (`nil`:
    /// gone), and subscribers get `event` numbered `sequence` (from the store's revision). With
    /// `replacedRemainingMilliseconds` (a `START … REPLACE` of a running or paused countdown),
    /// they first get its `cancelled` with that time left, numbered `sequence`, and `event` one
    /// more. Numbers only grow: a change numbered at or below the last one applied is ignored.
    /// - Returns: whether it was applied.
    @discardableResult
    public mutating func applyReplicated(
        _ key: String, state: Countdown?, event: EventKind, eventRemainingMilliseconds: Int64,
        replacedRemainingMilliseconds: Int64? = nil, sequence: UInt64, now: Instant, events: inout [CountdownEvent]
    ) -> Bool {
        guard sequence > lastSequence else { return false }
        let before = slot(named: key).flatMap { records[Int($0)] }
        var sequence = sequence
        if let replacedRemainingMilliseconds {
            // A `START … REPLACE`: the countdown it replaced is cancelled first, numbered
            // `sequence`, and the number is used even by a copy that did not hold it, so every
            // copy numbers the `started` alike.
            if let before, let slot = slot(named: key), before.state.isActive {
                lastSequence = sequence - 1
                emit(in: slot, .cancelled, before, remaining: replacedRemainingMilliseconds, into: &events)
            }
            sequence += 1
        }
        revert(key, to: state, now: now)
        let slot = self.slot(named: key) ?? -1
        guard let record = slot >= 0 ? records[Int(slot)] : before else {
            lastSequence = sequence
            return true
        }
        lastSequence = sequence - 1  // `emit` numbers it: `sequence`.
        emit(in: slot, event, record, remaining: eventRemainingMilliseconds, into: &events)
        if event == .done, record.state == .done {
            let deadline = record.finishedAt
            events[events.count - 1].due = deadline  // Its deadline: how late it is announced.
            // The rule of `done` on a host of its own, where it is announced (the store may have
            // taken that long).
            if events[events.count - 1].lateMilliseconds == nil {
                events[events.count - 1].lateMilliseconds = Self.lateness(of: deadline, at: now)
            }
        }
        lastSequence = sequence
        return true
    }

    // MARK: - Undo

    /// Puts the countdown named `name` back as it was before a change that storage could not
    /// keep. `previous` is its `persistentState(of:)` from before the change, `nil` when it did not
    /// exist. Emits nothing; event numbers already used stay used (a gap, not a repeat).
    public mutating func revert(_ name: String, to previous: Countdown?, now: Instant) {
        revert(name, hash: NameIndex.hash(name), to: previous, now: now)
    }

    /// `revert(_:to:now:)`, with the name's `NameIndex.hash` already computed.
    public mutating func revert(_ name: String, hash: UInt32, to previous: Countdown?, now: Instant) {
        let existing = slotsByName.find(hash: hash) { records[Int($0)]?.name == name }
        var generation: UInt32 = 0
        let slot: Int32
        if let existing, let current = records[Int(existing)] {
            guard previous != nil else {
                erase(slot: existing, hash: hash)
                return
            }
            countState(current.state, of: current.owner, -1)
            // Newer than any heap entry of the current record, so those become stale.
            generation = current.generation &+ 1
            slot = existing
        } else {
            guard let previous else { return }
            (slot, generation) = allocateSlot()
            slotsByName.insert(hash: hash, slot: slot)
            countHeld(by: previous.owner, 1)
        }
        guard let previous else { return }  // Both branches above return without one.
        var record = Record(previous, generation: generation)
        setCycle(previous.cycle, of: &record)
        place(record, in: slot, now: now)
    }

    /// Takes the countdown in `slot` (its name's `NameIndex.hash` is `hash`) out of every table
    /// without a word, as if it had never been: an undone change, or a restored state that a
    /// later stored one replaces. Its heap entries are left to go stale.
    private mutating func erase(slot: Int32, hash: UInt32) {
        guard let current = records[Int(slot)] else { return }
        countState(current.state, of: current.owner, -1)
        if current.isCycle { forgetCycle(of: current.name, owner: current.owner) }
        slotsByName.remove(hash: hash, slot: slot)
        countHeld(by: current.owner, -1)
        freeSlot(slot, after: current.generation)
        dropStaleTop()
    }

    /// Puts a restored or reverted record into its slot, counted and scheduled for its state.
    private mutating func place(_ record: Record, in slot: Int32, now: Instant) {
        records[Int(slot)] = record
        countState(record.state, of: record.owner, 1)
        switch record.state {
        case .running:
            scheduleNext(slot: slot, now: now)
        case .paused:
            break
        case .done, .cancelled:
            schedulePurge(slot: slot, record: record)
        }
        dropStaleTop()
    }

    // MARK: - Snapshots

    /// The engine's durable state at this moment, to be written out on another thread.
    ///
    /// O(1): the records are kept in pages that are shared until the engine next changes one, and
    /// then only that page is copied. The name index and the scheduler are not part of it.
    public func durableImage() -> DurableImage {
        DurableImage(records: records, cycles: cycles, lastSequence: lastSequence, ownerSequences: ownerSequences, count: slotsByName.count)
    }

    /// A copy of every countdown's durable state, taken by `durableImage()`.
    public struct DurableImage: Sendable {
        fileprivate let records: SlotTable<Record>
        fileprivate let cycles: [String: CountdownCycle]
        /// The engine's `lastSequence` when the image was taken.
        public let lastSequence: UInt64
        /// Each user's own last number then.
        public let ownerSequences: OwnerSequences
        /// How many countdowns it holds.
        public let count: Int

        /// Calls `body` with each countdown's durable state, in no particular order.
        public func forEach(_ body: (Countdown) -> Void) {
            for case let record? in records {
                body(record.persisted(cycle: record.isCycle ? cycles[record.name] : nil))
            }
        }
    }

    /// Forgets a finished countdown now, instead of at the end of its retention: its name and its
    /// slot (under `--max-countdowns`) are free at once.
    /// - Throws: `not-found`, `busy` (still running or paused), `forbidden`.
    @discardableResult
    public mutating func remove(
        _ name: String, requester: UInt32, now: Instant, events: inout [CountdownEvent]
    ) throws(ProtocolError) -> CountdownSnapshot {
        advance(to: now, events: &events)
        guard let slot = slot(named: name), let record = records[Int(slot)] else {
            throw ProtocolError(.notFound, "no countdown named '\(name)'; LIST shows the existing ones", fields: [.advice(.list)])
        }
        guard !record.state.isActive else {
            throw ProtocolError(.busy, "'\(name)' is \(record.state.rawValue), not finished; CANCEL it first", fields: [.init("state", record.state.rawValue), .advice(.cancelFirst)])
        }
        try authorize(requester, toChange: record, verb: "remove")
        let result = snapshot(of: record, now: now)
        emit(in: slot, .removed, record, remaining: 0, into: &events)
        purge(slot: slot, name: name)
        dropStaleTop()
        return result
    }

    // MARK: - Time

    /// After a restore: on a host that decides (`decidesLocally`), finished countdowns whose
    /// retention ended while the daemon was stopped are forgotten now, each with its `removed`
    /// (what was due is already `done`, by `restore`). A replica leaves them to the shared
    /// store, which forgets them once its copy has caught up.
    public mutating func settleAfterRestore(now: Instant, events: inout [CountdownEvent]) {
        guard configuration.decidesLocally else { return }
        advance(to: now, events: &events)
    }

    /// Runs everything due at or before `now`, appending the events in time order.
    ///
    /// A countdown whose wake-up came late (a stalled process, a suspended machine) skips ahead:
    /// it gets one tick for the latest whole second passed, or its `done`, never a burst of
    /// stale ticks.
    public mutating func advance(to now: Instant, events: inout [CountdownEvent]) {
        var firedSinceReadAhead = Self.readAheadCount
        while let top = heap.minimum, top.due <= now.nanoseconds {
            if firedSinceReadAhead == Self.readAheadCount {
                readAhead(dueBy: now)
                firedSinceReadAhead = 0
            }
            firedSinceReadAhead += 1
            guard let record = records[Int(top.slot)], record.generation == top.generation else {
                heap.popMinimum()
                continue
            }
            switch record.state {
            case .running:
                // The countdown's next wake-up (a tick, or its purge once done) takes the top's place.
                let next = fire(slot: top.slot, record: record, now: now, events: &events)
                heap.replaceMinimum(with: next)
            case .done where !configuration.decidesLocally, .cancelled where !configuration.decidesLocally:
                // Asked again a second later, until the shared store has forgotten it. (Each
                // pattern needs its own `where`: one clause binds only the last pattern.)
                dueToForget.append(DueChange(name: record.name, due: record.finishedAt.advanced(byMilliseconds: configuration.retentionMilliseconds)))
                heap.replaceMinimum(with: TimerHeap.Entry(due: now.nanoseconds + Self.replicaRetryNanoseconds, slot: top.slot, generation: record.generation))
            case .done, .cancelled:
                heap.popMinimum()
                emit(in: top.slot, .removed, record, remaining: 0, into: &events)
                purge(slot: top.slot, name: record.name)
            case .paused:
                heap.popMinimum()  // Unreachable: pausing bumps the generation. Skipping is the safe answer.
            }
        }
        dropStaleTop()
    }

    /// How many due countdowns `advance` reads ahead at a time.
    private static let readAheadCount = 32

    /// Reads the records of the next countdowns due (`readAheadCount` of the tick lane's) in
    /// one tight loop. Each is a cache miss at scale (100,000 records are 4.8 MB, each read once
    /// a second): read one by one as they fire, the misses came one after another, and the load
    /// of the record was 11 % of the daemon's CPU samples at 100,000 ticking countdowns. Read
    /// here, they are independent loads that the processor overlaps; firing then finds them in
    /// the cache. Only the generation is read, so no name is retained.
    private mutating func readAhead(dueBy now: Instant) {
        var generations: UInt32 = 0
        heap.forEachLaneEntry(dueBy: now.nanoseconds, limit: Self.readAheadCount) { entry in
            generations &+= records[Int(entry.slot)]?.generation ?? 0
        }
        readAheadSink = generations  // Kept, so that the reads are not optimized away.
    }

    // MARK: - Internals

    func snapshot(of record: Record, now: Instant) -> CountdownSnapshot {
        CountdownSnapshot(persisted(record), at: now)
    }

    private func activeRecord(_ name: String, verb: String) throws(ProtocolError) -> (Int32, Record) {
        guard let slot = slot(named: name), let record = records[Int(slot)] else {
            throw ProtocolError(.notFound, "no countdown named '\(name)'; LIST shows the existing ones", fields: [.advice(.list)])
        }
        guard record.state.isActive else {
            throw ProtocolError(
                .notFound,
                "'\(name)' already finished (\(record.state.rawValue)); there is nothing to \(verb); START it again to reuse the name",
                fields: [.init("state", record.state.rawValue), .advice(.startAgain)]
            )
        }
        return (slot, record)
    }

    private func authorize(_ requester: UInt32, toChange record: Record, verb: String) throws(ProtocolError) {
        guard requester == 0 || requester == record.owner else {
            throw ProtocolError(
                .forbidden,
                "'\(record.name)' belongs to uid \(record.owner); only its owner or root may \(verb) it"
            )
        }
    }

    /// A slot for a new record, and the generation its record starts from (see `freeSlots`).
    private mutating func allocateSlot() -> (slot: Int32, generation: UInt32) {
        if let free = freeSlots.popLast() {
            return free
        }
        records.append(nil)
        return (Int32(records.count - 1), 0)
    }

    /// Frees `slot`, whose last record had `generation`.
    private mutating func freeSlot(_ slot: Int32, after generation: UInt32) {
        records[Int(slot)] = nil
        freeSlots.append((slot, generation &+ 1))
    }

    private mutating func emit(in slot: Int32, _ kind: EventKind, _ record: Record, remaining: Int64, into events: inout [CountdownEvent]) {
        if kind.isLifecycle {
            lastSequence += 1
        }
        // The owner's own number: one more for its changes; a tick carries its last (one
        // dictionary lookup, for users' countdowns only).
        let ownerSequence: UInt64
        if record.owner == 0 || !configuration.decidesLocally {
            ownerSequence = lastSequence
        } else if kind.isLifecycle {
            ownerSequence = ownerSequences.next(for: record.owner)
            ownerSequenceMemo = (record.owner, ownerSequence)
        } else if let memo = ownerSequenceMemo, memo.owner == record.owner {
            ownerSequence = memo.last
        } else {
            ownerSequence = ownerSequences.last(of: record.owner)
            ownerSequenceMemo = (record.owner, ownerSequence)
        }
        var event = CountdownEvent(
            sequence: lastSequence,
            kind: kind,
            name: record.name,
            remainingMilliseconds: remaining,
            totalMilliseconds: record.totalMilliseconds,
            lateMilliseconds: kind == .done ? record.lateMilliseconds : nil,
            owner: record.owner,
            ownerSequence: ownerSequence
        )
        event.slotHint = slot
        if record.isCycle { event.cycle = cycles[record.name] }
        events.append(event)
    }

    private func finish(_ record: inout Record, as state: CountdownState, at instant: Instant) {
        record.state = state
        record.finishedAt = instant
        record.generation &+= 1
    }

    /// The one rule of a running countdown past its deadline: it is `done` as of the deadline
    /// (retention runs from there, not from a late wake-up), and says how late (`lateness`).
    private func finishPastDeadline(_ record: inout Record, now: Instant, afterRestart: Bool) {
        finish(&record, as: .done, at: record.deadline)
        record.lateMilliseconds = Self.lateness(of: record.deadline, at: now, afterRestart: afterRestart)
    }

    /// How late a `done` due at `deadline` and announced at `now` says it is: always after a
    /// restart (the deadline passed while the daemon was down); otherwise only more than a
    /// second after the deadline, which is no timer's jitter but a gap in the daemon's life, a
    /// suspended machine, or (in cluster mode) a store that took that long.
    static func lateness(of deadline: Instant, at now: Instant, afterRestart: Bool = false) -> Int64? {
        let late = now.nanoseconds(since: deadline)
        return afterRestart || late > 1_000_000_000 ? max(0, late) / 1_000_000 : nil
    }

    /// A due entry of a running countdown: its `done`, or the tick for the latest whole second passed.
    /// Emits a running countdown's due event and returns its next wake-up, for the caller to
    /// put in the heap.
    private mutating func fire(slot: Int32, record old: Record, now: Instant, events: inout [CountdownEvent]) -> TimerHeap.Entry {
        let left = old.deadline.nanoseconds(since: now)
        if left <= 0 && !configuration.decidesLocally {
            // A replica: the shared store finishes it, once; asked again a second later.
            dueToFinish.append(DueChange(name: old.name, due: old.deadline))
            return TimerHeap.Entry(due: now.nanoseconds + Self.replicaRetryNanoseconds, slot: slot, generation: old.generation)
        }
        if left <= 0, old.isCycle, let cycle = cycles[old.name], !cycle.isLastPhase {
            return beginNextPhases(slot: slot, record: old, cycle: cycle, now: now, events: &events)
        }
        if left <= 0 {
            var record = old
            countState(.running, of: record.owner, -1)
            finishPastDeadline(&record, now: now, afterRestart: false)
            records[Int(slot)] = record
            emit(in: slot, .done, record, remaining: 0, into: &events)
            events[events.count - 1].due = record.deadline
            return purgeEntry(slot: slot, record: record)
        }
        if wantsTicks(old) {
            let wholeSecondsLeft = (left + 999_999_999) / 1_000_000_000
            emit(in: slot, .tick, old, remaining: wholeSecondsLeft * 1000, into: &events)
            events[events.count - 1].due = old.deadline.advanced(byNanoseconds: -wholeSecondsLeft * 1_000_000_000)
        }
        return nextEntry(slot: slot, record: old, now: now)
    }

    /// A cycle's phase ended at its deadline: the next begins there (no drift), with its `phase`
    /// event, and so on for every phase whose time has come; after the last phase of the last
    /// round comes `done`. Returns the countdown's next wake-up.
    ///
    /// Whole rounds that passed (a long stop, a sleep of a countdown that counts on) are skipped
    /// without events: at most one round's boundaries are announced, each with how late it is
    /// (`lateness`), and the round count moves on.
    private mutating func beginNextPhases(
        slot: Int32, record old: Record, cycle start: CountdownCycle, now: Instant, afterRestart: Bool = false, events: inout [CountdownEvent]
    ) -> TimerHeap.Entry {
        var record = old
        var cycle = start
        var boundary = old.deadline
        let roundNanoseconds = cycle.roundMilliseconds * 1_000_000
        let behind = now.nanoseconds(since: boundary)
        if behind > roundNanoseconds {
            var rounds = UInt32(clamping: behind / roundNanoseconds)
            if cycle.rounds != 0 {
                // Never past the end of the second-to-last round: the last ends in `done`.
                rounds = min(rounds, cycle.rounds >= cycle.round + 2 ? cycle.rounds - cycle.round - 2 : 0)
            }
            // Wrapping, for a cycle that repeats for ever: its count is only shown (bounded ones
            // stop two rounds short of their end, above).
            cycle.round &+= rounds
            boundary = boundary.advanced(byNanoseconds: Int64(rounds) * roundNanoseconds)
        }
        repeat {
            cycle = cycle.next
            let milliseconds = cycle.phase.milliseconds
            record.totalMilliseconds = milliseconds
            record.deadline = boundary.advanced(byMilliseconds: milliseconds)
            record.generation &+= 1
            cycles[record.name] = cycle
            records[Int(slot)] = record
            emit(in: slot, .phase, record, remaining: milliseconds, into: &events)
            events[events.count - 1].due = boundary
            events[events.count - 1].lateMilliseconds = Self.lateness(of: boundary, at: now, afterRestart: afterRestart)
            boundary = record.deadline
        } while record.deadline <= now && !cycle.isLastPhase
        if record.deadline <= now {
            countState(.running, of: record.owner, -1)
            finishPastDeadline(&record, now: now, afterRestart: afterRestart)
            records[Int(slot)] = record
            emit(in: slot, .done, record, remaining: 0, into: &events)
            events[events.count - 1].due = record.deadline
            return purgeEntry(slot: slot, record: record)
        }
        return nextEntry(slot: slot, record: record, now: now)
    }

    /// Pushes the next wake-up of a running countdown.
    private mutating func scheduleNext(slot: Int32, now: Instant) {
        guard let record = records[Int(slot)] else { return }
        push(nextEntry(slot: slot, record: record, now: now))
    }

    /// The next wake-up of a running countdown: the tick at `deadline - k s` for the largest whole
    /// `k >= 1` still strictly ahead of `now`, or the deadline itself (always, with ticks off).
    private func nextEntry(slot: Int32, record: Record, now: Instant) -> TimerHeap.Entry {
        let left = record.deadline.nanoseconds(since: now)
        var due = record.deadline.nanoseconds
        if left > 0 && wantsTicks(record) {
            let k = (left + 999_999_999) / 1_000_000_000 - 1
            if k >= 1 {
                due -= k * 1_000_000_000
            }
        }
        return TimerHeap.Entry(due: due, slot: slot, generation: record.generation)
    }

    private mutating func schedulePurge(slot: Int32, record: Record) {
        push(purgeEntry(slot: slot, record: record))
    }

    /// When a finished countdown is dropped: its retention period after it finished.
    private func purgeEntry(slot: Int32, record: Record) -> TimerHeap.Entry {
        let due = record.finishedAt.advanced(byMilliseconds: configuration.retentionMilliseconds)
        return TimerHeap.Entry(due: due.nanoseconds, slot: slot, generation: record.generation)
    }

    private mutating func push(_ entry: TimerHeap.Entry) {
        heap.push(entry)
        // Each countdown has at most one live entry; compact if stale ones pile up.
        if heap.count > 2 * slotsByName.count + 1024 {
            heap.compact { entry in
                guard let record = records[Int(entry.slot)] else { return false }
                return record.generation == entry.generation && record.state != .paused
            }
        }
    }

    private mutating func purge(slot: Int32, name: String) {
        var generation: UInt32 = 0
        if let record = records[Int(slot)] {
            countHeld(by: record.owner, -1)
            if record.isCycle { forgetCycle(of: name, owner: record.owner) }
            generation = record.generation
        }
        slotsByName.remove(hash: NameIndex.hash(name), slot: slot)
        freeSlot(slot, after: generation)
    }

    /// Pops stale entries off the top, so `nextWakeup` names a real event.
    private mutating func dropStaleTop() {
        while let top = heap.minimum {
            if let record = records[Int(top.slot)], record.generation == top.generation, record.state != .paused {
                return
            }
            heap.popMinimum()
        }
    }
}
