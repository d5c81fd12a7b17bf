import Foundation
import Glibc

/// A fresh directory under /tmp, removed with everything in it when dropped.
final class ScratchDirectory {
    let path: String

    init() {
        var template = Array((NSTemporaryDirectory() + "countdownd-test-XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buffer in
            // A buffer made from a string literal always has a base address.
            buffer.baseAddress.flatMap { mkdtemp($0) }.map { String(cString: $0) }
        }
        guard let made else { preconditionFailure("mkdtemp in \(NSTemporaryDirectory()): \(String(cString: strerror(errno)))") }
        path = made
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Runs a command to completion; its exit status.
@discardableResult
func runTool(_ path: String, _ arguments: [String]) -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    guard (try? process.run()) != nil else { return -1 }
    process.waitUntilExit()
    return process.terminationStatus
}

/// Whether this process may mount a tmpfs (root with CAP_SYS_ADMIN, as in CI): tried once.
let canMountTmpfs: Bool = {
    guard getuid() == 0, access("/bin/mount", X_OK) == 0 else { return false }
    let probe = ScratchDirectory()
    let mounted = runTool("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", probe.path]) == 0
    if mounted { runTool("/bin/umount", [probe.path]) }
    return mounted
}()
