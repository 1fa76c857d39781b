import CSQLite
import Foundation

/// One SQLite connection with the habits a service needs: WAL, a busy timeout, a cache of
/// prepared statements, scoped transactions and migrations tracked by `PRAGMA user_version`.
///
/// ```swift
/// let db = try Database(path: "evaluator.sqlite")
/// try db.migrate([Migration(1, "state", sql: "CREATE TABLE state(…)")])
/// try db.transaction {
///     try db.run("INSERT INTO state(subject, region, state) VALUES (?, ?, ?)", "badge-7", "hall", "inside")
///     try db.run("INSERT INTO outbox(topic, payload) VALUES (?, ?)", topic, payload)
/// }
/// ```
///
/// - Important: One owner. A `Database` is not `Sendable`: keep it inside the actor or
///   thread that opened it. Other processes may open the same file (WAL lets readers and one
///   writer work together; writers wait up to `busyTimeout`).
public final class Database {
    public struct Options: Sendable {
        /// How long a writer waits for another connection's lock before failing with SQLITE_BUSY.
        public var busyTimeout: Duration = .seconds(5)
        /// `NORMAL` in WAL mode is durable against process crashes (the case services face);
        /// `FULL` also against power loss, at the cost of an fsync per commit.
        public var synchronous: Synchronous = .normal
        public var readOnly = false
        /// `PRAGMA locking_mode=EXCLUSIVE`, set before WAL is entered: the connection takes its
        /// locks at its first read and write and keeps them until it closes, so a transaction
        /// costs no lock calls (six `fcntl`s each otherwise), and the WAL index lives in the
        /// process's memory instead of `-shm`. No other connection, in this process or another,
        /// can read or write the file meanwhile.
        public var exclusive = false

        public enum Synchronous: String, Sendable {
            case off = "OFF"
            case normal = "NORMAL"
            case full = "FULL"
        }

        public init() {}
    }

    /// How a transaction takes its lock.
    public enum TransactionKind: String, Sendable {
        /// Lock on first write (SQLite's default).
        case deferred = "DEFERRED"
        /// Take the write lock at BEGIN, so the transaction never fails half-way with SQLITE_BUSY.
        case immediate = "IMMEDIATE"
    }

    public let path: String
    let handle: OpaquePointer
    private var statements: [String: OpaquePointer] = [:]
    private var transactionDepth = 0
    /// Who checkpoints for this connection (kept alive while SQLite's hook points at it).
    private var checkpointer: WALCheckpointer?

    /// Opens (creating if needed) the database at `path`; `":memory:"` for a private in-memory one.
    /// - Throws: ``StoreError`` naming the file when it cannot be opened or configured.
    public init(path: String, options: Options = Options()) throws(StoreError) {
        self.path = path
        var connection: OpaquePointer?
        let flags =
            (options.readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
            | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI
        let rc = sqlite3_open_v2(path, &connection, flags, nil)
        guard rc == SQLITE_OK, let connection else {
            let message = connection.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_close_v2(connection)
            throw StoreError(extendedCode: rc, function: "sqlite3_open_v2", message: message, path: path)
        }
        handle = connection
        sqlite3_extended_result_codes(handle, 1)
        let milliseconds =
            options.busyTimeout.components.seconds * 1000
            + options.busyTimeout.components.attoseconds / 1_000_000_000_000_000
        // Waits for a lock held by another connection in short steps (50 µs doubling to 1 ms)
        // rather than SQLite's default of sleeps growing to 25–100 ms: a writer that holds the
        // lock for a few hundred microseconds must not cost the waiter tens of milliseconds.
        sqlite3_busy_handler(
            handle,
            { context, count in
                let budget = Int(bitPattern: context) * 1000
                let attempt = Int(count)
                let waited = attempt <= 5 ? 50 * ((1 << attempt) - 1) : 1550 + (attempt - 5) * 1000
                guard waited < budget else { return 0 }
                usleep(UInt32(min(1000, 50 << min(attempt, 5))))
                return 1
            }, UnsafeMutableRawPointer(bitPattern: Int(clamping: milliseconds)))
        if options.exclusive { try execute("PRAGMA locking_mode=EXCLUSIVE") }
        if path != ":memory:" && !options.readOnly {
            let mode = try scalar("PRAGMA journal_mode=WAL")?.string
            if mode?.lowercased() != "wal" {
                throw StoreError(
                    extendedCode: SQLITE_ERROR, function: "PRAGMA journal_mode",
                    message: "could not switch to WAL (got \(mode ?? "nothing"))", path: path)
            }
        }
        try execute("PRAGMA synchronous=\(options.synchronous.rawValue); PRAGMA foreign_keys=ON")
    }

    deinit {
        for statement in statements.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(handle)
    }

    private func error(_ rc: Int32, _ function: String, sql: String?) -> StoreError {
        StoreError(
            extendedCode: sqlite3_extended_errcode(handle) != 0 ? sqlite3_extended_errcode(handle) : rc,
            function: function, message: String(cString: sqlite3_errmsg(handle)), sql: sql, path: path)
    }

    // MARK: - Statements

    /// Runs SQL without parameters; several statements separated by `;` are allowed.
    public func execute(_ sql: String) throws(StoreError) {
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(message)
            throw StoreError(
                extendedCode: sqlite3_extended_errcode(handle), function: "sqlite3_exec", message: text, sql: sql,
                path: path)
        }
    }

    /// Runs one statement with parameters (`?` or `?NNN`) and returns the number of rows changed.
    @discardableResult
    public func run(_ sql: String, _ parameters: any SQLBindable...) throws(StoreError) -> Int {
        try run(sql, parameters: parameters)
    }

    @discardableResult
    public func run(_ sql: String, parameters: [any SQLBindable]) throws(StoreError) -> Int {
        try withStatement(sql, parameters) { statement throws(StoreError) in
            while true {
                let rc = sqlite3_step(statement)
                if rc == SQLITE_DONE { break }
                if rc != SQLITE_ROW { throw error(rc, "sqlite3_step", sql: sql) }
            }
        }
        return Int(sqlite3_changes(handle))
    }

    /// Runs a query and returns every row.
    public func query(_ sql: String, _ parameters: any SQLBindable...) throws(StoreError) -> [Row] {
        var rows: [Row] = []
        try forEach(sql, parameters: parameters) { rows.append($0) }
        return rows
    }

    /// The first row of a query, or nil.
    public func row(_ sql: String, _ parameters: any SQLBindable...) throws(StoreError) -> Row? {
        var first: Row?
        try forEach(sql, parameters: parameters) { row in
            if first == nil { first = row }
        }
        return first
    }

    /// The first column of the first row, or nil when there is no row.
    public func scalar(_ sql: String, _ parameters: any SQLBindable...) throws(StoreError) -> SQLValue? {
        var first: SQLValue?
        try forEach(sql, parameters: parameters) { row in
            if first == nil { first = row.values.first }
        }
        return first
    }

    /// Calls `body` for each row, without collecting them.
    public func forEach(
        _ sql: String, parameters: [any SQLBindable] = [], _ body: (Row) throws(StoreError) -> Void
    ) throws(StoreError) {
        try withStatement(sql, parameters) { statement throws(StoreError) in
            let count = Int(sqlite3_column_count(statement))
            let columns = (0..<count).map { String(cString: sqlite3_column_name(statement, Int32($0))) }
            while true {
                let rc = sqlite3_step(statement)
                if rc == SQLITE_DONE { return }
                guard rc == SQLITE_ROW else { throw error(rc, "sqlite3_step", sql: sql) }
                let values = (0..<count).map { Self.column(statement, Int32($0)) }
                try body(Row(columns: columns, values: values))
            }
        }
    }

    /// The rowid of the last successful INSERT on this connection.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// How many prepared statements are cached (each distinct SQL text once).
    public var cachedStatementCount: Int { statements.count }

    /// Prepares (or reuses) the statement for `sql`, binds, runs `body`, and resets it.
    /// A statement whose step failed is finalized and evicted, never reused.
    private func withStatement(
        _ sql: String, _ parameters: [any SQLBindable], _ body: (OpaquePointer) throws(StoreError) -> Void
    ) throws(StoreError) {
        let statement = try prepared(sql)
        do {
            try bind(parameters, to: statement, sql: sql)
            try body(statement)
        } catch {
            statements[sql] = nil
            sqlite3_finalize(statement)
            throw error
        }
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
    }

    private func prepared(_ sql: String) throws(StoreError) -> OpaquePointer {
        if let statement = statements[sql] { return statement }
        var statement: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard rc == SQLITE_OK, let statement else { throw error(rc, "sqlite3_prepare_v3", sql: sql) }
        statements[sql] = statement
        return statement
    }

    private func bind(_ parameters: [any SQLBindable], to statement: OpaquePointer, sql: String) throws(StoreError) {
        let expected = Int(sqlite3_bind_parameter_count(statement))
        guard expected == parameters.count else {
            throw StoreError(
                extendedCode: SQLITE_RANGE, function: "sqlite3_bind",
                message: "the statement has \(expected) parameters but \(parameters.count) values were given",
                sql: sql, path: path)
        }
        for (offset, parameter) in parameters.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch parameter.sqlValue {
            case .null: rc = sqlite3_bind_null(statement, index)
            case .integer(let value): rc = sqlite3_bind_int64(statement, index, value)
            case .real(let value): rc = sqlite3_bind_double(statement, index, value)
            case .text(let value): rc = sqlite3_bind_text(statement, index, value, -1, perimeter_sqlite_transient())
            case .blob(let value):
                rc = value.withUnsafeBytes {
                    sqlite3_bind_blob(statement, index, $0.baseAddress, Int32($0.count), perimeter_sqlite_transient())
                }
            }
            if rc != SQLITE_OK { throw error(rc, "sqlite3_bind (parameter \(index))", sql: sql) }
        }
    }

    private static func column(_ statement: OpaquePointer, _ index: Int32) -> SQLValue {
        switch sqlite3_column_type(statement, index) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, index))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, index))
        case SQLITE_TEXT:
            guard let text = sqlite3_column_text(statement, index) else { return .text("") }
            let count = Int(sqlite3_column_bytes(statement, index))
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(statement, index))
            guard count > 0, let bytes = sqlite3_column_blob(statement, index) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: bytes, count: count)))
        default: return .null
        }
    }

    // MARK: - Checkpoints

    /// Copies the WAL's committed frames back into the database file as far as readers and
    /// writers allow, without waiting for them (`SQLITE_CHECKPOINT_PASSIVE`). Returns the WAL's
    /// frames and how many of them are now in the file; another checkpoint running at the same
    /// moment is not an error (nothing is copied).
    @discardableResult
    public func checkpoint() throws(StoreError) -> (frames: Int, copied: Int) {
        var frames: Int32 = 0
        var copied: Int32 = 0
        let rc = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, &frames, &copied)
        if rc == SQLITE_BUSY { return (Int(frames), 0) }
        guard rc == SQLITE_OK else { throw error(rc, "sqlite3_wal_checkpoint_v2", sql: nil) }
        return (Int(max(frames, 0)), Int(max(copied, 0)))
    }

    /// Leaves this connection's checkpoints to `checkpointer`, which runs them on a thread of
    /// its own: SQLite's automatic checkpoint runs in the connection whose commit crosses the
    /// WAL's limit and costs that commit two `fdatasync`s (15–35 ms each on this machine's
    /// disk), which stalled the evaluator's intake and processing for that long every few
    /// hundred commits. Should the checkpointer fall far behind (or not run), this connection
    /// checkpoints itself past ``WALCheckpointer/writerTakesOverAt`` pages, so the WAL stays
    /// bounded as before.
    public func leaveCheckpoints(to checkpointer: WALCheckpointer) {
        self.checkpointer = checkpointer
        sqlite3_wal_hook(
            handle,
            { context, connection, _, pages in
                guard let context else { return SQLITE_OK }
                let checkpointer = Unmanaged<WALCheckpointer>.fromOpaque(context).takeUnretainedValue()
                if Int(pages) >= checkpointer.writerTakesOverAt {
                    sqlite3_wal_checkpoint_v2(connection, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
                } else if Int(pages) >= checkpointer.pages {
                    checkpointer.request()
                }
                return SQLITE_OK
            }, Unmanaged.passUnretained(checkpointer).toOpaque())
    }

    // MARK: - Transactions

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    /// Nested calls become savepoints, so an inner failure undoes only the inner work.
    ///
    /// BEGIN, COMMIT and the savepoints go through the statement cache: `sqlite3_exec` prepared
    /// them again for every transaction, about 2 % of the evaluator's CPU at peak (`perf`).
    public func transaction<T>(_ kind: TransactionKind = .immediate, _ body: () throws -> T) throws -> T {
        let savepoint = "perimeter_\(transactionDepth)"
        if transactionDepth == 0 {
            try run("BEGIN \(kind.rawValue)", parameters: [])
        } else {
            try run("SAVEPOINT \(savepoint)", parameters: [])
        }
        transactionDepth += 1
        do {
            let result = try body()
            transactionDepth -= 1
            if transactionDepth == 0 {
                try run("COMMIT", parameters: [])
            } else {
                try run("RELEASE \(savepoint)", parameters: [])
            }
            return result
        } catch {
            transactionDepth -= 1
            if transactionDepth == 0 {
                // A failed COMMIT or an error may already have ended the transaction.
                if sqlite3_get_autocommit(handle) == 0 { try? execute("ROLLBACK") }
            } else {
                try? execute("ROLLBACK TO \(savepoint); RELEASE \(savepoint)")
            }
            throw error
        }
    }

    /// True while a transaction is open on this connection.
    public var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    // MARK: - Migrations

    /// The schema version recorded in `PRAGMA user_version`.
    public var schemaVersion: Int {
        get throws(StoreError) { try scalar("PRAGMA user_version")?.int ?? 0 }
    }

    /// Applies, in order, each migration newer than ``schemaVersion``, each in its own
    /// transaction together with the version bump.
    /// - Returns: the versions applied.
    /// - Throws: ``StoreError`` (the database stays at the last good version) or an error about
    ///   the list itself (versions not strictly increasing, or the database being newer than
    ///   this code).
    @discardableResult
    public func migrate(_ migrations: [Migration]) throws -> [Int] {
        let versions = migrations.map(\.version)
        guard versions == versions.sorted(), Set(versions).count == versions.count, versions.allSatisfy({ $0 > 0 })
        else {
            throw StoreError(
                extendedCode: SQLITE_MISUSE, function: "migrate",
                message: "migration versions must be positive and strictly increasing, got \(versions)", path: path)
        }
        let current = try schemaVersion
        if let newest = versions.last, current > newest {
            throw StoreError(
                extendedCode: SQLITE_MISUSE, function: "migrate",
                message: "the database is at schema version \(current), newer than this program knows (\(newest)); "
                    + "use a newer perimeter or a fresh file", path: path)
        }
        var applied: [Int] = []
        for migration in migrations where migration.version > current {
            do {
                try transaction {
                    try migration.apply(self)
                    try execute("PRAGMA user_version = \(migration.version)")
                }
            } catch let failure as StoreError {
                throw StoreError(
                    extendedCode: failure.extendedCode, function: "migration \(migration.version) '\(migration.name)'",
                    message: failure.message, sql: failure.sql, path: path)
            }
            applied.append(migration.version)
        }
        return applied
    }

    /// `PRAGMA integrity_check`: "ok", or the problems found.
    public func integrityCheck() throws(StoreError) -> [String] {
        try query("PRAGMA integrity_check").compactMap { $0[0].string }
    }
}
