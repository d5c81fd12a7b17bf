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

    /// A time read from `--at`, and what the person should know about it.
    public struct Resolved: Equatable, Sendable {
        /// The instant, in Unix milliseconds.
        public var unixMilliseconds: Int64
        /// A local time that happens twice (a clock turned back) or never (turned forward):
        /// which instant was taken.
        public var note: String?
    }

    /// Reads `text` as seen at `now` in `timeZone`, as a countdown's end: it must be in the
    /// future and at most 366 days away, on a date that exists.
    public static func resolve(_ text: String, now: Date, timeZone: TimeZone) throws(ParseError) -> Resolved {
        let milliseconds = try parse(text, now: now, timeZone: timeZone)
        let nowMilliseconds = Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
        guard milliseconds > nowMilliseconds else {
            throw ParseError(description: "'\(text)' is \(shown(date, timeZone)), which has passed (it is now \(shown(now, timeZone))); give a time to come")
        }
        guard milliseconds - nowMilliseconds <= CountdownDuration.maximumMilliseconds else {
            throw ParseError(description: "'\(text)' is \(shown(date, timeZone)), more than 366 days away; a countdown lasts at most 366 days")
        }
        return Resolved(unixMilliseconds: milliseconds, note: localTimeNote(text, date: date, timeZone: timeZone))
    }

    /// `2026-10-25 02:30:00 CEST`: an instant as the local clock and zone show it (without the
    /// zone: `withZone: false`).
    static func shown(_ date: Date, _ timeZone: TimeZone, withZone: Bool = true) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = timeZone
        formatter.dateFormat = withZone ? "yyyy-MM-dd HH:mm:ss zzz" : "yyyy-MM-dd HH:mm:ss"
        return formatter.string(from: date)
    }

    /// Whether the local time `text` asked for is one the clock shows twice, or skips.
    private static func localTimeNote(_ text: String, date: Date, timeZone: TimeZone) -> String? {
        guard WallClockTime.rfc3339(Array(text.trimmingCharacters(in: .whitespaces).utf8)) == nil,
              !text.lowercased().trimmingCharacters(in: .whitespaces).hasPrefix("now") else { return nil }
        let offset = timeZone.secondsFromGMT(for: date)
        // Turned back: the same local time an hour (the change) later or earlier.
        for other in [date.addingTimeInterval(3600), date.addingTimeInterval(-3600)] {
            let otherOffset = timeZone.secondsFromGMT(for: other)
            if otherOffset != offset, other.timeIntervalSince(date) == Double(offset - otherOffset) {
                let first = min(date, other), second = max(date, other)
                return "\(shown(first, timeZone, withZone: false)) happens twice (the clocks go back); taking the first, \(shown(first, timeZone)), not \(shown(second, timeZone)); give an offset (2026-10-25T02:30+01:00) for the other"
            }
        }
        return nil
    }

    /// Parses `text` as seen at `now` in `timeZone`; `resolve` checks the result too.
    /// - Returns: Unix milliseconds.
    public static func parse(_ text: String, now: Date, timeZone: TimeZone) throws(ParseError) -> Int64 {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let lower = trimmed.lowercased()
        let nowMilliseconds = Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        if lower.hasPrefix("now") {
            let rest = lower.dropFirst(3).filter { $0 != " " }
            guard rest.hasPrefix("+") else {
                throw ParseError(description: "'\(text)' is not a time; after 'now' comes '+ DURATION', as in now + 3 min")
            }
            do {
                return nowMilliseconds + (try CountdownDuration.parse(String(rest.dropFirst())))
            } catch where error.message.contains("longer than 366 days") {
                throw ParseError(description: "'\(text)' is more than 366 days away; a countdown lasts at most 366 days")
            } catch {
                throw ParseError(description: "'\(text)' is not a time; after 'now' comes '+ DURATION', as in now + 3 min")
            }
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
            guard let date = try isoDate(words[0], calendar: calendar) else { throw unreadable(text) }
            day = date
        default:
            throw unreadable(text)
        }
        // `2026-12-24T18:00` without an offset: local time.
        if words.count == 1, let t = clock.firstIndex(of: "t"), clock[..<t].contains("-") {
            guard let date = try isoDate(String(clock[..<t]), calendar: calendar) else { throw unreadable(text) }
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
            // A bare time of day means the next one: the same clock time tomorrow.
            guard let nextDay = calendar.date(byAdding: .day, value: 1, to: day ?? now) else { throw unreadable(text) }
            components = calendar.dateComponents([.year, .month, .day], from: nextDay)
            components.hour = hour
            components.minute = minute
            components.second = second
            guard let tomorrow = calendar.date(from: components) else { throw unreadable(text) }
            date = tomorrow
        }
        // A time the clocks skip (turned forward) comes out as another: say so.
        let shownComponents = calendar.dateComponents([.hour, .minute, .second], from: date)
        if shownComponents.hour != hour || shownComponents.minute != minute || shownComponents.second != second {
            throw ParseError(description: "'\(text)' does not exist here: the clocks skip it (they go forward, to \(shown(date, timeZone))); give that time, or an offset")
        }
        return Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    private static func isoDate(_ text: String, calendar: Calendar) throws(ParseError) -> Date? {
        let parts = text.split(separator: "-").map { Int($0) }
        guard parts.count == 3, let year = parts[0], let month = parts[1], let day = parts[2],
              (1...12).contains(month), (1...31).contains(day) else { return nil }
        guard let date = calendar.date(from: DateComponents(year: year, month: month, day: day)) else { return nil }
        // Foundation rolls 2027-02-29 over to March 1: refuse a date that does not exist instead.
        let back = calendar.dateComponents([.year, .month, .day], from: date)
        guard back.year == year, back.month == month, back.day == day else {
            let days = calendar.range(of: .day, in: .month, for: calendar.date(from: DateComponents(year: year, month: month, day: 1)) ?? date)?.count ?? 28
            throw ParseError(description: "'\(text)' is not a date: \(String(format: "%04d-%02d", year, month)) has \(days) days")
        }
        return date
    }

    private static func unreadable(_ text: String) -> ParseError {
        ParseError(description: "'\(text)' is not a time; use \(forms)")
    }
}
