import CLinuxShims
import Glibc

/// Small, checked wrappers over the socket calls the daemon makes.
enum UnixSocket {
    /// The most bytes of a path `sockaddr_un` holds, without its terminating NUL.
    static let maximumPathLength = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// Runs `body` with a `sockaddr_un` for `path`.
    static func withAddress<Result>(
        _ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Result
    ) throws(DaemonError) -> Result {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count <= maximumPathLength else {
            throw .socketPathTooLong(path: path, limit: maximumPathLength)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
        }
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// Makes a descriptor non-blocking.
    /// - Throws: `DaemonError.system` when `fcntl` fails (a blocking listener would stall the queue).
    static func setNonBlocking(_ fd: Int32) throws(DaemonError) {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0 else { throw .system("fcntl(F_GETFL)", errno) }
        guard fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else { throw .system("fcntl(F_SETFL, O_NONBLOCK)", errno) }
    }

    /// The uid of the process at the other end of a connected Unix socket.
    static func peerUID(_ fd: Int32) -> UInt32? {
        var uid: UInt32 = 0
        return countdownd_peer_uid(fd, &uid) == 0 ? uid : nil
    }

    /// Whether a daemon answers at `path`: a connect that succeeds means yes; refused means stale.
    static func isLive(_ path: String) -> Bool {
        let fd = countdownd_unix_stream_socket(0)
        guard fd >= 0 else { return false }
        defer { countdownd_close(fd) }
        let result = try? withAddress(path) { address, length in connect(fd, address, length) }
        return result == 0
    }
}
