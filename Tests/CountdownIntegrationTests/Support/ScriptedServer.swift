import Foundation
import Glibc

/// A one-connection stand-in for countdownd on a Unix socket: it greets, reads one request line,
/// sends `answer`, and closes. For replies no real daemon can be made to send on cue (a cluster
/// host whose copy trails etcd).
final class ScriptedServer: @unchecked Sendable {
    private let listener: Int32
    private let thread: Thread
    private let done = DispatchSemaphore(value: 0)

    init(path: String, answer: String) throws {
        unlink(path)  // A socket file from the last use of the path.
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0 else { throw HarnessError.unexpected("socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.prefix(raw.count - 1).enumerated() { raw[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(listener, 1) == 0 else {
            close(listener)
            throw HarnessError.unexpected("bind or listen on \(path): \(String(cString: strerror(errno)))")
        }
        self.listener = listener
        let done = self.done
        thread = Thread {
            defer { done.signal() }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            defer { close(client) }
            func send(_ text: String) { _ = text.withCString { Glibc.send(client, $0, strlen($0), Int32(MSG_NOSIGNAL)) } }  // A client gone early fails the test by itself.
            send("HELLO countdownd 1 scripted\n")
            var byte: UInt8 = 0
            while recv(client, &byte, 1, 0) == 1, byte != UInt8(ascii: "\n") {}
            send(answer)
        }
        thread.start()
    }

    /// Waits for the one connection to end (at most 30 s), and removes the socket.
    func finish() {
        _ = done.wait(timeout: .now() + 30)  // A client that never came leaves the thread in accept; the test has failed by then.
        close(listener)
    }
}
