/// A date and a time of day on the proleptic Gregorian calendar, in no zone: what a clock on the
/// wall shows. Pure arithmetic (Howard Hinnant's day algorithms), so that `--at` and RFC 3339
/// need neither Foundation's calendar nor ICU.
public struct CivilTime: Equatable, Sendable {
    public var year: Int
    /// 1...12.
    public var month: Int
    /// 1...31.
    public var day: Int
    public var hour: Int
    public var minute: Int
    public var second: Int

    public init(year: Int, month: Int, day: Int, hour: Int = 0, minute: Int = 0, second: Int = 0) {
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.second = second
    }

    /// The wall time that `seconds` since the epoch shows at UTC plus `offset` seconds.
    public init(unixSeconds seconds: Int64, offset: Int = 0) {
        let local = seconds + Int64(offset)
        let days = local >= 0 ? local / 86_400 : (local - 86_399) / 86_400
        let secondOfDay = Int(local - days * 86_400)
        let (year, month, day) = Self.civil(fromDays: Int(days))
        self.init(year: year, month: month, day: day, hour: secondOfDay / 3600, minute: secondOfDay / 60 % 60, second: secondOfDay % 60)
    }

    /// The instant at which a clock at UTC plus `offset` seconds shows this time.
    public func unixSeconds(offset: Int = 0) -> Int64 {
        Int64(Self.daysFromCivil(year: year, month: month, day: day)) * 86_400
            + Int64(hour * 3600 + minute * 60 + second) - Int64(offset)
    }

    /// Whether the fields name a date and time that the calendar has (no 2027-02-29, no 24:00).
    public var isValid: Bool {
        (1...12).contains(month) && day >= 1 && day <= Self.daysIn(month: month, year: year)
            && (0..<24).contains(hour) && (0..<60).contains(minute) && (0..<60).contains(second)
    }

    /// The same time of day, `count` calendar days later (earlier when negative).
    public func addingDays(_ count: Int) -> CivilTime {
        let (year, month, day) = Self.civil(fromDays: Self.daysFromCivil(year: year, month: month, day: day) + count)
        return CivilTime(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
    }

    /// `2026-10-25 02:30:00`.
    public var text: String {
        "\(Self.padded(year, 4))-\(Self.padded(month, 2))-\(Self.padded(day, 2)) \(Self.padded(hour, 2)):\(Self.padded(minute, 2)):\(Self.padded(second, 2))"
    }

    /// `2026-10` for messages about a month.
    public var monthText: String {
        "\(Self.padded(year, 4))-\(Self.padded(month, 2))"
    }

    public static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days since 1970-01-01 of a date.
    public static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date `days` after 1970-01-01: the inverse of `daysFromCivil`.
    public static func civil(fromDays days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// `value` in decimal, zeros in front up to `width` digits: `padded(7, 2)` is `07`.
    public static func padded(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }
}
