@testable import CountdownDaemon
import Dispatch
import Foundation
import Glibc

/// An `EtcdClient` on its own queue and poller, with blocking helpers for tests.
final class EtcdTestClient: @unchecked Sendable {
    let queue = DispatchQueue(label: "etcd-test")
    let poller: EventPoller
    let driver: CurlDriver
    let client: EtcdClient

    init(endpoints: [String], tls: TLSFiles? = nil) throws {
        poller = try EventPoller(queue: queue)
        let poller = self.poller
        let queue = self.queue
        // (A typed-throwing closure given to `queue.sync` crashes this compiler: optional instead.)
        guard let driver = queue.sync(execute: { try? CurlDriver(poller: poller, queue: queue) }) else {
            throw POSIXError(.EIO)
        }
        self.driver = driver
        client = EtcdClient(endpoints: endpoints, tls: tls, driver: driver, queue: queue)
        try poller.start { batch in
            batch.deliverUrgent()
            batch.deliverOthers()
            return false
        }
    }

    /// Runs `start` on the queue and waits (up to `timeout` s) for the value it hands back.
    func wait<T>(timeout: Double = 15, _ start: @escaping (EtcdClient, @escaping (T) -> Void) -> Void) -> T? {
        let done = DispatchSemaphore(value: 0)
        let box = Box<T>()
        queue.sync {
            start(client) { value in
                box.value = value
                done.signal()
            }
        }
        guard done.wait(timeout: .now() + timeout) == .success else { return nil }
        return queue.sync { box.value }
    }

    /// Waits until the cluster answers a read (it has a leader), for up to `timeout` s.
    func waitUntilReady(timeout: Double = 30) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if case .success? = wait(timeout: 5, { client, done in client.range(prefix: "/ready-check/") { done($0.map { _ in () }) } }) {
                return true
            }
            usleep(100_000)
        }
        return false
    }

    deinit {
        let driver = self.driver
        queue.sync { driver.close() }
    }

    private final class Box<T>: @unchecked Sendable {
        var value: T?
    }
}

