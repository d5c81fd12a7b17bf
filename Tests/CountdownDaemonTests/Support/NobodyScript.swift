import Foundation

/// A python3 script run as uid nobody (`setpriv --reuid=nobody`), for tests of what the client
/// table does with another user's connections. The test talks to it a line at a time: its
/// stdout (`readLine`) and its stdin (`send`).
final class NobodyScript {
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()

    /// Starts `python3 -c script arguments…` as nobody.
    init(_ script: String, arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments = ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3", "-c", script] + arguments
        process.standardInput = input
        process.standardOutput = output
        try process.run()
    }

    /// Stops the script if it still runs (a failed test's).
    deinit {
        if process.isRunning { process.terminate() }
    }

    /// The script's next line of output, without its newline (empty once it has ended).
    func readLine() -> String {
        let reader = output.fileHandleForReading
        var line = Data()
        while let byte = try? reader.read(upToCount: 1), let first = byte.first, first != 10 { line.append(first) }
        return String(decoding: line, as: UTF8.self)
    }

    /// Writes a line to the script's stdin.
    func send(_ line: String) {
        input.fileHandleForWriting.write(Data((line + "\n").utf8))
    }

    /// Waits until the script has ended.
    func waitUntilExit() {
        process.waitUntilExit()
    }
}
