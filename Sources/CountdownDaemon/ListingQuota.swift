/// How many `LIST`s each non-root uid has in progress, and the most it may: each keeps the
/// countdowns as they were when it began, so every page of them changed meanwhile is copied for
/// it (250 unread ones of one user held 1.3 GB).
///
/// A `LIST` in progress holds a `Permit` (`ListingInProgress.Purpose.list`). Its connection gives
/// it back the moment the listing stops being its own: at its last slice, when it closes or is
/// cut off, when another listing replaces it (`Connection`'s lifecycle). Should a listing be
/// dropped some other way, the permit gives itself back when the last copy of it goes. So the
/// daemon does not ask the client table how many listings a user has, and the count cannot
/// stay behind after a listing is gone. Confined to the daemon's queue, as the listings are.
final class ListingQuota {
    /// The most `LIST`s one non-root uid may have in progress at once.
    let limit: Int
    private var inProgress: [UInt32: Int] = [:]

    init(limit: Int) {
        self.limit = limit
    }

    /// One `LIST`'s place in its uid's count, until `giveBack` (or the last copy of it goes).
    final class Permit {
        private let quota: ListingQuota
        private let uid: UInt32
        /// Whether the place is still taken: given back once, whoever asks again.
        private(set) var isHeld = true

        fileprivate init(quota: ListingQuota, uid: UInt32) {
            self.quota = quota
            self.uid = uid
        }

        /// Gives the place back; once only, so a listing that ends and is then dropped, or a
        /// slice produced again after a failed commit that ends it again, counts once.
        func giveBack() {
            guard isHeld else { return }
            isHeld = false
            quota.release(uid)
        }

        deinit {
            giveBack()
        }
    }

    /// A place for one more `LIST` of `uid`'s, or `nil` when it has `limit` in progress. Root is
    /// counted but not limited. `replacingOne`: the new `LIST` replaces one of the user's own
    /// that is still counted (a failed commit's batch served again: the `LIST` it serves again
    /// began the listing it replaces), so that one makes room for it.
    func take(for uid: UInt32, replacingOne: Bool = false) -> Permit? {
        let held = inProgress[uid, default: 0]
        guard uid == 0 || held - (replacingOne ? 1 : 0) < limit else { return nil }
        inProgress[uid] = held + 1
        return Permit(quota: self, uid: uid)
    }

    /// How many `LIST`s of `uid`'s are in progress.
    func count(of uid: UInt32) -> Int {
        inProgress[uid, default: 0]
    }

    private func release(_ uid: UInt32) {
        guard let held = inProgress[uid] else { preconditionFailure("uid \(uid) gave back a LIST's place it never took") }
        inProgress[uid] = held > 1 ? held - 1 : nil
    }
}
