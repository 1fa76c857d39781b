import Foundation
import PerimeterStore

/// The notifier's arrival journal: every inbound message as it arrived, until processed, in
/// a SQLite file of its own beside `notifier.database` (`{database}.arrivals`).
///
/// The MQTT client's network thread journals each message before libmosquitto acknowledges
/// it, one commit each. In the same file as the outbox, each of those commits waited for the
/// lock behind the processing loop's and the deliverer's transactions, and the network thread
/// (which also reads the next message) stood still meanwhile: arrivals and processing took
/// turns a message at a time (`bench notifier`: about 5,000 events/s). Here a journal write
/// waits only for the processing loop's removal of the rows it has processed.
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
                """)
    ]

    /// The journal beside the notifier's database file.
    public static func path(for databasePath: String) -> String { databasePath + ".arrivals" }

    public init(path: String, readOnly: Bool = false) throws {
        var options = Database.Options()
        options.readOnly = readOnly
        database = try Database(path: path, options: options)
        if !readOnly { _ = try database.migrate(Self.migrations) }
    }

    public func journal(topic: String, payload: [UInt8], received: Date) throws {
        _ = try database.run(
            "INSERT INTO inbox(topic, payload, received) VALUES (?, ?, ?)", topic, payload,
            received.timeIntervalSince1970)
    }

    /// The oldest `limit` messages not yet removed, oldest first.
    public func inbox(limit: Int) throws -> [NotifierStore.InboxRow] {
        try Self.inbox(database, limit: limit)
    }

    /// Removes the messages `first...last` (a batch read by ``inbox(limit:)``: sequence numbers
    /// only grow, so nothing journalled later falls in between).
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
