import Foundation

/// Where an inbound MQTT message belongs, read from its topic alone.
///
/// `perimeter/v1/{venue}/…` topics (prefix configurable) carry Perimeter's own contract;
/// `owntracks/{user}/{device}` and `espresense/devices/{id}/{room}` are the adapters for what
/// venues already run. Ids in topic levels are percent-decoded (``Topics/level(_:)``).
public enum InboundRoute: Sendable, Hashable {
    case gps(venue: String, agent: String)
    case ble(venue: String, agent: String)
    case status(venue: String, agent: String)
    case region(venue: String, id: String)
    case authorization(venue: String, subject: String)
    case usage(venue: String, subject: String)
    case preferences(venue: String, subject: String)
    case session(venue: String, consumer: String, session: String)
    /// `owntracks/{user}/{device}`: locations, waypoints (and other `_type`s, which are ignored).
    case ownTracks(user: String, device: String)
    /// `espresense/devices/{id}/{room}`: one room node hearing one device.
    case espresense(device: String, room: String)
    /// `…/admin/{command}/{subject}`: an operator's request about one subject (`erase`, `show`).
    case admin(venue: String, command: String, subject: String)
    /// A message the evaluator itself publishes under an input-like path
    /// (`subjects/{s}/prompt`): seen because of the subscription, ignored.
    case echo(venue: String)

    /// Whether this is the OwnTracks adapter's topic.
    public var isOwnTracks: Bool {
        if case .ownTracks = self { return true }
        return false
    }

    /// The venue the message is for; nil for adapter topics (the venue configured for the adapter).
    public var venue: String? {
        switch self {
        case .gps(let venue, _), .ble(let venue, _), .status(let venue, _), .region(let venue, _),
            .authorization(let venue, _), .usage(let venue, _), .preferences(let venue, _),
            .session(let venue, _, _), .admin(let venue, _, _), .echo(let venue):
            venue
        case .ownTracks, .espresense: nil
        }
    }
}

/// Something the evaluator was told, decoded from one MQTT message.
public enum Inbound: Sendable, Hashable {
    /// A position of a subject (`obs/{agent}/gps`, an OwnTracks location).
    case fix(Fix)
    /// What a scanner or a registered gateway heard (`obs/{agent}/ble`).
    case beacons(BeaconReport)
    /// Gateway-mode sightings named by tag (ESPresense: the room node is the gateway).
    case tags(TagReport)
    /// An agent's retained status or last will (`agents/{agent}/status`).
    case agentStatus(AgentStatus)
    /// A region added or changed (`regions/{id}`, or an OwnTracks waypoint).
    case regionUpsert(Region)
    /// A region deleted (empty retained payload on `regions/{id}`).
    case regionRemove(id: String)
    /// A subject's own choices (`subjects/{s}/preferences`).
    case preferences(subject: String, SubjectPreferences)
    /// The privacy topics, checked for shape and passed to the privacy gate as they are.
    case authorization(subject: String, JSONValue?)
    case usage(subject: String, JSONValue)
    case session(consumer: String, session: String, JSONValue?)
    /// An operator's request about one subject: `erase` (forget it everywhere) or `show`.
    case admin(command: String, subject: String)
}

/// An agent's `agents/{agent}/status`: `{online, caps:[gps, ble-scan, ranging], mode, version, t?}`.
public struct AgentStatus: Sendable, Hashable {
    public var agent: String
    public var online: Bool
    public var t: Date?
    /// What the agent can observe (``AgentStatus/knownCapabilities``); nil when it did not say
    /// (everything is accepted from it then).
    public var capabilities: [String]?
    /// `scanner` or `gateway`.
    public var mode: String?
    public var version: String?

    public init(
        agent: String, online: Bool, t: Date? = nil, capabilities: [String]? = nil, mode: String? = nil,
        version: String? = nil
    ) {
        self.agent = agent
        self.online = online
        self.t = t
        self.capabilities = capabilities
        self.mode = mode
        self.version = version
    }

    /// The capabilities an agent may announce (DESIGN.md §2, Core Location's
    /// `isMonitoringAvailable(for:)` / `isRangingAvailable()`): `gps` (fixes), `ble-scan` (BLE
    /// scans: beacon monitoring and places), `ranging` (ranging reports from its scans).
    public static let knownCapabilities = ["gps", "ble-scan", "ranging"]
}

/// One tag heard by a fixed receiver, named by the subject it is (gateway mode).
public struct TagSighting: Sendable, Hashable {
    /// The tag's subject id: a beacon's canonical identity, or an adapter's name for it
    /// (`espresense:{id}`).
    public var subject: String
    /// The beacon identity when the tag has one (for calibration and constraints).
    public var identity: BeaconIdentity?
    public var rssi: Double
    /// Expected RSSI at 1 m, when known.
    public var tx1m: Double?

    public init(subject: String, identity: BeaconIdentity? = nil, rssi: Double, tx1m: Double? = nil) {
        self.subject = subject
        self.identity = identity
        self.rssi = rssi
        self.tx1m = tx1m
    }
}

/// What one gateway heard at one time.
public struct TagReport: Sendable, Hashable {
    public var gateway: String
    public var t: Date
    public var sightings: [TagSighting]

    public init(gateway: String, t: Date, sightings: [TagSighting]) {
        self.gateway = gateway
        self.t = t
        self.sightings = sightings
    }
}

/// `subjects/{s}/preferences`: the subject's chosen default place and language.
public struct SubjectPreferences: Sendable, Hashable, Codable {
    public var defaultPlace: String?
    public var locale: String?

    public init(defaultPlace: String? = nil, locale: String? = nil) {
        self.defaultPlace = defaultPlace
        self.locale = locale
    }
}

/// Why an inbound message was rejected: the deadletter record's `reason`.
public struct InboundError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A short category for counters: `json`, `schema`, `range`, `tooLarge`, `batch`, `topic`, `region` …
    public var code: String
    /// The field at fault (`lat`, `adverts[3].rssi`), empty when the whole payload is.
    public var field: String
    public var message: String

    public init(code: String, field: String = "", _ message: String) {
        self.code = code
        self.field = field
        self.message = message
    }

    public var description: String { field.isEmpty ? message : "\(field): \(message)" }
}

extension Inbound {
    /// The ids this input would put into outbound topic levels (subjects, regions).
    public var topicIDs: [String] {
        switch self {
        case .fix(let fix): [fix.subject]
        case .beacons(let report): report.subject.map { [$0] } ?? [report.agent]
        case .tags(let report): report.sightings.map(\.subject)
        case .regionUpsert(let region): [region.id]
        default: []
        }
    }
}
