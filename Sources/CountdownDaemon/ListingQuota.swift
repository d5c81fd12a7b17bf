/// How many `LIST`s each non-root uid has in progress, and the most it may: each keeps the
/// countdowns as they were when it began, so every page of them changed meanwhile is copied for
/// it (250 unread ones of one user held 1.3 GB).
///
/// A `LIST` holds a `Permit` for as long as its frozen copy lives (`ListingInProgress.permit`),
/// and gives it back by being dropped, wherever that happens: at its last slice, when its
/// connection closes or is cut off, or when a failed commit's record of it goes. The count is
/// the permits alive, so it is never out of step with the copies it stands for, and the daemon
/// does not ask the client table how many listings a user has. Confined to the daemon's queue,
/// as the listings are.
final class ListingQuota {
    /// The most `LIST`s one non-root uid may have in progress at once.
    let limit: Int
    private var inProgress: [UInt32: Int] = [:]

    init(limit: Int) {
        self.limit = limit
    }

    /// One `LIST`'s place in its uid's count, given back when the last copy of it is dropped.
    final class Permit {
        private let quota: ListingQuota
        private let uid: UInt32

        fileprivate init(quota: ListingQuota, uid: UInt32) {
            self.quota = quota
            self.uid = uid
        }

        deinit {
            quota.giveBack(for: uid)
        }
    }

    /// A place for one more `LIST` of `uid`'s, or `nil` when it has `limit` in progress.
    /// Root is counted but not limited.
    func take(for uid: UInt32) -> Permit? {
        let held = inProgress[uid, default: 0]
        guard uid == 0 || held < limit else { return nil }
        inProgress[uid] = held + 1
        return Permit(quota: self, uid: uid)
    }

    /// How many `LIST`s of `uid`'s are in progress.
    func count(of uid: UInt32) -> Int {
        inProgress[uid, default: 0]
    }

    private func giveBack(for uid: UInt32) {
        guard let held = inProgress[uid] else { preconditionFailure("uid \(uid) gave back a LIST's place it never took") }
        inProgress[uid] = held > 1 ? held - 1 : nil
    }
}
