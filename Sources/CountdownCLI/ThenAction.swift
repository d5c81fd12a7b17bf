import CLinuxShims
import CountdownCore
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

    /// The same for `--then-each`: `$4` is the event number to follow the cycle from.
    static let eachPhaseScript = #"exec "$0" --socket "$1" __each-phase "$2" "$4" "$3""#

    /// When the command runs.
    enum When: Equatable {
        /// Once, when the countdown is done.
        case done
        /// At each phase of a cycle that begins after event `since` (`--then-each`).
        case eachPhase(since: UInt64)
    }

    /// Starts waiting for `name` to be done (or for each of its phases), then running `command`.
    /// - Returns: where it waits, or a message saying why it could not.
    static func launch(command: String, name: String, when: When = .done, socket: String, environment: [String: String]) -> Result<Launched, ThenError> {
        var arguments = [executablePath(), socket, name, command]
        var script = Self.script
        if case .eachPhase(let since) = when {
            arguments.append("\(since)")
            script = eachPhaseScript
        }
        let what = when == .done ? "when '\(name)' is done" : "at each phase of '\(name)'"
        if case .success(let unit) = viaUserManager(arguments, script: script, what: what, command: command, environment: environment) {
            return .success(.unit(unit))
        }
        return detached(arguments, script: script).map(Launched.detached)
    }

    /// Why `--then` could not be set up.
    struct ThenError: Error, CustomStringConvertible {
        var description: String
    }

    /// This cdctl's own file, so the waiter runs the same version; `argv[0]` if /proc is away.
    private static func executablePath() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard length > 0 else { return CommandLine.arguments[0] }
        return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The working directory, for the unit to run the command where the user asked; `/` when
    /// it is gone or unreadable.
    private static func workingDirectory() -> String {
        guard let path = getcwd(nil, 0) else { return "/" }
        defer { free(path) }
        return String(cString: path)
    }

    /// `systemd-run --user …`: the unit's name, or systemd-run's own words on why not.
    private static func viaUserManager(
        _ arguments: [String], script: String, what: String, command: String, environment: [String: String]
    ) -> Result<String, ThenError> {
        var options = ["--user", "--collect", "--description=cdctl: \(what): \(command.prefix(200))",
                       "--working-directory=\(workingDirectory())"]
        for variable in passedVariables where environment[variable] != nil {
            options.append("--setenv=\(variable)")
        }
        let argv = ["/usr/bin/systemd-run"] + options + ["--", "/bin/sh", "-c", script] + arguments
        var errors: [Int32] = [-1, -1]
        // Close-on-exec at once (pipe2 is not in Swift's Glibc module): cdctl runs one thread here.
        guard pipe(&errors) == 0 else {
            return .failure(ThenError(description: "cannot make a pipe: \(String(cString: strerror(errno)))"))
        }
        guard fcntl(errors[0], F_SETFD, FD_CLOEXEC) == 0, fcntl(errors[1], F_SETFD, FD_CLOEXEC) == 0 else {
            countdownd_close(errors[0])
            countdownd_close(errors[1])
            return .failure(ThenError(description: "cannot make a pipe: \(String(cString: strerror(errno)))"))
        }
        var actions = posix_spawn_file_actions_t()
        let spawned: Result<pid_t, ThenError>
        if let failed = prepare("systemd-run", [
            posix_spawn_file_actions_init(&actions),
            posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0),
            posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0),
            // dup2 clears O_CLOEXEC on the copy: systemd-run writes its unit's name there.
            posix_spawn_file_actions_adddup2(&actions, errors[1], STDERR_FILENO),
        ]) {
            spawned = .failure(failed)
        } else {
            spawned = spawn(argv, actions: &actions, attributes: nil)
        }
        // Ignored on purpose: destroying what init set up frees memory and cannot fail.
        _ = posix_spawn_file_actions_destroy(&actions)
        // Our copy of the write end must go, or the read below never sees the end of the output.
        countdownd_close(errors[1])
        defer { countdownd_close(errors[0]) }
        guard case .success(let pid) = spawned else {
            if case .failure(let error) = spawned { return .failure(error) }
            return .failure(ThenError(description: "cannot start systemd-run"))
        }
        // Read to the end, keeping the first 64 KiB: a child that writes more must not block
        // on a full pipe while we wait for it.
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(errors[0], &chunk, chunk.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            if output.count < 65_536 { output += chunk[..<count] }
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = String(decoding: output, as: UTF8.self)
        // WIFEXITED and WEXITSTATUS, which Swift's Glibc module does not export as functions.
        let exitedCleanly = status & 0x7f == 0 && (status >> 8) & 0xff == 0
        guard exitedCleanly, let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Running as unit: ") }) else {
            return .failure(ThenError(description: text))
        }
        // systemd 256 and later add "; invocation ID: …" after the unit's name.
        let unit = line.dropFirst("Running as unit: ".count).prefix { $0 != ";" && $0 != " " }
        return .success(String(unit))
    }

    /// Runs `command` through `/bin/sh -c` with `environment`, and waits for it (`--then-each`:
    /// one phase's command at a time). Its exit status is its own business: a failed
    /// notification must not stop the next phase's.
    static func run(_ command: String, environment: [String: String]) {
        var actions = posix_spawn_file_actions_t()
        defer {
            // Ignored on purpose: destroying what init set up frees memory and cannot fail.
            _ = posix_spawn_file_actions_destroy(&actions)
        }
        guard posix_spawn_file_actions_init(&actions) == 0, countdownd_spawn_close_from(&actions, STDERR_FILENO + 1) == 0 else { return }
        let argv = ["/bin/sh", "-c", command]
        var cArguments = argv.map { strdup($0) } + [nil]
        var cEnvironment = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            cArguments.forEach { free($0) }
            cEnvironment.forEach { free($0) }
        }
        var pid: pid_t = 0
        guard posix_spawn(&pid, "/bin/sh", &actions, nil, &cArguments, &cEnvironment) == 0 else { return }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }

    /// glibc's `POSIX_SPAWN_SETSID` (2.26 and later), which Swift's Glibc module does not export.
    private static let spawnNewSession: Int16 = 0x80

    /// Runs the waiter in a new session, with no terminal: closing the terminal does not end it.
    private static func detached(_ arguments: [String], script: String) -> Result<pid_t, ThenError> {
        var attributes = posix_spawnattr_t()
        var actions = posix_spawn_file_actions_t()
        defer {
            // Ignored on purpose: destroying what init set up frees memory and cannot fail.
            _ = posix_spawnattr_destroy(&attributes)
            _ = posix_spawn_file_actions_destroy(&actions)  // Ignored on purpose, as above.
        }
        // A session of its own is the point: without it the waiter would end with the terminal.
        if let failed = prepare("/bin/sh", [
            posix_spawnattr_init(&attributes),
            posix_spawn_file_actions_init(&actions),
            posix_spawnattr_setflags(&attributes, Self.spawnNewSession),
        ] + [STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO].map { descriptor in
            posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", descriptor == STDIN_FILENO ? O_RDONLY : O_WRONLY, 0)
        }) {
            return .failure(failed)
        }
        return spawn(["/bin/sh", "-c", script] + arguments, actions: &actions, attributes: &attributes)
    }

    /// The first failure among the results of posix_spawn's set-up calls (each returns 0 or an
    /// error number), as a message; `nil` when all succeeded.
    private static func prepare(_ program: String, _ results: [Int32]) -> ThenError? {
        guard let failed = results.first(where: { $0 != 0 }) else { return nil }
        return ThenError(description: "cannot prepare \(program): \(String(cString: strerror(failed)))")
    }

    /// posix_spawn of `argv[0]` with this environment.
    private static func spawn(
        _ argv: [String], actions: inout posix_spawn_file_actions_t, attributes: UnsafePointer<posix_spawnattr_t>?
    ) -> Result<pid_t, ThenError> {
        // Only 0, 1 and 2 reach the child: a lock or a pipe the caller holds must not stay held
        // by a waiter that lives as long as the countdown.
        let closed = countdownd_spawn_close_from(&actions, STDERR_FILENO + 1)
        guard closed == 0 else {
            return .failure(ThenError(description: "cannot prepare \(argv[0]): \(String(cString: strerror(closed)))"))
        }
        var cStrings = argv.map { strdup($0) }
        cStrings.append(nil)
        defer { cStrings.forEach { free($0) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, argv[0], &actions, attributes, cStrings, environ)
        guard result == 0 else {
            return .failure(ThenError(description: "cannot start \(argv[0]): \(String(cString: strerror(result)))"))
        }
        return .success(pid)
    }
}
