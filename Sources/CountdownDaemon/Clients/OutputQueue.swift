import Glibc

/// A connection's pending output: replies and events not yet written to its socket.
///
/// Bytes are appended to the queue's last chunk while it is small (one copy of a few dozen bytes,
/// no allocation per event), and written with as few `send`s as the socket allows. What is queued
/// is bounded by its callers: events by the fan-out (no ticks once a subscriber is behind, a
/// disconnection past the hard limit), replies by the client table's backpressure.
struct OutputQueue {
    private var chunks: [[UInt8]] = []
    /// Index of the first chunk not fully written.
    private var head = 0
    /// Bytes of `chunks[head]` already written.
    private var headOffset = 0
    /// Chunks removed from the front so far, to turn the mark's absolute index into an array one.
    private var removedChunks = 0
    /// The last chunk may be shared with other queues (`appendShared`): nothing is appended to
    /// it, which would copy it whole.
    private var lastChunkIsShared = false

    /// Bytes waiting to be written.
    private(set) var byteCount = 0

    /// The memory the chunks not yet written hold, spare room included (a shared chunk counts in
    /// full in each queue that holds it): kept as they change, so that a user's output can be
    /// bounded by what it costs, not only by what it will send. 400 subscribers each holding a
    /// chunk with room to spare held 5 MiB more than their bytes.
    private(set) var footprint = 0

    /// Creates an empty queue.
    init() {}

    /// Whether the peer has received part of a line (the head chunk is partly written).
    var isMidLine: Bool { headOffset > 0 }

    /// Whether there is nothing to write.
    var isEmpty: Bool { byteCount == 0 }

    /// The memory the waiting chunks hold, spare capacity included: what the queue costs, beside
    /// `byteCount`, what it will send. A shared chunk counts in full in each queue that holds it.
    var retainedBytes: Int {
        chunks[head...].reduce(0) { $0 + $1.capacity }
    }

    /// `footprint` counted again from the chunks (after a change that rebuilds them).
    private mutating func recountFootprint() {
        footprint = head < chunks.count ? retainedBytes : 0
    }

    /// The batch whose output starts at the mark, and where it starts: the absolute chunk count
    /// and the length of the last chunk then.
    private var markedBatch = -1
    private var markChunkCount = 0
    private var markLastChunkLength = 0

    /// Remembers where batch `number`'s output starts, the first time it is called for that
    /// batch. Nothing is written during a batch, so `rollback(batch:)` can cut back to here.
    mutating func mark(batch number: Int) {
        guard markedBatch != number else { return }
        markedBatch = number
        markChunkCount = removedChunks + chunks.count
        markLastChunkLength = chunks.last?.count ?? 0
    }

    /// Drops everything appended since `mark(batch: number)`: the batch's changes were undone,
    /// and its replies and events are produced again. Returns whether anything was marked.
    @discardableResult
    mutating func rollback(batch number: Int) -> Bool {
        guard markedBatch == number else { return false }
        markedBatch = -1
        // Nothing is written during a batch: the head is at or before the mark.
        let keep = markChunkCount - removedChunks
        guard keep >= head, keep <= chunks.count else { return false }
        chunks.removeSubrange(keep...)
        lastChunkIsShared = true  // It may be; the next append starts a chunk of its own.
        if keep > 0, chunks[keep - 1].count > markLastChunkLength {
            chunks[keep - 1].removeSubrange(max(markLastChunkLength, head == keep - 1 ? headOffset : 0)...)
        }
        byteCount = chunks[head...].reduce(0) { $0 + $1.count } - headOffset
        recountFootprint()
        return true
    }

    /// Appends bytes (replies and events alike: they go out in the order appended), to the last
    /// chunk while they fit in `chunkSize`; otherwise in a new one.
    ///
    /// A chunk grows by doubling only up to `chunkSize`, and never past it: so the memory a long
    /// queue holds is what it counts (`byteCount`) plus at most one chunk's spare room, not up to
    /// twice as much (a chunk that passed 16 KiB by one line used to double to 32 KiB). The
    /// per-user output limit counts bytes, and so bounds memory too.
    mutating func append(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        byteCount += bytes.count
        // Behind a full chunk of its own (not a shared one): a client that is behind.
        let behindFullChunk = head < chunks.count && !lastChunkIsShared
        if behindFullChunk {
            let last = chunks.count - 1
            let needed = chunks[last].count + bytes.count
            if needed <= chunks[last].capacity || needed <= Self.chunkSize {
                if needed > chunks[last].capacity {
                    let before = chunks[last].capacity
                    chunks[last].reserveCapacity(min(Self.chunkSize, max(needed, 2 * chunks[last].capacity)))
                    footprint += chunks[last].capacity - before
                }
                // Appending behind a partly written chunk is safe: written bytes stay at its front.
                chunks[last].append(contentsOf: bytes)
                return
            }
        }
        // A chunk of its own size: `bytes` may be a reused buffer with room to spare, which a
        // chunk holding it would keep. Behind a full chunk of its own (a client that is behind;
        // not behind a shared chunk, where small lines would each take 16 KiB), the next is made
        // full-sized at once: grown by doubling from one line, each of hundreds of
        // backlogged queues freed seven smaller buffers per chunk, and the heap they left
        // scattered held 4 MB more than the queues at their peak.
        var chunk: [UInt8] = []
        chunk.reserveCapacity(behindFullChunk && bytes.count < Self.chunkSize ? Self.chunkSize : bytes.count)
        chunk.append(contentsOf: bytes)
        footprint += chunk.capacity
        chunks.append(chunk)
        lastChunkIsShared = false
    }

    /// The most a chunk that `append` fills holds (one it starts with a larger piece holds that).
    static let chunkSize = 16_384

    /// Appends bytes that other queues hold too (one delivery's events, for every subscriber that
    /// follows everything): large enough, they are kept as a chunk of their own, shared and not
    /// copied; small, they are copied as by `append`.
    mutating func appendShared(_ bytes: [UInt8]) {
        guard bytes.count >= Self.sharedChunkMinimum else {
            append(bytes)
            return
        }
        byteCount += bytes.count
        footprint += bytes.capacity
        chunks.append(bytes)
        lastChunkIsShared = true
    }

    /// Below this size a shared chunk is copied instead: a chunk of its own costs more to write.
    static let sharedChunkMinimum = 512

    /// Drops everything not yet sent, except the rest of a line the peer has received only in
    /// part, so that what is appended next starts on a line of its own.
    mutating func discardAllButCurrentLine() {
        var keep: [UInt8] = []
        if head < chunks.count && headOffset > 0 {
            let rest = chunks[head][headOffset...]
            if let newline = rest.firstIndex(of: UInt8(ascii: "\n")) {
                keep = Array(rest[...newline])
            }
        }
        reset()
        byteCount = 0
        append(keep)
    }

    /// The outcome of a write attempt.
    enum WriteOutcome: Equatable {
        /// Everything was written.
        case drained
        /// The socket buffer is full; wait until it is writable.
        case wouldBlock
        /// The peer is gone or the socket failed, with `errno`.
        case failed(Int32)
    }

    /// Writes as much as the socket takes. Small chunks are gathered into `scratch` (shared by all
    /// connections) so that one `write` carries many events; a large head chunk goes out directly.
    mutating func write(to descriptor: Int32, scratch: inout [UInt8]) -> WriteOutcome {
        while byteCount > 0 {
            let written = writeOnce(descriptor, scratch: &scratch)
            if written < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
                return .failed(code)
            }
            consume(written)
        }
        reset()
        return .drained
    }

    private func writeOnce(_ descriptor: Int32, scratch: inout [UInt8]) -> Int {
        let gatherLimit = 64 * 1024
        let first = chunks[head]
        if first.count - headOffset >= gatherLimit / 4 || head + 1 == chunks.count {
            return first.withUnsafeBytes { raw in
                send(descriptor, raw.baseAddress.map { $0 + headOffset }, raw.count - headOffset, Int32(MSG_NOSIGNAL))
            }
        }
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: first[headOffset...])
        var index = head + 1
        while index < chunks.count && scratch.count + chunks[index].count <= gatherLimit {
            scratch.append(contentsOf: chunks[index])
            index += 1
        }
        return scratch.withUnsafeBytes { raw in
            send(descriptor, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL))
        }
    }

    private mutating func consume(_ written: Int) {
        var remaining = written
        byteCount -= written
        while remaining > 0 && head < chunks.count {
            let available = chunks[head].count - headOffset
            if remaining >= available {
                remaining -= available
                footprint -= chunks[head].capacity
                chunks[head] = []
                head += 1
                headOffset = 0
            } else {
                headOffset += remaining
                remaining = 0
            }
        }
        if head > 64 && head * 2 > chunks.count {
            chunks.removeSubrange(0..<head)
            removedChunks += head
            head = 0
        }
    }

    private mutating func reset() {
        markedBatch = -1
        lastChunkIsShared = false
        removedChunks += chunks.count
        chunks.removeAll(keepingCapacity: chunks.capacity <= 4096)
        head = 0
        headOffset = 0
        footprint = 0
    }
}
