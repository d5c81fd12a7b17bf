import CountdownCore
import Foundation

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

    /// Parses `text` as seen at `now` in `timeZone`.
    /// - Returns: Unix milliseconds.
    public static func parse(_ text: String, now: Date, timeZone: TimeZone) throws(ParseError) -> Int64 {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let lower = trimmed.lowercased()
        let nowMilliseconds = Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        if lower.hasPrefix("now") {
            let rest = lower.dropFirst(3).filter { $0 != " " }
            guard rest.hasPrefix("+"), let milliseconds = try? CountdownDuration.parse(String(rest.dropFirst())) else {
                throw ParseError(description: "'\(text)' is not a time; after 'now' comes '+ DURATION', as in now + 3 min")
            }
            return nowMilliseconds + milliseconds
        }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        if let explicit = WallClockTime.rfc3339(Array(trimmed.utf8)) {
            return explicit
        }
        let words = lower.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        var day: Date?
        var clock = words.last ?? ""
        switch words.count {
        case 1:
            day = nil
        case 2 where words[0] == "today":
            day = now
        case 2 where words[0] == "tomorrow":
            day = calendar.date(byAdding: .day, value: 1, to: now)
        case 2:
            guard let date = isoDate(words[0], calendar: calendar) else { throw unreadable(text) }
            day = date
        default:
            throw unreadable(text)
        }
        // `2026-12-24T18:00` without an offset: local time.
        if words.count == 1, let t = clock.firstIndex(of: "t"), clock[..<t].contains("-") {
            guard let date = isoDate(String(clock[..<t]), calendar: calendar) else { throw unreadable(text) }
            day = date
            clock = String(clock[clock.index(after: t)...])
        }
        let parts = clock.split(separator: ":").map { Int($0) }
        guard (2...3).contains(parts.count), let hour = parts[0], let minute = parts[1], (0..<24).contains(hour), (0..<60).contains(minute) else {
            throw unreadable(text)
        }
        let second = parts.count == 3 ? parts[2] : 0
        guard let second, (0..<60).contains(second) else { throw unreadable(text) }
        var components = calendar.dateComponents([.year, .month, .day], from: day ?? now)
        components.hour = hour
        components.minute = minute
        components.second = second
        guard var date = calendar.date(from: components) else { throw unreadable(text) }
        if day == nil && date <= now {
            // A bare time of day means the next one.
            guard let tomorrow = calendar.date(byAdding: .day, value: 1, to: date) else { throw unreadable(text) }
            date = tomorrow
        }
        return Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    private static func isoDate(_ text: String, calendar: Calendar) -> Date? {
        let parts = text.split(separator: "-").map { Int($0) }
        guard parts.count == 3, let year = parts[0], let month = parts[1], let day = parts[2],
              (1...12).contains(month), (1...31).contains(day) else { return nil }
        return calendar.date(from: DateComponents(year: year, month: month, day: day))
    }

    private static func unreadable(_ text: String) -> ParseError {
        ParseError(description: "'\(text)' is not a time; use \(forms)")
    }
}
