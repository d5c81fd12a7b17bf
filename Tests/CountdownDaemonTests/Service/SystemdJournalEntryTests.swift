@testable import CountdownDaemon
import Glibc
import Testing

@Suite("Journal entries for sd_journal_sendv")
struct JournalEntryTests {
    @Test("an entry carries PRIORITY, SYSLOG_IDENTIFIER, MESSAGE and the countdown fields, in one buffer")
    func fields() {
        var entry = SystemdJournalEntry(priority: .info, message: "tea: done after 3m")
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
        var entry = SystemdJournalEntry(priority: .warning, message: "two\nlines = fine")
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
        #expect(SystemdJournalEntry.isValidFieldName(name) == valid)
        var entry = SystemdJournalEntry(priority: .debug, message: "m")
        entry.append(name, "v")
        #expect(entry.fields.count == (valid ? 4 : 3), "invalid names are dropped, never sent")
    }

    @Test("sending reaches the journal's socket as one datagram of FIELD=value lines; without a journal it is dropped quietly")
    func sendToJournalSocket() throws {
        let socketPath = "/run/systemd/journal/socket"
        var entry = SystemdJournalEntry(priority: .info, message: "probe from the test suite")
        entry.append("COUNTDOWN_EVENT", "done")
        if access(socketPath, F_OK) == 0 {
            let probe = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            defer { close(probe) }
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(socketPath.utf8)) }
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(probe, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            if connected == 0 {
                // A real journald listens: the entry is accepted.
                #expect(entry.send() == 0)
                return
            }
            // Left by a run of this test that was killed: nobody listens; stand in again.
            #expect(errno == ECONNREFUSED && unlink(socketPath) == 0, "\(socketPath) exists but cannot be used: \(String(cString: strerror(errno)))")
        }
        // No journal here: libsystemd drops the entry on purpose ("fail silently if the journal
        // is not available", sd-journal's journal-send.c) and reports success.
        #expect(entry.send() == 0)
        // Stand in for journald on its socket, where root may, and read what libsystemd sends.
        let directory = "/run/systemd/journal"
        let createdDirectory = access(directory, F_OK) != 0
        guard getuid() == 0, (try? FileSystem.createDirectory(directory)) != nil else { return }
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #expect(descriptor >= 0)
        defer {
            close(descriptor)
            unlink(socketPath)
            if createdDirectory { rmdir(directory) }
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(socketPath.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0, "bind \(socketPath): \(String(cString: strerror(errno)))")
        #expect(entry.send() == 0)
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        try #require(count > 0, "a datagram arrived")
        let lines = String(decoding: buffer[0..<count], as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(lines == ["PRIORITY=6", "SYSLOG_IDENTIFIER=countdownd", "MESSAGE=probe from the test suite", "COUNTDOWN_EVENT=done"])
    }

    @Test("JOURNAL_STREAM must name stderr's own device and inode")
    func journalStreamDetection() {
        #expect(!Logger.stderrIsJournal(nil))
        #expect(!Logger.stderrIsJournal("garbage"))
        #expect(!Logger.stderrIsJournal("0:0"))
    }
}
