import CountdownCore
@testable import CountdownDaemon
import Foundation
import Testing

@Suite("countdownd's command line")
struct DaemonCommandLineTests {
    func parse(_ arguments: [String], environment: [String: String] = ["XDG_RUNTIME_DIR": "/run/user/7", "XDG_STATE_HOME": "/home/u/.state"], uid: UInt32 = 7) throws(DaemonCommandLine.UsageError) -> DaemonConfiguration {
        guard case .run(let configuration) = try DaemonCommandLine.parse(arguments, environment: environment, uid: uid) else {
            throw DaemonCommandLine.UsageError(description: "not a run command")
        }
        return configuration
    }

    @Test("--config FILE: one option a line without its --, comments, flags alone or yes/no; the command line wins; every mistake names the file and line; --print-config reads back as the same settings")
    func configurationFile() throws {
        let file = """
            # a comment
            max-countdowns-per-user = 7
              retention 30
            log-lifecycle
            log-names = no

            durability=power
            """
        func read(_ text: String) -> (String) throws(DaemonCommandLine.UsageError) -> String {
            { _ throws(DaemonCommandLine.UsageError) in text }
        }
        guard case .run(let configured) = try DaemonCommandLine.parse(["--config", "/etc/c.conf", "--retention", "40"], environment: [:], uid: 0, readFile: read(file)) else {
            Issue.record("not a run")
            return
        }
        #expect(configured.engine.maximumCountdownsPerOwner == 7 && configured.durability == .power)
        #expect(configured.engine.retentionMilliseconds == 40_000, "the command line wins")
        #expect(configured.logsLifecycle && !configured.logsNames)
        for (text, message) in [
            ("bogus = 1", "/etc/c.conf:1: unknown option 'bogus'"),
            ("# fine\nretention", "/etc/c.conf:2: 'retention' needs a value"),
            ("log-names = maybe", "/etc/c.conf:1: 'log-names' is yes or no, not 'maybe'"),
            ("config = /other", "/etc/c.conf:1: 'config' cannot be set in a configuration file"),
            ("retention = 0", "--retention '0' must be a whole number above 0"),
        ] {
            #expect {
                try DaemonCommandLine.parse(["--config", "/etc/c.conf"], environment: [:], uid: 0, readFile: read(text))
            } throws: { error in
                "\(error)".contains(message)
            }
        }
        // The effective settings, printed, configure the same daemon when read back.
        for arguments in [["--config", "/etc/c.conf"], ["--cluster", "http://127.0.0.1:2379", "--cluster-prefix", "/x/", "--socket-mode", "0660"]] {
            guard case .printConfig(let printed) = try DaemonCommandLine.parse(arguments + ["--print-config"], environment: [:], uid: 0, readFile: read(file)),
                  case .run(let original) = try DaemonCommandLine.parse(arguments, environment: [:], uid: 0, readFile: read(file)),
                  case .run(let again) = try DaemonCommandLine.parse(["--config", "/printed"], environment: [:], uid: 0, readFile: read(printed)) else {
                Issue.record("not a printout")
                continue
            }
            #expect(again == original, "\(printed)")
        }
    }

    @Test("--check-state and --repair-state take a directory (made absolute); --log-lifecycle-limit takes 0 or more")
    func stateToolsAndLogLimit() throws {
        let cwd = FileManager.default.currentDirectoryPath
        #expect(try DaemonCommandLine.parse(["--check-state", "/var/lib/countdownd"], environment: [:], uid: 0) == .checkState("/var/lib/countdownd"))
        #expect(try DaemonCommandLine.parse(["--repair-state", "state"], environment: [:], uid: 0) == .repairState(cwd + "/state"))
        #expect(try parse(["--log-lifecycle-limit", "0"]).lifecycleLogLimit == 0)
        #expect(try !parse([]).logsLifecycle && parse(["--log-lifecycle"]).logsLifecycle && parse(["--log-level", "debug"]).logsLifecycle)
        #expect(try parse([]).lifecycleLogLimit == 1_000)
        #expect(throws: DaemonCommandLine.UsageError.self) { try parse(["--log-lifecycle-limit", "-1"]) }
    }

    @Test("defaults follow the documented resolution order")
    func defaults() throws {
        let configuration = try parse([])
        #expect(configuration.socketPath == "/run/user/7/countdownd/countdownd.sock")
        #expect(configuration.stateDirectory == "/home/u/.state/countdownd")
        #expect(configuration.socketMode == 0o600)
        #expect(configuration.durability == .process)
        #expect(configuration.engine.maximumCountdowns == 1_000_000)
        #expect(configuration.statusIntervalMilliseconds == 250)
    }

    @Test("state directory: STATE_DIRECTORY first (its first entry), then XDG, root, HOME")
    func stateDirectory() {
        #expect(DaemonConfiguration.defaultStateDirectory(environment: ["STATE_DIRECTORY": "/var/lib/countdownd:/var/lib/other", "XDG_STATE_HOME": "/x"], uid: 0) == "/var/lib/countdownd")
        #expect(DaemonConfiguration.defaultStateDirectory(environment: ["XDG_STATE_HOME": "/x"], uid: 1000) == "/x/countdownd")
        #expect(DaemonConfiguration.defaultStateDirectory(environment: [:], uid: 0) == "/var/lib/countdownd")
        #expect(DaemonConfiguration.defaultStateDirectory(environment: ["HOME": "/home/a"], uid: 1000) == "/home/a/.local/state/countdownd")
    }

    @Test("a relative --state-dir is taken against the working directory")
    func relativeStateDirectory() throws {
        let working = FileManager.default.currentDirectoryPath
        for given in ["state", "./state"] {
            #expect(try parse(["--state-dir", given]).stateDirectory == (working == "/" ? "" : working) + "/state")
        }
        #expect(try parse(["--state-dir", "/abs/state"]).stateDirectory == "/abs/state")
    }

    @Test("every option is read")
    func options() throws {
        let configuration = try parse([
            "--socket=/s.sock", "--socket-mode", "0660", "--state-dir", "/st", "--durability=power",
            "--max-countdowns", "5", "--max-connections", "6", "--max-subscriptions", "7",
            "--output-limit", "8192", "--log-level", "debug", "--status-interval", "0", "--output-limit-per-user", "0",
            "--retention", "30",
        ])
        let defaults = try parse([])
        #expect(configuration.engine.retentionMilliseconds == 30_000 && defaults.engine.retentionMilliseconds == 600_000)
        #expect(configuration.socketPath == "/s.sock" && configuration.socketMode == 0o660 && configuration.stateDirectory == "/st")
        #expect(configuration.durability == .power && configuration.engine.maximumCountdowns == 5)
        #expect(configuration.maximumConnections == 6 && configuration.maximumSubscriptionsPerConnection == 7)
        #expect(configuration.outputHardLimit == 8192 && configuration.logLevel == .debug && configuration.statusIntervalMilliseconds == 0)
        #expect(try configuration.outputLimitPerUser == 0 && parse([]).outputLimitPerUser == 64 << 20)
    }

    @Test("bad values are usage errors that say what is expected", arguments: [
        (["--socket-mode", "999"], "octal file mode"), (["--socket-mode", "rw"], "octal file mode"),
        (["--durability", "disk"], "'process' or 'power'"), (["--max-countdowns", "0"], "above 0"),
        (["--max-connections", "-1"], "above 0"), (["--log-level", "loud"], "error, warning"),
        (["--status-interval", "-5"], "0 or more"), (["--retention", "0"], "above 0"), (["--retention", "31536001"], "a year"), (["--output-limit-per-user", "lots"], "0 (no limit) or more"), (["extra"], "takes only options"), (["--nope"], "unknown option"),
        (["--cluster", "etcd:2379"], "etcd client URLs"), (["--cluster-prefix", "/x/"], "needs --cluster"),
        (["--cluster", "http://a:2379", "--cluster-prefix", "x"], "start and end with '/'"),
        (["--cluster", "http://a:2379", "--cluster-cert", "c.pem"], "go together"),
        (["--cluster", "http://a:2379", "--cluster-user", "cd"], "a user needs its password"), (["--cluster-user", "cd"], "needs --cluster"),
    ] as [([String], String)])
    func usageErrors(arguments: [String], fragment: String) {
        do {
            _ = try parse(arguments)
            Issue.record("\(arguments) parsed")
        } catch {
            #expect(error.description.contains(fragment), "\(error)")
        }
    }

    @Test("cluster mode: members, prefix, TLS files; the engine leaves deadlines to the cluster")
    func clusterOptions() throws {
        let configuration = try parse([
            "--cluster", "http://10.0.0.1:2379/,https://10.0.0.2:2379", "--cluster-prefix", "/fleet/otp/",
            "--cluster-ca", "ca.pem", "--cluster-cert", "c.pem", "--cluster-key", "k.pem",
        ])
        let cluster = try #require(configuration.cluster)
        #expect(cluster.endpoints == ["http://10.0.0.1:2379", "https://10.0.0.2:2379"])
        #expect(cluster.prefix == "/fleet/otp/")
        #expect(cluster.tls == TLSFiles(certificateAuthority: "ca.pem", certificate: "c.pem", key: "k.pem"))
        #expect(!configuration.engine.decidesLocally)
        #expect(try parse([]).cluster == nil && (try parse([]).engine.decidesLocally))
    }

    @Test("--help and --version win over everything else")
    func helpAndVersion() throws {
        #expect(try DaemonCommandLine.parse(["--max-countdowns", "0", "--help"], environment: [:], uid: 0) == .help)
        #expect(try DaemonCommandLine.parse(["-V"], environment: [:], uid: 0) == .version)
    }
}
