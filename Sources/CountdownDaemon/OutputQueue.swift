import Glibc

/// A connection's pending output: replies and events not yet written to its socket.
///
/// Replies and events are appended to the queue's last chunk while it is small (one copy of a few
/// dozen bytes, no allocation per event). Once a subscriber is more than `coalesceThreshold` bytes
/// behind, each tick gets a chunk of its own, and a new tick replaces that countdown's older tick
/// still in the queue (the subscriber sees a gap in `seq`); lifecycle events are never dropped.
/// The caller enforces the hard limit through `byteCount`.
struct OutputQueue {
    private struct Chunk {
        var bytes: [UInt8]
        /// The countdown a queued tick belongs to, when it may be replaced by a newer one.
        var tickName: String?
        /// Whether more bytes may be appended in place (not a replaceable tick).
        var isAppendable: Bool
    }

    private var chunks: [Chunk] = []
    /// Index of the first chunk not fully written.
    private var head = 0
    /// Bytes of `chunks[head]` already written.
    private var headOffset = 0
    /// Absolute index of each replaceable tick still queued, by countdown name.
    private var queuedTicks: [String: Int] = [:]
    /// Chunks removed from the front so far, to turn absolute indices into array indices.
    private var removedChunks = 0
    /// Replaced ticks whose emptied chunks are still in `chunks`: compacted away once they are
    /// most of it, so a subscriber that never reads costs memory and write time for what it
    /// holds, not for every tick it missed.
    private var emptiedChunks = 0

    /// How many chunks the queue holds, emptied ones included (for the tests).
    var chunkCount: Int { chunks.count - head }

    /// Bytes waiting to be written.
    private(set) var byteCount = 0
    /// How far behind a subscriber must be before its ticks are coalesced.
    let coalesceThreshold: Int

    /// Creates an empty queue.
    init(coalesceThreshold: Int) {
        self.coalesceThreshold = coalesceThreshold
    }

    /// Whether the peer has received part of a line (the head chunk is partly written).
    var isMidLine: Bool { headOffset > 0 }

    /// Whether there is nothing to write.
    var isEmpty: Bool { byteCount == 0 }

    /// How many ticks were replaced by newer ones, over the queue's life.
    private(set) var coalescedTickCount = 0

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
        markLastChunkLength = chunks.last?.bytes.count ?? 0
    }

    /// Drops everything appended since `mark(batch: number)`: the batch's changes were undone,
    /// and its replies and events are produced again. Returns whether anything was marked.
    @discardableResult
    mutating func rollback(batch number: Int) -> Bool {
        guard markedBatch == number else { return false }
        markedBatch = -1
        // Nothing is written during a batch, so the head can have passed the mark only by
        // dropping the batch's own replaced ticks: everything from the head on is the batch's.
        let keep = max(markChunkCount - removedChunks, head)
        guard keep <= chunks.count else { return false }
        chunks.removeSubrange(keep...)
        if keep > 0, chunks[keep - 1].bytes.count > markLastChunkLength {
            chunks[keep - 1].bytes.removeSubrange(max(markLastChunkLength, head == keep - 1 ? headOffset : 0)...)
        }
        queuedTicks = queuedTicks.filter { $0.value < markChunkCount }
        byteCount = chunks[head...].reduce(0) { $0 + $1.bytes.count } - headOffset
        emptiedChunks = chunks[head...].reduce(0) { $0 + ($1.bytes.isEmpty ? 1 : 0) }
        return true
    }

    /// Appends reply bytes.
    mutating func appendReply(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        byteCount += bytes.count
        appendInPlace(bytes)
    }

    /// Appends one event's bytes. `tickName` is set for ticks, which may be coalesced.
    mutating func appendEvent(_ bytes: [UInt8], tickName: String?) {
        guard !bytes.isEmpty else { return }  // An empty chunk would read as a replaced tick.
        byteCount += bytes.count
        guard let tickName, byteCount > coalesceThreshold else {
            appendInPlace(bytes)
            return
        }
        if let previous = queuedTicks[tickName] {
            let index = previous - removedChunks
            // Replace only a tick no byte of which has been written.
            if index > head || (index == head && headOffset == 0) {
                byteCount -= chunks[index].bytes.count
                chunks[index].bytes = []
                chunks[index].tickName = nil
                coalescedTickCount += 1
                emptiedChunks += 1
                if index == head {
                    dropEmptyHeadChunks()
                }
            }
        }
        queuedTicks[tickName] = removedChunks + chunks.count
        chunks.append(Chunk(bytes: bytes, tickName: tickName, isAppendable: false))
        if emptiedChunks > 1024 && emptiedChunks * 2 > chunks.count - head {
            compact()
        }
    }

    /// Removes the emptied chunks of replaced ticks, renumbering what refers to chunks by
    /// absolute index (queued ticks, the batch mark) as if the kept chunks had always been the
    /// only ones. O(chunks), run once the emptied ones are the majority: amortised O(1) a tick.
    private mutating func compact() {
        let newBase = removedChunks + chunks.count  // Past every old absolute index.
        var kept: [Chunk] = []
        kept.reserveCapacity(chunks.count - head - emptiedChunks)
        // The mark sits before the chunk numbered `markChunkCount` (or past the end); one before
        // the head (the batch's first chunks were dropped replaced ticks) moves to the head.
        var newMark = markChunkCount < removedChunks + head ? newBase : nil
        for index in head..<chunks.count {
            let absolute = removedChunks + index
            if absolute == markChunkCount { newMark = newBase + kept.count }
            let chunk = chunks[index]
            // The head is never an emptied chunk (`dropEmptyHeadChunks`); it may be partly written.
            if chunk.bytes.isEmpty && index != head { continue }
            if let name = chunk.tickName, queuedTicks[name] == absolute {
                queuedTicks[name] = newBase + kept.count
            }
            kept.append(chunk)
        }
        let mark = newMark ?? newBase + kept.count  // No chunk at the mark: it was at the end.
        // The chunk that was last when the mark was set, by array index.
        let lastAtMark = markChunkCount - removedChunks - 1
        if lastAtMark >= head, lastAtMark < chunks.count, chunks[lastAtMark].bytes.isEmpty, mark > newBase {
            // It was a tick, emptied since: its kept predecessor had nothing appended after the
            // mark (appends go to the last chunk only, and that was the tick), so a rollback
            // keeps all of it.
            markLastChunkLength = kept[mark - newBase - 1].bytes.count
        }
        markChunkCount = mark
        chunks = kept
        removedChunks = newBase
        head = 0
        emptiedChunks = 0
    }

    /// Adds bytes to the last chunk while it is small; otherwise starts a new one.
    private mutating func appendInPlace(_ bytes: [UInt8]) {
        if head < chunks.count, chunks[chunks.count - 1].isAppendable, chunks[chunks.count - 1].bytes.count < 16_384 {
            // Appending behind a partly written chunk is safe: written bytes stay at its front.
            chunks[chunks.count - 1].bytes.append(contentsOf: bytes)
        } else {
            chunks.append(Chunk(bytes: bytes, tickName: nil, isAppendable: true))
        }
    }

    /// Drops everything not yet sent, except the rest of a line the peer has received only in
    /// part, so that what is appended next starts on a line of its own.
    mutating func discardAllButCurrentLine() {
        var keep: [UInt8] = []
        if head < chunks.count && headOffset > 0 {
            let rest = chunks[head].bytes[headOffset...]
            if let newline = rest.firstIndex(of: UInt8(ascii: "\n")) {
                keep = Array(rest[...newline])
            }
        }
        reset()
        byteCount = 0
        appendReply(keep)
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
        let first = chunks[head].bytes
        if first.count - headOffset >= gatherLimit / 4 || head + 1 == chunks.count {
            return first.withUnsafeBytes { raw in
                send(descriptor, raw.baseAddress.map { $0 + headOffset }, raw.count - headOffset, Int32(MSG_NOSIGNAL))
            }
        }
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: first[headOffset...])
        var index = head + 1
        while index < chunks.count && scratch.count + chunks[index].bytes.count <= gatherLimit {
            scratch.append(contentsOf: chunks[index].bytes)
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
            let available = chunks[head].bytes.count - headOffset
            if remaining >= available {
                remaining -= available
                dropHeadChunk()
            } else {
                headOffset += remaining
                remaining = 0
            }
        }
        dropEmptyHeadChunks()
        if head > 1024 && head * 2 > chunks.count {
            chunks.removeSubrange(0..<head)
            removedChunks += head
            head = 0
        }
    }

    /// Skips chunks emptied by coalescing, so the head always has bytes to write.
    private mutating func dropEmptyHeadChunks() {
        while head < chunks.count && chunks[head].bytes.count == headOffset {
            dropHeadChunk()
        }
    }

    private mutating func dropHeadChunk() {
        if let name = chunks[head].tickName, queuedTicks[name] == removedChunks + head {
            queuedTicks[name] = nil
        }
        if chunks[head].bytes.isEmpty { emptiedChunks -= 1 }
        chunks[head].bytes = []
        head += 1
        headOffset = 0
    }

    private mutating func reset() {
        markedBatch = -1
        removedChunks += chunks.count
        chunks.removeAll(keepingCapacity: chunks.capacity <= 4096)
        queuedTicks.removeAll(keepingCapacity: false)
        head = 0
        headOffset = 0
        emptiedChunks = 0
    }
}
