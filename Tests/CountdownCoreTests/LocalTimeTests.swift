import CountdownCLI
import CountdownCore
import Testing

/// Central European time by the EU's rule (UTC+1, and UTC+2 from 01:00 UTC on the last Sunday of
/// March to 01:00 UTC on the last Sunday of October): Berlin's clock, without tzdata.
struct CentralEuropeanZone: LocalZone {
    func offset(atUnixSeconds unixSeconds: Int64) -> LocalOffset {
        let year = CivilTime(unixSeconds: unixSeconds).year
        func lastSunday(_ month: Int) -> Int64 {
            let last = CivilTime.daysFromCivil(year: year, month: month, day: 31)
            let weekday = (last + 4) % 7  // 1970-01-01 was a Thursday (4); Sunday is 0.
            return Int64(last - weekday) * 86_400 + 3600
        }
        let summer = (lastSunday(3)..<lastSunday(10)).contains(unixSeconds)
        return summer ? LocalOffset(seconds: 7200, abbreviation: "CEST") : LocalOffset(seconds: 3600, abbreviation: "CET")
    }
}

@Suite("cdctl --at: times of day as people write them")
struct LocalTimeTests {
    /// 2026-11-30 10:00:00 UTC.
    let now: Int64 = 1_796_032_800_000
    let utc = FixedOffsetZone.utc
    let berlin = CentralEuropeanZone()

    @Test("a time of day means the next one; today, tomorrow, dates and now + duration")
    func forms() throws {
        let hour: Int64 = 3_600_000
        let base: Int64 = 1_796_032_800_000
        #expect(try LocalTime.parse("10:30", now: now, zone: utc) == base + hour / 2)
        #expect(try LocalTime.parse("09:30", now: now, zone: utc) == base + 23 * hour + hour / 2, "passed today: tomorrow")
        #expect(try LocalTime.parse("tomorrow 09:30", now: now, zone: utc) == base + 23 * hour + hour / 2)
        #expect(try LocalTime.parse("today 17:00:30", now: now, zone: utc) == base + 7 * hour + 30_000)
        #expect(try LocalTime.parse("2026-12-24 18:00", now: now, zone: utc) == 1_798_135_200_000)
        #expect(try LocalTime.parse("2026-12-24T18:00", now: now, zone: utc) == 1_798_135_200_000)
        #expect(try LocalTime.parse("2026-12-24T18:00+01:00", now: now, zone: utc) == 1_798_135_200_000 - hour)
        #expect(try LocalTime.parse("now + 3 min", now: now, zone: utc) == base + 180_000)
        #expect(try LocalTime.parse("now+90s", now: now, zone: utc) == base + 90_000)
        // Blanks of any kind: a tab, a no-break space.
        #expect(try LocalTime.parse("\t10:30\u{A0}", now: now, zone: utc) == base + hour / 2)
        #expect(try LocalTime.parse("tomorrow\t09:30", now: now, zone: utc) == base + 23 * hour + hour / 2)
        #expect(try LocalTime.parse("now\t+\t90s", now: now, zone: utc) == base + 90_000)
        // Local time: 18:00 in Berlin (UTC+1 in December) is 17:00 UTC.
        #expect(try LocalTime.parse("2026-12-24 18:00", now: now, zone: berlin) == 1_798_135_200_000 - hour)
        #expect(try LocalTime.parse("2027-07-01 18:00", now: now, zone: berlin) == 1_814_464_800_000 - 2 * hour, "summer: UTC+2")
    }

    @Test("what is not a time says which forms are", arguments: ["25:00", "tomorrow", "9", "now - 3 min", "soon", "2026-13-01 10:00", "yesterday 10:00"])
    func rejected(text: String) {
        do {
            _ = try LocalTime.parse(text, now: now, zone: utc)
            Issue.record("'\(text)' was accepted")
        } catch {
            #expect(error.description.contains("09:30") || error.description.contains("now + 3 min"), "\(error)")
        }
    }

    @Test("a countdown's end must be a date that exists, still to come, and within 366 days; a local time the clocks show twice gets a note")
    func resolvedChecks() throws {
        func refusal(_ text: String, _ zone: some LocalZone) -> String {
            do {
                _ = try LocalTime.resolve(text, now: now, zone: zone)
                return "accepted"
            } catch {
                return error.description
            }
        }
        #expect(refusal("2027-02-29 10:00", utc).contains("is not a date: 2027-02 has 28 days"))
        #expect(refusal("2026-11-30 09:00", utc).contains("which has passed (it is now 2026-11-30 10:00:00"))
        #expect(refusal("2028-01-01 10:00", utc).contains("more than 366 days away"))
        #expect(try LocalTime.resolve("2028-02-29 10:00", now: 1_819_000_000_000, zone: utc).note == nil, "a leap day is a date")
        let plain = try LocalTime.resolve("tomorrow 09:30", now: now, zone: utc)
        #expect(plain.note == nil && plain.unixMilliseconds == 1_796_032_800_000 + 23 * 3_600_000 + 1_800_000)
        do {
            // 2027-10-31: Berlin's clocks go back from 03:00 to 02:00; 02:30 comes twice.
            let twice = try LocalTime.resolve("2027-10-31 02:30", now: now, zone: berlin)
            #expect(twice.note?.contains("2027-10-31 02:30:00 happens twice") == true, "\(twice)")
            #expect(twice.note?.contains("taking the first, 2027-10-31 02:30:00 CEST, not 2027-10-31 02:30:00 CET") == true, "\(twice)")
            #expect(twice.unixMilliseconds == CivilTime(year: 2027, month: 10, day: 31, hour: 0, minute: 30).unixSeconds() * 1000)
            #expect(twice.note?.contains("give an offset (2027-10-31T02:30+01:00) for the other") == true, "the other's own offset: \(twice)")
            // Inside the doubled hour, past the first 02:30 (02:10 CET, the second pass): the
            // second 02:30 is still to come, today, not tomorrow's.
            let secondPass = CivilTime(year: 2027, month: 10, day: 31, hour: 1, minute: 10).unixSeconds() * 1000
            let second = CivilTime(year: 2027, month: 10, day: 31, hour: 1, minute: 30).unixSeconds() * 1000
            #expect(try LocalTime.resolve("02:30", now: secondPass, zone: berlin).unixMilliseconds == second)
            #expect(try LocalTime.resolve("today 02:30", now: secondPass, zone: berlin).unixMilliseconds == second)
            // 2027-03-28: they go forward from 02:00 to 03:00; 02:30 never comes.
            #expect(refusal("2027-03-28 02:30", berlin).contains("does not exist here: the clocks skip it (they go forward, to 2027-03-28 03:30:00 CEST)"))
            // A bare time is tomorrow's when today's has passed: checked on the day it lands on.
            let saturdayEvening: Int64 = 1_806_170_400_000  // 2027-03-27 19:00 in Berlin
            #expect(throws: LocalTime.ParseError.self) { try LocalTime.resolve("02:30", now: saturdayEvening, zone: berlin) }
            let sundayMorning: Int64 = 1_806_220_800_000  // 2027-03-28 10:00 in Berlin
            let monday = try LocalTime.resolve("02:30", now: sundayMorning, zone: berlin)
            #expect(monday.unixMilliseconds == 1_806_280_200_000, "2027-03-29 02:30 in Berlin (00:30 UTC)")
        }
    }

    @Test("civil dates and Unix seconds convert both ways, across leap days, centuries and before 1970")
    func civilArithmetic() {
        for days in stride(from: -800_000, through: 800_000, by: 997) {
            let (year, month, day) = CivilTime.civil(fromDays: days)
            #expect(CivilTime.daysFromCivil(year: year, month: month, day: day) == days)
        }
        #expect(CivilTime(unixSeconds: 0).text == "1970-01-01 00:00:00")
        #expect(CivilTime(unixSeconds: -1).text == "1969-12-31 23:59:59")
        #expect(CivilTime(unixSeconds: 951_782_400).text == "2000-02-29 00:00:00", "2000 is a leap year")
        #expect(CivilTime(unixSeconds: 1_798_135_200, offset: 3600).text == "2026-12-24 19:00:00")
        #expect(CivilTime(year: 2100, month: 2, day: 29).isValid == false, "2100 is not")
        #expect(CivilTime(year: 2026, month: 12, day: 31).addingDays(1) == CivilTime(year: 2027, month: 1, day: 1))
    }
}
