import CSystemd
import Glibc

/// One structured journal entry, laid out as `sd_journal_sendv` wants it: every `FIELD=value`
/// in one contiguous buffer, with an iovec per field pointing into it.
///
/// `sd_journal_send` is variadic and cannot be called from Swift; `sd_journal_sendv` takes the
/// iovec array, which this type builds without a separate allocation per field.
struct SystemdJournalEntry: Equatable {
    /// The bytes of every field, back to back.
    private(set) var buffer: [UInt8] = []
    /// Where each field lies in `buffer`.
    private(set) var fieldRanges: [Range<Int>] = []

    /// Starts an entry with `PRIORITY=`, `SYSLOG_IDENTIFIER=` and `MESSAGE=`.
    init(priority: LogLevel, message: String, identifier: String = "countdownd") {
        append("PRIORITY", "\(priority.rawValue)")
        append("SYSLOG_IDENTIFIER", identifier)
        append("MESSAGE", message)
    }

    /// Whether `name` is a valid journal field name: upper-case ASCII letters, digits and
    /// underscores, not starting with an underscore or digit (leading `_` is for trusted fields).
    static func isValidFieldName(_ name: String) -> Bool {
        guard let first = name.utf8.first, first != UInt8(ascii: "_"), !(first >= 0x30 && first <= 0x39),
              name.utf8.count <= 64 else { return false }
        return name.utf8.allSatisfy { ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: "_") }
    }

    /// Adds one `NAME=value` field. Invalid names are skipped (a programming error, not input).
    mutating func append(_ name: String, _ value: String) {
        guard Self.isValidFieldName(name) else { return }
        let start = buffer.count
        buffer.append(contentsOf: name.utf8)
        buffer.append(UInt8(ascii: "="))
        buffer.append(contentsOf: value.utf8)
        fieldRanges.append(start..<buffer.count)
    }

    /// The fields as strings, for tests and debugging.
    var fields: [String] {
        fieldRanges.map { String(decoding: buffer[$0], as: UTF8.self) }
    }

    /// Sends the entry to the journal.
    /// - Returns: `sd_journal_sendv`'s result: 0 on success, a negative errno otherwise.
    func send() -> Int32 {
        buffer.withUnsafeBytes { raw -> Int32 in
            // `raw` is valid for the whole call; the iovecs only live inside it.
            guard let base = raw.baseAddress else { return -EINVAL }
            var vectors = fieldRanges.map { range in
                iovec(iov_base: UnsafeMutableRawPointer(mutating: base + range.lowerBound), iov_len: range.count)
            }
            return sd_journal_sendv(&vectors, Int32(vectors.count))
        }
    }
}
