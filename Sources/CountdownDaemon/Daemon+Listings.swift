import CountdownCore
import Dispatch

/// A reply of many lines in progress on one connection: a `LIST`, or the snapshots a new
/// subscriber to everything is sent after its `OK`.
struct ListingInProgress {
    /// What the lines are.
    enum Purpose {
        /// `COUNTDOWN` lines, then `OK <count>`.
        case list
        /// `EVENT snapshot` lines (the `OK` came first).
        case snapshots
    }

    var listing: CountdownListing
    let purpose: Purpose
    /// The wall clock as the listing started, for the wall-clock fields of its lines.
    let clock: WallClockMapping
}

extension Daemon {
    /// The most lines one slice of a listing produces: about half a millisecond of work, after
    /// which other clients and due events get their turn.
    static let linesPerListingSlice = 1024

    /// A listing is continued while less than this is waiting to be written to its connection:
    /// a client that reads slowly holds a few hundred KiB in the daemon, never the whole reply.
    static let listingOutputThreshold = 256 * 1024

    /// Starts a sliced reply on `connection`, producing its first slice now (into `replyBuffer`,
    /// as part of the request's reply). Its further requests wait until it is finished.
    func beginListing(_ listing: CountdownListing, purpose: ListingInProgress.Purpose, on connection: Connection, clock: WallClockMapping, now: Instant) {
        var progress = ListingInProgress(listing: listing, purpose: purpose, clock: clock)
        produceSlice(of: &progress, for: connection.peerUID, now: now)
        if progress.listing.isFinished {
            return
        }
        listings[connection.id] = (connection, progress)
        clients.beginListing(connection)
    }

    /// Starts the snapshots of every running or paused countdown the connection's user may see,
    /// live (`CountdownListing`): what a new subscriber to everything is sent after its `OK`.
    /// With a prefix (as the user writes it), only the countdowns whose names start with it.
    func beginActiveSnapshots(on connection: Connection, prefix: String = "", clock: WallClockMapping, now: Instant) {
        let everyActive = ListFilter(viewer: connection.peerUID, states: [.running, .paused], prefix: prefix)
        beginListing(engine.listing(everyActive, frozen: false, now: now), purpose: .snapshots, on: connection, clock: clock, now: now)
    }

    /// Produces the next slice of every listing whose connection has room for it, as part of the
    /// current batch. Run once per batch.
    func continueListings(now: Instant) {
        dispatchPrecondition(condition: .onQueue(queue))
        for (connection, saved) in listings.values where clients.queuedBytes(of: connection) < Self.listingOutputThreshold {
            // Ended meanwhile: cut off for overflow by the events of a listing before it.
            guard listings[connection.id] != nil else { continue }
            // If the batch's commit fails, the slice is taken back and produced again from here.
            batch.items.append((connection, .listingSlice(saved)))
            continueListing(from: saved, on: connection, now: now)
        }
    }

    /// Produces one slice of `progress` on `connection` and queues it; the listing ends (and the
    /// connection's waiting requests are served next batch) when it was the last.
    func continueListing(from progress: ListingInProgress, on connection: Connection, now: Instant) {
        var progress = progress
        replyBuffer.removeAll(keepingCapacity: true)
        advanceTime(to: now)
        // The events that fell due may have cut this connection off (`ERR overflow`; during a
        // listing nothing else closes it): its listing ended with it, and nothing follows the ERR.
        guard !clients.isClosing(connection) else { return }
        produceSlice(of: &progress, for: connection.peerUID, now: now)
        appendBesideEvents(to: connection)
        if progress.listing.isFinished {
            listings[connection.id] = nil
            clients.endListing(connection)
        } else {
            listings[connection.id] = (connection, progress)
        }
    }

    /// Whether some listing can go on at once (its connection has room): then the next batch
    /// comes without waiting for the poller.
    var hasListingWithRoom: Bool {
        listings.values.contains { clients.queuedBytes(of: $0.connection) < Self.listingOutputThreshold }
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
                WireEncoder.appendSnapshotEvent(sequence: engine.lastSequence, shown, clock: progress.clock, to: &replyBuffer)
            }
        }
        if progress.listing.isFinished && progress.purpose == .list {
            appendReadOK(count: progress.listing.producedCount)
        }
    }
}
