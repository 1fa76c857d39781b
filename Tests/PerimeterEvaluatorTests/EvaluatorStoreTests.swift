import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterTestSupport
import Testing

/// The evaluator's SQLite file on its own: snapshots written by two connections (the processing
/// task and the background snapshot thread) can never put an older state over a newer one.
@Suite("Evaluator store")
struct EvaluatorStoreTests {
    @Test("a snapshot older than the stored one is not written, and the journal it covers stays dropped")
    func olderSnapshotRefused() throws {
        let directory = TestScratch.root
            .appendingPathComponent("perimeter-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("evaluator.sqlite").path

        let processing = try EvaluatorStore(path: path)
        let background = try EvaluatorStore(path: path)
        var seqs: [Int64] = []
        for index in 0..<6 {
            seqs.append(try processing.journal(topic: "obs/\(index)", payload: [UInt8(index)], received: Date()))
        }
        try background.saveSnapshot(seq: seqs[3], data: Array("newer".utf8), now: Date())
        try processing.saveSnapshot(seq: seqs[1], data: Array("older".utf8), now: Date())

        let stored = try #require(try processing.loadSnapshot())
        #expect(stored.seq == seqs[3])
        #expect(stored.data == Array("newer".utf8))
        // Rows up to the snapshot are gone; the two after it are what a restart replays.
        #expect(try processing.inbox(after: 0).map(\.seq) == Array(seqs[4...]))

        try processing.saveSnapshot(seq: seqs[5], data: Array("newest".utf8), now: Date())
        #expect(try background.loadSnapshot()?.seq == seqs[5])
        #expect(try background.inbox(after: 0).isEmpty)
    }
}

/// Journal numbering without AUTOINCREMENT: a number is never handed out twice, whichever rows
/// were deleted (the processor reads rows after its cursor, so a reused number is a lost row).
@Suite("Evaluator store: journal numbering")
struct EvaluatorJournalNumberingTests {
    static func store() throws -> (EvaluatorStore, String) {
        let directory = TestScratch.root.appendingPathComponent("perimeter-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("evaluator.sqlite").path
        return (try EvaluatorStore(path: path), path)
    }

    enum Removal: String, CaseIterable, Sendable {
        /// The newest row processed and forgotten (a tick that changed nothing).
        case forgetNewest
        /// Every row processed and pruned by a snapshot.
        case snapshotAll
        /// Every row pruned by a snapshot the cursor has not reached (only tests do that).
        case snapshotAhead
        /// The processed rows naming a subject erased, the newest among them.
        case erase
    }

    @Test(
        "after each way rows are deleted, the next row is numbered past every earlier one", arguments: Removal.allCases)
    func neverReused(_ removal: Removal) throws {
        let (store, _) = try Self.store()
        var seqs: [Int64] = []
        for index in 0..<5 {
            seqs.append(try store.journal(topic: "perimeter/v1/v/obs/ann-\(index)/gps", payload: [1], received: Date()))
        }
        #expect(seqs == [1, 2, 3, 4, 5])
        switch removal {
        case .forgetNewest:
            _ = try store.commit(seq: 5, messages: [], now: Date())
            _ = try store.database.run("DELETE FROM inbox WHERE seq = 5")
        case .snapshotAll:
            _ = try store.commit(seq: 5, messages: [], now: Date())
            try store.saveSnapshot(seq: 5, data: [1], now: Date())
        case .snapshotAhead:
            try store.saveSnapshot(seq: 5, data: [1], now: Date())
        case .erase:
            _ = try store.commit(seq: 5, messages: [], now: Date())
            try store.erase(subject: "ann-4", venue: "v", level: "ann-4", through: 5)
        }
        #expect(try store.inbox(after: 0).allSatisfy { $0.seq < 5 }, "row 5 is gone (\(removal))")
        let next = try store.journal(topic: "perimeter/v1/v/obs/bob/gps", payload: [2], received: Date())
        #expect(next == 6, "\(removal)")
        #expect(try store.inbox(after: 5).map(\.seq) == [6], "the processor, past 5, reads it")
        // A group commit numbers its rows on from the same floor.
        let burst = try store.journal(
            (0..<3).map { (kind: .arrival, topic: "perimeter/v1/v/obs/cy-\($0)/gps", payload: [3]) }, received: Date())
        #expect(burst == [7, 8, 9], "\(removal)")
        #expect(try store.inbox(after: 6).map(\.topic) == (0..<3).map { "perimeter/v1/v/obs/cy-\($0)/gps" })
        #expect(try store.journal([], received: Date()) == [])
    }

    @Test("outbox numbers are never handed out twice while the store runs, the newest rows deleted or not")
    func outboxNumbers() throws {
        let (store, path) = try Self.store()
        func message(_ subject: String) -> OutboundMessage {
            OutboundMessage(topic: "perimeter/v1/v/event/hall/\(subject)", payload: [1], qos: 1, retain: false)
        }
        for index in 0..<3 {
            try store.journal(topic: "perimeter/v1/v/obs/ann/gps", payload: [UInt8(index)], received: Date())
        }
        let first = try store.commit(
            seq: 1, messages: [message("bob"), message("ann")], now: Date())
        #expect(first.map(\.number) == [1, 2])
        // The newest row (ann's, perhaps still in flight) is erased: its number is not reused.
        try store.erase(subject: "ann", venue: "v", level: "ann", through: 2)
        #expect(try store.unsent().map(\.number) == [1])
        let second = try store.commit(seq: 2, messages: [message("cy")], now: Date())
        #expect(second.map(\.number) == [3])
        try store.markSent([1, 3])
        // A standby's pruning deletes every unsent row; later rows still count on.
        let third = try store.commit(seq: 3, messages: [message("dee")], now: Date())
        #expect(third.map(\.number) == [4])
        #expect(try store.dropUnsent(before: Date().addingTimeInterval(60)) == 1)
        #expect(
            try store.commit(seq: 3, messages: [message("eve")], now: Date()).map(\.number) == [
                5
            ])
        // After a restart (nothing in flight) numbering goes on past the table's highest row.
        let reopened = try EvaluatorStore(path: path)
        #expect(
            try reopened.commit(seq: 3, messages: [message("fay")], now: Date()).map(\.number)
                == [6])
    }

    @Test("an outbox numbered with AUTOINCREMENT keeps its rows and numbers; the next continues after them")
    func outboxMigrated() throws {
        let (store, path) = try Self.store()
        let rows = (1...3).map {
            OutboundMessage(topic: "perimeter/v1/v/event/hall/s\($0)", payload: [UInt8($0)], qos: 1, retain: false)
        }
        _ = try store.commit(seq: 0, messages: rows, now: Date())
        try store.markSent([1])
        // What schema 6 left: the same rows in a table numbered with AUTOINCREMENT.
        try store.database.execute(
            """
            CREATE TABLE old(number INTEGER PRIMARY KEY AUTOINCREMENT, inbox_seq INTEGER NOT NULL, topic TEXT NOT NULL,
                payload BLOB NOT NULL, qos INTEGER NOT NULL, retain INTEGER NOT NULL, expiry INTEGER, event_id TEXT,
                sent INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL DEFAULT 0);
            INSERT INTO old SELECT number, inbox_seq, topic, payload, qos, retain, expiry, event_id, sent, created FROM outbox;
            DROP TABLE outbox; ALTER TABLE old RENAME TO outbox;
            CREATE INDEX outbox_unsent ON outbox(number) WHERE sent = 0;
            CREATE INDEX outbox_refused ON outbox(created) WHERE sent = 2;
            PRAGMA user_version = 6;
            """)
        let reopened = try EvaluatorStore(path: path)
        let sql = try reopened.database.scalar("SELECT sql FROM sqlite_master WHERE name = 'outbox'")?.string ?? ""
        #expect(!sql.contains("AUTOINCREMENT"), "\(sql)")
        #expect(try reopened.unsent().map(\.number) == [2, 3])
        #expect(try reopened.unsent().map(\.message.payload) == [[2], [3]])
        let next = try reopened.commit(seq: 0, messages: [rows[0]], now: Date())
        #expect(next.map(\.number) == [4])
        let indexes = try reopened.database.query(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'outbox'")
        #expect(Set(indexes.compactMap { $0[0].string }) == ["outbox_unsent", "outbox_refused"])
    }

    @Test(
        "marking sent takes exactly the numbers acknowledged, in any order and with gaps",
        arguments: [
            [Int64](),
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
            [3, 1, 2, 7, 9, 8],
            [10, 5, 1],
            [2, 2, 3, 5, 4, 9],
            [1, 3, 5, 7, 9],
        ])
    func markSent(acknowledged: [Int64]) throws {
        let (store, _) = try Self.store()
        let messages = (1...10).map {
            OutboundMessage(topic: "perimeter/v1/test/event/\($0)", payload: Array("\($0)".utf8), qos: 1, retain: false)
        }
        let rows = try store.commit(seq: 1, messages: messages, now: Date())
        #expect(rows.map(\.number) == Array(1...10))
        try store.markSent(acknowledged)
        let unsent = try store.unsent().map(\.number)
        #expect(unsent == Array(1...10).filter { !acknowledged.contains($0) }, "acknowledged \(acknowledged)")
    }

    @Test("schema 8 drops the membership table (written with every transition, read by nothing) and keeps the rest")
    func membershipDropped() throws {
        let (store, path) = try Self.store()
        func tables(_ store: EvaluatorStore) throws -> Set<String> {
            Set(
                try store.database.query("SELECT name FROM sqlite_master WHERE type = 'table'").compactMap {
                    $0[0].string
                })
        }
        #expect(try !tables(store).contains("membership"))
        try store.journal(topic: "perimeter/v1/v/obs/ann/gps", payload: [1], received: Date())
        let retained = OutboundMessage(
            topic: "perimeter/v1/v/state/hall/ann", payload: Array("inside".utf8), qos: 1, retain: true)
        _ = try store.commit(seq: 1, messages: [retained], now: Date())
        // What schema 7 left: the table, with a row.
        try store.database.execute(
            """
            CREATE TABLE membership(venue TEXT NOT NULL, region TEXT NOT NULL, subject TEXT NOT NULL,
                state TEXT NOT NULL, t REAL NOT NULL, seq INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (venue, region, subject)) WITHOUT ROWID;
            INSERT INTO membership VALUES ('v', 'hall', 'ann', 'inside', 0, 1);
            PRAGMA user_version = 7;
            """)
        let reopened = try EvaluatorStore(path: path)
        #expect(try !tables(reopened).contains("membership"))
        #expect(try reopened.retainedPicture().map(\.topic) == [retained.topic])
        #expect(try reopened.unsent().map(\.message.topic) == [retained.topic])
        #expect(try reopened.inbox(after: 0).count == 1)
    }

    @Test(
        "sent rows are pruned in steps: between keep and keep + step stay, whatever the acknowledgements' pace",
        arguments: [1, 3, 7, 25])
    func pruneInSteps(acknowledgedAtOnce: Int) throws {
        let (store, _) = try Self.store()
        let messages = (1...100).map {
            OutboundMessage(topic: "perimeter/v1/test/event/\($0)", payload: [1], qos: 1, retain: false)
        }
        _ = try store.commit(seq: 1, messages: messages, now: Date())
        func sent() throws -> [Int] {
            try store.database.query("SELECT number FROM outbox WHERE sent = 1 ORDER BY number").compactMap {
                $0[0].int
            }
        }
        var highest = 0
        var most = 0
        while highest < 100 {
            let next = min(100, highest + acknowledgedAtOnce)
            try store.markSent((highest + 1...next).map(Int64.init), keep: 10, pruneStep: 5)
            highest = next
            let kept = try sent()
            // The newest `keep` are always there, and at most `keep + step` in all.
            #expect(kept.last == highest)
            #expect(kept.count >= min(highest, 10) && kept.count < 15, "\(kept) after \(highest)")
            #expect(kept == Array((highest - kept.count + 1)...highest))
            most = max(most, kept.count)
        }
        #expect(try store.unsent().isEmpty)
        // Acknowledged a few at a time, the old rows wait for the next step (not one delete per call).
        if acknowledgedAtOnce < 5 { #expect(most == 14) }
    }

    @Test("a journal written with AUTOINCREMENT keeps its numbers and rows; the next continues after them")
    func migrated() throws {
        let (store, path) = try Self.store()
        for index in 0..<3 { try store.journal(topic: "t/\(index)", payload: [UInt8(index)], received: Date()) }
        _ = try store.commit(seq: 3, messages: [], now: Date())
        // What schema 4 left: the same rows in a table numbered with AUTOINCREMENT.
        try store.database.execute(
            """
            CREATE TABLE old(seq INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload BLOB NOT NULL,
                received REAL NOT NULL, kind INTEGER NOT NULL DEFAULT 0);
            INSERT INTO old SELECT seq, topic, payload, received, kind FROM inbox;
            DROP TABLE inbox; ALTER TABLE old RENAME TO inbox;
            DELETE FROM inbox WHERE seq = 3;
            PRAGMA user_version = 4;
            """)
        let reopened = try EvaluatorStore(path: path)
        let sql = try reopened.database.scalar("SELECT sql FROM sqlite_master WHERE name = 'inbox'")?.string ?? ""
        #expect(!sql.contains("AUTOINCREMENT"), "\(sql)")
        #expect(try reopened.inbox(after: 0).map(\.topic) == ["t/0", "t/1"])
        #expect(try reopened.inbox(after: 0).map(\.payload) == [[0], [1]])
        #expect(try reopened.journal(topic: "t/next", payload: [9], received: Date()) == 4)
    }
}
