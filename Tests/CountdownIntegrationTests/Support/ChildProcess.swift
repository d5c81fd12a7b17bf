import Foundation
import Glibc

/// A child process started with `posix_spawn`, with an empty signal mask and default signal
/// dispositions.
///
/// Foundation's `Process`, called from a Dispatch worker thread (where Swift Testing runs tests),
/// hands the child that thread's mask, in which SIGTERM and SIGINT are blocked: `timeout` and
/// `kill -TERM` then never reach the child. Spawning directly avoids that.
final class ChildProcess {
    let pid: pid_t
    private var status: Int32?

    /// Starts `executable` with `arguments`, the given environment, and standard streams
    /// redirected to the given descriptors (nil: /dev/null).
    init(_ executable: String, _ arguments: [String], environment: [String: String], stdin: Int32? = nil, stdout: Int32? = nil, stderr: Int32? = nil) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (source, target) in [(stdin, Int32(0)), (stdout, 1), (stderr, 2)] {
            if let source {
                posix_spawn_file_actions_adddup2(&actions, source, target)
            } else {
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            }
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let result = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw HarnessError.unexpected("cannot start \(executable): \(String(cString: strerror(result)))")
        }
        pid = child
    }

    deinit {
        if isRunning {
            kill(pid, SIGKILL)
            _ = wait()
        }
    }

    /// Whether the child has not exited yet (reaps it if it has).
    var isRunning: Bool {
        guard status == nil else { return false }
        var raw: Int32 = 0
        if waitpid(pid, &raw, WNOHANG) == pid {
            status = Self.decode(raw)
            return false
        }
        return true
    }

    /// Sends a signal.
    func signal(_ number: Int32) {
        if status == nil { kill(pid, number) }
    }

    /// Waits for the exit; returns the exit status (128 + n for death by signal n).
    @discardableResult
    func wait() -> Int32 {
        if let status { return status }
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
        let decoded = Self.decode(raw)
        status = decoded
        return decoded
    }

    private static func decode(_ raw: Int32) -> Int32 {
        // WIFEXITED / WEXITSTATUS / WTERMSIG, spelled out (they are macros).
        let signal = raw & 0x7F
        return signal == 0 ? (raw >> 8) & 0xFF : 128 + signal
    }
}
