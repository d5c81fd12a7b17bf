import CLinuxShims
import Glibc

/// The daemon's listening socket: bound by the daemon, or passed by systemd's socket activation.
final class ListeningSocket {
    /// The listening descriptor.
    let descriptor: Int32
    /// The path to unlink on exit, when the daemon bound the socket itself; `nil` for a passed one.
    let ownedPath: String?
    /// Where clients connect, for logs.
    let displayPath: String

    private var poller: EventPoller?
    private var token: EventPoller.Token?

    private init(descriptor: Int32, ownedPath: String?, displayPath: String) {
        self.descriptor = descriptor
        self.ownedPath = ownedPath
        self.displayPath = displayPath
    }

    /// Binds and listens at `path` with `mode`, creating the parent directory (0700) if needed.
    ///
    /// A stale socket file (nothing answers) is replaced; a live daemon makes this fail with a
    /// clear message, so two daemons never fight over one path.
    static func bind(path: String, mode: mode_t) throws(DaemonError) -> ListeningSocket {
        try createParentDirectory(of: path)
        var status = stat()
        if lstat(path, &status) == 0 {
            guard (status.st_mode & S_IFMT) == S_IFSOCK else {
                throw .pathIsNotSocket(path: path)
            }
            if UnixSocket.isLive(path) {
                throw .alreadyRunning(path: path)
            }
            // Ignored on purpose: a stale socket that cannot be removed makes bind fail next,
            // with the error the operator needs (EADDRINUSE, EACCES).
            _ = unlink(path)
        }
        let fd = countdownd_unix_stream_socket(1)
        guard fd >= 0 else { throw .system("socket(AF_UNIX)", errno) }
        // The file bind creates takes the socket's own mode (less the umask) on Linux: 0600 set
        // on the socket first, then the asked mode, so the socket is never more open than
        // configured. (Not umask(): it is the whole process's, and other threads creating files
        // meanwhile got 0600 ones.)
        guard fchmod(fd, 0o600) == 0 else {
            let code = errno
            countdownd_close(fd)
            throw .system("fchmod(socket)", code)
        }
        let bound = try UnixSocket.withAddress(path) { address, length in Glibc.bind(fd, address, length) }
        let bindErrno = errno
        guard bound == 0 else {
            countdownd_close(fd)
            throw .system("bind(\(path))", bindErrno)
        }
        guard chmod(path, mode) == 0 else {
            let code = errno
            countdownd_close(fd)
            _ = unlink(path)  // Ignored on purpose: the start fails with the error above.
            throw .system("chmod(\(path))", code)
        }
        guard listen(fd, SOMAXCONN) == 0 else {
            let code = errno
            countdownd_close(fd)
            _ = unlink(path)  // Ignored on purpose: the start fails with the error above.
            throw .system("listen(\(path))", code)
        }
        return ListeningSocket(descriptor: fd, ownedPath: path, displayPath: path)
    }

    /// Adopts a listening socket passed by systemd. It is never unlinked: systemd owns the file.
    static func adopt(descriptor: Int32, displayPath: String) throws(DaemonError) -> ListeningSocket {
        try UnixSocket.setNonBlocking(descriptor)
        return ListeningSocket(descriptor: descriptor, ownedPath: nil, displayPath: displayPath)
    }

    /// Starts watching for connections: `readable` runs on the poller's queue while some are pending.
    func startAccepting(with poller: EventPoller, readable: @escaping () -> Void) throws(DaemonError) {
        self.poller = poller
        token = try poller.register(descriptor, interest: .readable) { _ in readable() }
    }

    /// Stops or restarts watching for connections (while out of descriptors, a pending connection
    /// would otherwise be reported again at once, forever).
    /// - Throws: `DaemonError.system` when the poller could not change it (`epoll_ctl` failed).
    func setAccepting(_ accepting: Bool) throws(DaemonError) {
        guard let poller, let token else { return }
        try poller.setInterest(accepting ? .readable : [], for: token)
    }

    /// What one `accept` gave.
    enum AcceptResult {
        /// A new non-blocking, close-on-exec connection.
        case accepted(Int32)
        /// Nothing pending (or the socket is closed).
        case drained
        /// Out of descriptors or memory: try again a little later.
        case retryLater
    }

    /// Accepts one pending connection.
    func acceptOne() -> AcceptResult {
        guard token != nil else { return .drained }
        while true {
            let client = countdownd_accept(descriptor)
            if client >= 0 { return .accepted(client) }
            switch errno {
            case EINTR, ECONNABORTED: continue
            case EMFILE, ENFILE, ENOBUFS, ENOMEM: return .retryLater
            default: return .drained
            }
        }
    }

    /// Stops accepting, closes the descriptor and removes the socket file the daemon created.
    func close() {
        if let path = ownedPath {
            // Ignored on purpose: a socket file left behind is stale, and the next start
            // finds no daemon on it and replaces it.
            _ = unlink(path)
        }
        if let poller, let token {
            poller.unregister(token)
            self.token = nil
        }
        countdownd_close(descriptor)
    }

    private static func createParentDirectory(of path: String) throws(DaemonError) {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return }
        let directory = String(path[..<slash])
        var status = stat()
        if stat(directory, &status) == 0 { return }
        guard mkdir(directory, 0o700) == 0 || errno == EEXIST else {
            throw .system("mkdir(\(directory))", errno)
        }
    }
}
