import Glibc

/// countdownd's configuration file (`--config FILE`; the package's is
/// /etc/countdownd/countdownd.conf): one option per line, spelled as on the command line without
/// its `--`, then its value (`max-countdowns-per-user = 1000`, the `=` optional). A flag stands
/// alone or takes yes/no (`log-lifecycle`, `log-names = no`). Lines starting with `#` are
/// comments. Options on the command line win over the file's.
public enum ConfigFile {
    /// Options that make no sense in a file: they are commands, or name the file itself.
    static let notInFile: Set<String> = ["config", "print-config", "help", "version", "check-state", "repair-state"]

    /// A file's options as command-line arguments, in the file's order.
    /// - Parameters:
    ///   - text: the file's contents.
    ///   - path: its path, for messages (`FILE:LINE: …`).
    ///   - takesValue: for an option's name, whether it takes a value; `nil` for no such option.
    /// - Throws: `UsageError` naming the file, the line and what is wrong there.
    static func arguments(
        text: String, path: String, takesValue: (String) -> Bool?
    ) throws(DaemonCommandLine.UsageError) -> [String] {
        var arguments: [String] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingSpaces
            if line.isEmpty || line.hasPrefix("#") { continue }
            let place = "\(path):\(index + 1)"
            var name = Substring(line), value: Substring? = nil
            if let split = line.firstIndex(where: { $0 == " " || $0 == "\t" || $0 == "=" }) {
                name = line[..<split]
                var rest = line[split...].trimmingSpaces
                if rest.hasPrefix("=") { rest = rest.dropFirst().trimmingSpaces }
                value = rest.isEmpty ? nil : rest
            }
            let key = String(name)
            guard !notInFile.contains(key) else {
                throw .init(description: "\(place): '\(key)' cannot be set in a configuration file; give it on the command line")
            }
            guard let needsValue = takesValue(key) else {
                throw .init(description: "\(place): unknown option '\(key)'; the options are those of countdownd --help, without their --")
            }
            if needsValue {
                guard let value else {
                    throw .init(description: "\(place): '\(key)' needs a value, as in '\(key) = …'")
                }
                arguments += ["--" + key, String(value)]
            } else {
                switch value?.lowercased() {
                case nil, "yes", "true", "on", "1": arguments.append("--" + key)
                case "no", "false", "off", "0": break
                case let other?:
                    throw .init(description: "\(place): '\(key)' is yes or no, not '\(other)'")
                }
            }
        }
        return arguments
    }

    /// Reads a configuration file whole.
    /// - Throws: `UsageError` saying why it cannot be read.
    public static func read(_ path: String) throws(DaemonCommandLine.UsageError) -> String {
        let bytes: [UInt8]
        do {
            bytes = try FileSystem.readAll(path, limit: 1 << 20)
        } catch {
            throw .init(description: "--config \(path): \(error)")
        }
        guard bytes.count <= 1 << 20 else {
            throw .init(description: "--config \(path): larger than 1 MiB; is it the configuration file?")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .init(description: "--config \(path): not UTF-8 text")
        }
        return text
    }

    /// The effective settings, as a configuration file that gives them all
    /// (`countdownd --print-config`); read back, it configures the same daemon.
    public static func render(_ configuration: DaemonConfiguration) -> String {
        let engine = configuration.engine
        var stateDirectory = configuration.stateDirectory
        if configuration.cluster != nil, stateDirectory.hasSuffix("/cluster") {
            stateDirectory.removeLast("/cluster".count)  // Added back when read: this host's copy.
        }
        var lines = [
            "# countdownd's effective settings (countdownd --print-config); see countdownd(8)",
            "socket = \(configuration.socketPath)",
            "socket-mode = 0" + String(configuration.socketMode, radix: 8),
            "state-dir = \(stateDirectory)",
            "durability = \(configuration.durability.rawValue)",
            "replay-events = \(configuration.replayEventsPerUser)",
            "retention = \(engine.retentionMilliseconds / 1000)",
            "max-countdowns = \(engine.maximumCountdowns)",
            "max-countdowns-per-user = \(engine.maximumCountdownsPerOwner)",
            "max-connections = \(configuration.maximumConnections)",
            "max-connections-per-user = \(configuration.maximumConnectionsPerUser)",
            "max-subscriptions = \(configuration.maximumSubscriptionsPerConnection)",
            "output-limit = \(configuration.outputHardLimit)",
            "output-limit-per-user = \(configuration.outputLimitPerUser)",
            "overflow-grace = \(configuration.overflowGraceMilliseconds)",
            "log-level = \(configuration.logLevel.name)",
            "log-lifecycle = \(configuration.logsLifecycle ? "yes" : "no")",
            "log-names = \(configuration.logsNames ? "yes" : "no")",
            "log-lifecycle-limit = \(configuration.lifecycleLogLimit)",
            "status-interval = \(configuration.statusIntervalMilliseconds)",
        ]
        if let cluster = configuration.cluster {
            lines.append("cluster = \(cluster.endpoints.joined(separator: ","))")
            lines.append("cluster-prefix = \(cluster.prefix)")
            if let file = cluster.tls?.certificateAuthority { lines.append("cluster-ca = \(file)") }
            if let file = cluster.tls?.certificate { lines.append("cluster-cert = \(file)") }
            if let file = cluster.tls?.key { lines.append("cluster-key = \(file)") }
            if let user = cluster.user { lines.append("cluster-user = \(user)") }
            if let file = cluster.passwordFile { lines.append("cluster-password-file = \(file)") }
        } else {
            lines.append("# cluster: off")
        }
        return lines.joined(separator: "\n") + "\n"
    }
}

extension StringProtocol {
    /// Without leading and trailing spaces and tabs.
    var trimmingSpaces: SubSequence {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return self[endIndex...]
        }
        return self[first...last]
    }
}
