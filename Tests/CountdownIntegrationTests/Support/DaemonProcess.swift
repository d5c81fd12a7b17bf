import CountdownClient
import CountdownCore
import Foundation
import Glibc

/// A real `countdownd` process on a temporary socket, with its own notify socket and state
/// directory, started and waited for through `READY=1`, never through sleeps.
final class DaemonProcess {
    let directory: TemporaryDirectory
    let socketPath: String
    let notify: NotifyListener
    let process = Process()
    let stderrPath: String

    /// Starts the daemon and waits until it reports `READY=1`.
    /// - Parameters:
    ///   - arguments: extra command-line arguments.
    ///   - environment: extra environment variables.
    ///   - directory: reuse a directory (and so the socket path and state) from an earlier process.
    init(
        arguments: [String] = [],
        environment: [String: String] = [:],
        directory: TemporaryDirectory = TemporaryDirectory(),
        waitForReady: Bool = true,
        watchdogPIDSelf: Bool = false
    ) throws {
        self.directory = directory
        socketPath = directory.file("d.sock")
        notify = NotifyListener(path: directory.file("notify-\(UUID().uuidString.prefix(8)).sock"))
        stderrPath = directory.file("stderr-\(UUID().uuidString.prefix(8)).log")
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        if watchdogPIDSelf {
            // sd_watchdog_enabled() only says yes when WATCHDOG_PID is this process's pid.
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "WATCHDOG_PID=$$ exec \"$0\" \"$@\"", TestBinaries.countdownd, "--socket", socketPath] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: TestBinaries.countdownd)
            process.arguments = ["--socket", socketPath] + arguments
        }
        var env = ProcessInfo.processInfo.environment
        env["NOTIFY_SOCKET"] = notify.path
        env["XDG_STATE_HOME"] = directory.file("state")
        env["STATE_DIRECTORY"] = nil
        env["JOURNAL_STREAM"] = nil
        env["LISTEN_FDS"] = nil
        env["LISTEN_PID"] = nil
        env["WATCHDOG_USEC"] = nil
        env["WATCHDOG_PID"] = nil
        env.merge(environment) { $1 }
        if watchdogPIDSelf { env["WATCHDOG_PID"] = nil }
        process.environment = env
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        if waitForReady {
            guard notify.waitFor("READY=1", timeout: 20) != nil else {
                process.terminate()
                throw HarnessError.notReady(stderr: stderrText)
            }
        }
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    var pid: pid_t { process.processIdentifier }

    /// What the daemon wrote to stderr so far.
    var stderrText: String {
        (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
    }

    /// A new client connection (greeting already read).
    func connect() throws -> CountdownConnection {
        try CountdownConnection(path: socketPath, timeout: 10)
    }

    /// Sends SIGTERM and waits for the exit; returns the exit status.
    @discardableResult
    func terminate() -> Int32 {
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// Kills the daemon with SIGKILL, as a crash would.
    func crash() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// The number of descriptors the daemon holds open now.
    func openDescriptorCount() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1
    }

    /// The number of sockets the daemon holds open now (listening socket and connections).
    func openSocketCount() -> Int {
        let directory = "/proc/\(pid)/fd"
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return entries.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: directory + "/" + $0))?.hasPrefix("socket:") == true }.count
    }

    /// The daemon's resident set size, in bytes.
    func residentBytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
              let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "") else { return -1 }
        return kilobytes * 1024
    }
}

/// Why the harness could not do its part.
enum HarnessError: Error, CustomStringConvertible {
    case notReady(stderr: String)
    case unexpected(String)

    var description: String {
        switch self {
        case .notReady(let stderr): return "countdownd did not report READY=1 within 20 s; its stderr:\n\(stderr)"
        case .unexpected(let what): return what
        }
    }
}

/// The result of running a command to completion.
struct CommandResult {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// Runs an executable to completion with a time limit, capturing its output.
func runCommand(_ executable: String, _ arguments: [String], environment: [String: String] = [:], timeout: Double = 30) throws -> CommandResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    env.merge(environment) { $1 }
    process.environment = env
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    // Read both pipes to the end (a full pipe would block the child), then reap it.
    let group = DispatchGroup()
    nonisolated(unsafe) var outData = Data()
    nonisolated(unsafe) var errData = Data()
    DispatchQueue.global().async(group: group) { outData = out.fileHandleForReading.readDataToEndOfFile() }
    DispatchQueue.global().async(group: group) { errData = err.fileHandleForReading.readDataToEndOfFile() }
    if group.wait(timeout: .now() + timeout) == .timedOut {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        throw HarnessError.unexpected("\(executable) \(arguments) did not finish within \(timeout) s")
    }
    process.waitUntilExit()
    return CommandResult(
        status: process.terminationStatus,
        stdout: String(decoding: outData, as: UTF8.self),
        stderr: String(decoding: errData, as: UTF8.self)
    )
}

/// Runs the real `cdctl` against a daemon.
func cdctl(_ arguments: [String], socket: String, timeout: Double = 30) throws -> CommandResult {
    try runCommand(TestBinaries.cdctl, ["--socket", socket] + arguments, timeout: timeout)
}

extension CountdownConnection {
    /// Reads events until one matches, failing the wait after `timeout` seconds.
    func waitForEvent(timeout: Double = 10, where matches: (EventInfo) -> Bool) throws -> EventInfo {
        let deadline = monotonicNow() + timeout
        while true {
            let left = deadline - monotonicNow()
            guard left > 0, let event = try nextEvent(timeout: left) else {
                throw HarnessError.unexpected("no matching event within \(timeout) s")
            }
            if matches(event) { return event }
        }
    }
}
