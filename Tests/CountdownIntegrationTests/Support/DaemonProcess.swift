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
    private(set) var process: ChildProcess!
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
        watchdogPIDSelf: Bool = false,
        launcher: [String] = []
    ) throws {
        self.directory = directory
        socketPath = directory.file("d.sock")
        notify = NotifyListener(path: directory.file("notify-\(UUID().uuidString.prefix(8)).sock"))
        stderrPath = directory.file("stderr-\(UUID().uuidString.prefix(8)).log")
        let executable: String
        let fullArguments: [String]
        if watchdogPIDSelf {
            // sd_watchdog_enabled() only says yes when WATCHDOG_PID is this process's pid.
            executable = "/bin/sh"
            fullArguments = ["-c", "WATCHDOG_PID=$$ exec \"$0\" \"$@\"", TestBinaries.countdownd, "--socket", socketPath] + arguments
        } else if let first = launcher.first {
            // For instance setpriv, to run the daemon as another user.
            executable = first
            fullArguments = Array(launcher.dropFirst()) + [TestBinaries.countdownd, "--socket", socketPath] + arguments
        } else {
            executable = TestBinaries.countdownd
            fullArguments = ["--socket", socketPath] + arguments
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
        let log = open(stderrPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        defer { close(log) }
        process = try ChildProcess(executable, fullArguments, environment: env, stderr: log)
        if waitForReady {
            guard notify.waitFor("READY=1", timeout: 60) != nil else {
                process.signal(SIGKILL)
                throw HarnessError.notReady(stderr: stderrText)
            }
        }
    }

    var pid: pid_t { process.pid }

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
        process.signal(SIGTERM)
        return process.wait()
    }

    /// Waits for the exit of a daemon already signalled (a second SIGTERM would cut a cluster
    /// host's stop short); returns the exit status.
    @discardableResult
    func waitForExit() -> Int32 {
        process.wait()
    }

    /// Kills the daemon with SIGKILL, as a crash would.
    func crash() {
        process.signal(SIGKILL)
        process.wait()
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

    /// The signals the daemon's main thread blocks now (`SigBlk` in /proc), as a bit mask where
    /// signal n is bit n - 1; `nil` once it is gone.
    func blockedSignals() -> UInt64? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigBlk:") }),
              let mask = UInt64(line.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16) else { return nil }
        return mask
    }

    /// The daemon's resident set size, in bytes.
    func residentBytes() -> Int {
        statusBytes("VmRSS:")
    }

    /// The most the daemon's resident set has been since it started (`VmHWM`), in bytes: a
    /// peak that a later reading of `residentBytes` would miss.
    func peakResidentBytes() -> Int {
        statusBytes("VmHWM:")
    }

    private func statusBytes(_ field: String) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }),
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
        case .notReady(let stderr): return "countdownd did not report READY=1 within 60 s; its stderr:\n\(stderr)"
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
    var env = ProcessInfo.processInfo.environment
    env.merge(environment) { $1 }
    let directory = TemporaryDirectory()
    let outPath = directory.file("stdout"), errPath = directory.file("stderr")
    let out = open(outPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    let err = open(errPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    let child: ChildProcess
    do {
        defer {
            close(out)
            close(err)
        }
        child = try ChildProcess(executable, arguments, environment: env, stdout: out, stderr: err)
    }
    // Output goes to files, so a chatty child never blocks on a full pipe; poll for its exit.
    let deadline = monotonicNow() + timeout
    while child.isRunning {
        guard monotonicNow() < deadline else {
            child.signal(SIGKILL)
            child.wait()
            throw HarnessError.unexpected("\(executable) \(arguments) did not finish within \(timeout) s")
        }
        usleep(2000)
    }
    return CommandResult(
        status: child.wait(),
        stdout: (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "",
        stderr: (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
    )
}

/// Runs the real `cdctl` against a daemon.
func cdctl(_ arguments: [String], socket: String, timeout: Double = 30) throws -> CommandResult {
    try runCommand(TestBinaries.cdctl, ["--socket", socket] + arguments, timeout: timeout)
}

extension CountdownConnection {
    /// Reads events until one matches, failing the wait after `timeout` seconds.
    func waitForEvent(timeout: Double = 30, where matches: (EventInfo) -> Bool) throws -> EventInfo {
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

/// The value of one `STATS` key, as a number (`nil`: absent or not a number).
func statValue(_ key: String, on connection: CountdownConnection) throws -> Int? {
    try connection.request("STATS").stats.first { $0.key == key }.flatMap { Int($0.value) }
}

/// Runs a long-running command (such as `cdctl watch`) until its standard output has `lines`
/// complete lines, then stops it; returns those lines. Waits on the output, not on a clock: a
/// slow machine only makes it take longer.
func firstLines(_ lines: Int, of executable: String, _ arguments: [String], timeout: Double = 30) throws -> [String] {
    Array(try outputLines(of: executable, arguments, timeout: timeout) { $0.count >= lines }.prefix(lines))
}

/// Runs a long-running command until its complete output lines satisfy `enough` (or it exits),
/// then stops it; returns the complete lines.
func outputLines(of executable: String, _ arguments: [String], timeout: Double = 30, until enough: ([String]) -> Bool) throws -> [String] {
    let directory = TemporaryDirectory()
    let outPath = directory.file("stdout")
    let out = open(outPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    let child: ChildProcess
    do {
        defer { close(out) }
        child = try ChildProcess(executable, arguments, environment: ProcessInfo.processInfo.environment, stdout: out)
    }
    defer {
        child.signal(SIGKILL)
        child.wait()
    }
    var complete: [String] = []
    try waitUntil(timeout: timeout) {
        let text = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
        complete = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        return enough(complete) || !child.isRunning
    }
    return complete
}

/// Takes two ticks on `connection`, then sends `request`, which ends its (only) interest in
/// ticks; returns every tick it received. Each tick the daemon made before that request was
/// queued ahead of its reply (`request` keeps the events it reads meanwhile), so the count is
/// exact: STATS `events_tick` must equal it.
func ticksUntilInterestEnds(on connection: CountdownConnection, endingWith request: String) throws -> [EventInfo] {
    var ticks = [try connection.waitForEvent { $0.kind == .tick }, try connection.waitForEvent { $0.kind == .tick }]
    _ = try connection.request(request)
    while connection.hasBufferedInput, let event = try connection.nextEvent(timeout: 10) {
        if event.kind == .tick { ticks.append(event) }
    }
    return ticks
}
