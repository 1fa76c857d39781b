import Foundation
import PerimeterDashboard
import PerimeterKit

/// `perimeter dashboard --config FILE`: the live dashboard.
struct DashboardCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dashboard", abstract: "Serve a live page of the venue: map, occupancy, events, health.",
        discussion: """
            Subscribes to the venue's output topics like any consumer (never to raw
            observations), declares its own service session (dashboard.consumer/session,
            level dashboard.sessionLevel) and serves one self-contained page on
            dashboard.http (default 127.0.0.1:8080): the venue map with regions shaded by
            occupancy, subjects where they are, the live feed of events, notifications and
            dead letters, ranging of a chosen subject, held-event and dead-letter counters and
            services' health, streamed as Server-Sent Events on /events. Subjects whose
            authorization is denied, restricted or not determined are never shown; reduced-
            accuracy subjects only as a dashboard.coarseMeters circle. Settings: --config FILE
            (or PERIMETER_CONFIG; the evaluator's file works), PERIMETER_* variables and
            --set key=value.
            """)

    @Option(help: "JSON configuration file.", valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable); overrides file and environment.", valueName: "key=value")
    var set: [String] = []

    func run() async throws {
        let (configuration, logger) = try DashboardConfiguration.load(
            config: config, overrides: set, label: "dashboard")
        let service = try DashboardService(configuration: configuration, logger: logger) { url in
            FileHandle.standardOutput.write(Data("perimeter dashboard: \(url)\n".utf8))
        }
        try await ServiceGroup(services: [service], logger: logger).run()
    }
}
