import CountdownCore
import Dispatch

/// The event fan-out: who follows what (everything, a prefix, or some names), and delivery: each
/// event is encoded once into a reused buffer and the same bytes are queued on every matching
/// subscriber's connection.
///
/// Subscriptions live here: each subscribed connection has a `Subscriber` record, which this
/// alone changes. The connections' output belongs to the client table: the fan-out decides who
/// gets which line, and queues it through `ClientTable.send` (`.event` or `.sharedEvents`; both
/// enforce the hard limit) after reading how far behind the client is (`ClientTable.backlog`).
///
/// What a subscriber costs is bounded by what it reads. Ticks are derived data: once a
/// subscriber had `tickHoldThreshold` bytes left unsent when its output was last written, it is
/// sent no ticks (and costs nothing per
/// tick: it leaves the groups that ticks are delivered to) until its output drains; then the next
/// tick of each countdown brings it up to date. Lifecycle events are queued, each one, up to the
/// hard output limit; past it the subscriber gets `ERR overflow` and is disconnected.
///
/// Names are per user (`CountdownAddress`): "everything" is every countdown for root, and a
/// user's own for anyone else; the owner sees its countdowns by plain name, root as `<uid>/<name>`.
/// Root reads the daemon-wide `seq`, the owner its own (`OwnerSequences`). So an event is
/// encoded at most twice.
///
/// Subscribers that follow everything with every kind (plain `SUBSCRIBE`, the usual case) share
/// one stream per delivery: its lines are gathered once (for root, and for each user), and each
/// such subscriber's queue takes the whole stream as one shared chunk (`OutputQueue.appendShared`),
/// or only its lifecycle lines while its ticks are held. A hundred of them then cost a hundred
/// appends per delivery, not a hundred per event, and hold one copy of the bytes between them.
///
/// Confined to the daemon's queue.
final class EventFanOut {
    private let queue: DispatchQueue
    /// Held strongly: the client table never refers to the fan-out, so there is no cycle, and an
    /// unowned reference cost an atomic retain and release (`swift_unownedRetainStrong`) on every
    /// event line queued.
    private let clients: ClientTable
    private let maximumNamesPerConnection: Int
    private let outputHardLimit: Int
    /// Lines queued by the `deliver` in progress.
    private var queuedLines = 0
    private let tickHoldThreshold: Int
    /// Every connection that follows something, by connection id (a record is made when a
    /// `SUBSCRIBE` is accepted, and dropped when the connection closes or unsubscribes).
    private var subscribers: [Int: Subscriber] = [:]
    /// Root's subscribers that follow everything with every kind: they take the stream.
    private var allStreamSubscribers: [Int: Subscriber] = [:]
    /// Other users' subscribers that follow everything of theirs with every kind, by uid.
    private var ownerStreamSubscribers: [UInt32: [Int: Subscriber]] = [:]
    /// Root's subscribers that follow everything with some kinds: delivered event by event.
    private var allSubscribers: [Int: Subscriber] = [:]
    /// Other users' subscribers that follow everything of theirs with some kinds, by uid.
    private var ownerSubscribers: [UInt32: [Int: Subscriber]] = [:]
    /// The members of those two that take ticks now (they take the kind, and are not behind):
    /// ticks, by far the most frequent events, are delivered by these alone.
    private var allTickSubscribers: [Int: Subscriber] = [:]
    private var ownerTickSubscribers: [UInt32: [Int: Subscriber]] = [:]
    /// Subscribers found behind during a delivery, held once it ends.
    private var fallenBehind: [Subscriber] = []
    /// Subscribers sent no ticks for being behind, now.
    private(set) var heldCount = 0
    /// How many connections ticks to everything (or to a user's everything) are delivered to.
    var tickGroupMemberCount: Int {
        let streamed = allStreamSubscribers.values.filter { !$0.areTicksHeld }.count
            + ownerStreamSubscribers.values.reduce(0) { $0 + $1.values.filter { !$0.areTicksHeld }.count }
        return allTickSubscribers.count + ownerTickSubscribers.values.reduce(0) { $0 + $1.count } + streamed
    }
    /// Subscribers that follow some countdowns, by key.
    private var nameSubscribers: [String: [Int: Subscriber]] = [:]
    /// Subscribers that follow every countdown whose key starts with a prefix, by that prefix.
    private var prefixSubscribers: [String: [Int: Subscriber]] = [:]
    /// How many of those prefixes have each length (in bytes): an event's key is looked up once
    /// per length, never compared with every prefix.
    private var prefixLengths: [Int: Int] = [:]
    /// Reused for each event's bytes: as root sees it (the key), and as its owner does.
    private var eventBuffer: [UInt8] = []
    private var ownerEventBuffer: [UInt8] = []
    /// Connections subscribed to anything (all, a prefix, or some names).
    private(set) var subscriberCount = 0
    /// The same, by uid (absent: none), for a user's `STATS`.
    private var subscribersByUID: [UInt32: Int] = [:]

    /// How many of `uid`'s connections are subscribed to anything.
    func subscriberCount(of uid: UInt32) -> Int {
        subscribersByUID[uid] ?? 0
    }

    private func countSubscriber(_ subscriber: Subscriber, _ delta: Int) {
        subscriberCount += delta
        subscribersByUID[subscriber.uid, default: 0] += delta
        if subscribersByUID[subscriber.uid] == 0 { subscribersByUID[subscriber.uid] = nil }
    }

    /// Who wants ticks, as the engine learns it: every countdown (root follows all), a user's
    /// (that user follows all of theirs), or one key. Set by the daemon.
    struct TickInterest {
        var everything: (Bool) -> Void = { _ in }
        var owner: (UInt32, Bool) -> Void = { _, _ in }
        var key: (String, Bool) -> Void = { _, _ in }
    }
    var tickInterest = TickInterest()

    init(queue: DispatchQueue, clients: ClientTable, configuration: DaemonConfiguration) {
        self.queue = queue
        self.clients = clients
        maximumNamesPerConnection = configuration.maximumSubscriptionsPerConnection
        outputHardLimit = configuration.outputHardLimit
        tickHoldThreshold = configuration.tickHoldThreshold
    }

    // MARK: - Subscriptions

    /// The connection's record, or a new one (kept by the caller once the `SUBSCRIBE` is
    /// accepted, so a refused one leaves nothing behind).
    private func subscriber(of connection: Connection) -> Subscriber {
        subscribers[connection.id] ?? Subscriber(connection)
    }

    /// What a connection follows (`.none` if it never subscribed).
    func subscription(of connection: Connection) -> Subscription {
        subscribers[connection.id]?.subscription ?? .none
    }

    /// Whether a connection is sent no ticks for now, for being behind.
    func areTicksHeld(of connection: Connection) -> Bool {
        subscribers[connection.id]?.areTicksHeld ?? false
    }

    /// Adds names to a connection's subscription (no names subscribes it to everything) and sets
    /// the kinds of events it receives, for all it follows. Only a subscriber that takes ticks
    /// makes the countdowns it follows tick.
    /// - Throws: `limit` when the connection would follow more names than allowed.
    func subscribe(_ connection: Connection, to names: [String], kinds: EventKindSet) throws(ProtocolError) {
        dispatchPrecondition(condition: .onQueue(queue))
        let subscriber = subscriber(of: connection)
        if case .prefix = subscriber.subscription {
            throw ProtocolError(.badRequest, "this connection follows a prefix; follow \(names.isEmpty ? "everything" : "names") on another connection")
        }
        var followed: Set<String> = []
        if case .names(let existing) = subscriber.subscription { followed = existing }
        // Only the new names cost anything: what it follows is grown in place below, not copied
        // (a connection that follows 10,000 names in 20 requests cost 100,000 name copies), nor
        // walked (`Set.subtracting` hashed every name already followed, for each line: 50
        // connections following 10,000 names in lines of 300 spent a fifth of the daemon's time
        // there, and root's `done`s waited behind it).
        var added = Set<String>(minimumCapacity: names.count)
        for name in names where !followed.contains(name) {
            added.insert(name)
        }
        if !names.isEmpty && subscriber.subscription != .all && followed.count + added.count > maximumNamesPerConnection {
            throw ProtocolError(
                .limit,
                "a connection may follow at most \(maximumNamesPerConnection) names; SUBSCRIBE with no names follows all",
                fields: [.advice(.subscribeEverything)]
            )
        }
        subscribers[subscriber.id] = subscriber
        // New kinds apply to what it already follows too: its ticks start or stop there.
        if subscriber.eventKinds.includes(.tick) != kinds.includes(.tick) {
            setTickInterest(of: subscriber, kinds.includes(.tick))
        }
        subscriber.eventKinds = kinds
        if names.isEmpty {
            if subscriber.subscription == .all {  // Already: only the kinds changed.
                regroup(subscriber)
                return
            }
            stopFollowing(subscriber)
            subscriber.eventKinds = kinds
            countSubscriber(subscriber, 1)
            subscriber.subscription = .all
            if kinds.includes(.tick) { setTickInterest(of: subscriber, true) }
            regroup(subscriber)
            return
        }
        if subscriber.subscription == .all {  // Already receives everything.
            regroup(subscriber)
            return
        }
        if subscriber.subscription == .none {
            countSubscriber(subscriber, 1)
        }
        subscriber.subscription = .none  // `followed` holds the only reference: grown in place.
        followed.reserveCapacity(followed.count + added.count)
        for name in added {
            followed.insert(name)
            nameSubscribers[name, default: [:]][subscriber.id] = subscriber
            if kinds.includes(.tick) { tickInterest.key(name, true) }
        }
        subscriber.subscription = .names(followed)
    }

    /// Adds a key prefix to a connection's subscription: every countdown whose key starts with
    /// it, present and future (`SUBSCRIBE PREFIX`), and sets the kinds of events it receives.
    /// A prefix follower that takes ticks makes its namespace tick (everything, for root).
    /// - Throws: `bad-request` on a connection that follows names or another prefix.
    func subscribe(_ connection: Connection, toPrefix prefix: String, kinds: EventKindSet) throws(ProtocolError) {
        dispatchPrecondition(condition: .onQueue(queue))
        let subscriber = subscriber(of: connection)
        switch subscriber.subscription {
        case .all:
            throw ProtocolError(.badRequest, "this connection follows everything; follow a prefix on another connection")
        case .names:
            throw ProtocolError(.badRequest, "this connection follows names; follow a prefix on another connection")
        case .prefix(let other) where other != prefix:
            // One prefix per connection: its snapshots (and a cluster's resync) are one listing.
            let shown = CountdownAddress.display(other, owner: subscriber.uid, to: subscriber.uid)
            throw ProtocolError(.badRequest, "this connection follows the prefix '\(shown)' already; follow another on a connection of its own")
        case .prefix, .none:
            break
        }
        subscribers[subscriber.id] = subscriber
        // New kinds apply to what it already follows: its ticks start or stop there.
        if subscriber.eventKinds.includes(.tick) != kinds.includes(.tick) {
            setTickInterest(of: subscriber, kinds.includes(.tick))  // Nothing while it follows nothing.
        }
        subscriber.eventKinds = kinds
        guard subscriber.subscription == .none else {
            regroup(subscriber)
            return
        }
        subscriber.subscription = .prefix(prefix)
        countSubscriber(subscriber, 1)
        if kinds.includes(.tick) { setTickInterest(of: subscriber, true) }
        if prefixSubscribers[prefix] == nil { prefixLengths[prefix.utf8.count, default: 0] += 1 }
        prefixSubscribers[prefix, default: [:]][subscriber.id] = subscriber
    }

    /// Every connection subscribed to anything, with what it follows and the kinds it takes.
    var subscriptions: [(connection: Connection, following: Subscription, kinds: EventKindSet)] {
        subscribers.values.filter { $0.subscription != .none }.map { ($0.connection, $0.subscription, $0.eventKinds) }
    }

    /// How many names or prefixes a connection follows (0 when it follows all or none).
    func subscriptionCount(_ connection: Connection) -> Int {
        switch subscription(of: connection) {
        case .names(let names): names.count
        case .prefix: 1
        case .none, .all: 0
        }
    }

    /// Stops all events to a connection, and forgets it.
    func unsubscribe(_ connection: Connection) {
        guard let subscriber = subscribers.removeValue(forKey: connection.id) else { return }
        if case .names(let names) = subscriber.subscription, names.count > Self.namesRetiredPerBatch {
            // Many names: taken out a slice per batch (`continueWork`). Meanwhile it takes no
            // event (no kind), and its names tick on for a moment.
            retiring.append(Retiring(subscriber: subscriber, names: names, next: names.startIndex, ticking: subscriber.eventKinds.includes(.tick)))
            markStopped(subscriber, takingFromNowOn: [])
            return
        }
        stopFollowing(subscriber)
    }

    /// A gone subscriber's names, still to be taken out of `nameSubscribers` and the engine's
    /// tick interest from `next` on.
    private struct Retiring {
        let subscriber: Subscriber
        let names: Set<String>
        var next: Set<String>.Index
        let ticking: Bool
    }

    /// Subscribers gone (closed, cut off, or `UNSUBSCRIBE`d) with more names than
    /// `namesRetiredPerBatch`, in the order they went: fifty connections of 10,000 names each
    /// leaving at once held one batch for 0.4 s, and every other client with it.
    private var retiring: [Retiring] = []
    static let namesRetiredPerBatch = 4096

    /// Whether gone subscribers' names are still to be taken out (the next batch comes at once).
    var hasWorkLeft: Bool { !retiring.isEmpty }

    /// Takes up to `namesRetiredPerBatch` names of gone subscribers out (once a batch).
    func continueWork() {
        dispatchPrecondition(condition: .onQueue(queue))
        var budget = Self.namesRetiredPerBatch
        while budget > 0, !retiring.isEmpty {
            var entry = retiring[0]
            let id = entry.subscriber.id
            while budget > 0, entry.next != entry.names.endIndex {
                let name = entry.names[entry.next]
                entry.next = entry.names.index(after: entry.next)
                budget -= 1
                // The same connection may follow this name again by now, as another subscriber.
                if nameSubscribers[name]?[id] === entry.subscriber {
                    nameSubscribers[name]?[id] = nil
                    if nameSubscribers[name]?.isEmpty == true { nameSubscribers[name] = nil }
                }
                if entry.ticking { tickInterest.key(name, false) }
            }
            if entry.next == entry.names.endIndex {
                retiring.removeFirst()
            } else {
                retiring[0] = entry
            }
        }
    }

    /// Takes a subscriber out of everything it follows; its record stays (kinds back to all).
    private func stopFollowing(_ subscriber: Subscriber) {
        guard subscriber.subscription != .none else { return }
        if subscriber.eventKinds.includes(.tick) { setTickInterest(of: subscriber, false) }
        switch subscriber.subscription {
        case .none:
            return
        case .all:
            break  // Out of its groups below (`regroup`), once it follows nothing.
        case .names(let names):
            for name in names {
                nameSubscribers[name]?[subscriber.id] = nil
                if nameSubscribers[name]?.isEmpty == true {
                    nameSubscribers[name] = nil
                }
            }
        case .prefix(let prefix):
            prefixSubscribers[prefix]?[subscriber.id] = nil
            if prefixSubscribers[prefix]?.isEmpty == true {
                prefixSubscribers[prefix] = nil
                prefixLengths[prefix.utf8.count, default: 1] -= 1
                if prefixLengths[prefix.utf8.count] == 0 { prefixLengths[prefix.utf8.count] = nil }
            }
        }
        markStopped(subscriber, takingFromNowOn: .all)
        regroup(subscriber)
    }

    /// A subscriber follows nothing any more: counted out, its held ticks let go, and taking
    /// `kinds` from now on (all, for a record kept; none, for one whose names go later).
    private func markStopped(_ subscriber: Subscriber, takingFromNowOn kinds: EventKindSet) {
        subscriber.subscription = .none
        subscriber.eventKinds = kinds
        countSubscriber(subscriber, -1)
        if subscriber.areTicksHeld {
            subscriber.areTicksHeld = false
            heldCount -= 1
        }
    }

    /// Puts a subscriber that follows everything in the groups it qualifies for now, and takes
    /// it out of the others: the stream (every kind), or event by event (some kinds), and then
    /// the tick group too while it takes ticks and is not held. One that follows something else
    /// (or nothing) is in none of them.
    private func regroup(_ subscriber: Subscriber) {
        let followsAll = subscriber.subscription == .all
        let streamed = followsAll && subscriber.eventKinds == .all
        let eventByEvent = followsAll && !streamed
        let ticks = eventByEvent && subscriber.eventKinds.includes(.tick) && !subscriber.areTicksHeld
        let id = subscriber.id
        if subscriber.uid == 0 {
            allStreamSubscribers[id] = streamed ? subscriber : nil
            allSubscribers[id] = eventByEvent ? subscriber : nil
            allTickSubscribers[id] = ticks ? subscriber : nil
        } else {
            Self.place(subscriber, streamed, in: &ownerStreamSubscribers)
            if ownerStreamSubscribers[subscriber.uid] == nil { ownerStreams[subscriber.uid] = nil }
            Self.place(subscriber, eventByEvent, in: &ownerSubscribers)
            Self.place(subscriber, ticks, in: &ownerTickSubscribers)
        }
    }

    /// Puts `subscriber` in its uid's group (`member`), or takes it out, dropping an emptied group.
    private static func place(_ subscriber: Subscriber, _ member: Bool, in groups: inout [UInt32: [Int: Subscriber]]) {
        let uid = subscriber.uid
        if member {
            groups[uid, default: [:]][subscriber.id] = subscriber
        } else if groups[uid]?.removeValue(forKey: subscriber.id) != nil, groups[uid]?.isEmpty == true {
            groups[uid] = nil
        }
    }

    /// Sends ticks again to a connection held for being behind: its output drained. The next
    /// tick of each countdown it follows brings it up to date.
    func outputDrained(_ connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let subscriber = subscribers[connection.id], subscriber.areTicksHeld else { return }
        subscriber.areTicksHeld = false
        heldCount -= 1
        regroup(subscriber)
    }

    /// Root's connections that follow everything and take ticks: while there is one, every
    /// countdown ticks.
    private var tickingAllSubscribers = 0

    /// Tells the engine that what `subscriber` follows is (or is no longer) watched for ticks.
    /// A subscriber holds tick interest while it follows something and takes ticks; this is
    /// called exactly when that starts or stops, so the engine's counts stay balanced.
    private func setTickInterest(of subscriber: Subscriber, _ on: Bool) {
        switch subscriber.subscription {
        case .none:
            return
        case .prefix(let keyPrefix) where subscriber.uid == 0:
            // Root's prefix of one other user's keys makes that user's tick; else everything does.
            if let owner = CountdownAddress.onlyOwner(ofKeysStartingWith: keyPrefix), owner != 0 {
                tickInterest.owner(owner, on)
            } else {
                tickingAllSubscribers += on ? 1 : -1
                tickInterest.everything(tickingAllSubscribers > 0)
            }
        case .all where subscriber.uid == 0:
            tickingAllSubscribers += on ? 1 : -1
            tickInterest.everything(tickingAllSubscribers > 0)
        case .all, .prefix:
            tickInterest.owner(subscriber.uid, on)
        case .names(let names):
            for name in names {
                tickInterest.key(name, on)
            }
        }
    }

    // MARK: - Delivery

    /// Queues each event on every subscriber that follows it, as output of `batch`.
    /// - Returns: how many lines were queued (the work the events caused).
    @discardableResult
    func deliver(_ events: [CountdownEvent], batch: Int) -> Int {
        deliver(events[...], batch: batch)
    }

    /// The same for a part of an array: the events time caused, delivered from the batch's own
    /// list without a copy.
    @discardableResult
    func deliver(_ events: ArraySlice<CountdownEvent>, batch: Int) -> Int {
        dispatchPrecondition(condition: .onQueue(queue))
        queuedLines = 0
        let streamsToRoot = !allStreamSubscribers.isEmpty
        // The lifecycle lines apart only where a subscriber on the stream is held. Its buffers
        // are reused from the last delivery unless a queue still shares them.
        rootStream.reset(keepsLifecycle: streamsToRoot && allStreamSubscribers.values.contains { $0.areTicksHeld })
        // A tick is gathered only for a stream someone takes ticks from: one whose subscribers
        // are all held costs nothing per tick, as the tick groups cost nothing for theirs.
        let streamsTicksToRoot = streamsToRoot && allStreamSubscribers.values.contains { !$0.areTicksHeld }
        var ownerStreamTakesTicks: [UInt32: Bool] = [:]
        for event in events {
            let isTick = event.kind == .tick
            let everyone = isTick ? allTickSubscribers : allSubscribers
            // Most daemons have no per-name subscriber; then no name is hashed per event.
            let byName = nameSubscribers.isEmpty ? nil : nameSubscribers[event.name]
            let owners = isTick ? ownerTickSubscribers : ownerSubscribers
            let byOwner = owners.isEmpty || event.owner == 0 ? nil : owners[event.owner]
            let byPrefix = prefixSubscribers.isEmpty ? [] : prefixGroups(matching: event.name)
            var streamsToOwner = false
            if event.owner != 0, !ownerStreamSubscribers.isEmpty, let group = ownerStreamSubscribers[event.owner] {
                if isTick {
                    if ownerStreamTakesTicks[event.owner] == nil {
                        ownerStreamTakesTicks[event.owner] = group.values.contains { !$0.areTicksHeld }
                    }
                    streamsToOwner = ownerStreamTakesTicks[event.owner] == true
                } else {
                    streamsToOwner = true
                }
            }
            let streamsThisToRoot = isTick ? streamsTicksToRoot : streamsToRoot
            if everyone.isEmpty && byName == nil && byOwner == nil && byPrefix.isEmpty && !streamsThisToRoot && !streamsToOwner { continue }
            eventBuffer.removeAll(keepingCapacity: true)
            WireEncoder.appendEvent(event, to: &eventBuffer)
            // Root's own countdowns read the same either way.
            let separateOwnerLine = event.owner != 0
            if separateOwnerLine {
                ownerEventBuffer.removeAll(keepingCapacity: true)
                WireEncoder.appendEvent(event, name: CountdownAddress.split(event.name).name, seenBy: event.owner, to: &ownerEventBuffer)
            }
            if streamsThisToRoot { rootStream.add(eventBuffer, kind: event.kind) }
            if streamsToOwner {
                if ownerStreams[event.owner]?.isInUse != true {
                    // This user's first event of the delivery: its stream is emptied for it,
                    // keeping the buffers from the last delivery.
                    let held = ownerStreamSubscribers[event.owner]?.values.contains { $0.areTicksHeld } ?? false
                    ownerStreams[event.owner, default: EventStream(keepsLifecycle: held)].reset(keepsLifecycle: held)
                    ownerStreamsInUse.append(event.owner)
                }
                ownerStreams[event.owner]?.add(ownerEventBuffer, kind: event.kind)
            }
            for subscriber in everyone.values {
                append(eventBuffer, kind: event.kind, to: subscriber, batch: batch)
            }
            if let byOwner {
                for subscriber in byOwner.values {
                    append(ownerEventBuffer, kind: event.kind, to: subscriber, batch: batch)
                }
            }
            if let byName {
                for subscriber in byName.values {
                    let line = separateOwnerLine && subscriber.uid == event.owner ? ownerEventBuffer : eventBuffer
                    append(line, kind: event.kind, to: subscriber, batch: batch)
                }
            }
            for group in byPrefix {
                for subscriber in group.values {
                    let line = separateOwnerLine && subscriber.uid == event.owner ? ownerEventBuffer : eventBuffer
                    append(line, kind: event.kind, to: subscriber, batch: batch)
                }
            }
            if !fallenBehind.isEmpty { holdFallenBehind() }
        }
        // The streams go last: a subscriber is in one group only, so its lines keep their order.
        if streamsToRoot {
            for subscriber in allStreamSubscribers.values {
                append(rootStream, to: subscriber, batch: batch)
            }
        }
        for uid in ownerStreamsInUse {
            guard let stream = ownerStreams[uid] else { continue }
            for subscriber in ownerStreamSubscribers[uid]?.values ?? [:].values {
                append(stream, to: subscriber, batch: batch)
            }
            ownerStreams[uid]?.isInUse = false
        }
        ownerStreamsInUse.removeAll(keepingCapacity: true)
        return queuedLines
    }

    /// One delivery's lines for the subscribers that follow everything with every kind: all of
    /// them, and the lifecycle ones alone (for a subscriber whose ticks are held).
    private struct EventStream {
        /// Whether `lifecycle` is kept: only when a subscriber on the stream is held already.
        var keepsLifecycle: Bool
        var all: [UInt8] = []
        var allLines: Int { lineEnds.count }
        var lifecycle: [UInt8] = []
        var lifecycleLines = 0
        /// Where each line of `all` ends, and its event's kind: for a subscriber that takes the
        /// stream line by line (`appendLineByLine`).
        var lineEnds: [(end: Int, kind: EventKind)] = []

        mutating func add(_ line: [UInt8], kind: EventKind) {
            all.append(contentsOf: line)
            lineEnds.append((all.count, kind))
            if kind != .tick {
                lifecycleLines += 1
                if keepsLifecycle { lifecycle.append(contentsOf: line) }
            }
        }

        var hasTicks: Bool { allLines > lifecycleLines }

        /// Whether the delivery in progress has added to it (it was reset for that delivery).
        var isInUse = false

        /// Empties it for the next delivery. A buffer the last delivery may have shared with
        /// output queues (`OutputQueue.sharedChunkMinimum` bytes or more) is let go, not emptied:
        /// emptying a shared buffer in place copies its whole capacity, and a queue that holds
        /// such copies delivery after delivery would hold far more than the bytes it counts. A
        /// smaller one was copied by every queue, so it is reused, and a small delivery (one
        /// request's event) allocates nothing.
        mutating func reset(keepsLifecycle: Bool) {
            self.keepsLifecycle = keepsLifecycle
            isInUse = true
            Self.empty(&all)
            Self.empty(&lifecycle)
            lifecycleLines = 0
            // Never shared; kept unless a burst made it large.
            if lineEnds.capacity > 4096 { lineEnds = [] } else { lineEnds.removeAll(keepingCapacity: true) }
        }

        private static func empty(_ buffer: inout [UInt8]) {
            if buffer.count >= OutputQueue.sharedChunkMinimum { buffer = [] } else { buffer.removeAll(keepingCapacity: true) }
        }
    }

    /// Root's stream, kept between deliveries so that a small one allocates nothing.
    private var rootStream = EventStream(keepsLifecycle: false)
    /// Each user's stream (for the user's subscribers that follow all of theirs with every
    /// kind), kept as root's is while the user has such a subscriber.
    private var ownerStreams: [UInt32: EventStream] = [:]
    /// The users whose streams the delivery in progress has added to, in order.
    private var ownerStreamsInUse: [UInt32] = []

    /// Queues a stream on a subscriber, by the same rules as `append(_:kind:to:batch:)` event by
    /// event: its ticks only while it is not behind (nor would be past half the hard limit with
    /// them), every lifecycle line up to the hard limit.
    private func append(_ stream: EventStream, to subscriber: Subscriber, batch: Int) {
        let backlog = clients.state(of: subscriber.connection)
        guard backlog.takesOutput else { return }
        if stream.hasTicks && !subscriber.areTicksHeld {
            if backlog.unsent >= tickHoldThreshold {
                holdTicks(of: subscriber)
            } else if backlog.queued + stream.all.count >= outputHardLimit / 2 {
                // Its ticks would pass half the hard limit: it takes them up to there, as event by
                // event, not none of them.
                appendLineByLine(stream, to: subscriber, batch: batch)
                return
            }
        }
        // Every line, unless it is held and the stream has ticks.
        let takesAll = !subscriber.areTicksHeld || !stream.hasTicks
        if !takesAll && !stream.keepsLifecycle {
            // Held just now: its lifecycle lines are picked out of the stream.
            appendLineByLine(stream, to: subscriber, batch: batch)
            return
        }
        let (bytes, lines) = takesAll ? (stream.all, stream.allLines) : (stream.lifecycle, stream.lifecycleLines)
        guard lines > 0 else { return }
        clients.send(.sharedEvents(bytes), to: subscriber.connection, batch: batch)
        queuedLines += lines
    }

    /// Queues a stream line by line, each by `append(_:kind:to:batch:)` as event by event: ticks
    /// until half the hard limit (then it is held), every lifecycle line up to the hard limit.
    private func appendLineByLine(_ stream: EventStream, to subscriber: Subscriber, batch: Int) {
        var start = 0
        for (end, kind) in stream.lineEnds {
            append(Array(stream.all[start..<end]), kind: kind, to: subscriber, batch: batch)
            start = end
        }
        if !fallenBehind.isEmpty { holdFallenBehind() }
    }

    /// Sends a subscribed connection no ticks until its output drains (`outputDrained`), as a
    /// delivery does with one it finds behind.
    func holdTicks(of connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let subscriber = subscribers[connection.id], subscriber.subscription != .none, !subscriber.areTicksHeld else { return }
        holdTicks(of: subscriber)
        regroup(subscriber)
    }

    /// Sends a subscriber no ticks until its output drains (`outputDrained`).
    private func holdTicks(of subscriber: Subscriber) {
        subscriber.areTicksHeld = true
        heldCount += 1
    }

    /// The prefix subscribers whose prefix starts `key`: one lookup per prefix length.
    private func prefixGroups(matching key: String) -> [[Int: Subscriber]] {
        var groups: [[Int: Subscriber]] = []
        let bytes = key.utf8
        for length in prefixLengths.keys where length <= bytes.count {
            if let group = prefixSubscribers[String(Substring(bytes.prefix(length)))] { groups.append(group) }
        }
        return groups
    }

    private func append(_ line: [UInt8], kind: EventKind, to subscriber: Subscriber, batch: Int) {
        guard subscriber.eventKinds.includes(kind) else { return }
        let backlog = clients.state(of: subscriber.connection)
        guard backlog.takesOutput else { return }
        if kind == .tick {
            guard !subscriber.areTicksHeld else { return }
            // Behind before this batch, not by what this batch queues: a client that reads keeps
            // up with a burst of a hundred thousand ticks in one batch.
            // Half the hard limit in one batch is too much all the same: ticks never get a
            // subscriber disconnected.
            if backlog.unsent >= tickHoldThreshold || backlog.queued >= outputHardLimit / 2 {
                holdTicks(of: subscriber)
                fallenBehind.append(subscriber)  // Out of the groups once this event is delivered.
                return
            }
        }
        clients.send(.event(line), to: subscriber.connection, batch: batch)
        queuedLines += 1
    }

    /// Takes the subscribers just found behind out of the tick groups (not while those are being
    /// walked).
    private func holdFallenBehind() {
        for subscriber in fallenBehind {
            regroup(subscriber)
        }
        fallenBehind.removeAll(keepingCapacity: true)
    }
}
