import Foundation
import PerimeterAgent
import PerimeterCore
import PerimeterKit
import Synchronization

extension TrackReader.Format: ExpressibleByArgument {}

/// `perimeter agent --config FILE`: an edge agent publishing observations.
struct AgentCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent",
        abstract: "Run an edge agent: gpsd, a recorded track, the venue simulator or a BLE radio.",
        discussion: """
            Publishes observations on {prefix}/{venue}/obs/{agent}/gps and …/ble, a retained
            agents/{agent}/status (with a last will {"online":false}), and for simulated visitors
            their subjects/{s}/authorization, usage and preferences records (topics.md). Every
            message goes through a SQLite outbox (agent.database) and is deleted only when the
            broker acknowledges it: while the broker is unreachable observations queue up and
            are sent in order, with their original times, on reconnect.
            Sources (agent.source): gpsd (gpsd.host, gpsd.port), replay (replay.file: GPX, CSV,
            JSON lines or NMEA; replay.speed), simulator (simulator.venue: a venue file such as
            config/museum/venue.json; simulator.seed, simulator.visitors) and hci (hci.device;
            Linux, a Bluetooth controller and CAP_NET_RAW). Settings: --config FILE (or
            PERIMETER_CONFIG), PERIMETER_* variables, --set key=value and the flags below; see
            config/agent.example.json.
            """)

    @Option(help: "JSON configuration file.", valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable); overrides file and environment.", valueName: "key=value")
    var set: [String] = []

    @Option(help: "Source: gpsd, replay, simulator or hci (agent.source).", valueName: "source")
    var source: String?

    @Option(help: "Track file for the replay source (replay.file).", valueName: "file")
    var replay: String?

    @Option(
        help:
            "Venue directory or file for the simulator (simulator.venue); its name is the venue published on "
            + "unless agent.venue is set.",
        valueName: "dir|file")
    var venue: String?

    @Option(
        help: "Replay or simulation speed factor (replay.speed, simulator.speed); 0 replays without pauses.",
        valueName: "x")
    var speed: Double?

    @Option(help: "Simulator seed (simulator.seed).", valueName: "n")
    var seed: Int?

    @Option(help: "Broker port (broker.port).", valueName: "port")
    var brokerPort: Int?

    func run() async throws {
        var overrides: [String] = []
        if let source { overrides.append("agent.source=\(source)") }
        if let replay { overrides.append("replay.file=\(replay)") }
        if let venue { overrides.append("simulator.venue=\(venue)") }
        if let speed {
            overrides.append("replay.speed=\(speed)")
            if speed > 0 { overrides.append("simulator.speed=\(speed)") }
        }
        if let seed { overrides.append("simulator.seed=\(seed)") }
        if let brokerPort { overrides.append("broker.port=\(brokerPort)") }
        let (configuration, logger) = try AgentConfiguration.load(
            config: config, overrides: overrides + set, label: "agent")
        let bar = Mutex(ProgressBar(total: 0))
        let progress: @Sendable (Int, Int) -> Void = { done, total in
            bar.withLock { bar in
                if bar.total != total { bar = ProgressBar(total: total) }
                bar.update(done)
                if done == total { bar.finish() }
            }
        }
        let source = try AgentService.makeSource(configuration, logger: logger, progress: progress)
        try await ServiceGroup(
            services: [AgentService(configuration: configuration, source: source, logger: logger)], logger: logger
        )
        .run()
    }
}
