import Foundation
import PerimeterEvaluator
import PerimeterKit

/// `perimeter evaluator --config FILE`: the region evaluator service.
struct EvaluatorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evaluator", abstract: "Run the region evaluator: observations in, events and state out.",
        discussion: """
            Subscribes to the venues' observation, status, region and privacy topics (and the
            OwnTracks and ESPresense adapters when configured) with a persistent session, and
            publishes enter/exit/dwell, state, occupancy, ranging, place and deadletter topics
            (topics.md). Inbound messages are journalled in SQLite (evaluator.database) before
            they are processed; after a crash the journal is replayed and unacknowledged
            events are published again with the same ids. SIGHUP re-reads the regions files.
            Settings: --config FILE (or PERIMETER_CONFIG), PERIMETER_* variables and
            --set key=value; see config/evaluator.example.json.
            """)

    @Option(help: "JSON configuration file.", valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable); overrides file and environment.", valueName: "key=value")
    var set: [String] = []

    func run() async throws {
        let (configuration, logger) = try EvaluatorConfiguration.load(
            config: config, overrides: set, label: "evaluator")
        try await ServiceGroup(
            services: [EvaluatorService(configuration: configuration, logger: logger)], logger: logger
        )
        .run()
    }
}
