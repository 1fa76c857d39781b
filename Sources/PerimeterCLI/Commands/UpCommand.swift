import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterMQTT

/// `perimeter up`: the embedded default: a private broker, the sample venue, the live topic tree.
struct UpCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "up", abstract: "Run the embedded default: private Mosquitto, sample venue, live events.",
        discussion: """
            With no broker.host configured, starts a private mosquitto on loopback (on
            broker.port, or a free port when it is 0 or unset), runs the region evaluator on
            the venue (its journal in a temporary directory), publishes the venue's regions
            (retained) on perimeter/v1/{venue}/regions/{id} and prints every message under
            perimeter/v1/{venue}/# as 'topic payload' lines until Ctrl-C (or --duration). Settings come from --config FILE, PERIMETER_*
            variables and --set key=value, in rising precedence: broker.host, broker.port,
            venue.name, venue.regions, topics.prefix, log.level, log.format.
            """)

    @Option(help: "JSON configuration file.", valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable); overrides file and environment.", valueName: "key=value")
    var set: [String] = []

    @Option(help: "Stop after this many seconds (default: run until Ctrl-C).", valueName: "s")
    var duration: Double?

    @Option(
        help: "Also serve the live dashboard on host:port (port 0: any free one) and print its URL.",
        valueName: "host:port")
    var dashboard: String?

    struct Settings {
        var broker: BrokerSettings
        var embedded: Bool
        var venue: String
        var regionsPath: String
        var prefix: String
        var log: LogSettings
    }

    func settings() throws -> (Settings, ConfigReader) {
        let reader = try ConfigReader(
            filePath: config ?? ProcessInfo.processInfo.environment["PERIMETER_CONFIG"],
            environment: ProcessInfo.processInfo.environment, overrides: set)
        let embedded = reader.optionalString("broker.host") == nil
        var broker = BrokerSettings.read(from: reader, defaultClientID: "perimeter-up-\(getpid())", embedded: embedded)
        if embedded { broker.host = "127.0.0.1" }
        let venue = reader.string("venue.name", default: "museum")
        let regionsPath = reader.string("venue.regions", default: "config/venues/museum.geojson")
        let prefix = reader.string("topics.prefix", default: "perimeter/v1")
        let log = LogSettings.read(from: reader)
        if venue.isEmpty || Topics.separator(in: venue) != nil {
            reader.reject("venue.name", "must be a non-empty topic level without '/', '+' or '#'")
        }
        try reader.finish()
        return (
            Settings(
                broker: broker, embedded: embedded, venue: venue, regionsPath: regionsPath, prefix: prefix, log: log),
            reader
        )
    }

    mutating func validate() throws {
        if let duration, duration <= 0 { throw ValidationError("--duration must be positive") }
        if let dashboard, Self.hostPort(dashboard) == nil {
            throw ValidationError("--dashboard: expected host:port like 127.0.0.1:8080, got '\(dashboard)'")
        }
    }

    func run() async throws {
        let (settings, reader) = try settings()
        let logger = settings.log.makeLogger(label: "up")
        logger.info("configuration", metadata: reader.effectiveMetadata)
        let regions = try InputFiles.usableRegions(settings.regionsPath, skipInvalid: false)

        var services: [any Service] = []
        var broker = settings.broker
        if settings.embedded {
            let started = try await MosquittoBroker.start(
                MosquittoBroker.Options(port: broker.port == 0 ? nil : broker.port))
            broker.port = started.port
            services.append(BrokerService(broker: started, logger: logger))
        }
        let topics = Topics(prefix: settings.prefix, venue: settings.venue)
        FileHandle.standardError.write(
            Data(
                """
                perimeter up: venue '\(settings.venue)' with \(regions.count) regions, broker \(broker.host):\(broker.port)\(settings.embedded ? " (embedded)" : "")
                watch it from another terminal:
                  mosquitto_sub -h \(broker.host) -p \(broker.port) -t '\(topics.all)' -v
                Ctrl-C stops.

                """.utf8))
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("perimeter-up-\(getpid())")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: state) }
        var evaluatorBroker = broker
        evaluatorBroker.clientID = "\(broker.clientID)-evaluator"
        let evaluator = EvaluatorConfiguration(
            broker: evaluatorBroker, prefix: settings.prefix,
            databasePath: state.appendingPathComponent("evaluator.sqlite").path,
            venues: [
                // The demo's visitors are whoever publishes: everyone authorized, one session for all.
                .init(settings: VenueSettings(id: settings.venue, privacy: .open), regionsPath: settings.regionsPath)
            ],
            ownTracksVenue: settings.venue, espresenseVenue: settings.venue, log: settings.log)
        services.append(EvaluatorService(configuration: evaluator, logger: logger))
        services.append(LiveView(broker: broker, topics: topics, regions: regions, logger: logger))
        if let dashboard {
            services.append(try dashboardService(dashboard, broker: broker, settings: settings, logger: logger))
        }
        if let duration { services.append(Timer(seconds: duration)) }
        try await ServiceGroup(services: services, logger: logger).run()
    }
}

/// Publishes the venue's regions (retained) and prints every message of the venue.
struct LiveView: Service {
    let broker: BrokerSettings
    let topics: Topics
    let regions: [Region]
    let logger: Logger
    var name: String { "live-view" }

    func run() async throws {
        let client = try MQTTClient(broker.mqttConfiguration(clientID: "\(broker.clientID)-view"))
        try await client.connect()
        try await client.subscribe(topics.all, qos: .atLeastOnce)
        for region in regions {
            try await client.publish(
                topics.region(region.id), region.feature.serialized(), qos: .atLeastOnce, retain: true,
                properties: MQTTProperties(contentType: "application/geo+json"))
        }
        var output = LineWriter()
        for await message in client.messages {
            output.write("\(message.topic) \(message.payloadString)")
            output.flush()
            if Task.isCancelled { break }
        }
        await client.disconnect()
    }
}

/// Ends the group after a fixed time (for demos and scripted runs).
struct Timer: Service {
    let seconds: Double
    var name: String { "timer" }
    func run() async throws {
        try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
    }
}
