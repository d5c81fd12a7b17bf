import Glibc

/// The process's local time zone, as the C library knows it: `TZ`, else `/etc/localtime`, read
/// from the system's tzdata by `localtime_r` (no Foundation, no ICU).
public struct SystemLocalZone: LocalZone {
    public init() {
        // localtime_r, unlike localtime, need not read TZ itself (POSIX): read it once here.
        tzset()
    }

    public func offset(atUnixSeconds unixSeconds: Int64) -> LocalOffset {
        var seconds = time_t(unixSeconds)
        var broken = tm()
        guard localtime_r(&seconds, &broken) != nil else {
            // Only a year beyond what tm_year holds fails; --at refuses those long before.
            return FixedOffsetZone.utc.fixed
        }
        let abbreviation = broken.tm_zone.map { String(cString: $0) } ?? ""
        return LocalOffset(seconds: Int(broken.tm_gmtoff), abbreviation: abbreviation)
    }

    /// The wall clock, in Unix milliseconds.
    public static func nowUnixMilliseconds() -> Int64 {
        var now = timespec()
        // CLOCK_REALTIME always exists; the call cannot fail with a valid pointer.
        _ = clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}
