import CountdownCore

/// `cdctl start NAME --at TIME`: a time of day as people write it, in at(1) and systemd.time(7)
/// spirit, read in the local time zone.
///
/// - `09:30`, `9:30:15`: the next such time (today, or tomorrow if it has passed);
/// - `today 17:00`, `tomorrow 09:30`;
/// - `2026-12-24 18:00`, `2026-12-24T18:00[:SS]`: local time, or with `Z` / `+01:00` as given;
/// - `now + 3 min`, `now+90s`: a duration from now (any duration `cdctl` takes).
public enum LocalTime {
    /// Why a time could not be read.
    public struct ParseError: Error, CustomStringConvertible, Equatable {
        public var description: String
    }

    static let forms = "09:30, tomorrow 09:30, 2026-12-24 18:00, 2026-12-24T18:00+01:00 or now + 3 min"

    /// A time read from `--at`, and what the person should know about it.
    public struct Resolved: Equatable, Sendable {
        /// The instant, in Unix milliseconds.
        public var unixMilliseconds: Int64
        /// A local time that happens twice (a clock turned back): which instant was taken.
        public var note: String?
    }

    /// Reads `text` as seen at `now` (Unix milliseconds) in `zone`, as a countdown's end: it must
    /// be in the future and at most 366 days away, on a date that exists.
    public static func resolve(_ text: String, now: Int64, zone: some LocalZone) throws(ParseError) -> Resolved {
        let read = try read(text, now: now, zone: zone)
        guard read.unixMilliseconds > now else {
            throw ParseError(description: "'\(text)' is \(shown(read.unixMilliseconds, zone)), which has passed (it is now \(shown(now, zone))); give a time to come")
        }
        guard read.unixMilliseconds - now <= CountdownDuration.maximumMilliseconds else {
            throw ParseError(description: "'\(text)' is \(shown(read.unixMilliseconds, zone)), more than 366 days away; a countdown lasts at most 366 days")
        }
        return read
    }

    /// Parses `text` as seen at `now` (Unix milliseconds) in `zone`; `resolve` checks the result too.
    /// - Returns: Unix milliseconds.
    public static func parse(_ text: String, now: Int64, zone: some LocalZone) throws(ParseError) -> Int64 {
        try read(text, now: now, zone: zone).unixMilliseconds
    }

    /// `2026-10-25 02:30:00 CEST`: an instant as the local clock and zone show it (without the
    /// zone: `withZone: false`).
    static func shown(_ unixMilliseconds: Int64, _ zone: some LocalZone, withZone: Bool = true) -> String {
        let seconds = unixMilliseconds >= 0 ? unixMilliseconds / 1000 : (unixMilliseconds - 999) / 1000
        let offset = zone.offset(atUnixSeconds: seconds)
        let clock = CivilTime(unixSeconds: seconds, offset: offset.seconds).text
        return withZone && !offset.abbreviation.isEmpty ? clock + " " + offset.abbreviation : clock
    }

    /// Where a local time falls: once, twice (the clocks go back), or never (they go forward).
    enum Placement: Equatable {
        case once(Int64)
        case twice(Int64, Int64)
        /// Skipped: the instant a clock still on the earlier offset would have shown it.
        case skipped(Int64)

        /// The earliest instant it stands for, in Unix seconds.
        var first: Int64 {
            switch self {
            case .once(let instant), .twice(let instant, _), .skipped(let instant): return instant
            }
        }
    }

    /// The instants at which the clock of `zone` shows `civil`. Offsets change at most once in a
    /// day, so the offsets a day before and after are the only ones that can apply.
    static func place(_ civil: CivilTime, in zone: some LocalZone) -> Placement {
        let asUTC = civil.unixSeconds()
        let before = zone.offset(atUnixSeconds: asUTC - 86_400).seconds
        let after = zone.offset(atUnixSeconds: asUTC + 86_400).seconds
        var instants: [Int64] = []
        for offset in [before, after, zone.offset(atUnixSeconds: asUTC).seconds] {
            let instant = asUTC - Int64(offset)
            if zone.offset(atUnixSeconds: instant).seconds == offset, !instants.contains(instant) {
                instants.append(instant)
            }
        }
        instants.sort()
        switch instants.count {
        case 0: return .skipped(asUTC - Int64(before))
        case 1: return .once(instants[0])
        default: return .twice(instants[0], instants[instants.count - 1])
        }
    }

    private static func read(_ text: String, now: Int64, zone: some LocalZone) throws(ParseError) -> Resolved {
        // Blanks of any kind (a tab, a no-break space pasted from a chat) around and between words.
        let trimmed = String(text.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
        let lower = trimmed.lowercased()
        if lower.hasPrefix("now") {
            let rest = lower.dropFirst(3).filter { !$0.isWhitespace }
            guard rest.hasPrefix("+") else {
                throw ParseError(description: "'\(text)' is not a time; after 'now' comes '+ DURATION', as in now + 3 min")
            }
            do {
                return Resolved(unixMilliseconds: now + (try CountdownDuration.parse(String(rest.dropFirst()))))
            } catch where error.message.contains("longer than 366 days") {
                throw ParseError(description: "'\(text)' is more than 366 days away; a countdown lasts at most 366 days")
            } catch {
                throw ParseError(description: "'\(text)' is not a time; after 'now' comes '+ DURATION', as in now + 3 min")
            }
        }
        if let explicit = WallClockTime.rfc3339(Array(trimmed.utf8)) {
            return Resolved(unixMilliseconds: explicit)
        }
        let nowSeconds = now >= 0 ? now / 1000 : (now - 999) / 1000
        let today = CivilTime(unixSeconds: nowSeconds, offset: zone.offset(atUnixSeconds: nowSeconds).seconds)
        let words = lower.split(whereSeparator: \.isWhitespace).map(String.init)
        var day: CivilTime?
        var clock = words.last ?? ""
        switch words.count {
        case 1:
            day = nil
        case 2 where words[0] == "today":
            day = today
        case 2 where words[0] == "tomorrow":
            day = today.addingDays(1)
        case 2:
            guard let date = try isoDate(words[0]) else { throw unreadable(text) }
            day = date
        default:
            throw unreadable(text)
        }
        // `2026-12-24T18:00` without an offset: local time.
        if words.count == 1, let t = clock.firstIndex(of: "t"), clock[..<t].contains("-") {
            guard let date = try isoDate(String(clock[..<t])) else { throw unreadable(text) }
            day = date
            clock = String(clock[clock.index(after: t)...])
        }
        let parts = clock.split(separator: ":", omittingEmptySubsequences: false).map { Int($0) }
        guard (2...3).contains(parts.count), let hour = parts[0], let minute = parts[1], (0..<24).contains(hour), (0..<60).contains(minute) else {
            throw unreadable(text)
        }
        let second = parts.count == 3 ? parts[2] : 0
        guard let second, (0..<60).contains(second) else { throw unreadable(text) }
        let date = day ?? today
        var civil = CivilTime(year: date.year, month: date.month, day: date.day, hour: hour, minute: minute, second: second)
        var placement = place(civil, in: zone)
        if case .twice(let first, let second) = placement, first * 1000 <= now, second * 1000 > now {
            // In the hour the clocks went back, past the first 02:30: the second is still to come.
            return Resolved(unixMilliseconds: second * 1000)
        }
        if day == nil && placement.first * 1000 <= now {
            // A bare time of day means the next one: the same clock time tomorrow.
            civil = civil.addingDays(1)
            placement = place(civil, in: zone)
        }
        switch placement {
        case .once(let instant):
            return Resolved(unixMilliseconds: instant * 1000)
        case .twice(let first, let second):
            let other = "\(civil.text.prefix(10))T\(civil.text.dropFirst(11).prefix(5))\(offsetText(zone.offset(atUnixSeconds: second).seconds))"
            let note = "\(civil.text) happens twice (the clocks go back); taking the first, \(shown(first * 1000, zone)), not \(shown(second * 1000, zone)); give an offset (\(other)) for the other"
            return Resolved(unixMilliseconds: first * 1000, note: note)
        case .skipped(let shifted):
            throw ParseError(description: "'\(text)' does not exist here: the clocks skip it (they go forward, to \(shown(shifted * 1000, zone))); give that time, or an offset")
        }
    }

    /// `2026-12-24`: a date, or `nil` when the text is not one; a date the calendar lacks
    /// (`2027-02-29`) is refused, saying how many days its month has.
    private static func isoDate(_ text: String) throws(ParseError) -> CivilTime? {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false).map { Int($0) }
        guard parts.count == 3, let year = parts[0], let month = parts[1], let day = parts[2],
              (1...9999).contains(year), (1...12).contains(month), (1...31).contains(day) else { return nil }
        let date = CivilTime(year: year, month: month, day: day)
        guard date.isValid else {
            throw ParseError(description: "'\(text)' is not a date: \(date.monthText) has \(CivilTime.daysIn(month: month, year: year)) days")
        }
        return date
    }

    /// `+01:00`, `-03:30`: an offset as RFC 3339 writes it.
    static func offsetText(_ seconds: Int) -> String {
        let minutes = abs(seconds) / 60
        return (seconds < 0 ? "-" : "+") + CivilTime.padded(minutes / 60, 2) + ":" + CivilTime.padded(minutes % 60, 2)
    }

    private static func unreadable(_ text: String) -> ParseError {
        ParseError(description: "'\(text)' is not a time; use \(forms)")
    }
}
