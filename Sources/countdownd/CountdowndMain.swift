import CountdownDaemon
import FoundationEssentials
import Glibc

/// `countdownd`: parse the command line, hand over to `Daemon`.
@main
enum CountdowndMain {
    static func main() {
        let environment = ProcessInfo.processInfo.environment
        let command: DaemonCommand
        do {
            command = try DaemonCommandLine.parse(
                Array(CommandLine.arguments.dropFirst()), environment: environment, uid: getuid()
            )
        } catch {
            writeError("countdownd: \(error)\n")
            exit(2)
        }
        switch command {
        case .help:
            print(DaemonCommandLine.help)
        case .version:
            print("countdownd \(DaemonConfiguration.version)")
        case .printConfig(let text):
            print(text, terminator: "")
        case .checkState(let directory):
            exit(StateRepair.check(directory) { print($0) })
        case .repairState(let directory):
            exit(StateRepair.repair(directory) { print($0) })
        case .dumpState(let directory):
            exit(StateDump.dump(directory, print: { print($0) }, printError: { writeError($0 + "\n") }))
        case .run(let configuration):
            do {
                try Daemon(configuration: configuration, environment: environment).run()
            } catch {
                writeError("countdownd: \(error)\n")
                exit(1)
            }
        }
    }

    /// A message on stderr, whole (the daemon has not started, or has stopped: nothing else writes).
    private static func writeError(_ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }  // Ignored on purpose: nowhere else to say it.
            bytes = bytes.dropFirst(written)
        }
    }
}
