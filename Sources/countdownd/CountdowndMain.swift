import CountdownDaemon
import Foundation

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
            FileHandle.standardError.write(Data("countdownd: \(error)\n".utf8))
            exit(2)
        }
        switch command {
        case .help:
            print(DaemonCommandLine.help)
        case .version:
            print("countdownd \(DaemonConfiguration.version)")
        case .checkState(let directory):
            exit(StateRepair.check(directory) { print($0) })
        case .repairState(let directory):
            exit(StateRepair.repair(directory) { print($0) })
        case .run(let configuration):
            do {
                try Daemon(configuration: configuration, environment: environment).run()
            } catch {
                FileHandle.standardError.write(Data("countdownd: \(error)\n".utf8))
                exit(1)
            }
        }
    }
}
