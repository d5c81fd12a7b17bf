import CLinuxShims
import Glibc

/// Notices at once when the state directory, or a file in it, is deleted or moved away: an
/// inotify watch on the directory, read by the daemon's `EventPoller`. Busy or idle, a lost
/// directory is then recreated and rewritten from memory within milliseconds, instead of at the
/// next commit (which an idle daemon may never make, losing everything at the next stop).
///
/// A recreated directory is a new inode: `watch()` is called again after each recreation (and
/// is harmless when nothing changed: the kernel returns the same watch). The parent directory is
/// watched too, for entries made, removed or moved in it: a watch on the directory itself ends
/// with the directory, and one re-added a moment too early (the daemon looked while an `rm -rf`
/// was still emptying it) would miss the directory's end, leaving an idle daemon none the wiser.
final class StateDirectoryWatcher {
    private let descriptor: Int32
    private let directory: String
    private let poller: EventPoller
    private var token: EventPoller.Token?

    /// What is watched: the directory itself deleted or moved, and files in it deleted or moved
    /// out (the journal or snapshot removed by hand). The daemon's own removals of old journal
    /// files are reported too; checking after them costs an `fstat`.
    private static let events = UInt32(IN_DELETE_SELF | IN_MOVE_SELF | IN_DELETE | IN_MOVED_FROM)
    /// What is watched in the parent: entries made, removed or moved in it (any of them, the
    /// kernel does not filter by name: each burst costs a look, an `fstat` and a `stat`).
    private static let parentEvents = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR)

    /// Starts watching `directory`; `changed` runs on the poller's queue, in a batch, after each
    /// burst of events.
    init(directory: String, poller: EventPoller, changed: @escaping () -> Void) throws(DaemonError) {
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { throw .system("inotify_init1", errno) }
        descriptor = fd
        self.directory = directory
        self.poller = poller
        do {
            token = try poller.register(fd, interest: .readable) { _ in
                // Drained whole: only "something changed" matters, and the check that follows
                // looks at the files themselves.
                var buffer = [UInt8](repeating: 0, count: 4096)
                while buffer.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
                changed()
            }
        } catch {
            // Never watched; startup fails with `error`.
            countdownd_close(fd)
            throw error
        }
        watch()
    }

    /// (Re)watches the directory at its path. Returns whether the kernel took the watch; when it
    /// did not (the directory is gone this instant), the storage retry calls this again.
    @discardableResult
    func watch() -> Bool {
        // The watches' numbers are not kept: every event means "look", whichever watch it came
        // from. Ignored on purpose: a parent that cannot be watched leaves the directory's own
        // watch, as before there was one on the parent.
        _ = inotify_add_watch(descriptor, FileSystem.parent(of: directory), Self.parentEvents)
        return inotify_add_watch(descriptor, directory, Self.events) >= 0
    }

}
