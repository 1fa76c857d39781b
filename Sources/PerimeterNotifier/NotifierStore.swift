import Foundation
import PerimeterCore
import PerimeterStore

/// The notifier's SQLite file: rules from topics, subjects' locales, region names, what each
/// rule did per subject, and the outbox (the messages as they arrived are in
/// ``NotifierArrivals``, a file of their own).
///
/// Processing a batch of arrivals — their outbox rows and rule-state changes — commits in one
/// transaction, so after `kill -9` a message is either wholly processed or not at all; one
/// processed and not yet removed from the arrivals is processed again, which changes nothing:
/// the outbox holds at most one row per (event, rule, channel), so an event that arrives twice
/// fires nothing twice (and a rule that did not fire for it then does not now: its state has
/// only moved on since).
public final class NotifierStore {
    public let database: Database

    /// Outbox states.
    public enum State: String, Sendable, CaseIterable {
        case pending, delivered, failed, dead
    }

    public struct InboxRow: Sendable {
        public var seq: Int64
        public var topic: String
        public var payload: [UInt8]
        public var received: Date
    }

    public struct OutboxRow: Sendable {
        public var number: Int64
        public var key: String
        public var venue: String
        public var rule: String
        public var channel: String
        public var subject: String
        public var record: [UInt8]
        public var attempts: Int
        public var created: Date
        public var state: State
        public var lastError: String?
        public var nextAttempt: Date
        /// The attempt count when an operator last re-queued the row (`notifier retry`):
        /// `maxAttempts` counts from here, while the attempt number sent keeps counting.
        public var retryBase: Int = 0
    }

    static let migrations = [
        Migration(
            1, "journal, rules, preferences, region names, rule state, outbox",
            sql: """
                CREATE TABLE inbox(
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    topic TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    received REAL NOT NULL);
                CREATE TABLE topic_rules(
                    venue TEXT NOT NULL, id TEXT NOT NULL, source TEXT NOT NULL,
                    PRIMARY KEY (venue, id)) WITHOUT ROWID;
                CREATE TABLE preferences(
                    venue TEXT NOT NULL, subject TEXT NOT NULL, locale TEXT,
                    PRIMARY KEY (venue, subject)) WITHOUT ROWID;
                CREATE TABLE region_names(
                    venue TEXT NOT NULL, region TEXT NOT NULL, name TEXT NOT NULL,
                    PRIMARY KEY (venue, region)) WITHOUT ROWID;
                CREATE TABLE rule_state(
                    venue TEXT NOT NULL, rule TEXT NOT NULL, subject TEXT NOT NULL,
                    fired INTEGER NOT NULL, last_fired REAL,
                    PRIMARY KEY (venue, rule, subject)) WITHOUT ROWID;
                CREATE TABLE outbox(
                    number INTEGER PRIMARY KEY AUTOINCREMENT,
                    key TEXT NOT NULL,
                    event_id TEXT NOT NULL,
                    venue TEXT NOT NULL,
                    rule TEXT NOT NULL,
                    channel TEXT NOT NULL,
                    subject TEXT NOT NULL,
                    record BLOB NOT NULL,
                    state TEXT NOT NULL DEFAULT 'pending',
                    attempts INTEGER NOT NULL DEFAULT 0,
                    next_attempt REAL NOT NULL,
                    last_error TEXT,
                    created REAL NOT NULL,
                    finished REAL,
                    UNIQUE (event_id, rule, channel));
                CREATE INDEX outbox_due ON outbox(next_attempt) WHERE state = 'pending';
                """),
        Migration(
            2, "attempts recorded before they are sent; finished rows indexed for pruning",
            sql: """
                ALTER TABLE outbox ADD COLUMN in_flight INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE outbox ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE outbox ADD COLUMN retry_base INTEGER NOT NULL DEFAULT 0;
                CREATE INDEX outbox_finished ON outbox(state, finished) WHERE state != 'pending';
                """),
        Migration(
            3, "due rows not in flight indexed, in all and by channel",
            sql: """
                CREATE INDEX outbox_ready ON outbox(next_attempt, number) WHERE state = 'pending' AND in_flight = 0;
                CREATE INDEX outbox_ready_channel ON outbox(channel, next_attempt, number)
                    WHERE state = 'pending' AND in_flight = 0;
                """),
        // No query reads `outbox_due` since `outbox_ready` came; keeping it up to date cost
        // every notification an entry written when queued and one deleted when delivered.
        Migration(4, "outbox_due dropped (outbox_ready serves its queries)", sql: "DROP INDEX outbox_due;"),
        // Every query of due rows names its channels (`outbox_ready_channel`); keeping
        // `outbox_ready` up to date cost every notification an entry written when queued and
        // one deleted when its attempt began.
        Migration(5, "outbox_ready dropped (every due query names its channels)", sql: "DROP INDEX outbox_ready;"),
    ]

    public init(path: String, readOnly: Bool = false) throws {
        var options = Database.Options()
        options.readOnly = readOnly
        database = try Database(path: path, options: options)
        if !readOnly { _ = try database.migrate(Self.migrations) }
    }

    // MARK: - Inbox of earlier releases

    // Arrivals are journalled in a file of their own (``NotifierArrivals``); this file's inbox
    // holds what an earlier release journalled and had not processed when it stopped, moved
    // over at start.

    public func inbox(limit: Int) throws -> [InboxRow] {
        try NotifierArrivals.inbox(database, limit: limit)
    }

    public func removeInbox(_ seqs: ClosedRange<Int64>) throws {
        try NotifierArrivals.removeInbox(database, seqs)
    }

    // MARK: - Rules, preferences, region names

    public func topicRules() throws -> [(venue: String, id: String, source: String)] {
        try database.query("SELECT venue, id, source FROM topic_rules ORDER BY venue, id").map {
            ($0[0].string ?? "", $0[1].string ?? "", $0[2].string ?? "")
        }
    }

    /// Stores a rule from `rules/{id}` (nil source: deleted, and what it did is forgotten).
    public func setTopicRule(venue: String, id: String, source: String?) throws {
        if let source {
            _ = try database.run(
                "INSERT INTO topic_rules VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET source = excluded.source", venue,
                id,
                source)
        } else {
            _ = try database.run("DELETE FROM topic_rules WHERE venue = ? AND id = ?", venue, id)
            _ = try database.run("DELETE FROM rule_state WHERE venue = ? AND rule = ?", venue, id)
        }
    }

    public func locale(venue: String, subject: String) throws -> String? {
        try database.scalar("SELECT locale FROM preferences WHERE venue = ? AND subject = ?", venue, subject)?.string
    }

    public func setLocale(venue: String, subject: String, locale: String?) throws {
        if let locale {
            _ = try database.run(
                "INSERT INTO preferences VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET locale = excluded.locale", venue,
                subject, locale)
        } else {
            _ = try database.run("DELETE FROM preferences WHERE venue = ? AND subject = ?", venue, subject)
        }
    }

    public func regionNames(venue: String) throws -> [String: String] {
        var names: [String: String] = [:]
        for row in try database.query("SELECT region, name FROM region_names WHERE venue = ?", venue) {
            names[row[0].string ?? ""] = row[1].string ?? ""
        }
        return names
    }

    public func setRegionName(venue: String, region: String, name: String?) throws {
        if let name {
            _ = try database.run(
                "INSERT INTO region_names VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET name = excluded.name", venue,
                region, name)
        } else {
            _ = try database.run("DELETE FROM region_names WHERE venue = ? AND region = ?", venue, region)
        }
    }

    /// Forgets a subject (after the evaluator erased it): its locale, rule states and every
    /// notification about it (those not yet delivered are not sent). Returns the rows dropped.
    public func erase(venue: String, subject: String) throws -> Int {
        _ = try database.run("DELETE FROM preferences WHERE venue = ? AND subject = ?", venue, subject)
        _ = try database.run("DELETE FROM rule_state WHERE venue = ? AND subject = ?", venue, subject)
        return try database.run(
            "DELETE FROM outbox WHERE venue = ? AND subject = ?", venue, subject)
    }

    // MARK: - Rule state

    public func ruleState(venue: String, rule: String, subject: String) throws -> RuleState? {
        guard
            let row = try database.row(
                "SELECT fired, last_fired FROM rule_state WHERE venue = ? AND rule = ? AND subject = ?", venue, rule,
                subject)
        else { return nil }
        return RuleState(fired: row[0].int ?? 0, lastFired: row[1].double.map(Date.init(timeIntervalSince1970:)))
    }

    public func setRuleState(_ state: RuleState, venue: String, rule: String, subject: String) throws {
        _ = try database.run(
            """
            INSERT INTO rule_state VALUES (?, ?, ?, ?, ?)
            ON CONFLICT DO UPDATE SET fired = excluded.fired, last_fired = excluded.last_fired
            """, venue, rule, subject, state.fired, state.lastFired?.timeIntervalSince1970)
    }

    /// Whether `rule` already fired for this event (a redelivered event fires nothing twice).
    public func hasFired(event: String, rule: String) throws -> Bool {
        try database.scalar("SELECT 1 FROM outbox WHERE event_id = ? AND rule = ? LIMIT 1", event, rule) != nil
    }

    // MARK: - Outbox

    /// Adds a notification; false when (event, rule, channel) is already there.
    @discardableResult
    public func enqueue(_ notification: LocationNotification, now: Date) throws -> Bool {
        try database.run(
            """
            INSERT INTO outbox(key, event_id, venue, rule, channel, subject, record, next_attempt, created)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
            """, notification.key, notification.event.id, notification.event.venue, notification.rule,
            notification.channel, notification.event.subject, Array(notification.serializedRecord.utf8),
            now.timeIntervalSince1970, now.timeIntervalSince1970) == 1
    }

    static let columns =
        "number, key, venue, rule, channel, subject, record, attempts, created, state, last_error, next_attempt, retry_base"

    static func outboxRow(_ row: Row) -> OutboxRow {
        OutboxRow(
            number: Int64(row[0].int ?? 0), key: row[1].string ?? "", venue: row[2].string ?? "",
            rule: row[3].string ?? "", channel: row[4].string ?? "", subject: row[5].string ?? "",
            record: row[6].bytes ?? Array((row[6].string ?? "").utf8), attempts: row[7].int ?? 0,
            created: Date(timeIntervalSince1970: row[8].double ?? 0),
            state: State(rawValue: row[9].string ?? "") ?? .pending, lastError: row[10].string,
            nextAttempt: Date(timeIntervalSince1970: row[11].double ?? 0), retryBase: row[12].int ?? 0)
    }

    /// Which channels a query of due rows looks at: all of them (also any no longer
    /// configured), or only those named.
    /// Pending rows due by `now` and not in flight, earliest due first (then oldest), at most
    /// `limit`, of `channels`.
    ///
    /// Read through the `outbox_ready_channel` index in its order, one channel at a time, so
    /// SQLite reads only the rows it returns: ordered by number it sorted every due row,
    /// records included, on each call (40% of the notifier's time in reads with a burst
    /// queued, `bench notifier`); reading the rows in flight to leave them out cost a read of
    /// each per turn, a thousand with MQTT publishes pipelined; and one query for several
    /// channels read past every due row of the others.
    public func due(now: Date, channels: [String], limit: Int) throws -> [OutboxRow] {
        guard limit > 0 else { return [] }
        var rows: [OutboxRow] = []
        for name in channels {
            try database.forEach(
                """
                SELECT \(Self.columns) FROM outbox INDEXED BY outbox_ready_channel
                WHERE state = 'pending' AND in_flight = 0 AND next_attempt <= ? AND channel = ?
                ORDER BY next_attempt, number LIMIT ?
                """,
                parameters: [now.timeIntervalSince1970, name, limit]
            ) { rows.append(Self.outboxRow($0)) }
        }
        if channels.count > 1 {
            rows.sort { ($0.nextAttempt, $0.number) < ($1.nextAttempt, $1.number) }
        }
        return Array(rows.prefix(limit))
    }

    /// Pending rows not in flight of channels other than `channels` (those no longer
    /// configured), oldest first.
    public func pending(outside channels: [String]) throws -> [OutboxRow] {
        let list = Array(repeating: "?", count: channels.count).joined(separator: ", ")
        var rows: [OutboxRow] = []
        try database.forEach(
            """
            SELECT \(Self.columns) FROM outbox WHERE state = 'pending' AND in_flight = 0
            AND channel NOT IN (\(list)) ORDER BY number
            """, parameters: channels.map { $0 as any SQLBindable }
        ) { rows.append(Self.outboxRow($0)) }
        return rows
    }

    /// When the next pending row not in flight is due (rows in flight are due already:
    /// counting them would make a waiter with deliveries under way never sleep).
    public func nextDue(channels: [String]) throws -> Date? {
        try due(now: .distantFuture, channels: channels, limit: 1).first?.nextAttempt
    }

    /// Records that attempts on `rows` start now, in one transaction, before anything is
    /// sent: each row's attempt count goes up and it is marked in flight. A row still in flight
    /// when the notifier starts was being delivered when it died (``recoverInterrupted(maxCrashes:maxAttempts:now:)``).
    /// Returns the rows with their new attempt numbers.
    public func begin(_ rows: [OutboxRow]) throws -> [OutboxRow] {
        guard !rows.isEmpty else { return [] }
        try database.transaction {
            for row in rows {
                _ = try database.run(
                    "UPDATE outbox SET attempts = attempts + 1, in_flight = 1 WHERE number = ?", row.number)
            }
        }
        return rows.map { row in
            var row = row
            row.attempts += 1
            return row
        }
    }

    /// Rows whose attempt started and never finished: the process died during delivery. Each
    /// counts one more crash in a row; a row at `maxCrashes` (a poison delivery that takes the
    /// notifier down every time) or whose unfinished attempt was its last is set aside as
    /// dead, the others are due again at once. Returns the rows set aside and why.
    public func recoverInterrupted(
        maxCrashes: Int, maxAttempts: Int, now: Date
    ) throws -> [(row: OutboxRow, reason: String)] {
        var setAside: [(row: OutboxRow, reason: String)] = []
        try database.transaction {
            let rows = try database.query(
                "SELECT \(Self.columns), crashes FROM outbox WHERE in_flight = 1 AND state = 'pending'")
            for found in rows {
                let row = Self.outboxRow(found)
                let crashes = (found[13].int ?? 0) + 1
                let reason: String?
                if crashes >= maxCrashes {
                    reason =
                        "crashedDuringDelivery: the notifier stopped during \(crashes) attempts in a row on this "
                        + "notification (notifier.maxCrashes \(maxCrashes)); set aside"
                } else if row.attempts - row.retryBase >= maxAttempts {
                    reason = "the last attempt (\(row.attempts) of \(maxAttempts)) did not finish: the notifier stopped"
                } else {
                    reason = nil
                }
                _ = try database.run(
                    """
                    UPDATE outbox SET in_flight = 0, crashes = ?, state = ?, last_error = ?,
                    finished = CASE WHEN ? = 'dead' THEN ? ELSE NULL END WHERE number = ?
                    """, crashes, reason == nil ? State.pending.rawValue : State.dead.rawValue,
                    reason ?? "attempt \(row.attempts) did not finish: the notifier stopped during delivery",
                    reason == nil ? "pending" : "dead", now.timeIntervalSince1970, row.number)
                if let reason { setAside.append((row, reason)) }
            }
        }
        return setAside
    }

    /// Records how an attempt ended: delivered, failed for good, dead, or pending again at
    /// `retryAt`. The row is no longer in flight and its run of crashes is over.
    public func record(
        _ number: Int64, state: State, attempts: Int, error: String?, retryAt: Date?, now: Date
    ) throws {
        _ = try database.run(
            """
            UPDATE outbox SET state = ?, attempts = ?, last_error = ?, next_attempt = coalesce(?, next_attempt),
            in_flight = 0, crashes = 0, finished = CASE WHEN ? = 'pending' THEN NULL ELSE ? END WHERE number = ?
            """, state.rawValue, attempts, error, retryAt?.timeIntervalSince1970, state.rawValue,
            now.timeIntervalSince1970, number)
    }

    /// Deletes finished rows older than their retention: delivered ones finished before
    /// `now - delivered`, dead and failed ones before `now - undeliverable`. Returns how many.
    @discardableResult
    public func prune(now: Date, delivered: Double, undeliverable: Double) throws -> Int {
        let now = now.timeIntervalSince1970
        return try database.run(
            "DELETE FROM outbox WHERE state = 'delivered' AND finished < ?", now - delivered)
            + database.run(
                "DELETE FROM outbox WHERE state IN ('dead', 'failed') AND finished < ?", now - undeliverable)
    }

    /// Which rows ``requeue(_:now:)`` puts back: failed and dead ones (pending and delivered
    /// rows are never touched), narrowed by any of key, rule, channel and state.
    public struct Selection: Sendable, Equatable {
        public var key: String?
        public var rule: String?
        public var channel: String?
        /// `.failed` or `.dead`; nil: both.
        public var state: State?
        public init(key: String? = nil, rule: String? = nil, channel: String? = nil, state: State? = nil) {
            self.key = key
            self.rule = rule
            self.channel = channel
            self.state = state
        }
    }

    /// Puts the selected failed and dead rows back in the queue, due at once whatever the
    /// notifier's clock says (ahead of rows waiting for a retry), with a fresh run of
    /// `maxAttempts` attempts; the attempt number sent keeps counting. Returns the rows as they
    /// were before.
    @discardableResult
    public func requeue(_ selection: Selection) throws -> [OutboxRow] {
        var conditions = ["state IN ('failed', 'dead')"]
        var arguments: [any SQLBindable] = []
        for (column, value) in [
            ("key", selection.key), ("rule", selection.rule), ("channel", selection.channel),
            ("state", selection.state?.rawValue),
        ] {
            if let value {
                conditions.append("\(column) = ?")
                arguments.append(value)
            }
        }
        var rows: [OutboxRow] = []
        try database.transaction {
            rows = []
            try database.forEach(
                "SELECT \(Self.columns) FROM outbox WHERE \(conditions.joined(separator: " AND ")) ORDER BY number",
                parameters: arguments
            ) { rows.append(Self.outboxRow($0)) }
            for row in rows {
                _ = try database.run(
                    """
                    UPDATE outbox SET state = 'pending', next_attempt = 0, finished = NULL, in_flight = 0,
                    crashes = 0, retry_base = attempts WHERE number = ?
                    """, row.number)
            }
        }
        return rows
    }

    /// Rows per (channel, state).
    public func summary() throws -> [(channel: String, state: String, count: Int)] {
        try database.query(
            "SELECT channel, state, count(*) FROM outbox GROUP BY channel, state ORDER BY channel, state"
        )
        .map { ($0[0].string ?? "", $0[1].string ?? "", $0[2].int ?? 0) }
    }

    /// The oldest rows not delivered (pending, failed, dead).
    public func oldestUndelivered(limit: Int) throws -> [OutboxRow] {
        try database.query(
            "SELECT \(Self.columns) FROM outbox WHERE state != 'delivered' ORDER BY created, number LIMIT ?", limit
        ).map(Self.outboxRow)
    }

    public func count(_ state: State) throws -> Int {
        try database.scalar("SELECT count(*) FROM outbox WHERE state = ?", state.rawValue)?.int ?? 0
    }
}
