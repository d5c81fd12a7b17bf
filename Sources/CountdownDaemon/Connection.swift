import CountdownCore
import Dispatch
import Glibc

/// What a connection has subscribed to.
enum Subscription: Equatable {
    /// Nothing: request/reply only.
    case none
    /// Every countdown, present and future.
    case all
    /// The named countdowns.
    case names(Set<String>)
}

/// One client connection. Every property is owned by the daemon's queue.
///
/// Descriptor life: the read source is created at accept; a write source exists only while output
/// is waiting for the socket to drain. The descriptor is closed once the connection is closed and
/// every source on it has run its cancel handler, as libdispatch requires.
final class Connection {
    /// A number unique within this daemon's life, for maps and logs.
    let id: Int
    /// The socket.
    let descriptor: Int32
    /// The uid of the connecting process (`SO_PEERCRED`).
    let peerUID: UInt32
    /// Splits incoming bytes into request lines.
    var framer = LineFramer()
    /// Replies and events waiting to be written.
    var output: OutputQueue
    /// What this connection receives events for.
    var subscription = Subscription.none
    /// No more requests are read: after `QUIT`, or once the peer closed its sending side.
    /// The connection closes as soon as its output is written.
    private(set) var isClosing = false
    /// Closed: sources cancelled, forgotten by the daemon.
    private(set) var isClosed = false

    private let queue: DispatchQueue
    private var readSource: (any DispatchSourceRead)?
    private var writeSource: (any DispatchSourceWrite)?
    private var liveSources = 0

    /// Wraps an accepted, non-blocking descriptor.
    init(id: Int, descriptor: Int32, peerUID: UInt32, queue: DispatchQueue, outputCoalesceThreshold: Int) {
        self.id = id
        self.descriptor = descriptor
        self.peerUID = peerUID
        self.queue = queue
        self.output = OutputQueue(coalesceThreshold: outputCoalesceThreshold)
    }

    /// Starts reading; `handler` runs on the queue whenever the socket is readable.
    func startReading(_ handler: @escaping (Connection) -> Void) {
        readHandler = handler
        let source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        source.setEventHandler { [unowned self] in handler(self) }
        source.setCancelHandler { [self] in sourceDidCancel() }
        liveSources += 1
        readSource = source
        source.activate()
    }

    /// Reading is paused because too many replies wait to be written (backpressure).
    private(set) var isReadingPaused = false
    private var readHandler: ((Connection) -> Void)?

    /// Stops reading for now, keeping the connection open: the read source is cancelled (never
    /// suspended) and a new one is made by `resumeReading`.
    func pauseReading() {
        guard let source = readSource, !isClosing else { return }
        isReadingPaused = true
        readSource = nil
        source.cancel()
    }

    /// Reads again after `pauseReading`.
    func resumeReading() {
        guard isReadingPaused, !isClosing, let handler = readHandler else { return }
        isReadingPaused = false
        startReading(handler)
    }

    /// Stops reading requests; pending output is still written, then the connection closes.
    func stopReading() {
        isClosing = true
        isReadingPaused = false
        if let source = readSource {
            readSource = nil
            source.cancel()
        }
    }

    /// Watches for the socket to become writable, once; `handler` runs on the queue then.
    func waitUntilWritable(_ handler: @escaping (Connection) -> Void) {
        guard writeSource == nil, !isClosed else { return }
        let source = DispatchSource.makeWriteSource(fileDescriptor: descriptor, queue: queue)
        source.setEventHandler { [unowned self] in handler(self) }
        source.setCancelHandler { [self] in sourceDidCancel() }
        liveSources += 1
        writeSource = source
        source.activate()
    }

    /// Stops watching for writability (the output drained).
    func stopWaitingForWritable() {
        if let source = writeSource {
            writeSource = nil
            source.cancel()
        }
    }

    /// Closes the connection: cancels its sources; the descriptor closes when they have finished.
    func close() {
        guard !isClosed else { return }
        isClosed = true
        isClosing = true
        readHandler = nil
        stopWaitingForWritable()
        if let source = readSource {
            readSource = nil
            source.cancel()
        }
        if liveSources == 0 {
            Glibc.close(descriptor)
        }
    }

    private func sourceDidCancel() {
        dispatchPrecondition(condition: .onQueue(queue))
        liveSources -= 1
        if liveSources == 0 && isClosed {
            Glibc.close(descriptor)
        }
    }
}
