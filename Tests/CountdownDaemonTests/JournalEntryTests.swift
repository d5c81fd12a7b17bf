@testable import CountdownDaemon
import Testing

@Suite("Journal entries for sd_journal_sendv")
struct JournalEntryTests {
    @Test("an entry carries PRIORITY, SYSLOG_IDENTIFIER, MESSAGE and the countdown fields, in one buffer")
    func fields() {
        var entry = JournalEntry(priority: .info, message: "tea: done after 3m")
        entry.append("COUNTDOWN_NAME", "tea")
        entry.append("COUNTDOWN_EVENT", "done")
        #expect(entry.fields == [
            "PRIORITY=6", "SYSLOG_IDENTIFIER=countdownd", "MESSAGE=tea: done after 3m",
            "COUNTDOWN_NAME=tea", "COUNTDOWN_EVENT=done",
        ])
        // Fields are contiguous and in order: the iovecs cover the buffer exactly.
        #expect(entry.fieldRanges.map(\.count).reduce(0, +) == entry.buffer.count)
        #expect(zip(entry.fieldRanges, entry.fieldRanges.dropFirst()).allSatisfy { $0.upperBound == $1.lowerBound })
    }

    @Test("values may hold newlines and '=' unchanged: the iovec form needs no escaping")
    func binarySafeValues() {
        var entry = JournalEntry(priority: .warning, message: "two\nlines = fine")
        entry.append("COUNTDOWN_NAME", "a=b")
        #expect(entry.fields[2] == "MESSAGE=two\nlines = fine")
        #expect(entry.fields[3] == "COUNTDOWN_NAME=a=b")
    }

    @Test("field names follow the journal's rules", arguments: [
        ("COUNTDOWN_NAME", true), ("MESSAGE", true), ("A1", true),
        ("_TRUSTED", false), ("lower", false), ("1ABC", false), ("", false), ("WITH-DASH", false),
        (String(repeating: "A", count: 65), false),
    ])
    func fieldNames(name: String, valid: Bool) {
        #expect(JournalEntry.isValidFieldName(name) == valid)
        var entry = JournalEntry(priority: .debug, message: "m")
        entry.append(name, "v")
        #expect(entry.fields.count == (valid ? 4 : 3), "invalid names are dropped, never sent")
    }

    @Test("without a journal, sending fails cleanly or succeeds, and never crashes")
    func sendWithoutJournal() {
        let entry = JournalEntry(priority: .info, message: "probe from the test suite")
        let result = entry.send()
        #expect(result == 0 || result < 0)
    }

    @Test("JOURNAL_STREAM must name stderr's own device and inode")
    func journalStreamDetection() {
        #expect(!Logger.stderrIsJournal(nil))
        #expect(!Logger.stderrIsJournal("garbage"))
        #expect(!Logger.stderrIsJournal("0:0"))
    }
}
