import CountdownCore
import Foundation
import Glibc

/// `cdctl start NAME DURATION --then CMD`: a shell command that runs when the countdown is done,
/// without a terminal staying open. The daemon never runs commands; cdctl hands the waiting to
/// the user's service manager:
///
/// - **With a user manager** (`systemd --user`): a transient unit from `systemd-run --user` runs
///   `cdctl wait NAME && CMD`, as the user, with the user's display and session variables, in the
///   current directory; its output goes to the journal (`journalctl --user -u <unit>`). It
///   survives the terminal, and logout too where the user lingers (`loginctl enable-linger`).
/// - **Without one**: the same runs detached in a session of its own (it survives the terminal,
///   not a logout); its output is discarded.
///
/// A cancelled countdown runs nothing (`cdctl wait` exits 5).
enum ThenAction {
    /// Where the command waits.
    enum Launched: Equatable {
        /// In this transient user unit.
        case unit(String)
        /// In this detached process (no user manager).
        case detached(pid_t)
    }

    /// Environment variables handed to the command: what a desktop notification, a sound or a
    /// script needs from the session that asked for it.
    static let passedVariables = [
        "PATH", "HOME", "LANG", "LC_ALL", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS",
        "XDG_RUNTIME_DIR", "XDG_SESSION_TYPE", "XDG_CURRENT_DESKTOP", "PULSE_SERVER", "COUNTDOWND_SOCKET",
    ]

    /// The shell script the unit runs: `$0` is cdctl, `$1` the socket, `$2` the name, `$3` the command.
    static let script = #""$0" --socket "$1" wait "$2" >/dev/null && exec /bin/sh -c "$3""#

    /// Starts waiting for `name` to be done, then running `command`.
    /// - Returns: where it waits, or a message saying why it could not.
    static func launch(command: String, name: String, socket: String, environment: [String: String]) -> Result<Launched, ThenError> {
        let cdctl = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let arguments = [cdctl, socket, name, command]
        if let unit = try? viaUserManager(arguments, name: name, command: command, environment: environment) {
            return .success(.unit(unit))
        }
        return detached(arguments).map(Launched.detached)
    }

    /// Why `--then` could not be set up.
    struct ThenError: Error, CustomStringConvertible {
        var description: String
    }

    private static func viaUserManager(_ arguments: [String], name: String, command: String, environment: [String: String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/systemd-run")
        var options = ["--user", "--collect", "--description=cdctl: when '\(name)' is done: \(command.prefix(200))",
                       "--working-directory=\(FileManager.default.currentDirectoryPath)"]
        for variable in passedVariables where environment[variable] != nil {
            options.append("--setenv=\(variable)")
        }
        process.arguments = options + ["--", "/bin/sh", "-c", script] + arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        guard process.terminationStatus == 0,
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Running as unit: ") }) else {
            throw ThenError(description: text)
        }
        return String(line.dropFirst("Running as unit: ".count))
    }

    /// glibc's `POSIX_SPAWN_SETSID` (2.26 and later), which Swift's Glibc module does not export.
    private static let spawnNewSession: Int16 = 0x80

    /// Runs the waiter in a new session, with no terminal: closing the terminal does not end it.
    private static func detached(_ arguments: [String]) -> Result<pid_t, ThenError> {
        var attributes = posix_spawnattr_t()
        var actions = posix_spawn_file_actions_t()
        posix_spawnattr_init(&attributes)
        posix_spawn_file_actions_init(&actions)
        defer {
            posix_spawnattr_destroy(&attributes)
            posix_spawn_file_actions_destroy(&actions)
        }
        posix_spawnattr_setflags(&attributes, Self.spawnNewSession)
        for descriptor in [STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO] {
            posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", descriptor == STDIN_FILENO ? O_RDONLY : O_WRONLY, 0)
        }
        let argv = ["/bin/sh", "-c", script] + arguments
        var cStrings = argv.map { strdup($0) }
        cStrings.append(nil)
        defer { cStrings.forEach { free($0) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, "/bin/sh", &actions, &attributes, cStrings, environ)
        guard result == 0 else {
            return .failure(ThenError(description: "cannot start /bin/sh: \(String(cString: strerror(result)))"))
        }
        return .success(pid)
    }
}
