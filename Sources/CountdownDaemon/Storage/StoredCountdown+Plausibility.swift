import CountdownCore

extension StoredCountdown {
    /// The latest wall-clock time a stored countdown may name, in Unix milliseconds (November
    /// 2286): far past anything a daemon writes, and near enough to every clock it runs on that
    /// no conversion overflows.
    static let latestUnixMilliseconds: Int64 = 9_999_999_999_999

    /// What makes this row one no countdownd writes, or `nil` for a plausible one.
    ///
    /// A frame's checksum covers its bytes, not their sense: a frame rewritten with its checksum
    /// recomputed, or written by a buggy or hostile hand, verifies. Values no daemon writes are
    /// damage all the same, refused as a bad checksum is (recovery and `--check-state` share
    /// this), so that a name with a newline never reaches a client's line and a time no clock
    /// reaches never reaches the clock's arithmetic (event numbers and generations are bounded
    /// where they are read: `JournalFormat.largestNumber`). Only what is impossible is checked: a
    /// running countdown to a time of day may have a total far above the longest duration (the
    /// wall clock was set back), so totals and times are checked against the clock's reach.
    var implausibility: String? {
        if let problem = Self.nameProblem(name) { return problem }
        let reach = WallClockMapping.farthestMilliseconds
        guard totalMilliseconds > 0, totalMilliseconds <= reach else {
            return "a total of \(totalMilliseconds) ms (a countdown lasts 1 ms to \(reach) ms)"
        }
        guard remainingNanoseconds >= 0, remainingNanoseconds / 1_000_000 <= reach else {
            return "\(remainingNanoseconds) ns left (0 to \(reach) ms)"
        }
        for (field, value) in [("deadline", deadlineUnixMilliseconds), ("finishing time", finishedUnixMilliseconds), ("time of day", pinnedUnixMilliseconds)] {
            if let value, !(0...Self.latestUnixMilliseconds).contains(value) {
                return "a \(field) of \(value) Unix ms (0 to \(Self.latestUnixMilliseconds))"
            }
        }
        if let boot = deadlineBootNanoseconds, !(0...reach * 1_000_000).contains(boot) {
            return "a boot-clock deadline of \(boot) ns (0 to \(reach) ms after the boot)"
        }
        if let late = lateMilliseconds, !(0...reach).contains(late) {
            return "\(late) ms late (0 to \(reach))"
        }
        return nil
    }

    /// What makes `name` one no client could have given (`CountdownName`), or `nil`. The name is
    /// not repeated: its bytes may be anything.
    static func nameProblem(_ name: String) -> String? {
        let bytes = name.utf8
        guard !bytes.isEmpty, bytes.count <= CountdownName.maximumLength else {
            return "a name of \(bytes.count) bytes (1 to \(CountdownName.maximumLength))"
        }
        guard bytes.allSatisfy(CountdownName.isAllowed) else {
            return "a name with a byte outside \(CountdownName.allowedCharactersDescription)"
        }
        return nil
    }
}
