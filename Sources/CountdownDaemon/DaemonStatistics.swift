import CountdownCore
import Glibc

/// What `STATS` reports that the engine does not already count: events by kind and how late
/// ticks and `done`s went out, since the daemon started. Cheap enough to keep always on: a
/// counter per event and, per tick or `done`, one histogram bucket.
struct DaemonStatistics {
    /// When the daemon started (boot clock).
    let startedAt: Instant
    /// Events emitted, by kind (snapshots not counted: they are replies, not events).
    private(set) var eventsByKind: [EventKind: UInt64] = [:]
    /// How late, from the instant each was due to the moment its batch was written out.
    private(set) var doneLateness = LatenessHistogram()
    private(set) var tickLateness = LatenessHistogram()
    /// Batches whose commit failed and were undone, and the listing slices among them that were
    /// produced again: storage faults leave their trace here, not only in the log.
    private(set) var batchesUndone: UInt64 = 0
    private(set) var listingSlicesRedone: UInt64 = 0

    init(startedAt: Instant) {
        self.startedAt = startedAt
    }

    /// Counts released events (a change undone after a failed commit never is).
    mutating func count(_ events: [CountdownEvent]) {
        for event in events {
            eventsByKind[event.kind, default: 0] += 1
        }
    }

    /// Counts an undone batch and the listing slices it produced again.
    mutating func countUndoneBatch(listingSlicesRedone slices: Int) {
        batchesUndone += 1
        listingSlicesRedone += UInt64(slices)
    }

    /// Counts a batch's ticks (its lifecycle events are counted when released) and records how
    /// late its timed events leave, written out at `now`.
    mutating func recordTimeEvents(_ events: [CountdownEvent], writtenAt now: Instant) {
        var ticks: UInt64 = 0  // Counted here, hashed into the table once: ticks are most events.
        defer { if ticks > 0 { eventsByKind[.tick, default: 0] += ticks } }
        for event in events {
            if event.kind == .tick {
                ticks += 1
            }
            guard let due = event.due else { continue }
            if event.kind == .done {
                doneLateness.record(nanoseconds: now.nanoseconds(since: due))
            } else {
                tickLateness.record(nanoseconds: now.nanoseconds(since: due))
            }
        }
    }
}

extension Daemon {
    /// The `STAT <key> <value>` lines of a `STATS` reply, in a fixed order. Keys are lower-case
    /// words with underscores; values have no spaces. Later versions add keys at the end.
    ///
    /// Root, and the uid the daemon runs as (a per-user daemon's own user, who can read its state
    /// files anyway), see the whole daemon. Any other uid sees its own countdowns, connections and
    /// subscribers, and the daemon's health (version, uptime, storage), never other users'
    /// activity: not their counts, their event rates or the journal's growth. `scope` says which.
    func statisticsLines(now: Instant, uid: UInt32) -> [(String, String)] {
        let storage: String
        switch journal.health {
        case .available: storage = "ok"
        case .failing: storage = "failing"
        case .awaitingSnapshot: storage = "recovering"
        }
        guard uid == 0 || uid == geteuid() else {
            let tally = engine.tally(of: uid)
            return [
                ("version", DaemonConfiguration.version),
                ("uptime_s", "\(now.nanoseconds(since: statistics.startedAt) / 1_000_000_000)"),
                ("running", "\(tally.running)"),
                ("paused", "\(tally.paused)"),
                ("finished", "\(tally.finished)"),
                ("connections", "\(clients.figures.connectionsByUID[uid] ?? 0)"),
                ("subscribers", "\(fanOut.subscriberCount(of: uid))"),
                ("storage", storage),
                ("scope", "user"),
            ]
        }
        var lines: [(String, String)] = [
            ("version", DaemonConfiguration.version),
            ("uptime_s", "\(now.nanoseconds(since: statistics.startedAt) / 1_000_000_000)"),
            ("running", "\(engine.runningCount)"),
            ("paused", "\(engine.pausedCount)"),
            ("finished", "\(engine.finishedCount)"),
            ("connections", "\(clients.figures.connections)"),
            ("subscribers", "\(fanOut.subscriberCount)"),
            ("subscribers_behind", "\(fanOut.heldCount)"),
            ("listings_in_progress", "\(clients.figures.listingsInProgress)"),
            // In the asker's numbers: the uid the daemon runs as (a per-user daemon's user) counts
            // its own, as its `SINCE` does.
            ("last_seq", "\(engine.lastSequence(seenBy: uid))"),
        ]
        for kind in EventKind.allCases where kind != .snapshot {
            lines.append(("events_\(kind.rawValue)", "\(statistics.eventsByKind[kind] ?? 0)"))
        }
        for (name, histogram) in [("done", statistics.doneLateness), ("tick", statistics.tickLateness)] {
            lines.append(("\(name)_late_count", "\(histogram.count)"))
            lines.append(("\(name)_late_p50_us", "\(histogram.percentileMicroseconds(0.5))"))
            lines.append(("\(name)_late_p99_us", "\(histogram.percentileMicroseconds(0.99))"))
            lines.append(("\(name)_late_max_us", "\(histogram.maximumMicroseconds)"))
            lines.append(("\(name)_late_sum_us", "\(histogram.sumMicroseconds)"))
        }
        lines.append(("storage", storage))
        lines.append(("journal_bytes", "\(journal.bytesSinceSnapshot)"))
        lines.append(("journal_generation", "\(journal.generation)"))
        lines.append(("replay_kept_after", "\(uid == 0 ? ring.keptAfter : ring.keptAfterOwn(owner: uid))"))
        lines.append(("batches_undone", "\(statistics.batchesUndone)"))
        lines.append(("listing_slices_redone", "\(statistics.listingSlicesRedone)"))
        lines.append(("user_output_peak_bytes", "\(clients.figures.userOutputPeak)"))
        lines.append(contentsOf: store.statisticsLines)
        lines.append(("scope", "daemon"))
        return lines
    }
}
