import Foundation
import PerimeterAgent
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterMQTT

/// `perimeter up`: the embedded default: a private broker, a sample venue with simulated
/// visitors, the evaluator, and a readable live feed.
struct UpCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "up", abstract: "Run the embedded default: private Mosquitto, sample venue, live events.",
        discussion: """
            With no broker.host configured, starts a private mosquitto on loopback (on
            --broker-port or broker.port, or a free port when it is 0 or unset), runs the
            region evaluator on the venue of --venue DIR (DIR/venue.json and its regions file;
            default config/museum; the journal in a temporary directory), publishes the
            venue's regions (retained) on perimeter/v1/{venue}/regions/{id}, runs the venue
            simulator (its visitors' phones publish GPS, BLE scans and their authorization,
            usage and preference records), the notifier on DIR/rules.json (MQTT channels
            'app' and 'staff': notifications/{channel}/{subject}) and the live dashboard
            (--dashboard HOST:PORT, default a free loopback port; its URL is printed), and
            prints a readable feed (enter, exit, dwell, ranging summaries, places, held and
            withheld events, notifications) until Ctrl-C or --duration; --raw prints every
            message as 'topic payload' lines instead.
            Settings come from --config FILE, PERIMETER_* variables and --set key=value, in
            rising precedence: broker.host, broker.port, venue.name, venue.regions,
            topics.prefix, log.level, log.format.
            """)

    @Option(help: "JSON configuration file.", valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable); overrides file and environment.", valueName: "key=value")
    var set: [String] = []

    @Option(help: "Stop after this many seconds (default: run until Ctrl-C).", valueName: "s")
    var duration: Double?

    @Option(
        help: "Serve the live dashboard on host:port (default 127.0.0.1 and a free port); its URL is printed.",
        valueName: "host:port")
    var dashboard: String?

    @Option(help: "Venue directory with venue.json (default: config/museum).", valueName: "dir")
    var venue: String = "config/museum"

    @Option(help: "Port of the private broker (default: a free one).", valueName: "port")
    var brokerPort: Int?

    @Flag(help: "Print every message as 'topic payload' instead of the readable feed.")
    var raw: Bool

    @Flag(help: "Do not run the venue simulator (publish observations yourself).")
    var noSimulator: Bool

    @Flag(help: "Do not serve the live dashboard.")
    var noDashboard: Bool

    struct Settings {
        var broker: BrokerSettings
        var embedded: Bool
        var venue: String
        var venueFile: VenueFile
        var regionsPath: String
        var prefix: String
        var log: LogSettings
    }

    func settings() throws -> (Settings, ConfigReader) {
        let venueDirectory = URL(fileURLWithPath: venue)
        let venueFile = try SimulatorSource.loadVenue(venueDirectory.appendingPathComponent("venue.json").path)
        let reader = try ConfigReader.forCommand(
            config: config, overrides: (brokerPort.map { ["broker.port=\($0)"] } ?? []) + set)
        let embedded = !BrokerSettings.isConfigured(in: reader)
        var broker = BrokerSettings.read(from: reader, defaultClientID: "perimeter-up-\(getpid())", embedded: embedded)
        if embedded { broker.host = "127.0.0.1" }
        let venue = reader.string("venue.name", default: venueFile.name)
        // The venue file names its regions file relative to its own directory (or absolutely).
        let regionsPath = reader.string(
            "venue.regions",
            default: venueFile.regions.hasPrefix("/")
                ? venueFile.regions : venueDirectory.appendingPathComponent(venueFile.regions).path)
        let prefix = reader.string("topics.prefix", default: "perimeter/v1")
        let log = LogSettings.read(from: reader)
        if venue.isEmpty || Topics.separator(in: venue) != nil {
            reader.reject("venue.name", "must be a non-empty topic level without '/', '+' or '#'")
        }
        try reader.finish()
        return (
            Settings(
                broker: broker, embedded: embedded, venue: venue, venueFile: venueFile, regionsPath: regionsPath,
                prefix: prefix, log: log),
            reader
        )
    }

    mutating func validate() throws {
        if let duration, duration <= 0 { throw ValidationError("--duration must be positive") }
        if let dashboard, Self.hostPort(dashboard) == nil {
            throw ValidationError("--dashboard: expected host:port like 127.0.0.1:8080, got '\(dashboard)'")
        }
        if let brokerPort, !(1...65535).contains(brokerPort) {
            throw ValidationError("--broker-port must be 1…65535")
        }
    }

    func run() async throws {
        let (settings, reader) = try settings()
        let logger = settings.log.makeLogger(label: "up")
        logger.info("configuration", metadata: reader.effectiveMetadata)
        let venueFile = settings.venueFile
        // Beacon regions carry their beacons' positions from the venue file, for the maps.
        let regions = venueFile.placingBeacons(
            in: try InputFiles.usableRegions(settings.regionsPath, skipInvalid: false))

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
                perimeter up: venue '\(settings.venue)' with \(regions.count) regions, broker \(broker.host):\(broker.port)\(settings.embedded ? " (embedded)" : "")\(noSimulator ? "" : ", \(settings.venueFile.simulator.visitors) simulated visitors")
                watch the raw topics from another terminal:
                  mosquitto_sub -h \(broker.host) -p \(broker.port) -t '\(topics.all)' -v
                Ctrl-C stops.

                """.utf8))
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("perimeter-up-\(getpid())")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: state) }
        var evaluatorBroker = broker
        evaluatorBroker.clientID = "\(broker.clientID)-evaluator"
        var venueSettings = VenueSettings(
            id: settings.venue, timeZone: TimeZone(identifier: venueFile.timeZone) ?? .gmt,
            locale: venueFile.locale, currency: venueFile.currency,
            pathLossExponent: venueFile.pathLossExponent, gateways: venueFile.gateways, privacy: .open)
        // The simulated phone-N reports its visitor-N (docs/security.md: an agent speaks only
        // for the subjects bound to it).
        venueSettings.trust.reporters = [try ReporterRule.make(agent: "phone-*", subjects: ["visitor-*"]).get()]
        let evaluator = EvaluatorConfiguration(
            broker: evaluatorBroker, prefix: settings.prefix,
            databasePath: state.appendingPathComponent("evaluator.sqlite").path,
            venues: [
                // Subjects with no authorization record (a phone you publish as by hand, as in
                // the README's tour) count as always, with one session for all; the simulated
                // visitors publish their own records (denied, whenInUse with app sessions,
                // provisional always), so the privacy gate drops, withholds and holds theirs.
                .init(settings: venueSettings, regionsPath: settings.regionsPath)
            ],
            ownTracksVenue: settings.venue, espresenseVenue: settings.venue, log: settings.log)
        services.append(EvaluatorService(configuration: evaluator, logger: logger))
        if !noSimulator {
            var agent = AgentConfiguration(
                broker: broker, prefix: settings.prefix, agent: "simulator", venue: settings.venue, source: .simulator,
                databasePath: state.appendingPathComponent("agent.sqlite").path)
            agent.broker.clientID = "\(broker.clientID)-simulator"
            services.append(
                WhenEvaluatorOnline(
                    service: AgentService(
                        configuration: agent, source: SimulatorSource(venue: venueFile), logger: logger),
                    broker: broker, prefix: settings.prefix))
        }
        services.append(
            LiveView(
                broker: broker, topics: topics, regions: regions, raw: raw,
                timeZone: TimeZone(identifier: venueFile.timeZone) ?? .gmt, logger: logger))
        if let notifier = try notifierService(
            venueDirectory: URL(fileURLWithPath: venue), broker: broker, settings: settings, state: state,
            logger: logger)
        {
            services.append(notifier)
        }
        if !noDashboard {
            var placed = settings
            placed.regionsPath = state.appendingPathComponent("regions.geojson").path
            try RegionExporter.featureCollection(regions).serialized().write(
                toFile: placed.regionsPath, atomically: true, encoding: .utf8)
            services.append(
                try dashboardService(dashboard ?? "127.0.0.1:0", broker: broker, settings: placed, logger: logger))
        }
        if let duration { services.append(Timer(seconds: duration)) }
        try await ServiceGroup(services: services, logger: logger).run()
    }
}

/// Publishes the venue's regions (retained) and prints the readable feed (or, raw, every
/// message of the venue).
struct LiveView: Service {
    let broker: BrokerSettings
    let topics: Topics
    let regions: [Region]
    let raw: Bool
    let timeZone: TimeZone
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
        var feed = LiveFeed(topics: topics, regions: regions, timeZone: timeZone)
        for await message in client.messages {
            if raw {
                output.write("\(message.topic) \(message.payloadString)")
            } else if let line = feed.line(topic: message.topic, payload: message.payload) {
                output.write(line)
            }
            do {
                try output.flushChecked()
            } catch {
                // Whoever read the feed has gone (a closed pipe): stop everything cleanly.
                logger.notice("standard output closed; stopping", metadata: ["error": "\(error)"])
                break
            }
            if Task.isCancelled { break }
        }
        await client.disconnect()
    }
}

/// Runs a service once an evaluator says it is online (its retained status, published after it
/// has subscribed). Up's evaluator starts on a fresh database, so the broker holds no session
/// for it yet: what the simulator published before that subscription would reach nobody.
struct WhenEvaluatorOnline: Service {
    let service: any Service
    let broker: BrokerSettings
    let prefix: String
    var name: String { service.name }

    func run() async throws {
        let client = try MQTTClient(broker.mqttConfiguration(clientID: "\(broker.clientID)-wait"))
        try await client.connect()
        try await client.subscribe("\(prefix)/_sys/evaluator/+/status", qos: .atLeastOnce)
        for await message in client.messages {
            if (try? JSONParser.parse(message.payload))?["online"] == true { break }
            if Task.isCancelled { break }
        }
        await client.disconnect()
        if Task.isCancelled { return }
        try await service.run()
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
