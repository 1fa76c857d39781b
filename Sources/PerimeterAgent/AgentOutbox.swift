import Foundation
import PerimeterMQTT
import PerimeterStore

/// The agent's store-and-forward queue in SQLite: every message is written here before it is
/// sent and deleted only once the broker has acknowledged it, so what an agent observes while
/// the broker is unreachable (or while the agent itself restarts) is sent later, in order,
/// with the observation times it was measured at.
///
/// - Important: One owner (``AgentPublisher``), like every ``Database``.
final class AgentOutbox {
    let database: Database

    struct Row {
        var seq: Int64
        var message: MQTTMessage
    }

    static let migrations = [
        Migration(
            1, "outbox",
            sql: """
                CREATE TABLE outbox(
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    topic TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    qos INTEGER NOT NULL,
                    retain INTEGER NOT NULL,
                    queued REAL NOT NULL)
                """),
        // The last number given to each agent's observations (`n`): kept with the outbox, so
        // numbering goes on across restarts and a gap means a message lost after it left.
        Migration(2, "numbers", sql: "CREATE TABLE numbers(agent TEXT PRIMARY KEY, n INTEGER NOT NULL)"),
    ]

    init(path: String) throws {
        database = try Database(path: path)
        try database.migrate(Self.migrations)
    }

    /// Appends messages in order with the numbers they used, in one transaction.
    func append(_ messages: [MQTTMessage], numbers: [String: Int] = [:], at now: Date) throws {
        guard !messages.isEmpty else { return }
        try database.transaction {
            for message in messages {
                try database.run(
                    "INSERT INTO outbox(topic, payload, qos, retain, queued) VALUES (?, ?, ?, ?, ?)", message.topic,
                    message.payload, Int(message.qos.rawValue), message.retain ? 1 : 0, now.timeIntervalSince1970)
            }
            for (agent, n) in numbers {
                try database.run(
                    "INSERT INTO numbers(agent, n) VALUES (?, ?) ON CONFLICT(agent) DO UPDATE SET n = excluded.n",
                    agent,
                    n)
            }
        }
    }

    /// The last number given to each agent's observations.
    func numbers() throws -> [String: Int] {
        var numbers: [String: Int] = [:]
        for row in try database.query("SELECT agent, n FROM numbers") {
            if let agent = row[0].string, let n = row[1].int { numbers[agent] = Int(n) }
        }
        return numbers
    }

    /// The oldest `limit` messages after `seq`, oldest first.
    func rows(after seq: Int64 = 0, limit: Int) throws -> [Row] {
        try database.query(
            "SELECT seq, topic, payload, qos, retain FROM outbox WHERE seq > ? ORDER BY seq LIMIT ?", seq, limit
        ).map { row in
            Row(
                seq: Int64(row[0].int ?? 0),
                message: MQTTMessage(
                    topic: row[1].string ?? "", payload: row[2].bytes ?? [],
                    qos: QoS(rawValue: Int32(row[3].int ?? 1)) ?? .atLeastOnce, retain: row[4].int == 1))
        }
    }

    /// Forgets every message up to and including `seq`.
    func remove(through seq: Int64) throws {
        try database.run("DELETE FROM outbox WHERE seq <= ?", seq)
    }

    var count: Int { (try? database.scalar("SELECT count(*) FROM outbox")?.int) ?? 0 }

    /// Whether nothing waits (one indexed look, where ``count`` reads the whole table).
    var isEmpty: Bool { (try? database.scalar("SELECT EXISTS (SELECT 1 FROM outbox)")?.int) != 1 }
}
