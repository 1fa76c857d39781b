import CSQLite

/// A SQLite failure: the result code, the C function, SQLite's message and the SQL involved.
///
/// `sqlite3_step: UNIQUE constraint failed: regions.id [SQLITE_CONSTRAINT_PRIMARYKEY 1555] in "INSERT INTO regions …"`
public struct StoreError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The primary result code (`SQLITE_BUSY`, `SQLITE_CONSTRAINT`, …).
    public var code: Int32 { extendedCode & 0xFF }
    /// The extended result code (`SQLITE_CONSTRAINT_PRIMARYKEY`, …).
    public let extendedCode: Int32
    /// The C function that failed.
    public let function: String
    public let message: String
    /// The statement, when one was involved.
    public let sql: String?
    /// The database file.
    public let path: String?

    public init(extendedCode: Int32, function: String, message: String, sql: String? = nil, path: String? = nil) {
        self.extendedCode = extendedCode
        self.function = function
        self.message = message
        self.sql = sql
        self.path = path
    }

    public var isBusy: Bool { code == SQLITE_BUSY || code == SQLITE_LOCKED }
    public var isConstraintViolation: Bool { code == SQLITE_CONSTRAINT }

    public var description: String {
        var text = "\(function): \(message) [\(String(cString: sqlite3_errstr(extendedCode))), code \(extendedCode)]"
        if let sql { text += " in \"\(sql.count > 200 ? String(sql.prefix(200)) + "…" : sql)\"" }
        if let path { text += " (database \(path))" }
        return text
    }
}
