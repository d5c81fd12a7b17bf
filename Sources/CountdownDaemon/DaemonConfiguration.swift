import CountdownCore
import Glibc

/// How hard storage works to keep an acknowledged change.
public enum Durability: String, Sendable, CaseIterable {
    /// One `write` of the journal per batch before its replies: every `OK` survives the daemon
    /// being killed (the kernel has the bytes).
    case process
    /// The same plus `fdatasync`: every `OK` also survives a power loss.
    case power
}

/// Everything the daemon needs to know to run, built by `countdownd`'s argument parsing.
public struct DaemonConfiguration: Sendable, Equatable {
    /// The daemon's version, shown in the greeting and by `--version`.
    public static let version = CountdownVersion.current

    /// Where to listen (ignored when systemd passes a socket).
    public var socketPath: String
    /// The mode of a socket file the daemon creates.
    public var socketMode: mode_t = 0o600
    /// The engine's limits and retention.
    public var engine = EngineConfiguration()
    /// The most client connections at once; more are told `ERR limit` and closed.
    public var maximumConnections = 10_000
    /// The most connections of one non-root uid: one user cannot take them all.
    public var maximumConnectionsPerUser = 1_000
    /// The most names one connection may subscribe to.
    public var maximumSubscriptionsPerConnection = 10_000
    /// Once a subscriber has this many bytes left unsent after its output was written, it is sent
    /// no ticks until its output drains: a subscriber that reads slowly or not at all costs
    /// nothing per tick.
    public var tickHoldThreshold = 64 * 1024
    /// Once a connection has this many bytes unsent, its requests are not read until they drain:
    /// backpressure for clients that pipeline without reading. Generous, so that a client may
    /// send tens of thousands of requests before it reads a reply; nothing is dropped either way.
    public var readPauseThreshold = 4 * 1024 * 1024
    /// Past this many bytes of events unsent, a subscriber gets `ERR overflow` and is closed.
    public var outputHardLimit = 16 * 1024 * 1024
    /// The memory the queued output of all the connections of one non-root uid may hold
    /// together (`OutputQueue.footprint`: bytes, and their chunks' spare room); the ones furthest
    /// behind get `ERR overflow` and are closed as a line would pass it, so the sum never does:
    /// one user's many never-reading subscribers cannot take the daemon's memory (0: no such
    /// limit). Four connections at `outputHardLimit`.
    public var outputLimitPerUser = 64 * 1024 * 1024
    /// How long a client cut off for overflow gets to read its `ERR overflow` before it is
    /// closed, in milliseconds: one that never reads holds only a descriptor until then.
    public var overflowGraceMilliseconds = 2000
    /// Log entries up to this level are written.
    public var logLevel = LogLevel.info
    /// Whether lifecycle log lines and journal fields name the countdown (`--log-names`, or
    /// `--log-level debug`). Off by default: names can be personal data (an OTP cooldown's is a
    /// phone number), and a journal keeps them for weeks.
    public var logsNames = false
    /// Whether each lifecycle event is logged, one line with journal fields (`--log-lifecycle`,
    /// or `--log-level debug`). Off by default: a busy OTP server would write two lines per
    /// cooldown, which nobody acts on (Redis logs nothing per key); subscribers and `SINCE` have
    /// the events.
    public var logsLifecycle = false
    /// How many lifecycle events are logged one by one per 10 s; the rest are counted in one
    /// line (0: no limit).
    public var lifecycleLogLimit = 1_000
    /// The least time between two `STATUS=` updates to systemd, in milliseconds (0: every change).
    public var statusIntervalMilliseconds = 250
    /// Where the journal, the snapshot and the lock live.
    public var stateDirectory: String
    /// How hard storage works to keep an acknowledged change.
    public var durability = Durability.process
    /// How many of each uid's recent lifecycle events are kept for `SUBSCRIBE … SINCE` (across
    /// restarts too): only a uid's own events push out its own.
    public var replayEventsPerUser = 4_096
    /// Cluster mode: countdowns live in etcd, shared by every daemon on the same prefix; `nil`
    /// for a daemon on its own.
    public var cluster: ClusterConfiguration?

    /// Creates a configuration with the defaults, a socket path and a state directory.
    public init(socketPath: String, stateDirectory: String) {
        self.socketPath = socketPath
        self.stateDirectory = stateDirectory
    }

    /// The default state directory: `$STATE_DIRECTORY` (set by systemd's `StateDirectory=`; the
    /// first one if several), else `$XDG_STATE_HOME/countdownd`, else `/var/lib/countdownd` for
    /// root, else `$HOME/.local/state/countdownd`.
    public static func defaultStateDirectory(environment: [String: String], uid: UInt32) -> String {
        if let systemd = environment["STATE_DIRECTORY"]?.split(separator: ":").first, !systemd.isEmpty {
            return String(systemd)
        }
        if let xdg = environment["XDG_STATE_HOME"], !xdg.isEmpty {
            return xdg + "/countdownd"
        }
        if uid == 0 {
            return "/var/lib/countdownd"
        }
        return (environment["HOME"] ?? "/tmp/countdownd-\(uid)") + "/.local/state/countdownd"
    }
}

/// Where cluster mode keeps its countdowns: etcd's members, a key prefix, TLS.
public struct ClusterConfiguration: Sendable, Equatable {
    /// The etcd members' client URLs (`http://10.0.0.1:2379`).
    public var endpoints: [String]
    /// Every countdown is the key `<prefix><key>`; daemons sharing a prefix share countdowns.
    public var prefix = "/countdownd/"
    /// TLS to the members: a CA bundle, and a client certificate and key.
    var tls: TLSFiles?
    /// etcd's own authentication: a user, and the file holding its password.
    public var user: String?
    public var passwordFile: String?

    /// Cluster mode on these members.
    public init(endpoints: [String]) {
        self.endpoints = endpoints
    }
}

/// What `countdownd`'s command line asks for.
public enum DaemonCommand: Equatable, Sendable {
    /// Run with this configuration.
    case run(DaemonConfiguration)
    /// Print the help text.
    case help
    /// Print the version.
    case version
    /// Print the effective settings as a configuration file (`--print-config`).
    case printConfig(String)
    /// Say what in a state directory is intact (`--check-state DIR`), changing nothing.
    case checkState(String)
    /// Keep exactly what is intact in a damaged state directory (`--repair-state DIR`).
    case repairState(String)
    /// Print the state a start would restore from a directory as JSON lines (`--dump-state DIR`).
    case dumpState(String)
}

/// Parses `countdownd`'s arguments into a `DaemonCommand`.
public enum DaemonCommandLine {
    /// The help text, kept in step with the man page and README.
    public static let help = """
        Usage: countdownd [OPTIONS]

        Keeps named countdowns and publishes their ticks over a Unix socket.
        Runs in the foreground; systemd units are in the systemd/ folder.

        Options:
          --socket PATH            listen here (default: $COUNTDOWND_SOCKET, else
                                   $XDG_RUNTIME_DIR/countdownd/countdownd.sock, else
                                   /run/countdownd/countdownd.sock for root)
          --socket-mode MODE       octal mode of the socket file (default 0600)
          --state-dir DIR          where the journal and snapshot live (default:
                                   $STATE_DIRECTORY, else $XDG_STATE_HOME/countdownd,
                                   else /var/lib/countdownd for root, else
                                   ~/.local/state/countdownd)
          --durability LEVEL       process: every OK survives a killed daemon (default);
                                   power: also a power loss (fdatasync per batch)
          --replay-events N        each uid's recent lifecycle events kept for
                                   SUBSCRIBE ... SINCE (default 4096)
          --retention SECONDS      how long a done or cancelled countdown stays
                                   visible before it is forgotten (default 600)
          --max-countdowns N       most countdowns held at once (default 1000000)
          --max-countdowns-per-user N
                                   most countdowns of one non-root user (default 100000)
          --max-connections N      most client connections at once (default 10000)
          --max-connections-per-user N
                                   most connections of one non-root user (default 1000)
          --max-subscriptions N    most names one connection may subscribe to (default 10000)
          --output-limit BYTES     unsent bytes after which a client is disconnected
                                   with ERR overflow (default 16777216)
          --output-limit-per-user BYTES
                                   memory the output of all of one non-root user's
                                   clients may hold together; the furthest behind are
                                   disconnected before it is passed (default 67108864;
                                   0: no limit)
          --overflow-grace MS      how long such a client gets to read its ERR
                                   overflow before it is closed (default 2000)
          --log-level LEVEL        error, warning, notice, info or debug (default info)
          --log-lifecycle          log each lifecycle event (started, done, ...), one
                                   line with journal fields (default off; on with
                                   --log-level debug)
          --log-names              name countdowns in lifecycle log lines and journal
                                   fields (default: only their seq and uid; on
                                   with --log-level debug)
          --log-lifecycle-limit N  lifecycle events logged one by one per 10 s, the
                                   rest counted in one line (default 1000; 0: all)
          --status-interval MS     least time between STATUS= updates to systemd
                                   (default 250; 0 sends every change)
          --cluster URL[,URL...]   cluster mode (docs/CLUSTER.md): countdowns
                                   live in etcd at these members, shared by every
                                   daemon on the same prefix; --state-dir/cluster
                                   keeps this host's copy
          --cluster-prefix PREFIX  etcd key prefix (default /countdownd/)
          --cluster-ca FILE, --cluster-cert FILE, --cluster-key FILE
                                   TLS to etcd: its CA, this daemon's certificate and key
          --cluster-user USER, --cluster-password-file FILE
                                   etcd's own authentication: a user, and a file
                                   holding its password
          --config FILE            read options from FILE, one per line as here without
                                   their --, as in 'max-countdowns-per-user = 1000'
                                   (the package's: /etc/countdownd/countdownd.conf);
                                   options given here win over the file's
          --print-config           print the effective settings as such a file, and exit
          --check-state DIR        say what in a state directory is intact and what
                                   is damaged, changing nothing (exit 1: damaged)
          --repair-state DIR       keep exactly what is intact in a damaged state
                                   directory (no daemon may run on it); the old
                                   files are moved to DIR/damaged-<time>/
          --dump-state DIR         print the countdowns a start would restore from a
                                   state directory, as JSON lines, changing nothing
          -h, --help               show this help
          -V, --version            show the version

        Protocol: docs/PROTOCOL.md. Signals: SIGTERM and SIGINT stop it cleanly.
        """

    private static let parser = ArgumentParser(options: [
        .init(["--socket"], takesValue: true),
        .init(["--socket-mode"], takesValue: true),
        .init(["--state-dir"], takesValue: true),
        .init(["--durability"], takesValue: true),
        .init(["--max-countdowns"], takesValue: true),
        .init(["--max-countdowns-per-user"], takesValue: true),
        .init(["--max-connections-per-user"], takesValue: true),
        .init(["--replay-events"], takesValue: true),
        .init(["--retention"], takesValue: true),
        .init(["--max-connections"], takesValue: true),
        .init(["--max-subscriptions"], takesValue: true),
        .init(["--output-limit"], takesValue: true),
        .init(["--overflow-grace"], takesValue: true),
        .init(["--output-limit-per-user"], takesValue: true),
        .init(["--log-level"], takesValue: true),
        .init(["--log-names"]),
        .init(["--log-lifecycle"]),
        .init(["--log-lifecycle-limit"], takesValue: true),
        .init(["--status-interval"], takesValue: true),
        .init(["--cluster"], takesValue: true),
        .init(["--cluster-prefix"], takesValue: true),
        .init(["--cluster-ca"], takesValue: true),
        .init(["--cluster-cert"], takesValue: true),
        .init(["--cluster-key"], takesValue: true),
        .init(["--cluster-user"], takesValue: true),
        .init(["--cluster-password-file"], takesValue: true),
        .init(["--check-state"], takesValue: true),
        .init(["--repair-state"], takesValue: true),
        .init(["--dump-state"], takesValue: true),
        .init(["--config"], takesValue: true),
        .init(["--print-config"]),
        .init(["--help", "-h"]),
        .init(["--version", "-V"]),
    ])

    /// A usage error, worded for a person.
    public struct UsageError: Error, CustomStringConvertible, Equatable {
        /// What was wrong.
        public var description: String
    }

    /// `path` made absolute against the working directory: the state directory is created,
    /// locked, recreated after a deletion and named in messages, all by one full path.
    static func absolute(_ path: String) -> String {
        guard !path.hasPrefix("/") else { return path }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return path }  // Left relative: still works.
        let directory = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let trimmed = path.hasPrefix("./") ? String(path.dropFirst(2)) : path
        return (directory == "/" ? "" : directory) + "/" + trimmed
    }

    /// Whether a configuration file's option takes a value; `nil` for no such option.
    static func optionTakesValue(_ name: String) -> Bool? {
        parser.option(spelled: "--" + name).map(\.takesValue)
    }

    /// Parses arguments (without the program name). With `--config FILE`, the file's options
    /// come first, so that those on the command line win.
    /// - Parameter readFile: reads a configuration file (the tests give their own).
    /// - Throws: `UsageError` naming the bad argument, or the file and line, and what is expected.
    public static func parse(
        _ arguments: [String], environment: [String: String], uid: UInt32,
        readFile: (String) throws(UsageError) -> String = ConfigFile.read
    ) throws(UsageError) -> DaemonCommand {
        var parsed: ArgumentParser.Result
        do {
            parsed = try parser.parse(arguments)
            if let path = parsed.value("config"), !parsed.has("help"), !parsed.has("version") {
                let fromFile = try ConfigFile.arguments(text: try readFile(path), path: path, takesValue: optionTakesValue)
                parsed = try parser.parse(fromFile + arguments)
            }
        } catch let error as UsageError {
            throw error
        } catch {
            throw UsageError(description: "\(error); see countdownd --help")
        }
        if parsed.has("help") { return .help }
        if parsed.has("version") { return .version }
        if let directory = parsed.value("check-state") { return .checkState(absolute(directory)) }
        if let directory = parsed.value("repair-state") { return .repairState(absolute(directory)) }
        if let directory = parsed.value("dump-state") { return .dumpState(absolute(directory)) }
        if let extra = parsed.operands.first {
            throw UsageError(description: "unexpected argument '\(extra)'; countdownd takes only options, see countdownd --help")
        }
        var configuration = DaemonConfiguration(
            socketPath: parsed.value("socket") ?? SocketPath.resolve(environment: environment, uid: uid),
            stateDirectory: absolute(parsed.value("state-dir") ?? DaemonConfiguration.defaultStateDirectory(environment: environment, uid: uid))
        )
        if let durability = parsed.value("durability") {
            guard let value = Durability(rawValue: durability) else {
                throw UsageError(description: "--durability '\(durability)' is not 'process' or 'power'")
            }
            configuration.durability = value
        }
        if let mode = parsed.value("socket-mode") {
            guard let value = mode_t(mode, radix: 8), value <= 0o777 else {
                throw UsageError(description: "--socket-mode '\(mode)' is not an octal file mode such as 0600 or 0660")
            }
            configuration.socketMode = value
        }
        func count(_ key: String) throws(UsageError) -> Int? {
            guard let text = parsed.value(key) else { return nil }
            guard let value = Int(text), value > 0 else {
                throw UsageError(description: "--\(key) '\(text)' must be a whole number above 0")
            }
            return value
        }
        if let value = try count("max-countdowns") { configuration.engine.maximumCountdowns = value }
        if let value = try count("replay-events") { configuration.replayEventsPerUser = value }
        if let value = try count("retention") {
            // A year at most: the engine counts it in milliseconds on the monotonic clock.
            guard value <= 31_536_000 else {
                throw UsageError(description: "--retention '\(value)' must be at most 31536000 seconds (a year)")
            }
            configuration.engine.retentionMilliseconds = Int64(value) * 1000
        }
        if let value = try count("max-countdowns-per-user") { configuration.engine.maximumCountdownsPerOwner = value }
        if let value = try count("max-connections-per-user") { configuration.maximumConnectionsPerUser = value }
        if let value = try count("max-connections") { configuration.maximumConnections = value }
        if let value = try count("max-subscriptions") { configuration.maximumSubscriptionsPerConnection = value }
        if let value = try count("output-limit") { configuration.outputHardLimit = value }
        if let value = try count("overflow-grace") { configuration.overflowGraceMilliseconds = value }
        if let text = parsed.value("output-limit-per-user") {
            guard let value = Int(text), value >= 0 else {
                throw UsageError(description: "--output-limit-per-user '\(text)' must be a whole number of bytes, 0 (no limit) or more")
            }
            configuration.outputLimitPerUser = value
        }
        if let text = parsed.value("log-lifecycle-limit") {
            guard let value = Int(text), value >= 0 else {
                throw UsageError(description: "--log-lifecycle-limit '\(text)' must be a whole number of lines per 10 s, 0 (no limit) or more")
            }
            configuration.lifecycleLogLimit = value
        }
        if let text = parsed.value("status-interval") {
            guard let value = Int(text), value >= 0 else {
                throw UsageError(description: "--status-interval '\(text)' must be a whole number of milliseconds, 0 or more")
            }
            configuration.statusIntervalMilliseconds = value
        }
        if let urls = parsed.value("cluster") {
            let endpoints = urls.split(separator: ",").map { url in
                var endpoint = String(url)
                while endpoint.hasSuffix("/") { endpoint.removeLast() }
                return endpoint
            }
            guard !endpoints.isEmpty, endpoints.allSatisfy({ $0.hasPrefix("http://") || $0.hasPrefix("https://") }) else {
                throw UsageError(description: "--cluster '\(urls)' is not a comma-separated list of etcd client URLs such as http://127.0.0.1:2379")
            }
            var cluster = ClusterConfiguration(endpoints: endpoints)
            if let prefix = parsed.value("cluster-prefix") {
                guard prefix.hasPrefix("/"), prefix.hasSuffix("/"), prefix.count >= 2 else {
                    throw UsageError(description: "--cluster-prefix '\(prefix)' must start and end with '/', as /countdownd/ does")
                }
                cluster.prefix = prefix
            }
            let ca = parsed.value("cluster-ca"), certificate = parsed.value("cluster-cert"), key = parsed.value("cluster-key")
            if ca != nil || certificate != nil || key != nil {
                guard (certificate == nil) == (key == nil) else {
                    throw UsageError(description: "--cluster-cert and --cluster-key go together: a certificate needs its key")
                }
                cluster.tls = TLSFiles(certificateAuthority: ca, certificate: certificate, key: key)
            }
            cluster.user = parsed.value("cluster-user")
            cluster.passwordFile = parsed.value("cluster-password-file")
            guard (cluster.user == nil) == (cluster.passwordFile == nil) else {
                throw UsageError(description: "--cluster-user and --cluster-password-file go together: a user needs its password")
            }
            configuration.cluster = cluster
            configuration.engine.decidesLocally = false
            // This host's copy of the cluster's countdowns, apart from any state of its own.
            configuration.stateDirectory += "/cluster"
        } else if let stray = ["cluster-prefix", "cluster-ca", "cluster-cert", "cluster-key", "cluster-user", "cluster-password-file"]
            .first(where: { parsed.has($0) }) {
            throw UsageError(description: "--\(stray) needs --cluster")
        }
        if let level = parsed.value("log-level") {
            guard let value = LogLevel(name: level) else {
                throw UsageError(description: "--log-level '\(level)' is not one of error, warning, notice, info, debug")
            }
            configuration.logLevel = value
        }
        configuration.logsNames = parsed.has("log-names") || configuration.logLevel == .debug
        configuration.logsLifecycle = parsed.has("log-lifecycle") || configuration.logLevel == .debug
        if parsed.has("print-config") { return .printConfig(ConfigFile.render(configuration)) }
        return .run(configuration)
    }
}
