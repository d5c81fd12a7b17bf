import Foundation
import Glibc

/// A real etcd cluster of `size` members on loopback ports, in a temporary directory, for as
/// long as the value lives (each member is SIGKILLed and reaped at the end).
public final class EtcdCluster {
    /// Where Debian's etcd-server puts the server.
    public static let binary = "/usr/bin/etcd"
    public static var isInstalled: Bool { access(binary, X_OK) == 0 }

    public struct Member {
        public let name: String
        public let clientURL: String
        let peerURL: String
        let dataDirectory: String
        var process: Process?
    }

    public let directory: String
    public private(set) var members: [Member] = []

    /// The members' client URLs, in order.
    public var endpoints: [String] { members.map(\.clientURL) }

    /// The members' client ports, in order.
    public var clientPorts: [Int] { members.compactMap { $0.clientURL.split(separator: ":").last.flatMap { Int($0) } } }

    /// - Parameter clientHost: the address the members serve clients on (another network
    ///   namespace reaches the cluster through a veth's address; the peers stay on loopback).
    public init(size: Int = 3, tls: (certificate: String, key: String, authority: String)? = nil, clientHost: String = "127.0.0.1") throws {
        directory = NSTemporaryDirectory() + "etcd-test-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let scheme = tls == nil ? "http" : "https"
        for index in 0..<size {
            let name = "m\(index)"
            members.append(Member(
                name: name, clientURL: "\(scheme)://\(clientHost):\(try Self.freePort())", peerURL: "http://127.0.0.1:\(try Self.freePort())",
                dataDirectory: directory + "/" + name, process: nil
            ))
        }
        let initial = members.map { "\($0.name)=\($0.peerURL)" }.joined(separator: ",")
        for index in members.indices {
            try start(index, initialCluster: initial, tls: tls)
        }
    }

    private var tls: (certificate: String, key: String, authority: String)?

    /// Starts (or restarts) member `index`.
    public func start(_ index: Int, initialCluster: String? = nil, tls: (certificate: String, key: String, authority: String)? = nil) throws {
        if let tls { self.tls = tls }
        let member = members[index]
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        var arguments = [
            "--name", member.name, "--data-dir", member.dataDirectory,
            "--listen-client-urls", member.clientURL, "--advertise-client-urls", member.clientURL,
            "--listen-peer-urls", member.peerURL, "--initial-advertise-peer-urls", member.peerURL,
            "--initial-cluster", initialCluster ?? members.map { "\($0.name)=\($0.peerURL)" }.joined(separator: ","),
            "--initial-cluster-state", "new", "--initial-cluster-token", "countdownd-test",
            // Fast elections, so that a killed leader is replaced within about a second.
            "--heartbeat-interval", "50", "--election-timeout", "500",
            "--logger", "zap", "--log-outputs", directory + "/\(member.name).log",
        ]
        if let tls = self.tls {
            arguments += ["--cert-file", tls.certificate, "--key-file", tls.key, "--trusted-ca-file", tls.authority, "--client-cert-auth"]
        }
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        members[index].process = process
    }

    /// SIGKILLs member `index` and reaps it.
    public func kill(_ index: Int) {
        guard let process = members[index].process else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        members[index].process = nil
    }

    /// Sends `signal` to member `index` (SIGSTOP, SIGCONT).
    public func signal(_ index: Int, _ signal: Int32) {
        if let process = members[index].process {
            Glibc.kill(process.processIdentifier, signal)
        }
    }

    deinit {
        for index in members.indices {
            signal(index, SIGCONT)
            kill(index)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Waits until the first member answers a read (the cluster has a leader), up to `timeout` s.
    public func waitUntilAnswering(timeout: Double = 30) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let reply = Self.post(endpoints[0], path: "/v3/kv/range", body: #"{"key":"AA=="}"#), reply.contains("revision") {
                return true
            }
            usleep(100_000)
        }
        return false
    }

    /// The index of the member that leads now, asked of each member over plain HTTP
    /// (`/v3/maintenance/status`: its own id, and its leader's), or `nil` if none names one.
    public func leaderIndex() -> Int? {
        var ids: [String: Int] = [:]
        var leader: String?
        for (index, member) in members.enumerated() where member.process != nil {
            guard let status = Self.post(member.clientURL, path: "/v3/maintenance/status", body: "{}"),
                  let object = try? JSONSerialization.jsonObject(with: Data(status.utf8)) as? [String: Any] else { continue }
            if let id = (object["header"] as? [String: Any])?["member_id"] as? String { ids[id] = index }
            leader = leader ?? object["leader"] as? String
        }
        return leader.flatMap { ids[$0] }
    }

    /// Compacts etcd's history up to its current revision, through member `index`.
    /// - Returns: whether the member told the current revision and answered the compaction.
    @discardableResult
    public func compactToNow(through index: Int) -> Bool {
        let endpoint = members[index].clientURL
        guard let status = Self.post(endpoint, path: "/v3/kv/range", body: #"{"key":"AA=="}"#),
              let revision = status.firstMatch(of: #/"revision":"(\d+)"/#).map({ String($0.1) }) else { return false }
        return Self.post(endpoint, path: "/v3/kv/compaction", body: #"{"revision":"\#(revision)","physical":true}"#) != nil
    }

    /// Every key under `prefix` with how many times it was written since it was created (etcd's
    /// own `version`) and its value now: a countdown started and then done once is at 2, one
    /// finished twice at 3. A member that does not answer within its 2 s (a slow sync on a busy
    /// machine) is asked again, then the next one, for up to 30 s; `nil` when none answered.
    public func versions(under prefix: String, through index: Int = 0) -> [String: (version: Int, value: String)]? {
        var end = Array(prefix.utf8)
        end[end.count - 1] += 1
        let body = #"{"key":"\#(Data(prefix.utf8).base64EncodedString())","range_end":"\#(Data(end).base64EncodedString())"}"#
        let deadline = Date().addingTimeInterval(30)
        var attempt = 0
        var answer: [String: Any]?
        while answer == nil && Date() < deadline {
            let member = members[(index + attempt) % members.count]
            attempt += 1
            answer = Self.post(member.clientURL, path: "/v3/kv/range", body: body)
                .flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }
        guard let object = answer else { return nil }
        var versions: [String: (version: Int, value: String)] = [:]
        for pair in object["kvs"] as? [[String: Any]] ?? [] {
            guard let key = (pair["key"] as? String).flatMap({ Data(base64Encoded: $0) }),
                  let version = (pair["version"] as? String).flatMap(Int.init),
                  let value = (pair["value"] as? String).flatMap({ Data(base64Encoded: $0) }) else { continue }
            versions[String(decoding: key, as: UTF8.self)] = (version, String(decoding: value, as: UTF8.self))
        }
        return versions
    }

    /// Deletes `key` straight in etcd, as an operator with `etcdctl del` would; whether a
    /// member answered.
    public func delete(_ key: String, through index: Int = 0) -> Bool {
        Self.post(members[index].clientURL, path: "/v3/kv/deleterange", body: #"{"key":"\#(Data(key.utf8).base64EncodedString())"}"#) != nil
    }

    /// Every value `key` was written with, oldest first, from etcd's own history: the key read
    /// at each revision up to the current one (one entry per write, by its mod revision). For
    /// counting writes, such as `done`s, that no subscriber has to have seen. Needs the history
    /// uncompacted; `nil` when a member does not answer.
    public func writes(of key: String, through index: Int = 0) -> [String]? {
        let endpoint = members[index].clientURL
        let encodedKey = Data(key.utf8).base64EncodedString()
        guard let status = Self.post(endpoint, path: "/v3/kv/range", body: #"{"key":"AA=="}"#),
              let current = status.firstMatch(of: #/"revision":"(\d+)"/#).flatMap({ Int($0.1) }) else { return nil }
        var byRevision: [Int: String] = [:]
        for revision in 1...max(1, current) {
            guard let reply = Self.post(endpoint, path: "/v3/kv/range", body: #"{"key":"\#(encodedKey)","revision":"\#(revision)"}"#),
                  let object = try? JSONSerialization.jsonObject(with: Data(reply.utf8)) as? [String: Any] else { return nil }
            guard let pair = (object["kvs"] as? [[String: Any]])?.first,
                  let modified = (pair["mod_revision"] as? String).flatMap(Int.init),
                  let value = (pair["value"] as? String).flatMap({ Data(base64Encoded: $0) }) else { continue }
            byRevision[modified] = String(decoding: value, as: UTF8.self)
        }
        return byRevision.sorted { $0.key < $1.key }.map(\.value)
    }

    /// The revisions at which a key under `prefix` (and not containing `excluding`) was written,
    /// from etcd's own history (the prefix read at each revision up to the current one), in
    /// order. Deletions are not seen. Needs the history uncompacted; `nil` when a member does not
    /// answer.
    public func writeRevisions(under prefix: String, excluding: String, through index: Int = 0) -> [Int]? {
        let endpoint = members[index].clientURL
        var end = Array(prefix.utf8)
        end[end.count - 1] += 1
        let range = #""key":"\#(Data(prefix.utf8).base64EncodedString())","range_end":"\#(Data(end).base64EncodedString())""#
        guard let status = Self.post(endpoint, path: "/v3/kv/range", body: #"{"key":"AA=="}"#),
              let current = status.firstMatch(of: #/"revision":"(\d+)"/#).flatMap({ Int($0.1) }) else { return nil }
        var written = Set<Int>()
        for revision in 1...max(1, current) {
            guard let reply = Self.post(endpoint, path: "/v3/kv/range", body: #"{\#(range),"revision":"\#(revision)"}"#),
                  let object = try? JSONSerialization.jsonObject(with: Data(reply.utf8)) as? [String: Any] else { return nil }
            for pair in object["kvs"] as? [[String: Any]] ?? [] {
                guard let key = (pair["key"] as? String).flatMap({ Data(base64Encoded: $0) }).map({ String(decoding: $0, as: UTF8.self) }),
                      !key.contains(excluding), let modified = (pair["mod_revision"] as? String).flatMap(Int.init) else { continue }
                written.insert(modified)
            }
        }
        return written.sorted()
    }

    /// A minimal HTTP/1.0 POST to a loopback `http://` URL; the response body, or `nil`.
    public static func post(_ url: String, path: String, body: String) -> String? {
        // http://<IPv4 address>:<port>, as this cluster's members serve clients.
        let parts = url.dropFirst("http://".count).split(separator: ":")
        guard url.hasPrefix("http://"), parts.count == 2, let port = UInt16(parts[1]) else { return nil }
        let host = String(parts[0])
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(host)
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return nil }
        let request = "POST \(path) HTTP/1.0\r\nHost: \(host)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        guard write(fd, request, request.utf8.count) == request.utf8.count else { return nil }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count <= 0 { break }
            response += buffer[0..<count]
        }
        let text = String(decoding: response, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { return nil }
        return String(text[split.upperBound...])
    }

    /// A loopback port nobody listens on now.
    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// A throwaway certificate authority, and a server and a client certificate it signed (the
/// server's for 127.0.0.1), made with the openssl command in a temporary directory.
public struct TestCertificates {
    public let directory: String
    public var authority: String { directory + "/ca.pem" }
    public var serverCertificate: String { directory + "/server.pem" }
    public var serverKey: String { directory + "/server-key.pem" }
    public var clientCertificate: String { directory + "/client.pem" }
    public var clientKey: String { directory + "/client-key.pem" }

    public static var canBeMade: Bool { access("/usr/bin/openssl", X_OK) == 0 }

    public init(in directory: String) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let script = """
            set -e
            cd '\(directory)'
            openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=countdownd-test-ca -keyout ca-key.pem -out ca.pem 2>/dev/null
            printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > server.ext
            printf 'extendedKeyUsage=clientAuth\\n' > client.ext
            for name in server client; do
              openssl req -newkey rsa:2048 -nodes -subj /CN=$name -keyout $name-key.pem -out $name.csr 2>/dev/null
              openssl x509 -req -in $name.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 -extfile $name.ext -out $name.pem 2>/dev/null
            done
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw POSIXError(.EIO) }
    }
}
