import CSystemd
import Glibc

/// Socket activation through libsystemd: use the socket systemd passes, or bind one ourselves.
enum SocketActivation {
    /// The socket to serve: the first AF_UNIX stream socket passed by systemd, when there is one
    /// (`sd_listen_fds_with_names`, checked with `sd_is_socket_unix`); otherwise one bound at
    /// `fallbackPath`.
    static func listeningSocket(fallbackPath: String, mode: mode_t) throws(DaemonError) -> ListeningSocket {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        defer {
            if let names {
                var index = 0
                while let name = names[index] {
                    free(name)
                    index += 1
                }
                free(names)
            }
        }
        guard count > 0 else {
            return try ListeningSocket.bind(path: fallbackPath, mode: mode)
        }
        let first = SD_LISTEN_FDS_START
        for offset in 0..<count {
            let descriptor = first + offset
            if sd_is_socket_unix(descriptor, Int32(SOCK_STREAM.rawValue), 1, nil, 0) > 0 {
                let name = names?[Int(offset)].map { String(cString: $0) } ?? "unnamed"
                return try ListeningSocket.adopt(descriptor: descriptor, displayPath: "fd \(descriptor) (\(name))")
            }
        }
        throw .unusablePassedSocket("none of the \(count) passed descriptors is a listening AF_UNIX stream socket")
    }
}
