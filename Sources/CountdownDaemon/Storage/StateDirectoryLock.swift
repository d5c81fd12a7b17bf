import CLinuxShims
import Glibc

/// An exclusive `flock` on `countdownd.lock` in the state directory, held for the daemon's life:
/// two daemons on one directory would each overwrite the other's journal. Taken before anything
/// in the directory is read. The file holds the owner's pid, for the refusal message.
final class StateDirectoryLock {
    static let fileName = "countdownd.lock"
    private let descriptor: Int32

    /// Takes the lock, or fails at once (never waits) naming the daemon that holds it.
    init(directory: String) throws(StorageError) {
        let path = directory + "/" + Self.fileName
        var descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if descriptor < 0 && errno == EACCES {
            // A read-only lock file locks as well (flock needs no write access); no pid is noted.
            descriptor = open(path, O_RDONLY | O_CLOEXEC)
        }
        guard descriptor >= 0 else {
            // The directory was just made: gone again means it was deleted (again) meanwhile.
            if errno == ENOENT { throw .directoryGone(path: directory) }
            throw .system(what: "cannot open the lock file \(path)", errno: errno)
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            var buffer = [UInt8](repeating: 0, count: 32)
            let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
            countdownd_close(descriptor)
            guard code == EWOULDBLOCK else {
                throw .system(what: "cannot lock \(path)", errno: code)
            }
            let holder = count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self).split(separator: "\n").first.map(String.init) : nil
            throw .locked(directory: directory, holder: holder)
        }
        let pid = Array("\(getpid())\n".utf8)
        // Ignored on purpose: the pid is a note for the operator's message; the flock is the lock
        // (a read-only lock file takes no note at all).
        _ = ftruncate(descriptor, 0)
        _ = pid.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }  // As above.
        self.descriptor = descriptor
    }

    /// Whether the locked file is still the one at its path's name: a lock file deleted (by an
    /// `rm -rf` of the directory the daemon then refilled) locks nothing another daemon sees.
    var isLinked: Bool {
        var info = stat()
        return fstat(descriptor, &info) == 0 && info.st_nlink > 0
    }

    deinit {
        countdownd_close(descriptor)
    }
}
