/// Writes one protocol line or one journal record into scratch memory the caller sized, then
/// hands it over in one copy.
///
/// The hot path of the daemon is one event line per tick, encoded once and appended to every
/// subscriber, and one journal record per lifecycle event. Appending field by field to an
/// `[UInt8]` checks uniqueness and capacity for every byte run and goes through generic
/// `append(contentsOf:)`: callgrind counted about 1,100 instructions per event line that way,
/// and about 1,200 per journal record on the real daemon. Here each field is written with
/// plain stores into memory of a length bounded up front, and appended once.
///
/// Inlinable, so that the daemon's journal encoder, in another module, writes with plain stores
/// too rather than a call per field.
@frozen
public struct ScratchWriter {
    @usableFromInline let start: UnsafeMutablePointer<UInt8>
    @usableFromInline var cursor: UnsafeMutablePointer<UInt8>
    @usableFromInline let end: UnsafeMutablePointer<UInt8>

    /// The most bytes a decimal `Int64` takes: a sign and 19 digits (or 20 digits of a `UInt64`).
    public static let maximumDecimalLength = 20

    /// Lends a writer over `capacity` bytes of scratch (on the stack when small) to `body`, then
    /// appends what it wrote to `out`. `body` must write at most `capacity` bytes: its callers
    /// bound each field (decimals by `maximumDecimalLength`, text by its UTF-8 count); a wrong
    /// bound stops the process (a precondition), never writes past the scratch.
    @inlinable
    public static func append(capacity: Int, to out: inout [UInt8], _ body: (inout ScratchWriter) -> Void) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { scratch in
            // A temporary allocation of a positive capacity always has a base address.
            guard let base = scratch.baseAddress else { return }
            var writer = ScratchWriter(start: base, capacity: capacity)
            body(&writer)
            out.append(contentsOf: UnsafeBufferPointer(start: base, count: writer.count))
        }
    }

    @inlinable
    init(start: UnsafeMutablePointer<UInt8>, capacity: Int) {
        self.start = start
        cursor = start
        end = start + capacity
    }

    /// Bytes written so far.
    @inlinable
    public var count: Int { cursor - start }

    /// A wrong bound in a caller stops the process here, never writes past the scratch.
    @inlinable @inline(__always)
    func reserve(_ length: Int) {
        precondition(end - cursor >= length, "ScratchWriter: a field overruns the scratch its caller sized")
    }

    /// One byte.
    @inlinable @inline(__always)
    public mutating func write(_ byte: UInt8) {
        reserve(1)
        cursor.pointee = byte
        cursor += 1
    }

    /// A literal, such as `"EVENT "`.
    @inlinable @inline(__always)
    public mutating func write(_ text: StaticString) {
        let length = text.utf8CodeUnitCount
        reserve(length)
        cursor.update(from: text.utf8Start, count: length)
        cursor += length
    }

    /// Bytes already in UTF-8, such as a name.
    @inlinable @inline(__always)
    public mutating func write(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress else { return }
        reserve(bytes.count)
        cursor.update(from: source, count: bytes.count)
        cursor += bytes.count
    }

    /// The low `width` bytes (1 to 8) of `value`, little-endian: a binary record's field.
    @inlinable @inline(__always)
    public mutating func writeLittleEndian(_ value: UInt64, width: Int = 8) {
        precondition(width >= 1 && width <= 8, "ScratchWriter: a field of \(width) bytes")
        reserve(width)
        withUnsafeBytes(of: value.littleEndian) { bytes in
            // `bytes` holds 8; the low `width` of them, little-endian, are the field.
            UnsafeMutableRawPointer(cursor).copyMemory(from: bytes.baseAddress.unsafelyUnwrapped, byteCount: width)
        }
        cursor += width
    }

    /// A signed value, little-endian, in 8 bytes.
    @inlinable @inline(__always)
    public mutating func writeLittleEndian(_ value: Int64) {
        writeLittleEndian(UInt64(bitPattern: value))
    }

    /// A signed decimal integer, without going through `String`: at most `maximumDecimalLength`
    /// bytes.
    public mutating func writeDecimal(_ value: Int64) {
        if value < 0 { write(UInt8(ascii: "-")) }
        writeDecimal(value.magnitude)
    }

    /// An unsigned decimal integer: at most `maximumDecimalLength` bytes. Its length is counted
    /// by comparisons, then it is written backwards two digits at a time from a table, so a
    /// number costs one division per two digits.
    public mutating func writeDecimal(_ value: UInt64) {
        if value < 10 {
            write(UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value))
            return
        }
        var digits = 2
        var bound: UInt64 = 100
        while digits < 20 && value >= bound {
            digits &+= 1
            bound = bound &* 10
        }
        reserve(digits)
        var position = cursor + digits
        var rest = value
        Self.digitPairs.withUTF8Buffer { pairs in
            while rest >= 100 {
                let pair = Int(truncatingIfNeeded: rest % 100) &* 2
                rest /= 100
                position -= 2
                position[0] = pairs[pair]
                position[1] = pairs[pair &+ 1]
            }
            if rest >= 10 {
                let pair = Int(truncatingIfNeeded: rest) &* 2
                position -= 2
                position[0] = pairs[pair]
                position[1] = pairs[pair &+ 1]
            } else {
                position -= 1
                position[0] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest)
            }
        }
        cursor += digits
    }

    /// "00", "01", … "99", one after another.
    private static let digitPairs: StaticString = """
        00010203040506070809101112131415161718192021222324252627282930313233343536373839\
        40414243444546474849505152535455565758596061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899
        """
}
