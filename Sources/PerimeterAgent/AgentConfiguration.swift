import Foundation
import PerimeterCore
import PerimeterKit

/// Everything `perimeter agent` reads from its configuration (file, `PERIMETER_*`, `--set`).
///
/// ```json
/// {
///   "broker": {"host": "127.0.0.1", "port": 1883, "username": "agent-gw-hall", "password": "…"},
///   "topics": {"prefix": "perimeter/v1"},
///   "agent": {"id": "gw-hall", "venue": "museum", "source": "gpsd", "database": "agent.sqlite",
///             "distanceFilter": 5, "desiredAccuracy": 50, "batchSize": 500, "batchInterval": 0.5},
///   "gpsd": {"host": "127.0.0.1", "port": 2947},
///   "replay": {"file": "walk.gpx", "speed": 10},
///   "simulator": {"venue": "config/museum/venue.json", "seed": 7, "visitors": 8},
///   "hci": {"device": 0}
/// }
/// ```
public struct AgentConfiguration: ServiceSettings {
    public enum Source: String, Sendable, CaseIterable {
        case gpsd, replay, simulator, hci
    }

    public var broker: BrokerSettings
    public var prefix: String
    public var agent: String
    public var venue: String
    /// True when `agent.venue` was not set: the simulator's venue file then names the venue.
    public var venueIsDefault = false
    public var source: Source
    /// The subject of the agent's own GPS readings; nil: the agent itself (omitted from payloads).
    public var subject: String?
    public var databasePath: String
    /// Metres: a GPS reading closer than this to the last one published is dropped. nil: none.
    public var distanceFilter: Double?
    /// Metres: a GPS reading with worse (or no) accuracy is dropped. nil: any.
    public var desiredAccuracy: Double?
    /// Messages per MQTT batch (their acknowledgements overlap).
    public var batchSize: Int
    /// Seconds to gather messages before sending a batch smaller than `batchSize`.
    public var batchInterval: Double
    /// Capabilities announced in the retained status.
    public var caps: [String]
    /// `scanner` or `gateway`.
    public var mode: String
    public var gpsd: (host: String, port: Int)
    public var replay: Replay
    public var simulator: Simulator
    public var hciDevice: Int
    public var log: LogSettings

    public struct Replay: Sendable {
        public var file: String?
        public var format: TrackReader.Format?
        /// 1 = real time, 10 = ten times faster, 0 = as fast as the broker takes them.
        public var speed: Double = 1
        /// Seconds between points of a GPX track without times.
        public var interval: Double?
        /// Publish the track's own times instead of the time each reading is sent (the
        /// evaluator refuses times ahead of its clock and lets old ones go stale).
        public var originalTimes = false
        public init() {}
    }

    public struct Simulator: Sendable {
        public var venuePath: String?
        public var seed: UInt64?
        public var visitors: Int?
        /// Ticks faster than real time (observation times stay one interval apart).
        public var speed: Double = 1
        /// Stop after this many ticks; nil: run until stopped.
        public var ticks: Int?
        public init() {}
    }

    public init(
        broker: BrokerSettings, prefix: String = "perimeter/v1", agent: String, venue: String, source: Source,
        databasePath: String
    ) {
        self.broker = broker
        self.prefix = prefix
        self.agent = agent
        self.venue = venue
        self.source = source
        self.databasePath = databasePath
        self.batchSize = 500
        self.batchInterval = 0
        self.caps = Self.defaultCaps(source)
        self.mode = source == .hci ? "gateway" : "scanner"
        self.gpsd = ("127.0.0.1", 2947)
        self.replay = Replay()
        self.simulator = Simulator()
        self.hciDevice = 0
        self.log = LogSettings()
    }

    static func defaultCaps(_ source: Source) -> [String] {
        switch source {
        case .gpsd, .replay: ["gps"]
        case .simulator: ["gps", "ble-scan", "ranging"]
        case .hci: ["ble-scan"]
        }
    }

    /// Reads and checks every setting; throws ``ConfigError`` listing all problems.
    public static func read(_ reader: ConfigReader) throws -> AgentConfiguration {
        let agent = reader.string("agent.id", default: "agent-1")
        if let problem = Topics.idProblem(agent) {
            reader.reject("agent.id", problem)
        } else if Topics.separator(in: agent) != nil {
            reader.reject("agent.id", "must be a non-empty topic level without '/', '+' or '#'")
        }
        let broker = BrokerSettings.read(from: reader, defaultClientID: "perimeter-agent-\(agent)")
        let venue = reader.string("agent.venue", default: "museum")
        if venue.isEmpty || Topics.separator(in: venue) != nil || venue.hasPrefix("_") {
            reader.reject("agent.venue", "must be one topic level (no '/', '+', '#', not starting with '_')")
        }
        let source = reader.choice("agent.source", default: Source.simulator)
        var configuration = AgentConfiguration(
            broker: broker, prefix: reader.string("topics.prefix", default: "perimeter/v1"), agent: agent,
            venue: venue, source: source,
            databasePath: reader.string("agent.database", default: "perimeter-agent-\(agent).sqlite"))
        configuration.venueIsDefault = reader.optionalString("agent.venue") == nil
        configuration.subject = reader.optionalString("agent.subject")
        if let subject = configuration.subject, let problem = Topics.idProblem(subject) {
            reader.reject("agent.subject", problem)
        }
        let distance = reader.double("agent.distanceFilter", default: 0, range: 0...100_000)
        configuration.distanceFilter = distance > 0 ? distance : nil
        let accuracy = reader.double("agent.desiredAccuracy", default: 0, range: 0...100_000)
        configuration.desiredAccuracy = accuracy > 0 ? accuracy : nil
        configuration.batchSize = reader.int("agent.batchSize", default: 500, range: 1...10_000)
        configuration.batchInterval = reader.double("agent.batchInterval", default: 0, range: 0...3600)
        configuration.mode = reader.string("agent.mode", default: configuration.mode)
        if configuration.mode != "scanner" && configuration.mode != "gateway" {
            reader.reject("agent.mode", "expected scanner or gateway, got '\(configuration.mode)'")
        }
        if let caps = reader.json("agent.caps") {
            configuration.caps = caps.arrayValue?.compactMap(\.stringValue) ?? []
            // The evaluator refuses a status naming anything else (and so would every scan).
            for name in configuration.caps where !AgentStatus.knownCapabilities.contains(name) {
                reader.reject(
                    "agent.caps",
                    "'\(name)' is not a capability (known: \(AgentStatus.knownCapabilities.joined(separator: ", ")))")
            }
        }
        configuration.gpsd = (
            reader.string("gpsd.host", default: "127.0.0.1"), reader.int("gpsd.port", default: 2947, range: 1...65535)
        )
        configuration.replay.file = reader.optionalString("replay.file")
        if let format = reader.optionalString("replay.format") {
            configuration.replay.format = TrackReader.Format(rawValue: format)
            if configuration.replay.format == nil {
                reader.reject("replay.format", "expected gpx, csv, jsonl or nmea, got '\(format)'")
            }
        }
        configuration.replay.speed = reader.double("replay.speed", default: 1, range: 0...1_000_000)
        configuration.replay.originalTimes = reader.bool("replay.originalTimes", default: false)
        let interval = reader.double("replay.interval", default: 0, range: 0...86_400)
        configuration.replay.interval = interval > 0 ? interval : nil
        configuration.simulator.venuePath = reader.optionalString("simulator.venue")
        let seed = reader.int("simulator.seed", default: -1, range: -1...Int.max)
        configuration.simulator.seed = seed >= 0 ? UInt64(seed) : nil
        let visitors = reader.int("simulator.visitors", default: -1, range: -1...10_000)
        configuration.simulator.visitors = visitors >= 0 ? visitors : nil
        configuration.simulator.speed = reader.double("simulator.speed", default: 1, range: 0.01...10_000)
        let ticks = reader.int("simulator.ticks", default: 0, range: 0...Int.max)
        configuration.simulator.ticks = ticks > 0 ? ticks : nil
        configuration.hciDevice = reader.int("hci.device", default: 0, range: 0...255)
        configuration.log = LogSettings.read(from: reader)
        switch source {
        case .replay where configuration.replay.file == nil:
            reader.reject("replay.file", "the replay source needs a track file")
        case .simulator where configuration.simulator.venuePath == nil:
            reader.reject("simulator.venue", "the simulator needs a venue file (e.g. config/museum/venue.json)")
        default: break
        }
        try reader.finish()
        return configuration
    }
}
