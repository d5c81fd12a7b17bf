import CLinuxShims
import Glibc

/// Why storage failed, worded for the person reading the log or the `ERR unavailable` line.
enum StorageError: Error, CustomStringConvertible, Equatable {
    /// A system call on a storage file failed.
    case system(what: String, errno: Int32)
    /// A file exists but cannot be read.
    case unreadable(path: String, errno: Int32)
    /// A file is not what the daemon wrote: kept as it is, for inspection.
    case damaged(path: String, reason: String)
    /// Writing a file failed.
    case writeFailed(path: String, reason: String)
    /// The state directory (or the journal file in it) was deleted while the daemon ran.
    case directoryGone(path: String)
    /// Another daemon holds the state directory.
    case locked(directory: String, holder: String?)
    /// The state directory changed at every attempt to read it whole (a busy daemon's snapshots).
    case keptChanging(directory: String)

    var description: String {
        switch self {
        case .system(let what, let code):
            return "\(what): \(String(cString: strerror(code)))"
        case .unreadable(let path, let code):
            return "cannot read \(path): \(String(cString: strerror(code)))"
        case .damaged(let path, let reason):
            return "\(path) is damaged: \(reason)"
        case .writeFailed(let path, let reason):
            return "cannot write \(path): \(reason)"
        case .directoryGone(let path):
            return "the state directory \(path) was deleted"
        case .locked(let directory, let holder):
            return "another countdownd\(holder.map { " (pid \($0))" } ?? "") is using the state directory \(directory)"
        case .keptChanging(let directory):
            return "the state directory \(directory) changed while it was read, at every attempt: a running countdownd writes snapshots into it faster than it can be read whole"
        }
    }

    /// What an operator can do about it, for the end of a message.
    var advice: String {
        switch self {
        case .system(_, let code), .unreadable(_, let code):
            switch code {
            case ENOSPC, EDQUOT: return "free some space on its file system"
            case EROFS: return "remount its file system read-write"
            case EPERM: return "check the file's attributes (lsattr; chattr -i)"
            case EACCES: return "check the permissions of the state directory and its files"
            default: return "check the state directory's file system"
            }
        case .damaged(let path, _):
            let directory = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
            return "the file is kept as it is for inspection. Restore the state directory from a backup, or start with what is intact: countdownd --check-state \(directory) says what that is, and --repair-state \(directory) keeps exactly that, moving the damaged files aside"
        case .writeFailed:
            return "check free space and permissions in the state directory"
        case .directoryGone:
            return "it is being recreated"
        case .locked:
            return "stop that one, or give this one its own --state-dir"
        case .keptChanging:
            return "try again when the daemon is less busy, or stop it first"
        }
    }
}

/// The few file-system steps storage needs, each with a clear error.
enum FileSystem {
    /// Creates `path` and its parents (mode 0700) where missing.
    static func createDirectory(_ path: String) throws(StorageError) {
        // A relative path is created relative to the working directory, component by component.
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            prefix += "/" + component
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST {
                throw .system(what: "cannot create the state directory \(path)", errno: errno)
            }
        }
    }

    /// `fsync`s a file or directory by path.
    static func sync(path: String) throws(StorageError) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .system(what: "open \(path) to sync it", errno: errno) }
        defer { countdownd_close(descriptor) }
        guard fsync(descriptor) == 0 else { throw .system(what: "fsync \(path)", errno: errno) }
    }

    /// The directory holding `path` (`.` for a bare name).
    static func parent(of path: String) -> String {
        var path = Substring(path)
        while path.count > 1 && path.hasSuffix("/") { path = path.dropLast() }  // `/x/y/` is in `/x`.
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// The names in a directory (without `.` and `..`).
    static func entries(of path: String) throws(StorageError) -> [String] {
        guard let handle = opendir(path) else { throw .unreadable(path: path, errno: errno) }
        defer { closedir(handle) }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// The most a state file (a snapshot or a journal file) may hold: the snapshot of some 65
    /// million countdowns. A larger one is not one the daemon wrote (a sparse file, say), and reading it
    /// whole would exhaust memory.
    static let maximumStateFile = 1 << 32

    /// A state file's whole bytes: a snapshot or a journal file. Anything but a regular file (a
    /// device, a FIFO, a directory; symbolic links are followed) or one larger than
    /// `maximumStateFile` is damage, refused without reading it (a FIFO is opened without
    /// waiting for a writer); a symbolic link to nothing is unreadable, never "no file".
    static func readStateFile(_ path: String) throws(StorageError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard descriptor >= 0 else { throw .unreadable(path: path, errno: errno) }
        defer { countdownd_close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw .unreadable(path: path, errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw .damaged(path: path, reason: "it is not a regular file (a device, a FIFO or a directory), so not one countdownd wrote")
        }
        guard info.st_size <= off_t(maximumStateFile) else {
            throw .damaged(path: path, reason: "it is \(info.st_size) bytes long, more than any countdownd writes (\(maximumStateFile)): a sparse or foreign file")
        }
        // With the limit: a file that grows meanwhile is still bounded.
        let bytes = try readAll(descriptor: descriptor, path: path, limit: maximumStateFile)
        guard bytes.count <= maximumStateFile else {
            throw .damaged(path: path, reason: "it grew past \(maximumStateFile) bytes while it was read")
        }
        return bytes
    }

    /// The size in bytes of the file at `path`, or 0 when it cannot be examined: a guess for
    /// sizing tables before reading it, never a verdict about it.
    static func size(of path: String) -> Int {
        var info = stat()
        return stat(path, &info) == 0 ? max(0, Int(info.st_size)) : 0
    }

    /// Whether a directory entry exists at `path`, whatever it points to (a symbolic link to
    /// nothing exists).
    static func entryExists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// A whole file's bytes; with `limit`, reading stops once more than `limit` bytes are in
    /// (the caller tells a file that is too big by the count: a device such as /dev/zero never ends).
    static func readAll(_ path: String, limit: Int = .max) throws(StorageError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .unreadable(path: path, errno: errno) }
        defer { countdownd_close(descriptor) }
        return try readAll(descriptor: descriptor, path: path, limit: limit)
    }

    /// What is left to read of `descriptor` (opened on `path`, for messages), as `readAll(_:limit:)`.
    private static func readAll(descriptor: Int32, path: String, limit: Int) throws(StorageError) -> [UInt8] {
        // A regular file is read into one buffer of its size: a snapshot of a million countdowns
        // is 66 MB, which a growing buffer would allocate, clear and copy several times over.
        var info = stat()
        let size = fstat(descriptor, &info) == 0 && info.st_mode & S_IFMT == S_IFREG ? Int(info.st_size) : 0
        var failure: Int32 = 0
        var bytes = [UInt8](unsafeUninitializedCapacity: min(size, limit == .max ? size : limit + 1)) { buffer, count in
            guard let base = buffer.baseAddress else { return }
            while count < buffer.count {
                let got = read(descriptor, base + count, buffer.count - count)
                if got > 0 {
                    count += got
                } else if got == 0 {
                    return
                } else if errno != EINTR {
                    failure = errno
                    return
                }
            }
        }
        guard failure == 0 else { throw .unreadable(path: path, errno: failure) }
        // Then whatever else there is: a file that grew, or one whose size fstat does not tell.
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while bytes.count <= limit {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                bytes.append(contentsOf: chunk[0..<count])
            } else if count == 0 {
                return bytes
            } else if errno != EINTR {
                throw .unreadable(path: path, errno: errno)
            }
        }
        return bytes
    }

    /// Writes all of `bytes` at `offset`. On a short or failed write, cuts the file back to
    /// `offset`, so a later write never lands behind a torn frame.
    static func write(_ bytes: [UInt8], to descriptor: Int32, at offset: Int64, path: String) throws(StorageError) {
        var written = 0
        while written < bytes.count {
            // `written < bytes.count`, so the buffer is not empty and has a base address.
            let count = bytes.withUnsafeBytes { raw in
                pwrite(descriptor, raw.baseAddress! + written, raw.count - written, off_t(offset) + off_t(written))
            }
            if count > 0 {
                written += count
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                let code = count == 0 ? ENOSPC : errno
                // Ignored on purpose: the caller writes its next frame at `offset` again; what
                // is left past that reads as a torn tail, which recovery cuts.
                _ = ftruncate(descriptor, off_t(offset))
                throw .system(what: "cannot write \(path)", errno: code)
            }
        }
    }
}
