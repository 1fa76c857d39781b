import Foundation
import PerimeterNotifier
import PerimeterStore
import Testing

/// The arrivals table numbers its rows without AUTOINCREMENT (schema 2): what an earlier
/// release left is kept in order, and the processing loop's batches (read the oldest, process,
/// remove `first...last`) never take in a row journalled meanwhile, nor lose or reorder one.
@Suite("Notifier arrivals: numbering without AUTOINCREMENT")
struct NotifierArrivalsJournalTests {
    private static func temporaryPath() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "perimeter-arrivals-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory.appendingPathComponent("notifier.sqlite.arrivals").path
    }

    @Test("a schema 1 file keeps its unprocessed messages, in order, and new ones are numbered after them")
    func migratedInOrder() throws {
        let path = try Self.temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        do {
            // What the previous release created: AUTOINCREMENT, some rows processed and removed.
            let old = try Database(path: path)
            try old.execute(
                """
                CREATE TABLE inbox(
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    topic TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    received REAL NOT NULL);
                PRAGMA user_version = 1;
                """)
            for index in 0..<10 {
                try old.run(
                    "INSERT INTO inbox(topic, payload, received) VALUES (?, ?, ?)", "t/\(index)", [UInt8(index)], 1.0)
            }
            try old.run("DELETE FROM inbox WHERE seq <= 7")  // t/0 to t/6 (numbered 1 to 7) processed
        }
        let arrivals = try NotifierArrivals(path: path)
        #expect(try arrivals.database.schemaVersion == 2)
        let schema = try arrivals.database.scalar("SELECT sql FROM sqlite_master WHERE name = 'inbox'")?.string ?? ""
        #expect(!schema.contains("AUTOINCREMENT"), "\(schema)")
        #expect(
            try arrivals.database.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'inbox_numbered'")?.int == 0)
        let kept = try arrivals.inbox(limit: 100)
        #expect(kept.map(\.topic) == ["t/7", "t/8", "t/9"])
        #expect(kept.map(\.seq) == [8, 9, 10])
        #expect(kept.map(\.payload) == [[7], [8], [9]])
        try arrivals.journal(topic: "t/10", payload: [10], received: Date())
        #expect(try arrivals.inbox(limit: 100).map(\.seq) == [8, 9, 10, 11])
    }

    /// The processing loop's cycle, with arrivals journalled between its read and its removal
    /// and the table emptied now and then (numbers then start again): every message comes out
    /// once, in the order it was journalled.
    @Test("batches read and removed while messages arrive: each message once, in arrival order")
    func batchesExactlyOnceInOrder() throws {
        let path = try Self.temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        let journal = try NotifierArrivals(path: path)
        let processor = try NotifierArrivals(path: path)
        var next = 0
        func arrive(_ count: Int) throws {
            for _ in 0..<count {
                try journal.journal(topic: "t/\(next)", payload: Array("\(next)".utf8), received: Date())
                next += 1
            }
        }
        var processed: [String] = []
        var highest: Int64 = 0
        var restarted = false
        for round in 0..<60 {
            try arrive(round % 7)
            let batch = try processor.inbox(limit: 5)
            // Arrivals between the batch's read and its removal.
            try arrive(round % 3)
            guard let first = batch.first?.seq, let last = batch.last?.seq else { continue }
            if first <= highest { restarted = true }
            highest = max(highest, last)
            processed += batch.map(\.topic)
            try processor.removeInbox(first...last)
        }
        while true {
            let batch = try processor.inbox(limit: 5)
            guard let first = batch.first?.seq, let last = batch.last?.seq else { break }
            processed += batch.map(\.topic)
            try processor.removeInbox(first...last)
        }
        #expect(processed == (0..<next).map { "t/\($0)" }, "each once, in order")
        #expect(next > 100)
        #expect(restarted, "the table emptied and numbering started again at least once")
    }
}
