import Foundation
import Glibc
import Synchronization

/// A network namespace of the test's own, joined to this one by a veth pair, for a real
/// partition: a daemon started inside it (`launcher`) reaches etcd only through the pair, and
/// `cut` drops every packet between them with iptables, both ways, as a failed link does (no
/// refusal, no reset: TCP retransmits into the void). Its Unix sockets stay reachable, since
/// they live in the file system. Needs root, `ip` (iproute2) and `iptables`.
final class NetworkNamespace {
    /// Why a namespace cannot be made here, or `nil` when it can.
    static let unavailableReason: String? = {
        guard geteuid() == 0 else { return "making a network namespace needs root" }
        for tool in ["ip", "iptables"] where path(of: tool) == nil {
            return "\(tool) is not installed (iproute2 and iptables; make test installs them as root)"
        }
        // Root in a container may still lack CAP_SYS_ADMIN or CAP_NET_ADMIN: try one.
        let probe = "cdtest-probe-\(getpid())"
        do {
            try run("ip", "netns", "add", probe)
            defer { try? run("ip", "netns", "del", probe) }
            try run(["ip", "netns", "exec", probe, "iptables", "-L", "OUTPUT", "-n"])
        } catch {
            return "a network namespace with iptables rules cannot be made here (\(error))"
        }
        return nil
    }()

    /// Namespaces made by this test process so far: each takes its own /30.
    private static let made = Mutex(0)

    let name: String
    /// This side's address: what the namespace reaches (etcd's members serve clients on it).
    let outerAddress: String
    private let outerLink: String
    private var removed = false

    init() throws {
        let tag = String(UUID().uuidString.prefix(6)).lowercased()
        name = "cdtest-" + tag
        outerLink = "cdo" + tag
        let innerLink = "cdi" + tag
        // A /30 of its own in 10.232.0.0/16: by this process's count, so its tests in parallel
        // never share one, and by its pid, so another test run at once rarely does.
        let count = Self.made.withLock { made in
            made += 1
            return made
        }
        let subnet = ((Int(getpid()) * 64 + count) % 16_384) * 4
        outerAddress = "10.232.\(subnet / 256).\(subnet % 256 + 1)"
        let innerAddress = "10.232.\(subnet / 256).\(subnet % 256 + 2)"
        try Self.run("ip", "netns", "add", name)
        do {
            try Self.run("ip", "link", "add", outerLink, "type", "veth", "peer", "name", innerLink)
            try Self.run("ip", "link", "set", innerLink, "netns", name)
            try Self.run("ip", "addr", "add", outerAddress + "/30", "dev", outerLink)
            try Self.run("ip", "link", "set", outerLink, "up")
            try inside("ip", "addr", "add", innerAddress + "/30", "dev", innerLink)
            try inside("ip", "link", "set", innerLink, "up")
            try inside("ip", "link", "set", "lo", "up")
        } catch {
            remove()
            throw error
        }
    }

    deinit { remove() }

    /// What a process is started through to run inside (`DaemonProcess(launcher:)`).
    var launcher: [String] {
        [Self.path(of: "ip") ?? "/usr/sbin/ip", "netns", "exec", name]
    }

    /// Drops every packet between the namespace and `ports` of the outer address, both ways.
    func cut(ports: [Int]) throws {
        for port in ports {
            try inside("iptables", "-A", "OUTPUT", "-p", "tcp", "-d", outerAddress, "--dport", "\(port)", "-j", "DROP")
            try inside("iptables", "-A", "INPUT", "-p", "tcp", "-s", outerAddress, "--sport", "\(port)", "-j", "DROP")
        }
    }

    /// Ends every cut.
    func heal() throws {
        try inside("iptables", "-F", "OUTPUT")
        try inside("iptables", "-F", "INPUT")
    }

    /// Deletes the namespace (its end of the pair goes with it, and so the pair).
    func remove() {
        guard !removed else { return }
        removed = true
        // Best effort at the end of a test: a namespace left over only holds an unused address.
        try? Self.run("ip", "netns", "del", name)
        try? Self.run("ip", "link", "del", outerLink)
    }

    private func inside(_ arguments: String...) throws {
        try Self.run(["ip", "netns", "exec", name] + arguments)
    }

    private static func run(_ arguments: String...) throws {
        try run(arguments)
    }

    /// Runs a tool to its end; throws with what it wrote to stderr when it fails.
    private static func run(_ arguments: [String]) throws {
        guard let executable = path(of: arguments[0]) else { throw Failure(command: arguments, message: "not installed") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = Array(arguments.dropFirst())
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw Failure(command: arguments, message: message) }
    }

    private static func path(of tool: String) -> String? {
        ["/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"].map { $0 + tool }.first { access($0, X_OK) == 0 }
    }

    struct Failure: Error, CustomStringConvertible {
        let command: [String]
        let message: String
        var description: String { "\(command.joined(separator: " ")) failed: \(message)" }
    }
}
