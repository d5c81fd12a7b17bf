import CountdownCore

extension StoredCountdown {
    /// A countdown's durable state as kept on disk: deadlines on both clocks, the plain name
    /// beside its owner (the daemon's key is rebuilt from the two).
    init(_ countdown: Countdown, clock: WallClockMapping) {
        self.init(
            name: CountdownAddress.display(countdown.name, owner: countdown.owner, to: countdown.owner),
            state: countdown.state,
            totalMilliseconds: countdown.totalMilliseconds,
            deadlineUnixMilliseconds: countdown.deadline.map(clock.unixMilliseconds(of:)),
            deadlineBootNanoseconds: countdown.deadline?.nanoseconds,
            remainingNanoseconds: countdown.remainingNanoseconds,
            finishedUnixMilliseconds: countdown.finishedAt.map(clock.unixMilliseconds(of:)),
            owner: countdown.owner,
            lateMilliseconds: countdown.lateMilliseconds,
            pinnedUnixMilliseconds: countdown.pinnedUnixMilliseconds,
            pausesOnSuspend: countdown.pausesOnSuspend,
            cycle: countdown.cycle
        )
    }

    /// The daemon's key for this countdown: its name in its owner's namespace.
    var key: String { CountdownAddress.key(owner: owner, name: name) }

    /// The stored state on this run's clock. Within the boot that wrote it, the boot-clock
    /// deadline is exact and immune to wall-clock steps made while the daemon was down; after a
    /// reboot the wall-clock deadline is all there is. Whether a deadline has passed is the
    /// engine's business (`CountdownEngine.restore`), not storage's. `key` is this countdown's
    /// `key`, made once by the caller (which hashes it too).
    func persisted(clock: WallClockMapping, sameBoot: Bool, key: String) -> Countdown {
        // A finished row always has its finishing time; without one it finished now.
        var finishedAt: Instant { clock.instant(ofUnixMilliseconds: finishedUnixMilliseconds ?? clock.unixMilliseconds) }
        let status: Countdown.Status
        switch state {
        case .running:
            let deadline: Instant
            if let pinned = pinnedUnixMilliseconds {
                // A countdown to a time of day: wherever that time now is.
                deadline = clock.instant(ofUnixMilliseconds: pinned)
            } else if sameBoot, let boot = deadlineBootNanoseconds {
                deadline = Instant(nanoseconds: boot)
            } else {
                // A running row always has a wall-clock deadline; without one it is due now.
                deadline = clock.instant(ofUnixMilliseconds: deadlineUnixMilliseconds ?? clock.unixMilliseconds)
            }
            status = .running(deadline: deadline, pinnedUnixMilliseconds: pinnedUnixMilliseconds)
        case .paused: status = .paused(remainingNanoseconds: remainingNanoseconds)
        case .done: status = .done(finishedAt: finishedAt, lateMilliseconds: lateMilliseconds)
        case .cancelled: status = .cancelled(remainingNanoseconds: remainingNanoseconds, finishedAt: finishedAt)
        }
        return Countdown(
            name: key, owner: owner, totalMilliseconds: totalMilliseconds, status: status, pausesOnSuspend: pausesOnSuspend, cycle: cycle
        )
    }
}
