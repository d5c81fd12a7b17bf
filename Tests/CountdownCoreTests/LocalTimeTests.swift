import CountdownCLI
import Foundation
import Testing

@Suite("cdctl --at: times of day as people write them")
struct LocalTimeTests {
    /// 2026-11-30 10:00:00 UTC.
    let now = Date(timeIntervalSince1970: 1_796_032_800)
    let utc = TimeZone(identifier: "UTC")!  // A fixed, known zone: always present.
    let berlin = TimeZone(identifier: "Europe/Berlin")

    @Test("a time of day means the next one; today, tomorrow, dates and now + duration")
    func forms() throws {
        let hour: Int64 = 3_600_000
        let base: Int64 = 1_796_032_800_000
        #expect(try LocalTime.parse("10:30", now: now, timeZone: utc) == base + hour / 2)
        #expect(try LocalTime.parse("09:30", now: now, timeZone: utc) == base + 23 * hour + hour / 2, "passed today: tomorrow")
        #expect(try LocalTime.parse("tomorrow 09:30", now: now, timeZone: utc) == base + 23 * hour + hour / 2)
        #expect(try LocalTime.parse("today 17:00:30", now: now, timeZone: utc) == base + 7 * hour + 30_000)
        #expect(try LocalTime.parse("2026-12-24 18:00", now: now, timeZone: utc) == 1_798_135_200_000)
        #expect(try LocalTime.parse("2026-12-24T18:00", now: now, timeZone: utc) == 1_798_135_200_000)
        #expect(try LocalTime.parse("2026-12-24T18:00+01:00", now: now, timeZone: utc) == 1_798_135_200_000 - hour)
        #expect(try LocalTime.parse("now + 3 min", now: now, timeZone: utc) == base + 180_000)
        #expect(try LocalTime.parse("now+90s", now: now, timeZone: utc) == base + 90_000)
        if let berlin {
            // Local time: 18:00 in Berlin (UTC+1 in December) is 17:00 UTC.
            #expect(try LocalTime.parse("2026-12-24 18:00", now: now, timeZone: berlin) == 1_798_135_200_000 - hour)
        }
    }

    @Test("what is not a time says which forms are", arguments: ["25:00", "tomorrow", "9", "now - 3 min", "soon", "2026-13-01 10:00", "yesterday 10:00"])
    func rejected(text: String) {
        do {
            _ = try LocalTime.parse(text, now: now, timeZone: utc)
            Issue.record("'\(text)' was accepted")
        } catch {
            #expect(error.description.contains("09:30") || error.description.contains("now + 3 min"), "\(error)")
        }
    }

    @Test("a countdown's end must be a date that exists, still to come, and within 366 days; a local time the clocks show twice gets a note")
    func resolvedChecks() throws {
        func refusal(_ text: String, _ zone: TimeZone) -> String {
            do {
                _ = try LocalTime.resolve(text, now: now, timeZone: zone)
                return "accepted"
            } catch {
                return error.description
            }
        }
        #expect(refusal("2027-02-29 10:00", utc).contains("is not a date: 2027-02 has 28 days"))
        #expect(refusal("2026-11-30 09:00", utc).contains("which has passed (it is now 2026-11-30 10:00:00"))
        #expect(refusal("2028-01-01 10:00", utc).contains("more than 366 days away"))
        #expect(try LocalTime.resolve("2028-02-29 10:00", now: Date(timeIntervalSince1970: 1_819_000_000), timeZone: utc).note == nil, "a leap day is a date")
        let plain = try LocalTime.resolve("tomorrow 09:30", now: now, timeZone: utc)
        #expect(plain.note == nil && plain.unixMilliseconds == 1_796_032_800_000 + 23 * 3_600_000 + 1_800_000)
        if let berlin {
            // 2027-10-31: Berlin's clocks go back from 03:00 to 02:00; 02:30 comes twice.
            let twice = try LocalTime.resolve("2027-10-31 02:30", now: now, timeZone: berlin)
            #expect(twice.note?.contains("2027-10-31 02:30:00 happens twice") == true, "\(twice)")
            // 2027-03-28: they go forward from 02:00 to 03:00; 02:30 never comes.
            #expect(refusal("2027-03-28 02:30", berlin).contains("does not exist here"))
            // A bare time is tomorrow's when today's has passed: checked on the day it lands on.
            let saturdayEvening = Date(timeIntervalSince1970: 1_806_170_400)  // 2027-03-27 19:00 in Berlin
            #expect(throws: LocalTime.ParseError.self) { try LocalTime.resolve("02:30", now: saturdayEvening, timeZone: berlin) }
            let sundayMorning = Date(timeIntervalSince1970: 1_806_220_800)  // 2027-03-28 10:00 in Berlin
            let monday = try LocalTime.resolve("02:30", now: sundayMorning, timeZone: berlin)
            #expect(monday.unixMilliseconds == 1_806_280_200_000, "2027-03-29 02:30 in Berlin (00:30 UTC)")
        }
    }
}
