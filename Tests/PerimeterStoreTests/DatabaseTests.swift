import Foundation
import PerimeterStore
import PerimeterTestSupport
import Testing

/// A fresh directory for one test's database files.
func temporaryDatabasePath(_ name: String = "test.sqlite") throws -> String {
    let directory = TestScratch.root.appendingPathComponent(
        "perimeter-store-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory.appendingPathComponent(name).path
}

@Suite("SQLite store on real files")
struct DatabaseTests {
    static let schema = [
        Migration(1, "regions", sql: "CREATE TABLE regions(id TEXT PRIMARY KEY, name TEXT, radius REAL)"),
        Migration(
            2, "state",
            sql: """
                CREATE TABLE state(subject TEXT NOT NULL, region TEXT NOT NULL REFERENCES regions(id), seq INTEGER NOT NULL,
                                   PRIMARY KEY(subject, region));
                """),
    ]

    @Test("a file database is in WAL mode and round-trips every value type")
    func valuesRoundTrip() throws {
        let path = try temporaryDatabasePath()
        let database = try Database(path: path)
        #expect(try database.scalar("PRAGMA journal_mode")?.string == "wal")
        try database.execute("CREATE TABLE t(i INTEGER, r REAL, s TEXT, b BLOB, n)")
        try database.run(
            "INSERT INTO t VALUES (?, ?, ?, ?, ?)", Int64.max, 0.1, "grüße 🛰", [UInt8]([0, 1, 255]), SQLValue.null)
        let row = try #require(try database.row("SELECT i, r, s, b, n FROM t"))
        #expect(row["i"] == .integer(Int64.max))
        #expect(row["r"] == .real(0.1))
        #expect(row["s"] == .text("grüße 🛰"))
        #expect(row["b"] == .blob([0, 1, 255]))
        #expect(row["n"] == .null)
    }

    @Test("migrations run once, in order, and record user_version")
    func migrationsRunOnce() throws {
        let path = try temporaryDatabasePath()
        do {
            let database = try Database(path: path)
            #expect(try database.migrate(Self.schema) == [1, 2])
            #expect(try database.schemaVersion == 2)
        }
        let reopened = try Database(path: path)
        #expect(try reopened.migrate(Self.schema) == [])
        let extended = Self.schema + [Migration(3, "names", sql: "CREATE INDEX regions_name ON regions(name)")]
        #expect(try reopened.migrate(extended) == [3])
        #expect(try reopened.schemaVersion == 3)
    }

    @Test("a failing migration rolls back and leaves the previous version")
    func failingMigrationRollsBack() throws {
        let path = try temporaryDatabasePath()
        let database = try Database(path: path)
        try database.migrate(Self.schema)
        let broken =
            Self.schema + [
                Migration(3, "half done", sql: "CREATE TABLE extra(x); INSERT INTO nowhere VALUES (1);")
            ]
        do {
            try database.migrate(broken)
            Issue.record("a broken migration succeeded")
        } catch let error as StoreError {
            #expect(error.function == "migration 3 'half done'")
            #expect(error.message.contains("nowhere"))
        }
        #expect(try database.schemaVersion == 2)
        #expect(try database.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'extra'")?.int == 0)
    }

    @Test("a database newer than the code is refused, not silently used")
    func newerDatabaseRefused() throws {
        let database = try Database(path: try temporaryDatabasePath())
        try database.execute("PRAGMA user_version = 9")
        #expect(throws: StoreError.self) { try database.migrate(Self.schema) }
    }

    @Test("a transaction that throws leaves nothing behind; a nested failure undoes only itself")
    func rollback() throws {
        struct Abort: Error {}
        let database = try Database(path: try temporaryDatabasePath())
        try database.migrate(Self.schema)
        #expect(throws: Abort.self) {
            try database.transaction {
                try database.run("INSERT INTO regions(id) VALUES ('a')")
                throw Abort()
            }
        }
        #expect(try database.scalar("SELECT count(*) FROM regions")?.int == 0)
        #expect(!database.isInTransaction)

        try database.transaction {
            try database.run("INSERT INTO regions(id) VALUES ('outer')")
            _ = try? database.transaction {
                try database.run("INSERT INTO regions(id) VALUES ('inner')")
                throw Abort()
            }
        }
        #expect(try database.query("SELECT id FROM regions").map { $0["id"] } == [.text("outer")])
    }

    @Test("errors carry the SQL, the function and SQLite's extended code")
    func typedErrors() throws {
        let database = try Database(path: try temporaryDatabasePath())
        try database.migrate(Self.schema)
        try database.run("INSERT INTO regions(id) VALUES (?)", "hall")
        do {
            try database.run("INSERT INTO regions(id) VALUES (?)", "hall")
            Issue.record("duplicate key accepted")
        } catch {
            #expect(error.isConstraintViolation)
            #expect(error.extendedCode == 1555)  // SQLITE_CONSTRAINT_PRIMARYKEY
            #expect(error.sql == "INSERT INTO regions(id) VALUES (?)")
            #expect(error.description.contains("UNIQUE constraint failed: regions.id"))
        }
        do {
            _ = try database.query("SELEKT 1")
            Issue.record("bad SQL accepted")
        } catch {
            #expect(error.function == "sqlite3_prepare_v3")
            #expect(error.description.contains("SELEKT 1"))
        }
        do {
            try database.run("INSERT INTO state VALUES (?, ?, ?)", "s", "no-such-region", 1)
            Issue.record("foreign key not enforced")
        } catch {
            #expect(error.extendedCode == 787)  // SQLITE_CONSTRAINT_FOREIGNKEY
        }
        #expect(throws: StoreError.self) { try database.run("INSERT INTO regions(id) VALUES (?)") }
    }

    @Test("statements are prepared once and reused; a failed one is evicted")
    func statementCache() throws {
        let database = try Database(path: ":memory:")
        try database.migrate(Self.schema)
        let base = database.cachedStatementCount
        for index in 0..<100 {
            try database.run("INSERT INTO regions(id, radius) VALUES (?, ?)", "r\(index)", Double(index))
        }
        #expect(database.cachedStatementCount == base + 1)
        _ = try database.query("SELECT id FROM regions WHERE radius > ?", 50.0)
        #expect(database.cachedStatementCount == base + 2)
        #expect(throws: StoreError.self) {
            try database.run("INSERT INTO regions(id, radius) VALUES (?, ?)", "r1", 1.0)
        }
        #expect(database.cachedStatementCount == base + 1)
        try database.run("INSERT INTO regions(id, radius) VALUES (?, ?)", "r100", 100.0)
        #expect(try database.scalar("SELECT count(*) FROM regions")?.int == 101)
    }

    @Test("BEGIN and COMMIT are prepared once: a hundred transactions add no statement after the first")
    func transactionStatementsCached() throws {
        let database = try Database(path: ":memory:")
        // Not through a migration (its own transaction would cache BEGIN and COMMIT first).
        try database.execute("CREATE TABLE regions(id TEXT PRIMARY KEY, name TEXT, radius REAL)")
        let base = database.cachedStatementCount
        _ = try database.transaction { try database.run("INSERT INTO regions(id, radius) VALUES (?, ?)", "r0", 0.0) }
        #expect(database.cachedStatementCount == base + 3, "BEGIN IMMEDIATE, the insert, COMMIT")
        for index in 1..<100 {
            _ = try database.transaction {
                try database.run("INSERT INTO regions(id, radius) VALUES (?, ?)", "r\(index)", Double(index))
            }
        }
        #expect(database.cachedStatementCount == base + 3)
        struct Undo: Error {}
        #expect(throws: Undo.self) {
            try database.transaction {
                try database.run("INSERT INTO regions(id, radius) VALUES (?, ?)", "r100", 100.0)
                throw Undo()
            }
        }
        #expect(try database.scalar("SELECT count(*) FROM regions")?.int == 100, "the failed one rolled back")
        #expect(!database.isInTransaction)
    }

    @Test("a second writer waits out the busy timeout, then fails with SQLITE_BUSY")
    func busyTimeout() throws {
        let path = try temporaryDatabasePath()
        let first = try Database(path: path)
        try first.migrate(Self.schema)
        var options = Database.Options()
        options.busyTimeout = .milliseconds(200)
        let second = try Database(path: path, options: options)
        try first.execute("BEGIN IMMEDIATE")
        let started = ContinuousClock.now
        do {
            try second.run("INSERT INTO regions(id) VALUES ('late')")
            Issue.record("a second writer got the lock")
        } catch {
            #expect(error.isBusy)
        }
        #expect(ContinuousClock.now - started >= .milliseconds(150))
        try first.execute("COMMIT")
        try second.run("INSERT INTO regions(id) VALUES ('late')")
        // WAL: a reader sees committed data while a writer holds the lock.
        try first.execute("BEGIN IMMEDIATE")
        #expect(try second.scalar("SELECT count(*) FROM regions")?.int == 1)
        try first.execute("ROLLBACK")
    }

    @Test("an unreadable location names the file")
    func openFailureNamesFile() {
        do {
            _ = try Database(path: "/nonexistent-dir/x/y.sqlite")
            Issue.record("opened a file in a missing directory")
        } catch {
            #expect(error.description.contains("/nonexistent-dir/x/y.sqlite"))
        }
    }
}

@Suite("SQLite store under kill -9")
struct CrashTests {
    func checkInvariant(_ path: String) throws -> (items: Int, batches: Int) {
        let database = try Database(path: path)
        #expect(try database.integrityCheck() == ["ok"])
        let items = try #require(try database.scalar("SELECT count(*) FROM items")?.int)
        let counter = try #require(try database.row("SELECT total, batches FROM counter"))
        #expect(counter["total"].int == items, "the counter and the rows were committed together")
        #expect(try database.scalar("SELECT count(DISTINCT batch) FROM items")?.int == counter["batches"].int)
        return (items, counter["batches"].int ?? -1)
    }

    @Test("killed in the middle of a transaction: the open transaction vanishes, the committed ones stay")
    func killedInsideTransaction() async throws {
        let path = try temporaryDatabasePath()
        let writer = try ChildProcess(
            Products.executable("perimeter-testpeer"),
            ["store-crash", "--path", path, "--rows", "500", "--hold-after", "3"])
        try await writer.waitForLine(containing: "holding", timeout: .seconds(60))
        writer.kill(SIGKILL)
        let state = try checkInvariant(path)
        #expect(state.batches == 3)
        #expect(state.items == 1500)
    }

    @Test("killed at arbitrary moments, again and again: the file is always consistent")
    func killedAtRandomMoments() async throws {
        let path = try temporaryDatabasePath()
        var previous = 0
        for round in 0..<6 {
            let writer = try ChildProcess(
                Products.executable("perimeter-testpeer"), ["store-crash", "--path", path, "--rows", "300"])
            try await writer.waitForLine(containing: "committed", timeout: .seconds(60))
            // Sleep, not a clock: a random moment, in real time, inside another process's writes, at which it is killed.
            try await Task.sleep(for: .milliseconds(Int.random(in: 5...120)))
            writer.kill(SIGKILL)
            let state = try checkInvariant(path)
            #expect(state.batches > previous, "round \(round) committed at least one batch")
            #expect(state.items == state.batches * 300)
            previous = state.batches
        }
    }
}
