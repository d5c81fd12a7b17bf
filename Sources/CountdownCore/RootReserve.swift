/// The share of a daemon-wide pool (`--max-countdowns`, `--max-connections`) kept for root, as
/// ext4 keeps 5 % of a file system's blocks: whatever the other users take between them, root
/// (the operator, and the services that run as root) can still connect and start countdowns.
public enum RootReserve {
    /// 5 % of `limit`, rounded down (none for pools under 20).
    public static func share(of limit: Int) -> Int {
        limit / 20
    }

    /// How much of a pool of `limit` the uid may fill: all of it for root, the rest for others.
    public static func usable(of limit: Int, by uid: UInt32) -> Int {
        uid == 0 ? limit : limit - share(of: limit)
    }
}
