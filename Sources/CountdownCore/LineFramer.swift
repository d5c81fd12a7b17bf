/// Cuts a byte stream into request lines, enforcing the protocol's line-length limit.
///
/// A line longer than `maximumLineLength` bytes (its terminator not counted) yields one
/// `.tooLong` frame; the rest of that line is discarded as it arrives, so the buffer never holds
/// more than the limit plus one read, and the connection stays usable for the next line.
public struct LineFramer {
    /// The longest request line, in bytes, without its LF or CRLF.
    public static let maximumLineLength = 4096

    /// One framing result.
    public enum Frame: Equatable {
        /// A complete line, without LF (a trailing CR, if any, is left for the parser).
        case line(ArraySlice<UInt8>)
        /// A line exceeded the limit; it has been (or is being) discarded.
        case tooLong
    }

    private var buffer: [UInt8] = []
    private var start = 0
    private var scanned = 0
    private var discarding = false
    private let limit: Int

    /// Creates a framer; `maximumLineLength` is the limit unless a test says otherwise.
    public init(maximumLineLength: Int = LineFramer.maximumLineLength) {
        self.limit = maximumLineLength
    }

    /// Bytes held that do not yet form a complete line.
    public var bufferedByteCount: Int { buffer.count - start }

    /// Whether the stream stopped in the middle of a line.
    public var hasPartialLine: Bool { buffer.count > start || discarding }

    /// Whether a complete line (or an overlong one to report) waits to be taken: `nextFrame`
    /// would return one. Looks only at bytes not yet scanned, so it costs nothing twice.
    public var hasFrame: Bool {
        buffer[scanned...].contains(UInt8(ascii: "\n")) || (!discarding && buffer.count - start > limit)
    }

    /// Appends bytes read from the stream: the daemon's entry point, concrete so that the generic
    /// version is specialized inside this module rather than run generically from another.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        appendBytes(bytes)
    }

    /// Appends bytes read from the stream.
    public mutating func append<Bytes: Collection<UInt8>>(_ bytes: Bytes) {
        appendBytes(bytes)
    }

    private mutating func appendBytes<Bytes: Collection<UInt8>>(_ bytes: Bytes) {
        if start > 0 && start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
            scanned = 0
        } else if start > 4096 && start * 2 > buffer.count {
            buffer.removeSubrange(0..<start)
            scanned -= start
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// Gives back the line `nextFrame` just returned, with nothing appended since: the next
    /// `nextFrame` returns it again (a request that must wait for the next batch).
    public mutating func putBack(_ frame: Frame) {
        guard case .line(let line) = frame else { preconditionFailure("only a line can be put back, not \(frame)") }
        precondition(line.endIndex + 1 == start, "putBack(_:) takes only the line nextFrame() just returned")
        start = line.startIndex
        scanned = start
    }

    /// The next complete frame, or `nil` when more bytes are needed.
    public mutating func nextFrame() -> Frame? {
        while true {
            let newline = buffer[scanned...].firstIndex(of: UInt8(ascii: "\n"))
            guard let newline else {
                scanned = buffer.count
                let pending = buffer.count - start
                var lengthLimit = limit
                if pending > 0, buffer[buffer.count - 1] == UInt8(ascii: "\r") {
                    lengthLimit += 1  // A CR that may yet be followed by LF does not count.
                }
                if discarding {
                    start = buffer.count
                    return nil
                }
                if pending > lengthLimit {
                    discarding = true
                    start = buffer.count
                    return .tooLong
                }
                return nil
            }
            let lineStart = start
            start = newline + 1
            scanned = start
            if discarding {
                discarding = false
                continue
            }
            var lineEnd = newline
            if lineEnd > lineStart, buffer[lineEnd - 1] == UInt8(ascii: "\r") {
                lineEnd -= 1
            }
            if lineEnd - lineStart > limit {
                return .tooLong
            }
            return .line(buffer[lineStart..<newline])
        }
    }
}
