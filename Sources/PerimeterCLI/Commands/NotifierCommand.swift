import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterNotifier

/// `perimeter notifier`: runs the notifier service.
struct NotifierCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notifier", abstract: "Run the notifier: region events in, notifications out.",
        discussion: """
            Subscribes to the venues' enter/exit/dwell topics (and self/… for notifications to a
            subject's own device), the subjects' preferences, live rules (rules/{rule}) and region
            definitions with a persistent session; fires the venues' rules and delivers their
            notifications over MQTT, webhooks and mail through a SQLite outbox
            (notifier.database): at most one notification per (event, rule, channel), retried
            with backoff, dead after notifier.maxAttempts with a deadletter/notifier message;
            `notifier retry` re-queues failed and dead ones.
            SIGHUP re-reads the rules files. Settings: --config FILE (or PERIMETER_CONFIG),
            PERIMETER_* variables and --set key=value; see config/notifier.example.json.
            """,
        subcommands: [NotifierStatusCommand.self, NotifierRetryCommand.self])

    @Option(help: "JSON configuration file.", valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable); overrides file and environment.", valueName: "key=value")
    var set: [String] = []

    func run() async throws {
        let (configuration, logger) = try NotifierConfiguration.load(config: config, overrides: set, label: "notifier")
        try await ServiceGroup(
            services: [NotifierService(configuration: configuration, logger: logger)], logger: logger
        )
        .run()
    }
}

/// Where the notifier's database is: `--database`, else notifier.database from `--config`.
private func notifierDatabase(config: String?, database: String?) throws -> String {
    var path = database
    if path == nil {
        let reader = try ConfigReader(filePath: config, environment: [:], overrides: [])
        path = reader.string("notifier.database", default: "perimeter-notifier.sqlite")
    }
    guard let path, FileManager.default.fileExists(atPath: path) else {
        throw ValidationError("no notifier database at \(path ?? "?")")
    }
    return path
}

/// `perimeter notifier retry`: failed and dead notifications back in the queue.
struct NotifierRetryCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retry", abstract: "Re-queue failed and dead notifications (by key, rule, channel or state).",
        discussion: """
            Puts the outbox rows that failed for good or went dead back in the queue, due at once,
            with a fresh run of notifier.maxAttempts attempts (the attempt number sent keeps
            counting). Narrow the selection with --key, --rule, --channel and --state (failed or
            dead); give at least one of them, or --all. Pending and delivered rows are never
            touched. A running notifier picks the rows up within a minute; the command prints
            each row it re-queued. Works on notifier.database from --config, or --database.
            """)

    @Option(help: "JSON configuration file (for notifier.database).", valueName: "file")
    var config: String?

    @Option(help: "The notifier's SQLite file (overrides the configuration).", valueName: "file")
    var database: String?

    @Option(help: "One notification, by its idempotency key (event id:rule id).", valueName: "key")
    var key: String?

    @Option(help: "Notifications of this rule.", valueName: "rule")
    var rule: String?

    @Option(help: "Notifications on this channel.", valueName: "channel")
    var channel: String?

    @Option(help: "Only rows in this state: failed or dead (default: both).", valueName: "state")
    var state: String?

    @Flag(help: "Every failed and dead notification.")
    var all: Bool

    mutating func validate() throws {
        if config == nil && database == nil { throw ValidationError("give --config FILE or --database FILE") }
        if let state, state != "failed" && state != "dead" {
            throw ValidationError("--state '\(state)': only failed and dead notifications can be re-queued")
        }
        if key == nil && rule == nil && channel == nil && state == nil && !all {
            throw ValidationError("say which notifications: --key, --rule, --channel, --state, or --all")
        }
    }

    func run() async throws {
        let path = try notifierDatabase(config: config, database: database)
        let store = try NotifierStore(path: path)
        let selection = NotifierStore.Selection(
            key: key, rule: rule, channel: channel, state: state.flatMap(NotifierStore.State.init(rawValue:)))
        let rows = try store.requeue(selection)
        for row in rows {
            print(
                "re-queued \(row.key) channel=\(row.channel) was=\(row.state.rawValue) attempts=\(row.attempts)"
                    + (row.lastError.map { " error=\($0)" } ?? ""))
        }
        print("\(rows.count) notification(s) re-queued")
        if rows.isEmpty { throw ExitCode(1, "no failed or dead notification matches") }
    }
}

/// `perimeter notifier status`: the outbox at a glance.
struct NotifierStatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Print the outbox summary and the oldest undelivered notifications.",
        discussion: """
            Reads the notifier's database (notifier.database from --config, or --database) without
            changing it: rows per channel and state (pending, delivered, failed, dead), then the
            oldest rows not delivered with their attempts and last error.
            """)

    @Option(help: "JSON configuration file (for notifier.database).", valueName: "file")
    var config: String?

    @Option(help: "The notifier's SQLite file (overrides the configuration).", valueName: "file")
    var database: String?

    @Option(help: "How many undelivered rows to list (default 10).", valueName: "n")
    var limit: Int = 10

    mutating func validate() throws {
        if limit < 0 { throw ValidationError("--limit must not be negative") }
        if config == nil && database == nil { throw ValidationError("give --config FILE or --database FILE") }
    }

    func run() async throws {
        let path = try notifierDatabase(config: config, database: database)
        let store = try NotifierStore(path: path, readOnly: true)
        print("outbox \(path)")
        let summary = try store.summary()
        if summary.isEmpty { print("  (empty)") }
        var channels: [String: [String: Int]] = [:]
        for (channel, state, count) in summary { channels[channel, default: [:]][state] = count }
        let states = NotifierStore.State.allCases.map(\.rawValue)
        print("  " + (["channel"] + states).map { $0.padding(toLength: 12, withPad: " ", startingAt: 0) }.joined())
        for channel in channels.keys.sorted() {
            let cells = [channel] + states.map { "\(channels[channel]?[$0] ?? 0)" }
            print("  " + cells.map { $0.padding(toLength: 12, withPad: " ", startingAt: 0) }.joined())
        }
        let rows = try store.oldestUndelivered(limit: limit)
        print("oldest undelivered (\(rows.count)):")
        for row in rows {
            print(
                "  \(Timestamp.format(row.created)) \(row.state.rawValue) \(row.channel) \(row.key) subject=\(row.subject) attempts=\(row.attempts)"
                    + (row.state == .pending ? " next=\(Timestamp.format(row.nextAttempt))" : "")
                    + (row.lastError.map { " error=\($0)" } ?? ""))
        }
    }
}
