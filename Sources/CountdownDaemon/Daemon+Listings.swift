import CountdownCore
import Dispatch

extension Daemon {
    /// The most lines one slice of a listing produces: about half a millisecond of work, after
    /// which other clients and due events get their turn.
    static let linesPerListingSlice = 1024

    /// Starts a sliced reply on `connection`, producing its first slice now (into `replyBuffer`,
    /// as part of the request's reply). Its further requests wait until it is finished; the
    /// client table keeps it (`ClientOutput.listing`). `phase` is where the connection is
    /// (`ClientTable.state(of:)`): open in its turn, where the table serves only open connections;
    /// otherwise asked by whoever begins it outside a turn.
    func beginListing(
        _ listing: CountdownListing, purpose: ListingInProgress.Purpose, on connection: Connection, phase: ClientTable.ConnectionState.Phase,
        clock: WallClockMapping, now: Instant
    ) {
        var progress = ListingInProgress(listing: listing, purpose: purpose, clock: clock, copy: store.readCopy(now: now))
        switch phase {
        case .closed:
            return
        case .closing:
            // Served again after a failed commit, on a connection that has since stopped reading
            // (its QUIT or end of input came after this request): it is read no more, so the
            // whole reply is produced now, and the replies after it follow it.
            while !progress.isFinished {
                produceSlice(of: &progress, for: connection.peerUID, now: now)
            }
        case .open, .listing:
            produceSlice(of: &progress, for: connection.peerUID, now: now)
            // Listing already: its request, served again after a failed commit, began it; the
            // table replaces it, or ends it when this one is whole in its first slice.
            if !progress.isFinished || phase == .listing {
                clients.send(.listing(progress), to: connection, batch: batch.number)
            }
        }
    }

    /// Starts the snapshots of every running or paused countdown the connection's user may see,
    /// live (`CountdownListing`): what a new subscriber to everything is sent after its `OK`.
    /// With a prefix (as the user writes it), only the countdowns whose names start with it.
    /// `phase` as for `beginListing`.
    func beginActiveSnapshots(on connection: Connection, phase: ClientTable.ConnectionState.Phase, prefix: String = "", clock: WallClockMapping, now: Instant) {
        let everyActive = ListFilter(viewer: connection.peerUID, states: [.running, .paused], prefix: prefix)
        beginListing(engine.listing(everyActive, frozen: false, now: now), purpose: .snapshots, on: connection, phase: phase, clock: clock, now: now)
    }

    /// Produces the next slice of a listing (`RequestServer`) as part of the current batch: the
    /// table continues each whose connection has room once per batch, and one again after a
    /// failed commit took it back (`ClientOutput.listingSliceAgain`). Each is recorded, so that a
    /// failed commit produces it again from the same progress.
    func continueListing(_ progress: inout ListingInProgress, on connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        let now = time.now()
        // What fell due first (nothing, but for the first listing of a batch). Its events may cut
        // the connection off (`ERR overflow`): then its listing ended with it, and nothing follows
        // the ERR.
        advanceTime(to: now)
        guard clients.state(of: connection).phase != .closing else { return }
        batch.items.append((connection, .listingSlice(progress)))
        replyBuffer.removeAll(keepingCapacity: true)
        produceSlice(of: &progress, for: connection.peerUID, now: now)
        appendBesideEvents(to: connection)
    }

    /// Encodes the next slice into `replyBuffer`, and the final `OK` of a finished `LIST`.
    private func produceSlice(of progress: inout ListingInProgress, for viewer: UInt32, now: Instant) {
        let slice = engine.nextSlice(of: &progress.listing, limit: Self.linesPerListingSlice, now: now)
        for snapshot in slice {
            let shown = snapshot.shown(to: viewer)
            switch progress.purpose {
            case .list:
                WireEncoder.appendCountdown(shown, clock: progress.clock, to: &replyBuffer)
            case .snapshots:
                WireEncoder.appendSnapshotEvent(sequence: engine.lastSequence(seenBy: viewer), shown, clock: progress.clock, to: &replyBuffer)
            }
        }
        if progress.listing.isFinished, case .list = progress.purpose {
            store.appendReadOK(count: progress.listing.producedCount, copy: progress.copy, to: &replyBuffer)
        }
    }
}
