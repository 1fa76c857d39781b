import Foundation
import PerimeterStore
import PerimeterTestSupport
import Testing

@Suite("SQLite store: checkpoints on a queue of their own")
struct WALCheckpointerTests {
    /// Frames in the WAL file now (SQLite reuses the file from its start after a checkpoint, so
    /// its size is the most the WAL held since it was opened).
    static func walFrames(_ path: String) throws -> Int {
        let size = (try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? NSNumber)?.intValue ?? 0
        return max(0, size - 32) / (4096 + 24)
    }

    /// A connection that left its checkpoints to `checkpointer`, with a table of one-page rows
    /// (a commit of one row writes two or three frames).
    static func writer(_ path: String, _ checkpointer: WALCheckpointer) throws -> Database {
        let database = try Database(path: path)
        try database.execute("CREATE TABLE t(i INTEGER PRIMARY KEY, b BLOB NOT NULL)")
        database.leaveCheckpoints(to: checkpointer)
        return database
    }

    static func commit(_ database: Database, rows: Int) throws {
        for _ in 0..<rows { try database.run("INSERT INTO t(b) VALUES (?)", [UInt8](repeating: 7, count: 3000)) }
    }

    struct Case: CustomTestStringConvertible, Sendable {
        let name: String
        let commits: Int
        /// The WAL's frames after them: at least, at most.
        let atLeast: Int
        let atMost: Int
        var testDescription: String { name }
    }

    /// With nothing running the checkpointer, its writers do not checkpoint (the WAL grows past
    /// `pages`) until the WAL reaches `writerTakesOverAt` (128 frames): the bound holds.
    @Test(
        "a writer leaves checkpoints to the checkpointer, up to the bound where it takes over",
        arguments: [
            Case(name: "past pages, below the bound: no checkpoint", commits: 40, atLeast: 40, atMost: 127),
            Case(name: "far past the bound: the writer checkpoints", commits: 600, atLeast: 100, atMost: 140),
        ])
    func writerAlone(_ example: Case) throws {
        let path = try temporaryDatabasePath()
        let checkpointer = WALCheckpointer(path: path, pages: 8, writerTakesOverAt: 128)
        let database = try Self.writer(path, checkpointer)
        try Self.commit(database, rows: example.commits)
        let frames = try Self.walFrames(path)
        #expect(frames >= example.atLeast && frames <= example.atMost, "\(example.name): \(frames) frames")
        #expect(checkpointer.checkpoints == 0)
        #expect(try database.scalar("SELECT count(*) FROM t")?.int == example.commits)
    }

    /// Running, it checkpoints when asked: rounds of commits each followed by a checkpoint keep
    /// the WAL at about one round, far below what the writers alone would let it reach. Each
    /// round waits until every ask is served, not for a count of checkpoints: one that ran
    /// while the round was still committing (a starved machine) leaves the round's last frames
    /// behind, and the WAL starts over only once everything is copied back.
    @Test("the running checkpointer copies the WAL back when a commit asks, and stops when cancelled")
    func running() async throws {
        let path = try temporaryDatabasePath()
        let checkpointer = WALCheckpointer(path: path, pages: 8, writerTakesOverAt: 128)
        let database = try Self.writer(path, checkpointer)
        let service = Task { await checkpointer.run() }
        for round in 1...30 {
            try Self.commit(database, rows: 5)
            try await waitUntil("round \(round)'s asks served", timeout: .seconds(60)) { checkpointer.isIdle }
        }
        let frames = try Self.walFrames(path)
        // A round is about a dozen frames (two or three a commit); with no checkpoint between
        // rounds the WAL would have grown to the writers' bound, 128.
        #expect(frames <= 64, "\(frames) frames: the WAL restarted after each checkpoint")
        #expect(checkpointer.checkpoints >= 30)
        service.cancel()
        await service.value
        // Stopped: commits go on (the writer takes over at its bound) and nothing is lost.
        try Self.commit(database, rows: 450)
        #expect(try Self.walFrames(path) <= 140)
        #expect(try Database(path: path).scalar("SELECT count(*) FROM t")?.int == 600)
    }
}
