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
            accuracy subjects only as a dashboard.coarseMeters circle. Everything but /healthz
            needs a sign-in: the password from dashboard.passwordFile (a file of mode 0600) or
            PERIMETER_DASHBOARD_PASSWORD, never from the JSON file; requests must name an
            allowed host (loopback names, the listening address, dashboard.allowedHosts); set
            dashboard.behindTLS behind an HTTPS proxy. Settings: --config FILE
            (or PERIMETER_CONFIG; the evaluator's file works), PERIMETER_* variables and
            --set key=value.
            """)

    @Option(help: "JSON configuration file.", valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable); overrides file and environment.", valueName: "key=value")
    var set: [String] = []

    @Flag(
        help:
            "Print a single-use sign-in link (valid ten minutes) once listening: for an operator at a terminal, not for a service's log."
    )
    var loginLink: Bool

    func run() async throws {
        let (configuration, logger) = try DashboardConfiguration.load(
            config: config, overrides: set, label: "dashboard")
        let loginLink = loginLink
        let service = try DashboardService(configuration: configuration, logger: logger) { address in
            var text = "perimeter dashboard: \(address.url)\n"
            if loginLink { text += "perimeter dashboard: sign in once at \(address.oneTimeLoginURL())\n" }
            FileHandle.standardOutput.write(Data(text.utf8))
        }
        try await ServiceGroup(services: [service], logger: logger).run()
    }
}
