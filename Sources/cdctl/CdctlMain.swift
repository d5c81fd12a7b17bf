import CountdownCLI
import Glibc

/// `cdctl`: parse the command line, hand over to `Cdctl`.
@main
enum CdctlMain {
    static func main() {
        let console = Console.standard
        let invocation: CdctlInvocation
        do {
            invocation = try CdctlCommandLine.parse(
                Array(CommandLine.arguments.dropFirst()),
                environment: ProcessEnvironment.current(),
                uid: getuid(),
                stdoutIsTerminal: console.isTerminal
            )
        } catch {
            console.error("cdctl: \(error)\n")
            exit(ExitCode.usage.rawValue)
        }
        exit(Cdctl(invocation: invocation, console: console).run().rawValue)
    }
}
