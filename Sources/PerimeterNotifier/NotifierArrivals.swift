import Foundation
import PerimeterMQTT
import PerimeterStore

/// The notifier's arrival journal: every inbound message as it arrived, until processed, in
/// a SQLite file of its own beside `notifier.database` (`{database}.arrivals`).
///
/// The MQTT client's network thread journals each burst of messages in one commit before
/// their acknowledgements are written (``ArrivalJournal``). In the same file as the outbox, each of those commits waited for the
/// lock behind the processing loop's and the deliverer's transactions, and the network thread
/// (which also reads the next message) stood still meanwhile: arrivals and processing took
/// turns a message at a time (`bench notifier`: about 5,000 events/s). Here a journal write
/// waits only for the processing loop's reading of a batch and its removal once processed.
///
/// While the notifier runs, the file is held by its one connection (`exclusive`): other
/// processes cannot open it until the notifier stops.
public final class NotifierArrivals {
    public let database: Database

    static let migrations = [
        Migration(
            1, "inbound messages until processed",
            sql: """
                CREATE TABLE inbox(
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    topic TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    received REAL NOT NULL);
                """),
        // AUTOINCREMENT kept a row of `sqlite_sequence` up to date on every insert: a second page
        // written to the WAL per message journalled, on the network thread (a fifth of the
        // insert's cost). Without it a new row is numbered one past the highest one left, which
        // keeps the order and the batches apart just the same: a batch's rows stay until its
        // removal, so whatever arrives meanwhile is numbered past its last; numbers are reused
        // only once every earlier row is gone.
        Migration(
            2, "inbound messages numbered without AUTOINCREMENT",
            sql: """
                CREATE TABLE inbox_numbered(
                    seq INTEGER PRIMARY KEY,
                    topic TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    received REAL NOT NULL);
                INSERT INTO inbox_numbered(seq, topic, payload, received)
                    SELECT seq, topic, payload, received FROM inbox ORDER BY seq;
                DROP TABLE inbox;
                ALTER TABLE inbox_numbered RENAME TO inbox;
                """),
    ]

    /// The journal beside the notifier's database file.
    public static func path(for databasePath: String) -> String { databasePath + ".arrivals" }

    /// - Parameter exclusive: hold the file for this connection alone while it is open
    ///   (``Database/Options/exclusive``): the running notifier's one connection, which both the
    ///   network thread and the processing loop use, taking turns (``ArrivalJournal``). Its
    ///   journal writes then cost no lock calls: with two connections each insert took and gave
    ///   back SQLite's file and WAL-index locks (`fcntl`), over a third of its cost.
    public init(path: String, readOnly: Bool = false, exclusive: Bool = false) throws {
        var options = Database.Options()
        options.readOnly = readOnly
        options.exclusive = exclusive && !readOnly
        database = try Database(path: path, options: options)
        if !readOnly { _ = try database.migrate(Self.migrations) }
    }

    public func journal(topic: String, payload: [UInt8], received: Date) throws {
        _ = try database.run(
            "INSERT INTO inbox(topic, payload, received) VALUES (?, ?, ?)", topic, payload,
            received.timeIntervalSince1970)
    }

    /// Appends `messages` in order, in one transaction (the network thread's group commit).
    public func journal(_ messages: [MQTTMessage], received: Date) throws {
        try database.transaction {
            for message in messages { try journal(topic: message.topic, payload: message.payload, received: received) }
        }
    }

    /// The oldest `limit` messages not yet removed, oldest first.
    public func inbox(limit: Int) throws -> [NotifierStore.InboxRow] {
        try Self.inbox(database, limit: limit)
    }

    /// Removes the messages `first...last` (a batch read by ``inbox(limit:)``: while its rows
    /// are there, whatever is journalled is numbered past `last`, so nothing falls in between).
    public func removeInbox(_ seqs: ClosedRange<Int64>) throws {
        try Self.removeInbox(database, seqs)
    }

    /// Messages journalled and not processed yet.
    public func count() throws -> Int {
        try database.scalar("SELECT count(*) FROM inbox")?.int ?? 0
    }

    static func inbox(_ database: Database, limit: Int) throws -> [NotifierStore.InboxRow] {
        try database.query("SELECT seq, topic, payload, received FROM inbox ORDER BY seq LIMIT ?", limit).map { row in
            NotifierStore.InboxRow(
                seq: Int64(row[0].int ?? 0), topic: row[1].string ?? "",
                payload: row[2].bytes ?? Array((row[2].string ?? "").utf8),
                received: Date(timeIntervalSince1970: row[3].double ?? 0))
        }
    }

    static func removeInbox(_ database: Database, _ seqs: ClosedRange<Int64>) throws {
        _ = try database.run("DELETE FROM inbox WHERE seq BETWEEN ? AND ?", seqs.lowerBound, seqs.upperBound)
    }
}
