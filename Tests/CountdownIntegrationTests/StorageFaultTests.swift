import CountdownClient
import CountdownCore
import Foundation
import Glibc
import Synchronization
import Testing

/// Real faults under the real daemon: a full disk, a deleted directory, damaged and read-only
/// files, an immutable journal, a second daemon, and SIGKILL at chosen moments. The promise under
/// test (docs/PROTOCOL.md, "Durability"): an OK is durable, a refused change says so, reads and
/// events go on, nothing acknowledged is lost, and no file error becomes an empty start.
enum StorageFaults {
    /// Whether this machine lets the tests mount a small tmpfs (root, and mounting allowed).
    static let canMountTmpfs: Bool = {
        guard getuid() == 0, toolExists("/bin/mount") else { return false }
        let probe = TemporaryDirectory()
        guard (try? runCommand("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", probe.path]))?.status == 0 else { return false }
        _ = try? runCommand("/bin/umount", [probe.path])
        return true
    }()

    /// Whether `chattr +i` works on this machine's /tmp (root, and a file system that has it).
    static let canSetImmutable: Bool = {
        guard getuid() == 0, toolExists("/usr/bin/chattr") else { return false }
        let probe = TemporaryDirectory()
        let file = probe.file("probe")
        guard FileManager.default.createFile(atPath: file, contents: Data()),
              (try? runCommand("/usr/bin/chattr", ["+i", file]))?.status == 0 else { return false }
        _ = try? runCommand("/usr/bin/chattr", ["-i", file])
        return true
    }()

    /// Where each frame of a journal file starts (the layout countdownd writes: a 20-byte frame
    /// header whose second field is the payload's length), read the way a hex dump would.
    static func frameOffsets(_ bytes: [UInt8]) -> [Int] {
        var frames: [Int] = []
        var offset = 0
        while offset + 20 <= bytes.count {
            frames.append(offset)
            offset += 20 + Int(UInt32(bytes[offset + 4]) | UInt32(bytes[offset + 5]) << 8 | UInt32(bytes[offset + 6]) << 16 | UInt32(bytes[offset + 7]) << 24)
        }
        return frames
    }

    /// Pipelines `lines` and reads one reply each, in chunks, so neither side's buffers fill.
    static func pipeline(_ lines: [String], on connection: CountdownConnection, chunk: Int = 1000) throws -> [Reply] {
        var replies: [Reply] = []
        for start in stride(from: 0, to: lines.count, by: chunk) {
            let slice = lines[start..<min(start + chunk, lines.count)]
            try connection.send(slice.map { $0 + "\n" }.joined())
            for _ in slice { replies.append(try connection.readReply(timeout: 30)) }
        }
        return replies
    }

    /// Deletes a state directory as `rm -rf` would, again until it is gone: the daemon notices
    /// the first file removed (inotify) and may recreate what it needs inside the directory
    /// before the removal reaches the directory itself, which then fails as not empty.
    static func deleteDirectory(_ path: String) throws {
        for _ in 0..<1000 {
            if (try? FileManager.default.removeItem(atPath: path)) != nil { return }
        }
        throw HarnessError.unexpected("\(path) could not be deleted in 1,000 attempts")
    }

    /// A run of the daemon on `state` that starts `names` (one hour each), one request at a time
    /// (so one journal frame each), each answered OK, and ends by SIGKILL.
    static func crashedRun(starting names: [String], state: String, directory: TemporaryDirectory) throws {
        let daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
        let connection = try daemon.connect()
        for name in names { #expect(try connection.request("START \(name) 1h").countdown != nil) }
        daemon.crash()
    }

    /// The names the daemon holds now.
    static func names(_ daemon: DaemonProcess) throws -> Set<String> {
        Set(try daemon.connect().request("LIST", timeout: 60).countdowns.map(\.name))
    }

    /// A client changing things on a thread of its own: one `START <prefix><n> 1h` at a time
    /// until `stop` or until its daemon is gone; `stop` returns the names answered OK.
    final class Writer: @unchecked Sendable {
        private let prefix: String
        private let state = Mutex<(running: Bool, acknowledged: Set<String>)>((false, []))
        private let finished = DispatchSemaphore(value: 0)

        init(prefix: String) {
            self.prefix = prefix
        }

        /// Connects to `socket` and starts; throws when the connection cannot be made.
        func start(socket: String) throws {
            let connection = try CountdownConnection(path: socket, timeout: 10)
            let box = ConnectionBox(connection)
            state.withLock { $0.running = true }
            Thread.detachNewThread { [self] in
                let connection = box.connection
                var index = 0
                while state.withLock({ $0.running }) {
                    let name = "\(prefix)\(index)"
                    index += 1
                    guard let reply = try? connection.request("START \(name) 1h", timeout: 30) else { break }
                    if reply.countdown != nil { state.withLock { _ = $0.acknowledged.insert(name) } }
                }
                finished.signal()
            }
        }

        func stop() -> Set<String> {
            let wasRunning = state.withLock { state in
                defer { state.running = false }
                return state.running
            }
            if wasRunning { finished.wait() }
            return state.withLock { $0.acknowledged }
        }
    }

    /// Hands a connection to the writer's thread, which alone uses it from then on.
    private final class ConnectionBox: @unchecked Sendable {
        let connection: CountdownConnection
        init(_ connection: CountdownConnection) { self.connection = connection }
    }

    /// The newest journal file in a state directory.
    static func newestJournal(in directory: String) throws -> String {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix("journal.") }.sorted()
        guard let last = names.last else { throw HarnessError.unexpected("no journal file in \(directory)") }
        return directory + "/" + last
    }
}

extension Integration {
    @Suite("Storage under real faults: full disk, deleted directory, damage, read-only, immutable, two daemons, SIGKILL")
    struct StorageFaultTests {
        @Test(
            "disk full on a 1 MiB tmpfs: every OK survives SIGKILL, the rest are ERR unavailable, PING stays quick, and it recovers by itself",
            .enabled(if: StorageFaults.canMountTmpfs, "needs root and permission to mount a tmpfs")
        )
        func diskFull() throws {
            let directory = TemporaryDirectory()
            let mountPoint = directory.file("small")
            try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
            #expect(try runCommand("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mountPoint]).status == 0)
            defer { _ = try? runCommand("/bin/umount", ["-l", mountPoint]) }
            // Most of the space goes to a filler file, deleted later to let storage recover.
            let filler = mountPoint + "/filler"
            try #require(FileManager.default.createFile(atPath: filler, contents: Data(repeating: 1, count: 600 * 1024)), "the filler file could not be written to the 1 MiB tmpfs")
            let state = mountPoint + "/state"
            var daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let c = try daemon.connect()
            let replies = try StorageFaults.pipeline((0..<20_000).map { "START otp:\($0) 1h" }, on: c)
            var acknowledged: Set<String> = []
            var refusals: [String] = []
            for reply in replies {
                switch reply.outcome {
                case .ok:
                    if let name = reply.countdown?.name { acknowledged.insert(name) }
                case .error(let code, _, let message):
                    #expect(code == .unavailable, "\(message)")
                    refusals.append(message)
                }
            }
            #expect(!refusals.isEmpty, "the tmpfs filled up")
            #expect(acknowledged.count > 100)
            #expect(refusals.allSatisfy { $0.contains("No space left on device") && $0.contains("free some space") }, "\(refusals.first ?? "")")
            // Reads and PING go on while storage fails (the disk is still full): answered. (That
            // they wait for nothing is the design: one queue that never blocks on storage; how
            // quick they are is the benchmark's to say.)
            #expect(try c.request("PING").outcome == .ok("pong"))
            #expect(try c.request("STATUS otp:0").countdowns.first?.state == .running)
            #expect(daemon.stderrText.contains("storage failed"))
            // STATS counts what happened: the starts that were undone are not among them.
            let started = try c.request("STATS").stats.first { $0.key == "events_started" }?.value
            #expect(started == "\(acknowledged.count)", "events_started \(started ?? "-") for \(acknowledged.count) acknowledged")

            daemon.crash()
            daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let restored = try StorageFaults.names(daemon)
            #expect(acknowledged.subtracting(restored).isEmpty, "\(acknowledged.subtracting(restored).count) acknowledged countdowns lost")
            #expect(restored.count == acknowledged.count, "nothing refused was kept")

            // Space again: the daemon notices by itself and takes changes.
            try FileManager.default.removeItem(atPath: filler)
            let control = try daemon.connect()
            try waitUntil(timeout: 60) {
                if case .ok = try control.request("START after-recovery 1h").outcome { return true }
                return false
            }
            try waitUntil(timeout: 30) { daemon.stderrText.contains("storage works again") }
            daemon.crash()
            let third = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            #expect(try StorageFaults.names(third).contains("after-recovery"))
        }

        @Test("the state directory deleted while running: noticed at once, recreated whole; a change meanwhile is refused or kept, never acknowledged and lost")
        func directoryDeleted() throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            var daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let c = try daemon.connect()
            let first = try StorageFaults.pipeline((0..<100).map { "START before\($0) 1h" }, on: c)
            #expect(first.allSatisfy { $0.countdown != nil })
            try StorageFaults.deleteDirectory(state)
            // inotify tells the daemon at once; this change lands before or after it has made the
            // directory whole again. Either answer is a promise: refused, or durable.
            let meanwhile = try c.request("START meanwhile 1h").outcome
            switch meanwhile {
            case .ok: break
            case .error(.unavailable?, _, let message):
                #expect(message.contains("was deleted") || message.contains("being rewritten after it was lost"), "\(message)")
            default: Issue.record("a change after the deletion: \(meanwhile)")
            }
            #expect(try c.request("STATUS before0").countdowns.first?.state == .running, "reads go on")
            try waitUntil(timeout: 60) {
                if case .ok = try c.request("START after 1h").outcome { return true }
                return false
            }
            #expect(FileManager.default.fileExists(atPath: state + "/countdownd.snapshot"), "a full snapshot was written")
            #expect(daemon.stderrText.contains("recreated the state directory"))
            daemon.crash()
            daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let names = try StorageFaults.names(daemon)
            #expect(names.isSuperset(of: (0..<100).map { "before\($0)" }))
            #expect(names.contains("after"))
            if case .ok = meanwhile { #expect(names.contains("meanwhile"), "acknowledged, so kept") } else { #expect(!names.contains("meanwhile")) }
        }

        @Test(
            "the state directory deleted while nobody changes anything: recreated at once from memory, so a clean stop or a SIGKILL afterwards loses nothing",
            arguments: [SIGTERM, SIGKILL]
        )
        func directoryDeletedWhileIdle(signal: Int32) throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            var daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let c = try daemon.connect()
            #expect(try StorageFaults.pipeline((0..<200).map { "START idle\($0) 1h" }, on: c).allSatisfy { $0.countdown != nil })
            try StorageFaults.deleteDirectory(state)
            // No request follows: only the inotify watch can tell the daemon.
            try waitUntil(timeout: 60) { daemon.stderrText.contains("is whole again") }
            if signal == SIGTERM {
                #expect(daemon.terminate() == 0)
            } else {
                daemon.crash()
            }
            daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            #expect(try StorageFaults.names(daemon) == Set((0..<200).map { "idle\($0)" }))
            #expect(!daemon.stderrText.contains("a new state directory"), "the state was there: \(daemon.stderrText)")
        }

        @Test("restored after a SIGKILL, a countdown finishes on time with no client connected: the timer is armed at start, not by the first client")
        func restoredCountdownFiresOnIdleDaemon() throws {
            let directory = TemporaryDirectory()
            var daemon = try DaemonProcess(directory: directory)
            #expect(try daemon.connect().request("START idle 2s").countdown != nil)
            daemon.crash()
            daemon = try DaemonProcess(arguments: ["--log-lifecycle"], directory: directory)
            // Nobody connects: only the daemon's own timer can bring the done (seq 2), logged.
            try waitUntil(timeout: 60) { daemon.stderrText.contains("seq 2 (uid 0): done") }
        }

        @Test("the snapshot or a journal file deleted by hand while the directory stays: a full snapshot is written at once, so a SIGKILL then loses nothing and the next start is not refused", arguments: ["snapshot", "journal"])
        func restingFileDeleted(file: String) throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            var daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            _ = try StorageFaults.pipeline((0..<100).map { "START first\($0) 1h" }, on: try daemon.connect())
            #expect(daemon.terminate() == 0)  // A snapshot, then the next run's journal.
            daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            _ = try StorageFaults.pipeline((0..<100).map { "START second\($0) 1h" }, on: try daemon.connect())
            daemon.crash()  // Its journal stays: the state rests on the snapshot and on it.
            let restingJournal = try StorageFaults.newestJournal(in: state)
            daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            // Not the journal being written (that is a lost directory, tested above): one before it.
            let victim = file == "snapshot" ? state + "/countdownd.snapshot" : restingJournal
            try FileManager.default.removeItem(atPath: victim)
            try waitUntil(timeout: 60) { daemon.stderrText.contains("writing a full snapshot so that nothing rests on it") }
            try waitUntil(timeout: 60) { daemon.stderrText.components(separatedBy: "snapshot of 200 countdowns written").count > 1 }
            daemon.crash()
            daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            #expect(try StorageFaults.names(daemon).count == 200)
        }

        @Test(
            "the state directory deleted, then SIGKILL the moment the recreated directory's first file lands, idle or while a client changes things: that file is the snapshot, and nothing acknowledged is lost (3 rounds each)",
            arguments: ["idle", "busy"]
        )
        func killAtRecreatedDirectorysFirstWrite(load: String) throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            var daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            var acknowledged = Set((0..<2000).map { "base\($0)" })
            #expect(try StorageFaults.pipeline(acknowledged.sorted().map { "START \($0) 1h" }, on: try daemon.connect()).allSatisfy { $0.countdown != nil })
            for round in 0..<3 {
                // The busy load: one START at a time on a connection of its own, until the kill.
                let writer = StorageFaults.Writer(prefix: "r\(round)-")
                if load == "busy" { try writer.start(socket: daemon.socketPath) }
                try StorageFaults.deleteDirectory(state)
                let deleted = Date()
                var first: String?
                try waitUntil(timeout: 60, interval: 0.0002) {
                    // Anything but the lock and the temporary names files are written under.
                    first = ((try? FileManager.default.contentsOfDirectory(atPath: state)) ?? []).first {
                        $0 != "countdownd.lock" && !$0.hasSuffix(".tmp") && !$0.hasSuffix(".new")
                    }
                    return first != nil
                }
                daemon.crash()
                let window = Date().timeIntervalSince(deleted) * 1000
                acknowledged.formUnion(writer.stop())
                #expect(first == "countdownd.snapshot", "the recreated directory's first file is its snapshot, not a journal continuing nothing: \(first ?? "none")")
                print("round \(round) (\(load)): the recreated directory's first file landed \(Int(window)) ms after the deletion")
                daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
                let names = try StorageFaults.names(daemon)
                let lost = acknowledged.subtracting(names)
                #expect(lost.isEmpty, "round \(round): \(lost.count) of \(acknowledged.count) acknowledged countdowns lost, e.g. \(lost.sorted().prefix(5))")
            }
        }

        @Test("the state directory deleted three times in a row under load, each time as soon as it was recreated (while 50,000 countdowns are rewritten): every OK survives SIGKILL")
        func directoryDeletedRepeatedly() throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            var daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let c = try daemon.connect()
            // Enough countdowns that rewriting them takes a while: the next deletion may land
            // during it (when it lands changes nothing about what must hold).
            _ = try StorageFaults.pipeline((0..<50_000).map { "START base\($0) 1h" }, on: c)
            var acknowledged: Set<String> = Set((0..<50_000).map { "base\($0)" })
            var next = 0
            func startSome() throws {
                let names = (next..<next + 200).map { "load\($0)" }
                next += 200
                for (name, reply) in zip(names, try StorageFaults.pipeline(names.map { "START \($0) 1h" }, on: c)) where reply.countdown != nil {
                    acknowledged.insert(name)
                }
            }
            for round in 1...3 {
                try? FileManager.default.removeItem(atPath: state)  // May race the daemon recreating it.
                try startSome()
                try waitUntil(timeout: 60) { daemon.stderrText.components(separatedBy: "recreated the state directory").count - 1 >= round }
                try startSome()
            }
            try waitUntil(timeout: 120) {
                try startSome()
                return try c.request("STATS").stats.first { $0.key == "storage" }?.value == "ok"
            }
            try startSome()
            daemon.crash()
            daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let names = try StorageFaults.names(daemon)
            let lost = acknowledged.subtracting(names)
            #expect(lost.isEmpty, "\(lost.count) of \(acknowledged.count) acknowledged countdowns lost, e.g. \(lost.sorted().prefix(5))")
        }

        @Test("a torn journal tail is cut off and logged; damage inside the journal stops the start, names the file and the intact length, and keeps it")
        func tornAndDamagedJournal() throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            let daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let c = try daemon.connect()
            for name in ["a", "b", "c"] { _ = try c.request("START \(name) 1h") }
            daemon.crash()
            let journal = try StorageFaults.newestJournal(in: state)
            let intact = try Data(contentsOf: URL(fileURLWithPath: journal))
            // A frame cut short, as a crash mid-write leaves it.
            var torn = intact
            torn.append(contentsOf: [0x43, 0x44, 0x4A, 0x02, 100, 0, 0, 0, 1, 2, 3, 4, 2, 9, 9])
            try torn.write(to: URL(fileURLWithPath: journal))
            let second = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            #expect(try StorageFaults.names(second) == ["a", "b", "c"])
            #expect(second.stderrText.contains("ended in a torn write"), "\(second.stderrText)")
            second.crash()
            #expect(try Data(contentsOf: URL(fileURLWithPath: journal)).count <= intact.count + 200, "the torn frame was cut off")

            // A flipped byte inside an earlier frame is damage, not a torn tail.
            var bytes = try Data(contentsOf: URL(fileURLWithPath: journal))
            bytes[bytes.count / 2] ^= 0xFF
            try bytes.write(to: URL(fileURLWithPath: journal))
            let refused = try DaemonProcess(arguments: ["--state-dir", state], directory: directory, waitForReady: false)
            #expect(refused.process.wait() == 1)
            #expect(refused.stderrText.contains("\(journal) is damaged: at byte"), "\(refused.stderrText)")
            #expect(refused.stderrText.contains("--repair-state \(state)"), "the refusal names the repair tool")
            #expect(try Data(contentsOf: URL(fileURLWithPath: journal)) == bytes, "the damaged file is kept as it is")
        }

        /// Runs `countdownd --check-state` or `--repair-state` on `state`.
        func stateTool(_ option: String, _ state: String) throws -> CommandResult {
            try runCommand(TestBinaries.countdownd, [option, state], timeout: 120)
        }

        @Test("a flipped bit in a middle frame's length field: the start is refused naming the repair tool, the file is kept byte for byte; --check-state says so; --repair-state keeps the 299 other countdowns")
        func damagedLengthField() throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            try StorageFaults.crashedRun(starting: (0..<300).map { "f\($0)" }, state: state, directory: directory)
            let journal = try StorageFaults.newestJournal(in: state)
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: journal)))
            let frames = StorageFaults.frameOffsets(bytes)
            try #require(frames.count == 301, "a header frame and one frame per START: \(frames.count)")
            bytes[frames[140] + 6] ^= 0x10  // The length of f139's frame, now past the end of the file.
            try Data(bytes).write(to: URL(fileURLWithPath: journal))
            let refused = try DaemonProcess(arguments: ["--state-dir", state], directory: directory, waitForReady: false)
            #expect(refused.process.wait() == 1)
            #expect(refused.stderrText.contains("its length field is damaged") && refused.stderrText.contains("--repair-state \(state)"), "\(refused.stderrText)")
            #expect([UInt8](try Data(contentsOf: URL(fileURLWithPath: journal))) == bytes, "kept byte for byte, not cut")
            let check = try stateTool("--check-state", state)
            #expect(check.status == 1 && check.stdout.contains("at byte \(frames[140]): a frame's length") && check.stdout.contains("intact: 299 countdowns"), "\(check.stdout)\(check.stderr)")
            #expect([UInt8](try Data(contentsOf: URL(fileURLWithPath: journal))) == bytes, "the check changes nothing")
            let repair = try stateTool("--repair-state", state)
            #expect(repair.status == 0 && repair.stdout.contains("kept the 299 countdowns"), "\(repair.stdout)\(repair.stderr)")
            let aside = try FileManager.default.contentsOfDirectory(atPath: state).filter { $0.hasPrefix("damaged-") }
            try #require(aside.count == 1)
            #expect([UInt8](try Data(contentsOf: URL(fileURLWithPath: "\(state)/\(aside[0])/\(URL(fileURLWithPath: journal).lastPathComponent)"))) == bytes, "the damaged file, moved aside as it was")
            let repaired = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            #expect(try StorageFaults.names(repaired) == Set((0..<300).filter { $0 != 139 }.map { "f\($0)" }))
            #expect(try stateTool("--check-state", state).status == 0, "whole now")
        }

        @Test("files missing or empty around a journal: no snapshot before a later journal, a gap between files, an empty file before another, the newest emptied: each refused as damage, never a partial start", arguments: ["snapshot", "gap", "empty", "empty-newest"])
        func missingFiles(fault: String) throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            // Three runs: a clean stop (a snapshot, then a new journal), then two SIGKILLs (a
            // journal file each, after the snapshot).
            var daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            _ = try StorageFaults.pipeline((0..<100).map { "START first\($0) 1h" }, on: try daemon.connect())
            #expect(daemon.terminate() == 0)
            for run in ["second", "third"] {
                daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
                _ = try StorageFaults.pipeline((0..<100).map { "START \(run)\($0) 1h" }, on: try daemon.connect())
                daemon.crash()
            }
            let journals = try FileManager.default.contentsOfDirectory(atPath: state).filter { $0.hasPrefix("journal.") }.sorted()
            try #require(journals.count == 2 && FileManager.default.fileExists(atPath: state + "/countdownd.snapshot"), "\(journals)")
            let expected: String
            switch fault {
            case "snapshot":
                try FileManager.default.removeItem(atPath: state + "/countdownd.snapshot")
                expected = "that is missing"
            case "gap":
                // The snapshot's own continuation is the first file: removing it leaves a gap.
                try FileManager.default.removeItem(atPath: state + "/" + journals[0])
                expected = "but the first one here is"
            case "empty":
                try Data().write(to: URL(fileURLWithPath: state + "/" + journals[0]))
                expected = "the file is empty (0 bytes), yet later journal files follow it"
            default:
                // The newest file emptied: 100 acknowledged STARTs would be lost if it were taken
                // for a stop right after the file was made (journal files are created whole).
                try Data().write(to: URL(fileURLWithPath: state + "/" + journals[1]))
                expected = "the file is empty (0 bytes), though journal files are created with their header"
            }
            let refused = try DaemonProcess(arguments: ["--state-dir", state], directory: directory, waitForReady: false)
            #expect(refused.process.wait() == 1, "refused, not a partial start")
            #expect(refused.stderrText.contains(expected) && refused.stderrText.contains("--repair-state"), "\(refused.stderrText)")
            #expect(try stateTool("--check-state", state).status == 1)
            #expect(try stateTool("--repair-state", state).status == 0)
            let repaired = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let names = try StorageFaults.names(repaired)
            let intact = fault == "empty-newest" ? "second" : "third"
            #expect(names.isSuperset(of: (0..<100).map { "\(intact)\($0)" }), "the intact journal is kept")
        }

        @Test(
            "a journal frame removed, repeated or moved, or an earlier journal cut at a frame boundary: the start is refused naming the frame, the files kept byte for byte; --check-state agrees; --repair-state keeps every other countdown, frames after the hole included",
            arguments: ["removed", "repeated", "swapped", "earlier-file-cut"]
        )
        func framesOutOfPlace(fault: String) throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            // Two runs ended by SIGKILL: two journal files, one frame per START.
            try StorageFaults.crashedRun(starting: (0..<20).map { "early\($0)" }, state: state, directory: directory)
            try StorageFaults.crashedRun(starting: (0..<20).map { "late\($0)" }, state: state, directory: directory)
            let journals = try FileManager.default.contentsOfDirectory(atPath: state).filter { $0.hasPrefix("journal.") }.sorted().map { state + "/" + $0 }
            try #require(journals.count == 2, "\(journals)")
            let target = fault == "earlier-file-cut" ? journals[0] : journals[1]
            let original = [UInt8](try Data(contentsOf: URL(fileURLWithPath: target)))
            let frames = StorageFaults.frameOffsets(original) + [original.count]
            try #require(frames.count == 22, "a header frame and one frame per START: \(frames.count - 1)")
            func frame(_ index: Int) -> [UInt8] { Array(original[frames[index]..<frames[index + 1]]) }
            var bytes: [UInt8]
            var expected: String
            var kept: Set<String>
            let all = Set((0..<20).map { "early\($0)" } + (0..<20).map { "late\($0)" })
            switch fault {
            case "removed":
                // The frame of late7 (frame 8).
                bytes = (0..<21).filter { $0 != 8 }.flatMap(frame)
                expected = "frame 9 comes where frame 8 belongs"
                kept = all.subtracting(["late7"])
            case "repeated":
                bytes = (0..<21).flatMap { $0 == 8 ? frame(8) + frame(8) : frame($0) }
                expected = "frame 8 comes again where frame 9 belongs"
                kept = all
            case "swapped":
                bytes = (0..<21).flatMap { $0 == 8 ? frame(9) : $0 == 9 ? frame(8) : frame($0) }
                expected = "frame 9 comes where frame 8 belongs"
                kept = all
            default:
                // The last two frames of the earlier file gone: each file is whole on its own.
                bytes = (0..<19).flatMap(frame)
                expected = "this file follows its frame 20"
                kept = all.subtracting(["early18", "early19"])
            }
            try Data(bytes).write(to: URL(fileURLWithPath: target))
            let refused = try DaemonProcess(arguments: ["--state-dir", state], directory: directory, waitForReady: false)
            #expect(refused.process.wait() == 1, "refused, not started without what the frames held")
            #expect(refused.stderrText.contains(expected) && refused.stderrText.contains("--repair-state \(state)"), "\(refused.stderrText)")
            #expect([UInt8](try Data(contentsOf: URL(fileURLWithPath: target))) == bytes, "kept byte for byte")
            let check = try stateTool("--check-state", state)
            #expect(check.status == 1 && check.stdout.contains(expected), "the check says the same: \(check.stdout)")
            let repair = try stateTool("--repair-state", state)
            #expect(repair.status == 0, "\(repair.stdout)\(repair.stderr)")
            let repaired = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            #expect(try StorageFaults.names(repaired) == kept, "every countdown whose frame is intact, in the order of the frames")
        }

        @Test("one bit flipped in a snapshot countdown's name: the start is refused, not a renamed countdown; --check-state agrees; --repair-state keeps the countdowns of every frame that verifies")
        func damagedSnapshotFrame() throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            let daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let names = Set((0..<200).map { "s7-\($0)" })
            _ = try StorageFaults.pipeline(names.sorted().map { "START \($0) 1h" }, on: try daemon.connect())
            #expect(daemon.terminate() == 0, "a clean stop: everything in the snapshot")
            let snapshot = state + "/countdownd.snapshot"
            #expect(!FileManager.default.fileExists(atPath: state + "/countdownd.db"), "no SQLite file beside the image")
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: snapshot)))
            // "s7-3" becomes "r7-3" (0x73 ^ 0x01 = 0x72), as one flipped bit on the disk would.
            let needle = [4] + Array("s7-3".utf8)
            // The last match: the countdowns come after the replay history, which names s7-3 too.
            let at = try #require((0...(bytes.count - needle.count)).last { bytes[$0..<($0 + needle.count)].elementsEqual(needle) })
            bytes[at + 1] ^= 0x01
            try Data(bytes).write(to: URL(fileURLWithPath: snapshot))
            let refused = try DaemonProcess(arguments: ["--state-dir", state], directory: directory, waitForReady: false)
            #expect(refused.process.wait() == 1, "refused: \(refused.stderrText)")
            #expect(refused.stderrText.contains("do not verify") && refused.stderrText.contains("--repair-state"), "\(refused.stderrText)")
            #expect([UInt8](try Data(contentsOf: URL(fileURLWithPath: snapshot))) == bytes, "kept byte for byte")
            let check = try stateTool("--check-state", state)
            #expect(check.status == 1 && check.stdout.contains("do not verify") && check.stdout.contains("says 200 and"), "\(check.stdout)")
            let intact = try #require(check.stdout.split(separator: "\n").last { $0.hasPrefix("intact: ") }.flatMap { Int($0.split(separator: " ")[1]) })
            #expect(try stateTool("--repair-state", state).status == 0)
            let repaired = try StorageFaults.names(try DaemonProcess(arguments: ["--state-dir", state], directory: directory))
            #expect(repaired.count == intact && repaired.isSubset(of: names) && !repaired.contains("s7-3"), "no r7-3: the damaged frame's countdowns are dropped, not renamed: \(repaired.count)")
            #expect(intact >= 140 && intact < 200, "one 4 KiB frame lost, the others kept: \(intact) of 200")
        }

        @Test(
            "an SQLite snapshot of the version before the image (schema 4, a checksum per row) is read and replaced by an image at the next snapshot; a row flipped or deleted in it is refused, as before",
            arguments: ["whole", "flipped-name", "row-deleted"]
        )
        func upgradeFromSchema4(fault: String) throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
            // Written by countdownd at eef35a1: s7-1 to s7-8 and sleepy (ON-SUSPEND pause), all paused.
            let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("Fixtures/schema4/countdownd.db").path
            let database = state + "/countdownd.db"
            try FileManager.default.copyItem(atPath: fixture, toPath: database)
            var expected = Set((1...8).map { "s7-\($0)" } + ["sleepy"])
            if fault == "flipped-name" {
                var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: database)))
                let needle = Array("s7-3paused".utf8)
                let at = try #require((0...(bytes.count - needle.count)).first { bytes[$0..<($0 + needle.count)].elementsEqual(needle) })
                bytes[at] ^= 0x01
                try Data(bytes).write(to: URL(fileURLWithPath: database))
            } else if fault == "row-deleted" {
                try #require(toolExists("/usr/bin/sqlite3"), "the fresh machine has sqlite3, which alters the old database")
                #expect(try runCommand("/usr/bin/sqlite3", [database, "DELETE FROM countdowns WHERE name = 's7-3'"]).status == 0)
            }
            if fault != "whole" {
                let reason = fault == "flipped-name" ? "1 rows that do not verify" : "the countdowns table holds 8 rows where 9 were written"
                let refused = try DaemonProcess(arguments: ["--state-dir", state], directory: directory, waitForReady: false)
                #expect(refused.process.wait() == 1 && refused.stderrText.contains(reason), "\(refused.stderrText)")
                let check = try stateTool("--check-state", state)
                #expect(check.status == 1 && check.stdout.contains(reason), "\(check.stdout)")
                #expect(try stateTool("--repair-state", state).status == 0)
                expected.remove("s7-3")
            }
            let daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let list = try daemon.connect().request("LIST").countdowns
            #expect(Set(list.map(\.name)) == expected && list.allSatisfy { $0.state == .paused }, "\(list.map(\.name))")
            #expect(try daemon.connect().request("STATUS sleepy").countdowns.first?.pausesOnSuspend == true)
            #expect(daemon.terminate() == 0)
            #expect(FileManager.default.fileExists(atPath: state + "/countdownd.snapshot") && !FileManager.default.fileExists(atPath: database), "the image replaced the database")
            let dump = try stateTool("--dump-state", state)
            #expect(dump.status == 0 && dump.stdout.split(separator: "\n").count == expected.count + 1, "\(dump.stdout)\(dump.stderr)")
        }

        @Test("a 0-byte snapshot stops the start with a clear message and is kept")
        func emptySnapshot() throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
            try #require(FileManager.default.createFile(atPath: state + "/countdownd.snapshot", contents: Data()), "the empty snapshot could not be created")
            let refused = try DaemonProcess(arguments: ["--state-dir", state], directory: directory, waitForReady: false)
            #expect(refused.process.wait() == 1)
            #expect(refused.stderrText.contains("countdownd.snapshot is damaged: the file is empty (0 bytes)"), "\(refused.stderrText)")
            #expect(FileManager.default.fileExists(atPath: state + "/countdownd.snapshot"))
        }

        @Test(
            "read-only state files in a writable directory are read, not taken for damage, and changes go on (as a non-root user)",
            .enabled(if: getuid() == 0 && toolExists("/usr/bin/setpriv"), "needs root to run the daemon as another user with setpriv")
        )
        func readOnlyFiles() throws {
            let directory = TemporaryDirectory()
            chmod(directory.path, 0o777)
            let state = directory.file("state-dir")
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
            chown(state, 65534, 65534)
            let asNobody = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
            let first = try DaemonProcess(arguments: ["--state-dir", state], directory: directory, launcher: asNobody)
            let c = try first.connect()
            _ = try c.request("START a 1h")
            _ = try c.request("START b 1h")
            _ = try c.request("PAUSE b")
            first.crash()
            for file in try FileManager.default.contentsOfDirectory(atPath: state) {
                chmod(state + "/" + file, 0o444)
            }
            let second = try DaemonProcess(arguments: ["--state-dir", state], directory: directory, launcher: asNobody)
            let list = try second.connect().request("LIST").countdowns.sorted { $0.name < $1.name }
            #expect(list.map(\.name) == ["a", "b"] && list.map(\.state) == [.running, .paused])
            #expect(!second.stderrText.contains("damaged"))
            #expect(try second.connect().request("START c 1h").countdown?.state == .running)
            second.crash()
            let third = try DaemonProcess(arguments: ["--state-dir", state], directory: directory, launcher: asNobody)
            #expect(try StorageFaults.names(third) == ["a", "b", "c"])
        }

        @Test(
            "an immutable journal (chattr +i) while running: changes get ERR unavailable, no crash, reads go on; chattr -i and it recovers",
            .enabled(if: StorageFaults.canSetImmutable, "needs root and a file system with chattr +i")
        )
        func immutableJournal() throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            var daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let c = try daemon.connect()
            #expect(try c.request("START a 1h").countdown != nil)
            let journal = try StorageFaults.newestJournal(in: state)
            #expect(try runCommand("/usr/bin/chattr", ["+i", journal]).status == 0)
            defer { _ = try? runCommand("/usr/bin/chattr", ["-i", journal]) }
            guard case .error(.unavailable?, _, let message) = try c.request("START b 1h").outcome else {
                Issue.record("a change to an immutable journal was acknowledged")
                return
            }
            #expect(message.contains("Operation not permitted") && message.contains("chattr -i"), "\(message)")
            #expect(try c.request("STATUS a").countdowns.first?.state == .running)
            #expect(try c.request("STATUS b").outcome != .ok("1"), "the refused change was not made")
            // systemctl status says so.
            let degraded = daemon.notify.waitFor("STATUS=1 running, 0 paused, 0 subscribers, 1 connections; storage degraded: ", timeout: 30)
            #expect(degraded?.contains("Operation not permitted") == true, "\(daemon.notify.lines(withPrefix: "STATUS="))")
            #expect(try runCommand("/usr/bin/chattr", ["-i", journal]).status == 0)
            try waitUntil(timeout: 60) {
                if case .ok = try c.request("START c 1h").outcome { return true }
                return false
            }
            #expect(daemon.notify.waitFor("STATUS=2 running, 0 paused, 0 subscribers, 1 connections", timeout: 30) == "STATUS=2 running, 0 paused, 0 subscribers, 1 connections")
            daemon.crash()
            daemon = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            #expect(try StorageFaults.names(daemon) == ["a", "c"])
        }

        @Test("a second daemon on the same state directory refuses to start, naming the first")
        func twoDaemons() throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            let first = try DaemonProcess(arguments: ["--state-dir", state], directory: directory)
            let second = try DaemonProcess(arguments: ["--state-dir", state], directory: TemporaryDirectory(), waitForReady: false)
            #expect(second.process.wait() == 1)
            #expect(second.stderrText.contains("another countdownd (pid \(first.pid)) is using the state directory \(state)"), "\(second.stderrText)")
            #expect(second.stderrText.contains("--state-dir"))
            #expect(try first.connect().request("PING").outcome == .ok("pong"))
        }

        @Test("SIGKILL in the middle of 50,000 pipelined STARTs: every countdown acknowledged before the kill is there after it")
        func killDuringBurst() throws {
            let directory = TemporaryDirectory()
            var daemon = try DaemonProcess(directory: directory)
            let c = try daemon.connect()
            try c.send((0..<50_000).map { "START burst\($0) 1h\n" }.joined())
            let killAfter = Int.random(in: 5000...40_000)
            var acknowledged: [String] = []
            while acknowledged.count < killAfter {
                if let name = try c.readReply(timeout: 30).countdown?.name { acknowledged.append(name) }
            }
            daemon.crash()
            daemon = try DaemonProcess(directory: directory)
            let names = try StorageFaults.names(daemon)
            #expect(names.isSuperset(of: acknowledged), "killed after \(killAfter) OKs: \(Set(acknowledged).subtracting(names).count) lost")
        }

        @Test("SIGKILL within milliseconds of 2,000 deadlines: every done is announced once on the wire and logged at most once")
        func killAtDeadlines() throws {
            let directory = TemporaryDirectory()
            // Names in the log (`--log-names`), every line (4,000 of them, past the default
            // limit): the log is checked for each countdown's done below.
            let logEverything = ["--log-lifecycle", "--log-names", "--log-lifecycle-limit", "0"]
            var daemon = try DaemonProcess(arguments: logEverything, directory: directory)
            let subscriber = try daemon.connect()
            _ = try subscriber.request("SUBSCRIBE")
            let count = 2000
            _ = try StorageFaults.pipeline((0..<count).map { "START d\($0) \(1000 + $0 % 200)ms" }, on: subscriber)
            var seen: [String: Int] = [:]
            var lastSequence: UInt64 = 0
            while seen.count < count / 2 {
                let event = try subscriber.waitForEvent { $0.kind == .done }
                seen[event.name, default: 0] += 1
                lastSequence = max(lastSequence, event.sequence)
            }
            daemon.crash()
            let firstLog = daemon.stderrText
            daemon = try DaemonProcess(arguments: logEverything, directory: directory)
            // What happened after the last event seen, replayed: the late dones of the restart
            // and any done committed just before the kill.
            let replay = try daemon.connect()
            guard case .ok = try replay.request("SUBSCRIBE SINCE \(lastSequence)").outcome else {
                Issue.record("the replay after the restart was refused")
                return
            }
            while seen.values.reduce(0, +) < count {
                let event = try replay.waitForEvent { $0.kind == .done }
                seen[event.name, default: 0] += 1
            }
            #expect(seen.count == count)
            #expect(seen.values.allSatisfy { $0 == 1 }, "\(seen.filter { $0.value > 1 }.keys.sorted().prefix(5)) announced twice")
            let logs = firstLog + daemon.stderrText
            var logged = 0
            for index in 0..<count {
                let times = logs.components(separatedBy: "d\(index): done").count - 1
                #expect(times <= 1, "d\(index) logged done \(times) times")
                logged += times
            }
            // Logged after it is committed: only a kill between the two can skip a line.
            #expect(logged >= count - 50, "only \(logged) of \(count) dones logged")
        }

        @Test("SUBSCRIBE ... SINCE replays what was missed across a restart, then goes live; too old is ERR gone, from the future bad-request")
        func sinceAcrossRestart() throws {
            let directory = TemporaryDirectory()
            var daemon = try DaemonProcess(arguments: ["--replay-events", "3"], directory: directory)
            let c = try daemon.connect()
            _ = try c.request("START a 1h")
            _ = try c.request("START b 1h")
            #expect(daemon.terminate() == 0)
            daemon = try DaemonProcess(arguments: ["--replay-events", "3"], directory: directory)
            let control = try daemon.connect()
            _ = try control.request("START c 1h")
            _ = try control.request("CANCEL c")
            let subscriber = try daemon.connect()
            try subscriber.send("SUBSCRIBE SINCE 2\n")
            #expect(try subscriber.readLine(timeout: 30) == "OK subscribed all seq 4")
            #expect(try subscriber.readLine(timeout: 30) == "EVENT 3 started c 3600000 3600000")
            // Its time left is whatever was left at the CANCEL: no bet on how fast that came.
            let cancelled = try #require(try subscriber.readLine(timeout: 30))
            #expect(cancelled.hasPrefix("EVENT 4 cancelled c ") && cancelled.hasSuffix(" 3600000"), "\(cancelled)")
            _ = try control.request("PAUSE a")
            #expect(try subscriber.readLine(timeout: 30)?.hasPrefix("EVENT 5 paused a ") == true, "then live, with no gap")
            let named = try daemon.connect()
            try named.send("SUBSCRIBE a SINCE 2\n")
            #expect(try named.readLine(timeout: 30) == "OK subscribed 1 seq 5")
            let aEvent = try #require(try named.readLine(timeout: 30))
            #expect(aEvent.hasPrefix("EVENT 5 paused a "), "only a's events: \(aEvent)")
            guard case .error(.gone?, _, let message) = try daemon.connect().request("SUBSCRIBE SINCE 0").outcome else {
                Issue.record("a replay from before the kept events was served")
                return
            }
            #expect(message.contains("follows seq 2") && message.contains("SUBSCRIBE without SINCE"), "\(message)")
            guard case .error(.badRequest?, _, _) = try daemon.connect().request("SUBSCRIBE SINCE 99").outcome else {
                Issue.record("a replay from the future was served")
                return
            }
        }

        @Test("a client under backpressure and a subscriber: every started event seen before a SIGKILL is durable")
        func backpressureOrdering() throws {
            let directory = TemporaryDirectory()
            var daemon = try DaemonProcess(directory: directory)
            let setup = try daemon.connect()
            _ = try StorageFaults.pipeline((0..<1000).map { "START pad\($0) 1h" }, on: setup)
            let subscriber = try daemon.connect()
            _ = try subscriber.request("SUBSCRIBE")
            let client = try daemon.connect()
            // Each LIST answers ~60 KB: 120 of them pass the 4 MiB at which reading pauses, so the
            // STARTs behind them are served after the output drains.
            var burst = ""
            for index in 0..<120 { burst += "LIST\nSTART x\(index) 1h\n" }
            try client.send(burst)
            var replies = 0
            var seenStarted: Set<String> = []
            let deadline = monotonicNow() + 60
            while seenStarted.count < 60 {
                guard monotonicNow() < deadline else { throw HarnessError.unexpected("only \(seenStarted.count) started events within 60 s") }
                // Read the client's replies slowly, so its output drains while events flow.
                if replies < 240 {
                    _ = try client.readReply(timeout: 30)
                    replies += 1
                }
                // What has arrived so far (a time-out means nothing more for now).
                while seenStarted.count < 60, let event = try? subscriber.nextEvent(timeout: replies < 240 ? 0.001 : 1) {
                    if event.kind == .started && event.name.hasPrefix("x") { seenStarted.insert(event.name) }
                }
            }
            daemon.crash()
            daemon = try DaemonProcess(directory: directory)
            let names = try StorageFaults.names(daemon)
            #expect(names.isSuperset(of: seenStarted), "\(seenStarted.subtracting(names).sorted()) were announced but not stored")
        }

        @Test(
            "a state directory of countdownd 0.1 (one SQLite row per countdown) is read: running, paused and already-done countdowns come back",
            .enabled(if: toolExists("/usr/bin/sqlite3"), "the sqlite3 tool writes the old database")
        )
        func upgradeFromVersion1() throws {
            let directory = TemporaryDirectory()
            let state = directory.file("state-dir")
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
            let now = Int64(unixNowMilliseconds())
            let script = """
                CREATE TABLE countdowns (name TEXT PRIMARY KEY NOT NULL, state TEXT NOT NULL, total_ms INTEGER NOT NULL,
                    deadline_unix_ms INTEGER, deadline_boot_ns INTEGER, remaining_ns INTEGER NOT NULL DEFAULT 0,
                    finished_unix_ms INTEGER, owner_uid INTEGER NOT NULL, late_ms INTEGER) WITHOUT ROWID;
                CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
                INSERT INTO meta VALUES ('schema_version', '1'), ('last_seq', '65536'), ('done_through_unix_ms', '\(now - 1000)');
                INSERT INTO countdowns VALUES ('run', 'running', 3600000, \(now + 3_000_000), NULL, 0, NULL, 0, NULL);
                INSERT INTO countdowns VALUES ('hold', 'paused', 3600000, NULL, NULL, 1800000000000, NULL, 0, NULL);
                INSERT INTO countdowns VALUES ('was', 'running', 60000, \(now - 5000), NULL, 0, NULL, 0, NULL);
                """
            #expect(try runCommand("/usr/bin/sqlite3", [state + "/countdownd.db", script]).status == 0)
            let daemon = try DaemonProcess(arguments: ["--state-dir", state, "--log-names"], directory: directory)
            let list = Dictionary(uniqueKeysWithValues: try daemon.connect().request("LIST").countdowns.map { ($0.name, $0) })
            #expect(list["run"]?.state == .running)
            #expect(list["hold"]?.state == .paused && list["hold"]?.remainingMilliseconds == 1_800_000)
            #expect(list["was"]?.state == .done && list["was"]?.lateMilliseconds == nil, "done before the upgrade, by the old watermark: not again")
            #expect(!daemon.stderrText.contains("was: done"))
            let started = try daemon.connect().request("START new 1h")
            #expect(started.countdown != nil)
        }

        @Test(
            "group commit, seen with strace: 200 pipelined STARTs take a few journal writes, not 200; --durability power adds one fdatasync per write",
            .enabled(if: toolExists("/usr/bin/strace"), "strace is not installed"),
            arguments: ["process", "power"]
        )
        func groupCommit(durability: String) throws {
            let directory = TemporaryDirectory()
            let trace = directory.file("trace")
            let daemon = try DaemonProcess(
                arguments: ["--durability", durability], directory: directory,
                launcher: ["/usr/bin/strace", "-f", "-qq", "-e", "trace=pwrite64,fdatasync", "-o", trace]
            )
            // strace's child is the daemon.
            let children = (try? String(contentsOfFile: "/proc/\(daemon.pid)/task/\(daemon.pid)/children", encoding: .utf8)) ?? ""
            let daemonPID = try #require(Int32(children.split(separator: " ").first ?? ""))
            defer {
                kill(daemonPID, SIGKILL)
                daemon.crash()
            }
            let c = try daemon.connect()
            let before = try String(contentsOfFile: trace, encoding: .utf8)
            let replies = try StorageFaults.pipeline((0..<200).map { "START g\($0) 1h" }, on: c, chunk: 200)
            #expect(replies.allSatisfy { $0.countdown != nil })
            #expect(try c.request("PING").outcome == .ok("pong"))
            let during = try String(contentsOfFile: trace, encoding: .utf8).dropFirst(before.count)
            let writes = during.split(separator: "\n").filter { $0.contains("pwrite64(") }.count
            let syncs = during.split(separator: "\n").filter { $0.contains("fdatasync(") }.count
            #expect(writes >= 1 && writes <= 40, "\(writes) journal writes for 200 pipelined STARTs")
            if durability == "power" {
                #expect(syncs == writes, "one fdatasync per journal write: \(syncs) for \(writes)")
            } else {
                #expect(syncs == 0, "no fdatasync per batch by default: \(syncs)")
            }
        }
    }
}