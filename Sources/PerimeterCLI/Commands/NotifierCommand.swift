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
            with backoff, dead after notifier.maxAttempts with a deadletter/notifier message.
            SIGHUP re-reads the rules files. Settings: --config FILE (or PERIMETER_CONFIG),
            PERIMETER_* variables and --set key=value; see config/notifier.example.json.
            """,
        subcommands: [NotifierStatusCommand.self])

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
        var path = database
        if path == nil {
            let reader = try ConfigReader(filePath: config, environment: [:], overrides: [])
            path = reader.string("notifier.database", default: "perimeter-notifier.sqlite")
        }
        guard let path, FileManager.default.fileExists(atPath: path) else {
            throw ValidationError("no notifier database at \(path ?? "?")")
        }
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
