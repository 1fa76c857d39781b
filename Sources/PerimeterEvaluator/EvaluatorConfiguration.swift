import Foundation
import PerimeterCore
import PerimeterKit

/// Everything `perimeter evaluator` reads from its configuration (file, `PERIMETER_*`,
/// `--set`), checked as a whole before anything starts.
///
/// ```json
/// {
///   "broker": {"host": "127.0.0.1", "port": 1883, "clientId": "perimeter-evaluator-1"},
///   "topics": {"prefix": "perimeter/v1"},
///   "evaluator": {"instance": "1", "database": "evaluator.sqlite"},
///   "adapters": {"ownTracks": "museum", "espresense": "museum"},
///   "venues": {
///     "museum": {"regions": "config/venues/museum.geojson", "timeZone": "Europe/Paris",
///                "locale": "fr_FR", "currency": "EUR", "pathLossExponent": 2.2,
///                "gateways": [{"id": "gw-hall", "lat": 48.8606, "lon": 2.3376, "floor": 0, "zone": "hall"}]}
///   }
/// }
/// ```
public struct EvaluatorConfiguration: ServiceSettings {
    public struct Venue: Sendable {
        public var settings: VenueSettings
        /// The venue's regions file (GeoJSON), re-read on SIGHUP; nil for topic-only regions.
        public var regionsPath: String?
        /// Refuse a regions file with any invalid feature (`venues.{id}.strictRegions`, default
        /// `evaluator.strictRegions`, false): the evaluator does not start, and a reload keeps
        /// the regions in use. Otherwise the valid features are served and the venue is degraded.
        public var strictRegions: Bool
        /// The venue split over several evaluators (`venues.{id}.partitions`); nil: one
        /// evaluator serves the whole venue, as without partitions.
        public var partitions: VenuePartitions?

        public init(settings: VenueSettings, regionsPath: String?, strictRegions: Bool = false) {
            self.settings = settings
            self.regionsPath = regionsPath
            self.strictRegions = strictRegions
        }
    }

    /// `venues.{id}.partitions = {count, nats, ttl, margin, replay}` (docs/scale.md, "The
    /// evaluator on partitions"): the venue's subjects in `count` partitions, routed by the
    /// broker's mapping; leases in the JetStream key-value bucket `perimeter-leases` on the NATS
    /// servers `nats`, held for `ttl` seconds, publishing stopped `margin` seconds before; a
    /// partition taken is read from its stream `replay` seconds back.
    public struct VenuePartitions: Sendable {
        public var partitioning: Partitioning
        public var servers: [String]
        public var lease: PartitionLease
        /// How far back a new holder reads a partition's observations from the broker's stream
        /// (`replay`, seconds): longer than its former holder can have taken without publishing.
        public var replay: Double

        public init(partitioning: Partitioning, servers: [String], lease: PartitionLease, replay: Double = 30) {
            self.partitioning = partitioning
            self.servers = servers
            self.lease = lease
            self.replay = replay
        }
    }

    public var broker: BrokerSettings
    public var prefix: String
    public var instance: String
    public var databasePath: String
    public var venues: [Venue]
    /// The venue OwnTracks (`owntracks/+/+`) and ESPresense (`espresense/devices/+/+`) feed; nil = off.
    public var ownTracksVenue: String?
    public var espresenseVenue: String?
    public var limits: InboundDecoder.Limits
    public var statsInterval: Double
    public var tickInterval: Double
    /// MQTT 5 session expiry: how long the broker keeps our queue while we are down.
    public var sessionExpiry: Int
    /// A snapshot of the whole state is taken after this many journal rows (and at shutdown);
    /// the journal before it is dropped, so a restart replays at most this many rows.
    public var snapshotEvery: Int = 50_000
    /// Journal rows processed and committed together (group commit): one short write
    /// transaction for many arrivals instead of one each.
    public var groupCommitRows: Int = 1_024
    /// Journal rows waiting to be processed at which the evaluator stops reading arrivals until
    /// processing is down to three quarters of it (the broker queues the rest): bounds the
    /// journal and keeps the CPU for processing under overload.
    public var maxJournalBacklog: Int = 20_000
    /// Published messages not yet acknowledged before processing waits for the broker
    /// (bounds libmosquitto's queue, and so the evaluator's memory, whatever the broker does).
    public var maxUnacknowledged: Int = 20_000
    /// `host:port` of `/metrics` and `/healthz` (loopback); nil for none.
    public var http: (host: String, port: Int)?
    /// `/healthz` reports unhealthy when processing lags arrival by more than this.
    public var healthMaxLag: Double = 30
    /// `active` (the default) or `standby` (processes with publishing off, takes over when the
    /// active's last will says it is gone): see ``LeasePolicy``.
    public var role: LeasePolicy.Role = .active
    /// How long to listen for retained leases and statuses before deciding how to start.
    public var leaseWait: Double = 1
    /// A standby keeps the outbox rows of this many last seconds unsent, to publish them at
    /// takeover (overlap is harmless: event ids are deterministic); older ones are dropped.
    public var standbyWindow: Double = 60
    /// Characters refused in ids that would become topic levels (subjects, regions), beyond
    /// `/`, `+`, `#`: on a NATS broker (`topics.natsSafe`) `.`, space, `*`, `>` and tabs,
    /// which NATS answers by closing the connection.
    public var forbiddenIDCharacters: Set<Character> = []
    /// Seconds between snapshots at the latest (each prunes the journal), when anything arrived.
    public var snapshotInterval: Double = 3600
    /// Seconds refused outbox rows are kept for inspection.
    public var refusedRetention: Double = 7 * 86_400
    public var log: LogSettings

    public init(
        broker: BrokerSettings, prefix: String = "perimeter/v1", instance: String = "1", databasePath: String,
        venues: [Venue], ownTracksVenue: String? = nil, espresenseVenue: String? = nil,
        limits: InboundDecoder.Limits = InboundDecoder.Limits(), statsInterval: Double = 10, tickInterval: Double = 1,
        sessionExpiry: Int = 86_400, log: LogSettings = LogSettings()
    ) {
        self.broker = broker
        self.prefix = prefix
        self.instance = instance
        self.databasePath = databasePath
        self.venues = venues
        self.ownTracksVenue = ownTracksVenue
        self.espresenseVenue = espresenseVenue
        self.limits = limits
        self.statsInterval = statsInterval
        self.tickInterval = tickInterval
        self.sessionExpiry = sessionExpiry
        self.log = log
    }

    /// Reads and checks the configuration; throws ``ConfigError`` listing every problem.
    public static func read(_ reader: ConfigReader) throws -> EvaluatorConfiguration {
        let instance = reader.string("evaluator.instance", default: "1")
        var broker = BrokerSettings.read(from: reader, defaultClientID: "perimeter-evaluator-\(instance)")
        let prefix = reader.string("topics.prefix", default: "perimeter/v1")
        let database = reader.string("evaluator.database", default: "perimeter-evaluator.sqlite")
        let maxPayload = reader.int("evaluator.maxPayloadBytes", default: 65_536, range: 64...16_777_216)
        let maxBatch = reader.int("evaluator.maxBatch", default: 256, range: 1...100_000)
        let statsInterval = reader.double("evaluator.statsInterval", default: 10, range: 0.1...3600)
        let tickInterval = reader.double("evaluator.tickInterval", default: 1, range: 0.05...60)
        let sessionExpiry = reader.int("evaluator.sessionExpiry", default: 86_400, range: 0...Int(UInt32.max))
        let snapshotEvery = reader.int("evaluator.snapshotEvery", default: 50_000, range: 1...100_000_000)
        let snapshotInterval = reader.double("evaluator.snapshotInterval", default: 3600, range: 1...86_400 * 7)
        let refusedRetention = reader.double("evaluator.refusedRetention", default: 7 * 86_400, range: 0...86_400 * 365)
        let groupCommitRows = reader.int("evaluator.groupCommitRows", default: 1_024, range: 1...100_000)
        let maxUnacknowledged = reader.int("evaluator.maxUnacknowledged", default: 20_000, range: 100...1_000_000)
        let maxJournalBacklog = reader.int("evaluator.maxJournalBacklog", default: 20_000, range: 1_000...100_000_000)
        let http = reader.hostPort("evaluator.http")
        let healthMaxLag = reader.double("evaluator.healthMaxLag", default: 30, range: 0.1...86_400)
        let role = reader.choice("evaluator.role", default: LeasePolicy.Role.active)
        let leaseWait = reader.double("evaluator.leaseWait", default: 1, range: 0...60)
        let standbyWindow = reader.double("evaluator.standbyWindow", default: 60, range: 1...86_400)
        let natsSafe = reader.bool("topics.natsSafe", default: false)
        let maxClockSkew = reader.double("evaluator.maxClockSkew", default: 60, range: 0...86_400)
        let log = LogSettings.read(from: reader)
        if instance.isEmpty { reader.reject("evaluator.instance", "must not be empty") }
        if prefix.isEmpty || prefix.hasSuffix("/") || prefix.utf8.contains(where: { $0 == 0x2B || $0 == 0x23 }) {
            reader.reject("topics.prefix", "must be a topic prefix like perimeter/v1 (no '+', '#' or trailing '/')")
        }

        let strictRegions = reader.bool("evaluator.strictRegions", default: false)
        var venues: [Venue] = []
        let names = reader.venueIDs()
        for name in names {
            if let problem = Topics.idProblem(name) { reader.reject("venues.\(name)", "the venue id: \(problem)") }
            if var venue = readVenue(name, reader) {
                venue.settings.trust.maxFutureSkew = maxClockSkew
                venue.strictRegions = reader.bool("venues.\(name).strictRegions", default: strictRegions)
                venue.settings.locationServices = readLocationServices("venues.\(name)", reader)
                venue.partitions = readPartitions("venues.\(name)", venue: venue, instance: instance, reader)
                venue.settings.homeAssistant = readHomeAssistant(
                    "venues.\(name).homeAssistant", reader, prefix: prefix,
                    statusTopic: statusTopic(prefix: prefix, instance: instance))
                venues.append(venue)
            }
        }
        if role == .standby, let venue = venues.first(where: { $0.partitions != nil }) {
            reader.reject(
                "evaluator.role",
                "standby does not apply to venue '\(venue.settings.id)', which is partitioned: its evaluators take over each other's partitions through their leases"
            )
        }
        let served = Set(names)
        func adapter(_ key: String) -> String? {
            guard let venue = reader.optionalString(key) else { return nil }
            if !served.contains(venue) {
                reader.reject(key, "'\(venue)' is not one of the venues served (\(names.joined(separator: ", ")))")
            }
            return venue
        }
        let ownTracks = adapter("adapters.ownTracks")
        let waypoints = reader.choice("adapters.ownTracksWaypoints", default: WaypointScope.own)
        let espresense = adapter("adapters.espresense")
        // One file may configure the whole venue: the other services' sections are theirs.
        for section in ["dashboard", "notifier", "channels"] { reader.claim(section) }
        for name in names { reader.claim("venues.\(name).rules") }
        try reader.finish()
        broker.clientID = broker.clientID.isEmpty ? "perimeter-evaluator-\(instance)" : broker.clientID
        var configuration = EvaluatorConfiguration(
            broker: broker, prefix: prefix, instance: instance, databasePath: database, venues: venues,
            ownTracksVenue: ownTracks, espresenseVenue: espresense,
            limits: InboundDecoder.Limits(maxPayloadBytes: maxPayload, maxBatch: maxBatch),
            statsInterval: statsInterval, tickInterval: tickInterval, sessionExpiry: sessionExpiry, log: log)
        configuration.snapshotEvery = snapshotEvery
        configuration.snapshotInterval = snapshotInterval
        configuration.refusedRetention = refusedRetention
        configuration.groupCommitRows = groupCommitRows
        configuration.maxUnacknowledged = maxUnacknowledged
        configuration.maxJournalBacklog = maxJournalBacklog
        configuration.http = http
        configuration.healthMaxLag = healthMaxLag
        configuration.role = role
        configuration.leaseWait = leaseWait
        configuration.standbyWindow = standbyWindow
        for index in configuration.venues.indices where configuration.venues[index].settings.id == ownTracks {
            configuration.venues[index].settings.trust.waypoints = waypoints
        }
        if natsSafe { configuration.forbiddenIDCharacters = [".", " ", "*", ">", "\t"] }
        return configuration
    }

    private static func readVenue(_ name: String, _ reader: ConfigReader) -> Venue? {
        let key = "venues.\(name)"
        let regions = reader.optionalString("\(key).regions")
        let conventions = reader.venueConventions(key)
        let exponent = reader.double("\(key).pathLossExponent", default: 2, range: 1...6)
        let staleAfter = reader.double("\(key).staleAfter", default: 300, range: 1...86_400 * 7)
        let exitTimeout = reader.double("\(key).beaconExitTimeout", default: 30, range: 1...3600)
        var gateways: [Gateway] = []
        if let list = reader.json("\(key).gateways") {
            gateways = readGateways(list, key: "\(key).gateways", reader)
        }
        let privacy = readPrivacy("\(key).privacy", reader)
        var settings = VenueSettings(
            id: name, timeZone: conventions.timeZone, locale: conventions.locale, currency: conventions.currency,
            staleAfter: staleAfter, pathLossExponent: exponent, beaconExitTimeout: exitTimeout, gateways: gateways,
            privacy: privacy)
        settings.geofence.requireAccuracy = reader.bool("\(key).requireAccuracy", default: false)
        // Hysteresis, the same factors `perimeter replay` takes (--k-in, --k-out).
        settings.geofence.kIn = reader.double("\(key).kIn", default: 1, range: 0...10)
        settings.geofence.kOut = reader.double("\(key).kOut", default: 1, range: 0...10)
        // An object whose keys are agent patterns: read whole (from an override) or key by key.
        let reportersKey = "\(key).reporters"
        var reporters = reader.json(reportersKey)
        if reporters == nil, !reader.children(of: reportersKey).isEmpty {
            var object = JSONObject()
            for agent in reader.children(of: reportersKey) { object[agent] = reader.json("\(reportersKey).\(agent)") }
            reporters = .object(object)
        }
        if let reporters { settings.trust.reporters = readReporters(reporters, key: reportersKey, reader) }
        return Venue(settings: settings, regionsPath: regions)
    }

    /// `venues.{id}.partitions`, nil when absent. Every agent named as a reporter of other
    /// subjects must be an exact id: its messages are read in every partition
    /// (`…/p/+/obs/{agent}/+`), which a pattern cannot be.
    static func readPartitions(
        _ key: String, venue: Venue, instance: String, _ reader: ConfigReader
    )
        -> VenuePartitions?
    {
        let partitionsKey = "\(key).partitions"
        guard !reader.children(of: partitionsKey).isEmpty else {
            if reader.json(partitionsKey) != nil {
                reader.reject(partitionsKey, "expected an object {count, nats, ttl, margin, replay}")
            }
            return nil
        }
        let count = reader.int("\(partitionsKey).count", default: 0, range: 1...Partitioning.maxCount)
        if reader.json("\(partitionsKey).count") == nil {
            reader.reject("\(partitionsKey).count", "required: how many partitions (1…\(Partitioning.maxCount))")
        }
        let servers = reader.stringList("\(partitionsKey).nats") ?? []
        let ttl = reader.double("\(partitionsKey).ttl", default: 6, range: 1...300)
        let margin = reader.double("\(partitionsKey).margin", default: 1, range: 0...299)
        let replay = reader.double("\(partitionsKey).replay", default: 30, range: 1...3600)
        if servers.isEmpty {
            reader.reject(
                "\(partitionsKey).nats",
                "required: the NATS servers holding the leases, like [\"nats://127.0.0.1:4222\"]")
        }
        if margin >= ttl { reader.reject("\(partitionsKey).margin", "must be less than ttl (\(ttl) s)") }
        for id in [venue.settings.id, instance] {
            if let problem = PartitionLeaseKeeper.keyProblem(id) {
                reader.reject(partitionsKey, "the venue and evaluator.instance name lease keys: \(problem)")
            }
        }
        for rule in venue.settings.trust.reporters where rule.agent.contains("*") {
            reader.reject(
                "\(key).reporters",
                "'\(rule.agent)' is a pattern; a partitioned venue needs exact agent ids (each one's messages are read in every partition)"
            )
        }
        guard let partitioning = try? Partitioning(count: count), !servers.isEmpty, margin < ttl else { return nil }
        return VenuePartitions(
            partitioning: partitioning, servers: servers,
            lease: PartitionLease(ttl: .milliseconds(Int(ttl * 1000)), margin: .milliseconds(Int(margin * 1000))),
            replay: replay)
    }

    /// `venues.{id}.privacy`: who is authorized by default, which tags are assets, the
    /// gate's timings, and the sessions that exist without a consumer declaring them.
    /// `"open": true` authorizes everyone with one session for all (demos only).
    static func readPrivacy(_ key: String, _ reader: ConfigReader) -> PrivacySettings {
        var settings = PrivacySettings()
        if reader.bool("\(key).open", default: false) { settings = .open }
        func status(_ name: String, _ fallback: AuthorizationStatus) -> AuthorizationStatus {
            reader.choice("\(key).\(name)", default: fallback)
        }
        settings.defaultStatus = status("defaultStatus", settings.defaultStatus)
        settings.assetStatus = status("assetStatus", settings.assetStatus)
        settings.inUseGrace = reader.double("\(key).inUseGrace", default: settings.inUseGrace, range: 0...3600)
        settings.heldMaxAge = reader.double("\(key).heldMaxAge", default: settings.heldMaxAge, range: 1...86_400 * 30)
        settings.reducedAccuracyMeters = reader.double(
            "\(key).reducedAccuracyMeters", default: settings.reducedAccuracyMeters, range: 1...1_000_000)
        if let assets = reader.json("\(key).assets") {
            settings.assets = []
            for (index, item) in (assets.arrayValue ?? [assets]).enumerated() {
                switch BeaconRegionSpec.parse(item) {
                case .success(let spec): settings.assets.append(spec.constraint)
                case .failure(let problems):
                    reader.reject("\(key).assets", "[\(index)]: \(problems.messages.joined(separator: "; "))")
                }
            }
        }
        if let sessions = reader.json("\(key).defaultSessions") {
            settings.defaultSessions = []
            for (index, item) in (sessions.arrayValue ?? [sessions]).enumerated() {
                if let session = ServiceSession(json: item) {
                    settings.defaultSessions.append(session)
                } else {
                    reader.reject(
                        "\(key).defaultSessions",
                        "[\(index)]: expected {\"subjects\": \"*\" or [ids], \"level\": \"whenInUse\"|\"always\", \"fullAccuracyPurpose\"?}"
                    )
                }
            }
        }
        return settings
    }

    /// The evaluator's status topic (retained, and its last will).
    public static func statusTopic(prefix: String, instance: String) -> String {
        "\(prefix)/_sys/evaluator/\(Topics.level(instance))/status"
    }

    /// `venues.{id}.homeAssistant`: `{"enabled": true, "discoveryPrefix": "homeassistant",
    /// "subjects": ["badge-*"], "deviceName": "Museum"}`; nil (off) unless `enabled`.
    static func readHomeAssistant(
        _ key: String, _ reader: ConfigReader, prefix: String, statusTopic: String
    ) -> HomeAssistantSettings? {
        let enabled = reader.bool("\(key).enabled", default: false)
        let discoveryPrefix = reader.string("\(key).discoveryPrefix", default: "homeassistant")
        let subjects = reader.stringList("\(key).subjects") ?? []
        let deviceName = reader.optionalString("\(key).deviceName")
        if let problem = HomeAssistantSettings.prefixProblem(discoveryPrefix) {
            reader.reject("\(key).discoveryPrefix", problem)
        }
        var patterns: [Glob] = []
        for subject in subjects {
            do { patterns.append(try Glob(subject)) } catch {
                reader.reject("\(key).subjects", "\(error)")
            }
        }
        guard enabled else { return nil }
        return HomeAssistantSettings(
            discoveryPrefix: discoveryPrefix, subjects: patterns, deviceName: deviceName, topicPrefix: prefix,
            availabilityTopic: statusTopic)
    }

    /// `venues.{id}.reporters`: `{"phone-*": ["visitor-*"], "lora-gw": ["tracker-*"]}`, the
    /// subjects each agent (pattern) may report besides itself (``ReporterRule``).
    private static func readReporters(_ value: JSONValue, key: String, _ reader: ConfigReader) -> [ReporterRule] {
        guard case .object(let object) = value else {
            reader.reject(
                key, "expected an object of agent pattern → [subject pattern], like {\"phone-*\": [\"visitor-*\"]}")
            return []
        }
        var rules: [ReporterRule] = []
        for (agent, subjects) in object {
            let patterns = subjects.arrayValue?.compactMap(\.stringValue) ?? subjects.stringValue.map { [$0] }
            guard let patterns, !patterns.isEmpty, patterns.count == (subjects.arrayValue?.count ?? 1) else {
                reader.reject(key, "'\(agent)': expected a subject pattern or an array of them")
                continue
            }
            switch ReporterRule.make(agent: agent, subjects: patterns) {
            case .success(let rule): rules.append(rule)
            case .failure(let error): reader.reject(key, "'\(agent)': \(error.field): \(error.message)")
            }
        }
        return rules
    }

    private static func readGateways(_ value: JSONValue, key: String, _ reader: ConfigReader) -> [Gateway] {
        guard case .array(let items) = value else {
            reader.reject(key, "expected an array of {id, lat, lon, floor?, zone?}")
            return []
        }
        var gateways: [Gateway] = []
        for (index, item) in items.enumerated() {
            let at = "\(key)[\(index)]"
            guard case .object(let object) = item, let id = object["id"]?.stringValue, !id.isEmpty else {
                reader.reject(key, "\(at): expected an object with a non-empty string \"id\"")
                continue
            }
            if let problem = Topics.idProblem(id) {
                reader.reject(key, "\(at): \(problem)")
                continue
            }
            var position: GeoPoint?
            switch (object["lat"]?.doubleValue, object["lon"]?.doubleValue) {
            case (let lat?, let lon?) where abs(lat) <= 90 && abs(lon) <= 180: position = GeoPoint(lon: lon, lat: lat)
            case (nil, nil): position = nil
            default:
                reader.reject(key, "\(at) '\(id)': lat and lon must both be given, within ±90 and ±180")
                continue
            }
            let floor = object["floor"]?.intValue
            if object["floor"] != nil && object["floor"] != .null && floor == nil {
                reader.reject(key, "\(at) '\(id)': floor must be an integer")
            }
            gateways.append(Gateway(id: id, position: position, floor: floor, zone: object["zone"]?.stringValue))
        }
        return gateways
    }
}
