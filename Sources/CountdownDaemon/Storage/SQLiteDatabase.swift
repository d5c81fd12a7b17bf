import CSQLite

/// A failure reported by SQLite, with its message.
struct SQLiteError: Error, CustomStringConvertible {
    /// SQLite's result code.
    var code: Int32
    /// What SQLite said, and what the daemon was doing.
    var message: String

    var description: String { message }
}

/// A small, checked wrapper over one SQLite connection, used by one thread at a time.
final class SQLiteDatabase {
    private var handle: OpaquePointer?

    /// Opens the database at `path`: read-only, or for writing (creating it if needed).
    init(path: String, readOnly: Bool = false) throws(SQLiteError) {
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        let result = sqlite3_open_v2(path, &handle, flags, nil)
        guard result == SQLITE_OK else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            // Ignored on purpose: closing a connection that failed to open reports nothing more.
            _ = sqlite3_close_v2(handle)
            handle = nil
            throw SQLiteError(code: result, message: "cannot open \(path): \(message)")
        }
        for (what, code) in [("extended result codes", sqlite3_extended_result_codes(handle, 1)), ("a busy timeout", sqlite3_busy_timeout(handle, 5000))]
        where code != SQLITE_OK {
            let message = lastError
            _ = sqlite3_close_v2(handle)  // As above.
            handle = nil
            throw SQLiteError(code: code, message: "cannot set \(what) on \(path): \(message)")
        }
    }

    deinit {
        // Ignored on purpose: close_v2 defers the close until every statement is finalized and
        // reports no error of its own for a valid handle; every write was committed and checked.
        _ = sqlite3_close_v2(handle)
    }

    /// Runs SQL that returns no rows (several statements allowed).
    func execute(_ sql: String) throws(SQLiteError) {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let result = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        guard result == SQLITE_OK else {
            let message = errorMessage.map { String(cString: $0) } ?? lastError
            sqlite3_free(errorMessage)  // Returns nothing.
            throw SQLiteError(code: result, message: message)
        }
    }

    /// Runs `body` in one `BEGIN IMMEDIATE` … `COMMIT` transaction, rolling back if it throws.
    func transaction(_ body: () throws(SQLiteError) -> Void) throws(SQLiteError) {
        try execute("BEGIN IMMEDIATE")
        do throws(SQLiteError) {
            try body()
            try execute("COMMIT")
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Runs a query and returns the first column of the first row as text.
    func scalarText(_ sql: String) throws(SQLiteError) -> String? {
        let statement = try prepare(sql)
        return try statement.step() ? statement.text(0) : nil
    }

    /// Prepares a statement for repeated use.
    func prepare(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        var statement: OpaquePointer?
        let result = sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
        guard result == SQLITE_OK, let statement else {
            throw SQLiteError(code: result, message: "cannot prepare '\(sql.prefix(60))': \(lastError)")
        }
        return SQLiteStatement(statement, database: self)
    }

    /// The last error message on this connection.
    var lastError: String {
        handle.map { String(cString: sqlite3_errmsg($0)) } ?? "no connection"
    }
}

/// A prepared statement. Bind, step, read columns, reset.
final class SQLiteStatement {
    private let statement: OpaquePointer
    private unowned let database: SQLiteDatabase

    /// SQLite's "copy the value now" destructor marker: the bound buffers are temporary.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    fileprivate init(_ statement: OpaquePointer, database: SQLiteDatabase) {
        self.statement = statement
        self.database = database
    }

    deinit {
        // Ignored on purpose: finalize repeats the last step's error, which `step` has reported.
        _ = sqlite3_finalize(statement)
    }

    /// Binds an integer, or NULL for `nil` (1-based index).
    /// - Throws: when SQLite refuses (no such parameter, out of memory): a value silently left
    ///   NULL would be stored as if it were the data.
    func bind(_ index: Int32, _ value: Int64?) throws(SQLiteError) {
        try check(value.map { sqlite3_bind_int64(statement, index, $0) } ?? sqlite3_bind_null(statement, index), index)
    }

    /// Binds text (1-based index); throws as the integer form does.
    func bind(_ index: Int32, _ value: String) throws(SQLiteError) {
        try check(sqlite3_bind_text(statement, index, value, -1, Self.transient), index)
    }

    /// Binds text, or NULL for `nil` (1-based index); throws as the integer form does.
    func bind(_ index: Int32, _ value: String?) throws(SQLiteError) {
        if let value {
            try bind(index, value)
        } else {
            try check(sqlite3_bind_null(statement, index), index)
        }
    }

    private func check(_ result: Int32, _ index: Int32) throws(SQLiteError) {
        guard result == SQLITE_OK else {
            throw SQLiteError(code: result, message: "cannot bind parameter \(index): \(database.lastError)")
        }
    }

    /// Steps once. - Returns: `true` for a row, `false` when done.
    func step() throws(SQLiteError) -> Bool {
        let result = sqlite3_step(statement)
        switch result {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw SQLiteError(code: result, message: database.lastError)
        }
    }

    /// Runs a statement that returns no rows, then resets it for reuse.
    func run() throws(SQLiteError) {
        defer { reset() }
        _ = try step()  // A statement without rows: only its error matters.
    }

    /// Resets for another execution and clears the bindings.
    func reset() {
        // Ignored on purpose: reset repeats the last step's error, which `step` has reported.
        _ = sqlite3_reset(statement)
        _ = sqlite3_clear_bindings(statement)  // Ignored on purpose: it always succeeds.
    }

    /// Column `index` (0-based) as an integer, or `nil` for NULL.
    func int(_ index: Int32) -> Int64? {
        sqlite3_column_type(statement, index) == SQLITE_NULL ? nil : sqlite3_column_int64(statement, index)
    }

    /// Column `index` (0-based) as raw bytes, valid until the next step (empty for NULL).
    func bytes(_ index: Int32) -> UnsafeBufferPointer<UInt8> {
        guard let pointer = sqlite3_column_text(statement, index) else { return UnsafeBufferPointer(start: nil, count: 0) }
        return UnsafeBufferPointer(start: pointer, count: Int(sqlite3_column_bytes(statement, index)))
    }

    /// Column `index` (0-based) as text, or `nil` for NULL.
    func text(_ index: Int32) -> String? {
        guard let pointer = sqlite3_column_text(statement, index) else { return nil }
        return String(cString: pointer)
    }
}
