/// Where the daemon listens and the client connects, resolved the same way by both.
public enum SocketPath {
    /// The default socket path for a user and an environment:
    /// 1. `$COUNTDOWND_SOCKET`, when set and not empty;
    /// 2. `$XDG_RUNTIME_DIR/countdownd/countdownd.sock`;
    /// 3. `/run/countdownd/countdownd.sock` for root;
    /// 4. `/tmp/countdownd-<uid>/countdownd.sock` for anyone else (no runtime directory).
    public static func resolve(environment: [String: String], uid: UInt32) -> String {
        if let explicit = environment["COUNTDOWND_SOCKET"], !explicit.isEmpty {
            return explicit
        }
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
            return runtime + "/countdownd/countdownd.sock"
        }
        if uid == 0 {
            return "/run/countdownd/countdownd.sock"
        }
        return "/tmp/countdownd-\(uid)/countdownd.sock"
    }

    /// The system daemon's socket (countdownd.socket), which root and members of its group may use.
    public static let system = "/run/countdownd/countdownd.sock"

    /// The sockets a client tries, in order: `$COUNTDOWND_SOCKET` alone when it is set; else the
    /// user's own daemon's socket (`resolve`), then the system daemon's, which members of its
    /// group may use (as `at` and `chronyc` users just run the client).
    public static func clientCandidates(environment: [String: String], uid: UInt32) -> [String] {
        let own = resolve(environment: environment, uid: uid)
        if let explicit = environment["COUNTDOWND_SOCKET"], !explicit.isEmpty {
            return [explicit]
        }
        return own == system ? [own] : [own, system]
    }

    /// How to start a daemon that would listen at the default path, for "cannot connect" messages.
    public static func startAdvice(uid: UInt32) -> String {
        if uid == 0 {
            return "start it with 'systemctl start countdownd.socket' or run 'countdownd'"
        }
        return "start it with 'systemctl --user start countdownd.socket' or run 'countdownd'"
    }
}
