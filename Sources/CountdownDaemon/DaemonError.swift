import Glibc

/// Why the daemon could not start or keep running, worded for the person reading the log.
public enum DaemonError: Error, CustomStringConvertible, Equatable {
    /// A system call failed.
    case system(String, Int32)
    /// Another daemon already answers on the socket path.
    case alreadyRunning(path: String)
    /// The socket path exists and is not a socket.
    case pathIsNotSocket(path: String)
    /// The socket path does not fit in `sun_path`.
    case socketPathTooLong(path: String, limit: Int)
    /// A descriptor passed by systemd is not a listening AF_UNIX stream socket.
    case unusablePassedSocket(String)
    /// A problem with the state database.
    case storage(String)
    /// A library the daemon links (libcurl, for cluster mode) cannot be used.
    case unusableLibrary(String)

    public var description: String {
        switch self {
        case .system(let call, let code):
            return "\(call) failed: \(String(cString: strerror(code)))"
        case .alreadyRunning(let path):
            return "another countdownd is already listening on \(path); stop it first, or pass --socket with another path"
        case .pathIsNotSocket(let path):
            return "\(path) exists and is not a socket; remove it or pass --socket with another path"
        case .socketPathTooLong(let path, let limit):
            return "socket path \(path) is longer than the \(limit) bytes a Unix socket address allows; choose a shorter --socket"
        case .unusablePassedSocket(let why):
            return "the socket passed by systemd cannot be used: \(why); check ListenStream= in countdownd.socket"
        case .storage(let why):
            return why
        case .unusableLibrary(let why):
            return "\(why); check that the system's library works (reinstall libcurl4), or run without cluster mode"
        }
    }
}
