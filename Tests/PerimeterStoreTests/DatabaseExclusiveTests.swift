import Foundation
import PerimeterStore
import Testing

@Suite("SQLite store: a connection that holds its file exclusively")
struct DatabaseExclusiveTests {
    /// `exclusive`: WAL without `-shm` (the WAL index in the process's memory), the file closed
    /// to every other connection while open, and everything committed there for the next one
    /// once it closes, also when it closes without a checkpoint of its own (a crash).
    @Test("an exclusive connection keeps others out while open; what it committed is there after")
    func exclusive() throws {
        let path = try temporaryDatabasePath()
        var exclusive = Database.Options()
        exclusive.exclusive = true
        var impatient = Database.Options()
        impatient.busyTimeout = .milliseconds(100)
        do {
            let holder = try Database(path: path, options: exclusive)
            #expect(try holder.scalar("PRAGMA journal_mode")?.string == "wal")
            #expect(try holder.scalar("PRAGMA locking_mode")?.string == "exclusive")
            try holder.execute("CREATE TABLE t(i INTEGER PRIMARY KEY, s TEXT)")
            for index in 0..<50 { try holder.run("INSERT INTO t(s) VALUES (?)", "row \(index)") }
            #expect(try holder.scalar("SELECT count(*) FROM t")?.int == 50)
            #expect(!FileManager.default.fileExists(atPath: path + "-shm"), "the WAL index is in memory")
            do {
                // Opening already reads the file (to enter WAL).
                let other = try Database(path: path, options: impatient)
                _ = try other.scalar("SELECT count(*) FROM t")
                Issue.record("another connection read the file while it was held")
            } catch {
                #expect(error.isBusy, "\(error)")
            }
        }
        let after = try Database(path: path, options: impatient)
        #expect(try after.scalar("SELECT count(*) FROM t")?.int == 50)
        #expect(try after.scalar("SELECT s FROM t ORDER BY i DESC LIMIT 1")?.string == "row 49")
    }
}
