import Foundation
import PerimeterCore
import PerimeterStore

/// The evaluator's SQLite file: what arrived (the inbox journal), how far it was processed,
/// what must be published (the outbox) and the retained picture as published.
///
/// The evaluator is deterministic in its inputs, so the journal is its state: after a crash
/// the journal up to the processed cursor is replayed (publishing nothing) to rebuild the
/// engines, the outbox rows not yet acknowledged are published again (same event ids), and
/// processing goes on from the cursor. Processing a group of inbox rows — their outbox rows,
/// the retained picture and the cursor — commits in one transaction.
public final class EvaluatorStore {
    public let database: Database

    /// What a journal row is. Arrivals are MQTT messages as they came; the others are inputs
    /// the service made itself, recorded so that a replay sees them in the same order.
    public enum EntryKind: Int, Sendable {
        /// An MQTT message (topic, payload).
        case arrival = 0
        /// A clock tick for a venue (topic: the venue; payload: its time, seconds since 1970).
        case tick = 1
        /// A venue's regions file as read (topic: the venue; payload: the file's text).
        case regionsFile = 2
        /// An MQTT message over the payload limit, kept as a stub (topic; payload: its size in
        /// bytes, as text) so that it is dead-lettered without ever being stored whole.
        case oversized = 3
        /// The partitions of a partitioned venue this evaluator holds from here on (topic: the
        /// venue; payload: `{"held":[n,…]}`): a replay keeps and drops subjects as the run did.
        case partitions = 4
        /// Partitions taken over (topic: the venue; payload: `{"partitions":[n,…],"states":[…]}`,
        /// the retained states of their subjects): the engines start from them.
        case handover = 5
        /// An observation of a partition just taken, stored by the broker before it was taken
        /// (topic and payload as an arrival's): processed as one, but refusals are not
        /// dead-lettered again (its former holder did that, or the state already covers it).
        case replayed = 6
    }

    public struct InboxRow: Sendable {
        public var seq: Int64
        public var kind: EntryKind
        /// The MQTT topic of an arrival; the venue of a tick or a regions file.
        public var topic: String
        public var payload: [UInt8]
        public var received: Date
    }

    public struct OutboxRow: Sendable {
        public var number: Int64
        public var message: OutboundMessage
    }

    static let migrations = [
        Migration(
            1, "journal, outbox, membership",
            sql: """
                CREATE TABLE inbox(
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    topic TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    received REAL NOT NULL);
                CREATE TABLE cursor(id INTEGER PRIMARY KEY CHECK (id = 1), processed INTEGER NOT NULL);
                INSERT INTO cursor VALUES (1, 0);
                CREATE TABLE outbox(
                    number INTEGER PRIMARY KEY AUTOINCREMENT,
                    inbox_seq INTEGER NOT NULL,
                    topic TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    qos INTEGER NOT NULL,
                    retain INTEGER NOT NULL,
                    expiry INTEGER,
                    event_id TEXT,
                    sent INTEGER NOT NULL DEFAULT 0);
                CREATE INDEX outbox_unsent ON outbox(number) WHERE sent = 0;
                CREATE TABLE membership(
                    venue TEXT NOT NULL,
                    region TEXT NOT NULL,
                    subject TEXT NOT NULL,
                    state TEXT NOT NULL,
                    t REAL NOT NULL,
                    seq INTEGER NOT NULL DEFAULT 0,
                    PRIMARY KEY (venue, region, subject)) WITHOUT ROWID;
                """),
        Migration(
            2, "snapshots bound the journal",
            sql: """
                CREATE TABLE snapshot(
                    id INTEGER PRIMARY KEY CHECK (id = 1),
                    seq INTEGER NOT NULL,
                    data BLOB NOT NULL,
                    t REAL NOT NULL);
                """),
        Migration(
            3, "outbox rows say when they were committed (a standby drops what the active published)",
            sql: "ALTER TABLE outbox ADD COLUMN created REAL NOT NULL DEFAULT 0;"),
        Migration(
            4, "typed journal entries instead of pseudo-topics; the retained picture as published",
            sql: """
                ALTER TABLE inbox ADD COLUMN kind INTEGER NOT NULL DEFAULT 0;
                UPDATE inbox SET kind = 1, topic = substr(topic, 7) WHERE topic LIKE '$tick/%';
                UPDATE inbox SET kind = 2, topic = substr(topic, 10) WHERE topic LIKE '$regions/%';
                CREATE TABLE retained(
                    topic TEXT PRIMARY KEY,
                    payload BLOB NOT NULL,
                    qos INTEGER NOT NULL) WITHOUT ROWID;
                """),
        // AUTOINCREMENT kept inbox's row of `sqlite_sequence` up to date on every insert: a
        // second page written to the WAL per arrival on the network thread (the insert's file
        // writes were a fifth of the evaluator's CPU with realistic traffic in `bench pipeline`)
        // and twice the WAL pages, so twice the checkpoints. ``journal(_:topic:payload:received:)``
        // numbers a row itself, past the highest row, the processed cursor and the snapshot.
        Migration(
            5, "journal rows numbered without AUTOINCREMENT",
            sql: """
                CREATE TABLE inbox_numbered(
                    seq INTEGER PRIMARY KEY,
                    topic TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    received REAL NOT NULL,
                    kind INTEGER NOT NULL DEFAULT 0);
                INSERT INTO inbox_numbered(seq, topic, payload, received, kind)
                    SELECT seq, topic, payload, received, kind FROM inbox ORDER BY seq;
                DROP TABLE inbox;
                ALTER TABLE inbox_numbered RENAME TO inbox;
                """),
        // The refused rows' retention ran with the stats, every `statsInterval`, as a scan of
        // the whole outbox (the last 10,000 sent rows are kept): a stall of the processor each time.
        Migration(
            6, "refused outbox rows indexed by when they were committed",
            sql: "CREATE INDEX IF NOT EXISTS outbox_refused ON outbox(created) WHERE sent = 2;"),
        // The outbox's AUTOINCREMENT, as the journal's before schema 5: `sqlite_sequence`
        // written with every outbox row, two or three times per transition. The store numbers
        // its rows itself (``write(seq:messages:now:)``).
        Migration(
            7, "outbox rows numbered without AUTOINCREMENT",
            sql: """
                CREATE TABLE outbox_numbered(
                    number INTEGER PRIMARY KEY,
                    inbox_seq INTEGER NOT NULL,
                    topic TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    qos INTEGER NOT NULL,
                    retain INTEGER NOT NULL,
                    expiry INTEGER,
                    event_id TEXT,
                    sent INTEGER NOT NULL DEFAULT 0,
                    created REAL NOT NULL DEFAULT 0);
                INSERT INTO outbox_numbered(number, inbox_seq, topic, payload, qos, retain, expiry, event_id, sent, created)
                    SELECT number, inbox_seq, topic, payload, qos, retain, expiry, event_id, sent, created
                    FROM outbox ORDER BY number;
                DROP TABLE outbox;
                ALTER TABLE outbox_numbered RENAME TO outbox;
                CREATE INDEX outbox_unsent ON outbox(number) WHERE sent = 0;
                CREATE INDEX outbox_refused ON outbox(created) WHERE sent = 2;
                """),
        // The membership table was written with every transition (an upsert for the state and
        // an update for the transition's number: two of a transition's seven statements, and a
        // page of a randomly keyed B-tree per commit) and read by nothing: the memberships are
        // the core's, rebuilt from the snapshot and the journal, and the retained `state`
        // topics are the published picture.
        Migration(8, "membership table dropped (written, never read)", sql: "DROP TABLE IF EXISTS membership;"),
    ]

    /// The highest outbox number handed out by this store (nil until the first row is written):
    /// numbers are never reused while this process runs, even when the newest rows are deleted
    /// (an erasure, a standby's or a refusal's pruning) and an acknowledgement of one deleted
    /// row may still be on its way. Across a restart nothing is in flight.
    private var lastOutboxNumber: Int64?

    /// The number through which sent rows were last pruned by ``markSent(_:keep:pruneStep:)``
    /// (nil until the first prune of this process).
    private var prunedThrough: Int64?

    public init(path: String) throws {
        database = try Database(path: path)
        _ = try database.migrate(Self.migrations)
    }

    // MARK: - Journal

    /// Appends an entry to the journal; returns its sequence number.
    ///
    /// Numbered one past the highest row, the processed cursor and the snapshot, never reusing a
    /// number: rows are only ever deleted once processed (a forgotten tick or an erasure, in the
    /// transaction that moves the cursor past them) or covered by the snapshot (its pruning), so
    /// every number handed out before is still in the table or at most the cursor or snapshot.
    @discardableResult
    public func journal(_ kind: EntryKind = .arrival, topic: String, payload: [UInt8], received: Date) throws -> Int64 {
        _ = try database.run(
            """
            INSERT INTO inbox(seq, kind, topic, payload, received) VALUES (
                1 + max(
                    coalesce((SELECT max(seq) FROM inbox), 0), (SELECT processed FROM cursor WHERE id = 1),
                    coalesce((SELECT seq FROM snapshot WHERE id = 1), 0)),
                ?, ?, ?, ?)
            """, kind.rawValue, topic, payload, received.timeIntervalSince1970)
        return database.lastInsertRowID
    }

    /// Appends entries `(kind, topic, payload)` in order, in one transaction (a group commit);
    /// returns their sequence numbers. `beforeCommit` runs inside the transaction once every
    /// entry is written (the crash test's fault injection). The first entry is numbered as
    /// ``journal(_:topic:payload:received:)`` numbers one; the others follow it (nothing else
    /// writes the journal while the transaction holds the lock).
    public func journal(
        _ entries: [(kind: EntryKind, topic: String, payload: [UInt8])], received: Date,
        beforeCommit: () -> Void = {}
    ) throws -> [Int64] {
        guard let first = entries.first else { return [] }
        return try database.transaction {
            var seqs = [try journal(first.kind, topic: first.topic, payload: first.payload, received: received)]
            seqs.reserveCapacity(entries.count)
            for entry in entries.dropFirst() {
                let seq = seqs[seqs.count - 1] + 1
                _ = try database.run(
                    "INSERT INTO inbox(seq, kind, topic, payload, received) VALUES (?, ?, ?, ?, ?)", seq,
                    entry.kind.rawValue, entry.topic, entry.payload, received.timeIntervalSince1970)
                seqs.append(seq)
            }
            beforeCommit()
            return seqs
        }
    }

    /// The last inbox row processed.
    public func processedCursor() throws -> Int64 {
        Int64(try database.scalar("SELECT processed FROM cursor WHERE id = 1")?.int ?? 0)
    }

    /// Inbox rows after `seq`, oldest first.
    public func inbox(after seq: Int64, through last: Int64 = .max, limit: Int = 512) throws -> [InboxRow] {
        try database.query(
            "SELECT seq, kind, topic, payload, received FROM inbox WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
            seq, last, limit
        ).map { row in
            InboxRow(
                seq: Int64(row[0].int ?? 0), kind: EntryKind(rawValue: row[1].int ?? 0) ?? .arrival,
                topic: row[2].string ?? "", payload: row[3].bytes ?? Array((row[3].string ?? "").utf8),
                received: Date(timeIntervalSince1970: row[4].double ?? 0))
        }
    }

    /// Records that `seq` was processed with these outputs, in one transaction: outbox rows,
    /// the retained picture, the cursor. Returns the outbox rows to publish.
    public func commit(seq: Int64, messages: [OutboundMessage], now: Date) throws -> [OutboxRow] {
        try database.transaction {
            let rows = try write(seq: seq, messages: messages, now: now)
            try advanceCursor(to: seq)
            return rows
        }
    }

    /// `commit`'s writes for one row without its transaction and cursor: for a group of rows
    /// committed together, inside the caller's transaction, which moves the cursor once
    /// (``advanceCursor(to:)``) past the group's last row. A savepoint and a cursor update per
    /// row were three of its eleven statements for a transition.
    public func write(seq: Int64, messages: [OutboundMessage], now: Date) throws -> [OutboxRow] {
        var rows: [OutboxRow] = []
        let now = now.timeIntervalSince1970
        for message in messages where message.retain {
            if message.payload.isEmpty {
                _ = try database.run("DELETE FROM retained WHERE topic = ?", message.topic)
            } else {
                _ = try database.run(
                    "INSERT OR REPLACE INTO retained(topic, payload, qos) VALUES (?, ?, ?)", message.topic,
                    message.payload, message.qos)
            }
        }
        for message in messages {
            let number = try nextOutboxNumber()
            _ = try database.run(
                """
                INSERT INTO outbox(number, inbox_seq, topic, payload, qos, retain, expiry, event_id, created)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
                number, seq, message.topic, message.payload, message.qos, message.retain,
                message.expiry.map { Int($0) }, message.eventID, now)
            rows.append(OutboxRow(number: number, message: message))
        }
        return rows
    }

    /// The next outbox number: one past the last handed out, or past the table's highest row
    /// at the first (a number skipped by a failed insert stays unused).
    private func nextOutboxNumber() throws -> Int64 {
        let last =
            try lastOutboxNumber ?? Int64(database.scalar("SELECT coalesce(max(number), 0) FROM outbox")?.int ?? 0)
        lastOutboxNumber = last + 1
        return last + 1
    }

    /// Records that the journal is processed through `seq` (inside the caller's transaction).
    public func advanceCursor(to seq: Int64) throws {
        _ = try database.run("UPDATE cursor SET processed = ? WHERE id = 1", seq)
    }

    /// The retained picture as last committed: every retained topic the evaluator has set and
    /// not cleared, with its payload. Republished after a reconnect to a broker that may have
    /// lost its retained store.
    public func retainedPicture() throws -> [OutboundMessage] {
        try database.query("SELECT topic, payload, qos FROM retained ORDER BY topic").map { row in
            OutboundMessage(
                topic: row[0].string ?? "", payload: row[1].bytes ?? Array((row[1].string ?? "").utf8),
                qos: row[2].int ?? 1, retain: true)
        }
    }

    /// The retained topics under `root` (`prefix/venue`) one of whose levels is `level` (an
    /// erased subject's topic level), sorted.
    public func retainedTopics(under root: String, naming level: String) throws -> [String] {
        let prefix = root + "/"
        return try database.query(
            "SELECT topic FROM retained WHERE substr(topic, 1, ?) = ? ORDER BY topic", prefix.utf8.count, prefix
        ).compactMap { row in
            guard let topic = row[0].string else { return nil }
            return topic.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false).contains {
                $0 == level
            } ? topic : nil
        }
    }

    /// The retained topics ending in `/config` (Home Assistant discovery configs among them),
    /// with their payloads.
    public func retainedConfigs() throws -> [String: [UInt8]] {
        var configs: [String: [UInt8]] = [:]
        for row in try database.query("SELECT topic, payload FROM retained WHERE topic LIKE '%/config'") {
            configs[row[0].string ?? ""] = row[1].bytes ?? Array((row[1].string ?? "").utf8)
        }
        return configs
    }

    // MARK: - Erasure

    /// Deletes every row naming a subject: the journal and outbox rows (up to journal row
    /// `through`) and the retained topics that have `level` (its topic level) as a level.
    public func erase(subject: String, venue: String, level: String, through seq: Int64) throws {
        try database.transaction {
            let names = "(substr(topic, -length(?) - 1) = '/' || ? OR instr(topic, '/' || ? || '/') > 0)"
            _ = try database.run("DELETE FROM inbox WHERE seq <= ? AND \(names)", seq, level, level, level)
            _ = try database.run("DELETE FROM outbox WHERE inbox_seq < ? AND \(names)", seq, level, level, level)
            _ = try database.run("DELETE FROM retained WHERE \(names)", level, level, level)
            // Its Home Assistant tracker configs name it in their own encoding (not its topic level).
            let node = HomeAssistantDiscovery(settings: HomeAssistantSettings(), venue: venue).nodeID
            let tracker = "/\(node)/\(HomeAssistantDiscovery.objectID(subject))/config"
            let trackers = "(instr(topic, '/device_tracker/') > 0 AND substr(topic, -length(?)) = ?)"
            _ = try database.run("DELETE FROM outbox WHERE inbox_seq < ? AND \(trackers)", seq, tracker, tracker)
            _ = try database.run("DELETE FROM retained WHERE \(trackers)", tracker, tracker)
        }
    }

    // MARK: - Snapshots

    /// Stores the state as of journal row `seq`, then drops the journal up to it. A snapshot
    /// older than the one stored is not written (two writers, one of them late, can never put an
    /// older state over a newer one whose journal is already gone). The journal goes in short
    /// transactions of `chunk` rows: one DELETE of 50,000 rows held the write lock long enough
    /// to stall the arrivals being journalled meanwhile. Rows up to the stored snapshot are never
    /// read again, so a crash halfway only leaves some for the next snapshot to drop.
    public func saveSnapshot(seq: Int64, data: [UInt8], now: Date, chunk: Int64 = 2_000) throws {
        let saved = try database.transaction {
            let stored = Int64(try database.scalar("SELECT seq FROM snapshot WHERE id = 1")?.int ?? -1)
            guard seq > stored else { return false }
            _ = try database.run(
                "INSERT OR REPLACE INTO snapshot(id, seq, data, t) VALUES (1, ?, ?, ?)", seq, data,
                now.timeIntervalSince1970)
            return true
        }
        guard saved, var from = try database.scalar("SELECT min(seq) FROM inbox")?.int.map(Int64.init) else {
            return
        }
        while from <= seq {
            let through = min(seq, from + chunk - 1)
            _ = try database.run("DELETE FROM inbox WHERE seq <= ?", through)
            from = through + 1
        }
    }

    /// The latest snapshot: the journal row it includes, and its data.
    public func loadSnapshot() throws -> (seq: Int64, data: [UInt8])? {
        guard let row = try database.row("SELECT seq, data FROM snapshot WHERE id = 1") else { return nil }
        return (Int64(row[0].int ?? 0), row[1].bytes ?? [])
    }

    // MARK: - Outbox

    /// Outbox rows not yet acknowledged after row `number`, oldest first.
    public func unsent(after number: Int64 = 0, limit: Int = 1000) throws -> [OutboxRow] {
        try database.query(
            """
            SELECT number, topic, payload, qos, retain, expiry, event_id FROM outbox
            WHERE sent = 0 AND number > ? ORDER BY number LIMIT ?
            """, number, limit
        ).map { row in
            OutboxRow(
                number: Int64(row[0].int ?? 0),
                message: OutboundMessage(
                    topic: row[1].string ?? "", payload: row[2].bytes ?? Array((row[2].string ?? "").utf8),
                    qos: row[3].int ?? 1, retain: (row[4].int ?? 0) != 0, expiry: row[5].int.map { UInt32($0) },
                    eventID: row[6].string))
        }
    }

    /// Marks rows as published and acknowledged; keeps the last `keep` to `keep + pruneStep`
    /// sent rows for inspection. Numbers ≤ 0 (republished messages that have no outbox row)
    /// are ignored.
    ///
    /// The older sent rows go in steps of `pruneStep` numbers, not with every call: a delete at
    /// the head of the outbox wrote its pages, the freelist and the database header into the WAL
    /// with each group commit, a seventh of the commit's CPU when groups are small (a few rows,
    /// at half of `bench pipeline`'s peak).
    public func markSent(_ numbers: [Int64], keep: Int = 10_000, pruneStep: Int = 1_000) throws {
        let numbers = numbers.filter { $0 > 0 }
        guard let highest = numbers.max() else { return }
        let bound = highest - Int64(keep)
        let step = Int64(max(1, pruneStep))
        let prune = bound >= (prunedThrough ?? 0) + step ? bound - bound % step : nil
        try database.transaction {
            // Acknowledgements come mostly in order: one statement per run of consecutive numbers
            // (every number of a run was acknowledged), not one per row.
            for run in Self.runs(numbers) {
                _ = try database.run(
                    "UPDATE outbox SET sent = 1 WHERE number BETWEEN ? AND ?", run.lowerBound, run.upperBound)
            }
            if let prune { _ = try database.run("DELETE FROM outbox WHERE sent = 1 AND number <= ?", prune) }
        }
        if let prune { prunedThrough = prune }
    }

    /// `numbers` as runs of consecutive values, ascending (duplicates merged).
    private static func runs(_ numbers: [Int64]) -> [ClosedRange<Int64>] {
        var runs: [ClosedRange<Int64>] = []
        for number in numbers.sorted() {
            if let last = runs.last, number <= last.upperBound + 1 {
                runs[runs.count - 1] = last.lowerBound...max(last.upperBound, number)
            } else {
                runs.append(number...number)
            }
        }
        return runs
    }

    /// Sets aside rows the broker refused (sent = 2): kept for inspection, never retried.
    public func markRefused(_ numbers: [Int64]) throws {
        try database.transaction {
            for number in numbers where number > 0 {
                _ = try database.run("UPDATE outbox SET sent = 2 WHERE number = ?", number)
            }
        }
    }

    /// Retention of rows the broker refused: those committed before `date` are deleted.
    @discardableResult
    public func dropRefused(before date: Date) throws -> Int {
        try database.run("DELETE FROM outbox WHERE sent = 2 AND created < ?", date.timeIntervalSince1970)
    }

    /// A standby's pruning: unsent rows committed before `date` are dropped (the active
    /// published them). Returns how many.
    @discardableResult
    public func dropUnsent(before date: Date) throws -> Int {
        try database.run("DELETE FROM outbox WHERE sent = 0 AND created < ?", date.timeIntervalSince1970)
    }

    public func unsentCount() throws -> Int {
        try database.scalar("SELECT count(*) FROM outbox WHERE sent = 0")?.int ?? 0
    }

    public func journalLength() throws -> Int { try database.scalar("SELECT count(*) FROM inbox")?.int ?? 0 }
}
