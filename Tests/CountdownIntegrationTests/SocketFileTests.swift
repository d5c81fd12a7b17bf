import Foundation
import Glibc
import Testing

extension Integration {
    @Suite("The socket file: mode, stale sockets, a live daemon")
    struct SocketFileTests {
        @Test("the socket is created 0600 by default")
        func mode() throws {
            let daemon = try DaemonProcess()
            var status = stat()
            #expect(stat(daemon.socketPath, &status) == 0)
            #expect(status.st_mode & 0o777 == 0o600)
        }

        @Test("a stale socket left by a killed daemon is replaced on start")
        func staleSocketReplaced() throws {
            let directory = TemporaryDirectory()
            let first = try DaemonProcess(directory: directory)
            first.crash()
            #expect(FileManager.default.fileExists(atPath: first.socketPath), "SIGKILL leaves the file behind")
            let second = try DaemonProcess(directory: directory)
            #expect(try second.connect().request("PING").outcome == .ok("pong"))
        }

        @Test("a second daemon on a live socket refuses to start, saying why")
        func liveDaemonRefused() throws {
            let directory = TemporaryDirectory()
            let first = try DaemonProcess(directory: directory)
            // A state directory of its own: never the system's (root's default, /var/lib/countdownd).
            let result = try runCommand(TestBinaries.countdownd, ["--socket", first.socketPath, "--state-dir", directory.file("second-state")])
            #expect(result.status == 1)
            #expect(result.stderr.contains("already listening on \(first.socketPath)"))
            #expect(try first.connect().request("PING").outcome == .ok("pong"), "the first daemon is untouched")
        }

        @Test("a path that is not a socket is left alone and reported")
        func notASocket() throws {
            let directory = TemporaryDirectory()
            let path = directory.file("file.sock")
            _ = FileManager.default.createFile(atPath: path, contents: Data("precious".utf8))
            let result = try runCommand(TestBinaries.countdownd, ["--socket", path, "--state-dir", directory.file("state")])
            #expect(result.status == 1)
            #expect(result.stderr.contains("is not a socket"))
            #expect(try String(contentsOfFile: path, encoding: .utf8) == "precious")
        }

        @Test("countdownd --help, --version and usage errors")
        func commandLine() throws {
            let help = try runCommand(TestBinaries.countdownd, ["--help"])
            #expect(help.status == 0 && help.stdout.contains("--socket PATH"))
            let version = try runCommand(TestBinaries.countdownd, ["--version"])
            #expect(version.status == 0 && version.stdout.hasPrefix("countdownd "))
            let bad = try runCommand(TestBinaries.countdownd, ["--frobnicate"])
            #expect(bad.status == 2 && bad.stderr.contains("unknown option '--frobnicate'"))
        }
    }
}
