import Foundation

/// A position an agent publishes on `obs/{agent}/gps`, with the extras a receiver reports.
///
/// ``Fix`` is what the evaluator reads; this is what an agent measured, including altitude,
/// speed and course, which the topic carries but the evaluator does not use yet.
public struct GPSReading: Sendable, Hashable {
    /// Whose position it is; nil means the agent itself.
    public var subject: String?
    public var t: Date
    public var position: GeoPoint
    /// Horizontal accuracy in metres (~68 % radius); nil when the source gives none.
    public var accuracy: Double?
    /// Altitude above mean sea level, metres.
    public var altitude: Double?
    /// Metres per second over ground.
    public var speed: Double?
    /// Degrees clockwise from true north.
    public var course: Double?
    public var floor: Int?

    public init(
        subject: String? = nil, t: Date, position: GeoPoint, accuracy: Double? = nil, altitude: Double? = nil,
        speed: Double? = nil, course: Double? = nil, floor: Int? = nil
    ) {
        self.subject = subject
        self.t = t
        self.position = position
        self.accuracy = accuracy
        self.altitude = altitude
        self.speed = speed
        self.course = course
        self.floor = floor
    }

    /// The reading of a ``Fix`` (a replayed track).
    public init(_ fix: Fix) {
        self.init(subject: fix.subject, t: fix.t, position: fix.position, accuracy: fix.accuracy, floor: fix.floor)
    }

    /// The `obs/{agent}/gps` payload (topics.md), times with milliseconds.
    public var payload: JSONValue {
        var object = JSONObject()
        if let subject { object["subject"] = .string(subject) }
        object["t"] = .string(Timestamp.format(t))
        object["lat"] = .number(position.lat)
        object["lon"] = .number(position.lon)
        if let accuracy { object["acc"] = .number(Self.rounded(accuracy, 1)) }
        if let altitude { object["alt"] = .number(Self.rounded(altitude, 1)) }
        if let speed { object["speed"] = .number(Self.rounded(speed, 2)) }
        if let course { object["course"] = .number(Self.rounded(course, 1)) }
        if let floor { object["floor"] = .number(Double(floor)) }
        return .object(object)
    }

    static func rounded(_ value: Double, _ digits: Int) -> Double {
        let scale = pow(10, Double(digits))
        return (value * scale).rounded() / scale
    }
}

/// One advert heard in a scan: a decoded iBeacon identity or raw advertising data.
public enum AdvertReading: Sendable, Hashable {
    case iBeacon(uuid: String, major: Int, minor: Int, rssi: Int, tx: Int?)
    /// Raw AD structures as a receiver reports them (decoded by the evaluator).
    case raw(mac: String?, data: [UInt8], rssi: Int)

    public var json: JSONValue {
        switch self {
        case .iBeacon(let uuid, let major, let minor, let rssi, let tx):
            var object: JSONObject = [
                "uuid": .string(uuid), "major": .number(Double(major)), "minor": .number(Double(minor)),
                "rssi": .number(Double(rssi)),
            ]
            if let tx { object["tx"] = .number(Double(tx)) }
            return .object(object)
        case .raw(let mac, let data, let rssi):
            var object = JSONObject()
            if let mac { object["mac"] = .string(mac) }
            object["data"] = .string(Hex.encode(data))
            object["rssi"] = .number(Double(rssi))
            return .object(object)
        }
    }
}

/// What one receiver heard in one scan: the `obs/{agent}/ble` payload.
public struct BLEScan: Sendable, Hashable {
    public var subject: String?
    public var t: Date
    public var adverts: [AdvertReading]

    public init(subject: String? = nil, t: Date, adverts: [AdvertReading]) {
        self.subject = subject
        self.t = t
        self.adverts = adverts
    }

    public var payload: JSONValue {
        var object = JSONObject()
        object["t"] = .string(Timestamp.format(t))
        if let subject { object["subject"] = .string(subject) }
        object["adverts"] = .array(adverts.map(\.json))
        return .object(object)
    }
}

/// What an agent's source produces: observations and, for simulated visitors, the records a
/// phone app publishes about its user. The agent turns each into a topic and payload.
public enum AgentMessage: Sendable, Hashable {
    /// A GPS reading by `agent` (nil: the agent running the source) about `reading.subject`.
    case gps(agent: String?, GPSReading)
    /// A BLE scan by `agent` (a phone in scanner topology, a gateway in gateway topology).
    case ble(agent: String?, BLEScan)
    /// `subjects/{subject}/authorization` (retained).
    case authorization(subject: String, status: String, accuracy: String)
    /// `subjects/{subject}/usage`.
    case usage(subject: String, inUse: Bool)
    /// `subjects/{subject}/preferences` (retained).
    case preferences(subject: String, locale: String, defaultPlace: String?)
}
