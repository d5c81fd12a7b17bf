import Glibc

/// Why a socket refused this user, and the fix, from the socket file's owner, group and mode.
public enum SocketAccess {
    /// The advice after "permission denied on PATH": join the socket's group and log in again
    /// (or just log in again, when the group was given after this session began), or use another
    /// socket; under systemd the mode is the `.socket` unit's, so widening `--socket-mode` is the
    /// answer only for a daemon started by hand.
    public static func advice(for path: String) -> String {
        var info = stat()
        guard stat(path, &info) == 0 else {
            return "use --socket with a socket you may use, or ask the daemon's owner for access"
        }
        let user = userName(getuid()) ?? "\(getuid())"
        let groupWritable = info.st_mode & S_IWGRP != 0
        if groupWritable, let group = groupName(info.st_gid) {
            if listsMember(user, ofGroup: info.st_gid) {
                return "you are in group '\(group)', but this session began before you joined it: log in again (or run 'newgrp \(group)')"
            }
            return "only root and members of group '\(group)' may use it: join the group ('sudo usermod -aG \(group) \(user)'), then log in again; or use your own daemon ('systemctl --user start countdownd.socket')"
        }
        let owner = userName(info.st_uid) ?? "uid \(info.st_uid)"
        return "the socket belongs to \(owner) and only they may use it: use your own daemon ('systemctl --user start countdownd.socket', or --socket), or ask \(owner) to widen countdownd's --socket-mode"
    }

    private static func userName(_ uid: uid_t) -> String? {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return nil }
        return String(cString: name)
    }

    private static func groupName(_ gid: gid_t) -> String? {
        guard let entry = getgrgid(gid), let name = entry.pointee.gr_name else { return nil }
        return String(cString: name)
    }

    /// Whether /etc/group (or NSS) lists `user` in the group, whatever this process's groups are.
    private static func listsMember(_ user: String, ofGroup gid: gid_t) -> Bool {
        guard let entry = getgrgid(gid), var member = entry.pointee.gr_mem else { return false }
        while let name = member.pointee {
            if String(cString: name) == user { return true }
            member += 1
        }
        return false
    }
}
