/// MQTT quality of service.
public enum QoS: Int32, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    case atMostOnce = 0
    case atLeastOnce = 1
    case exactlyOnce = 2

    public static func < (lhs: QoS, rhs: QoS) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { "\(rawValue)" }
}

/// A user property: an ordered name/value pair carried by MQTT 5 packets.
public struct UserProperty: Sendable, Hashable {
    public var name: String
    public var value: String
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// The MQTT 5 publish properties Perimeter uses. Ignored on an MQTT 3.1.1 connection.
public struct MQTTProperties: Sendable, Hashable {
    /// Seconds after which the broker discards the message if it is not yet delivered.
    public var messageExpiry: UInt32?
    /// MIME type of the payload, e.g. `application/json`.
    public var contentType: String?
    public var responseTopic: String?
    public var correlationData: [UInt8]?
    public var userProperties: [UserProperty]

    public init(
        messageExpiry: UInt32? = nil, contentType: String? = nil, responseTopic: String? = nil,
        correlationData: [UInt8]? = nil, userProperties: [UserProperty] = []
    ) {
        self.messageExpiry = messageExpiry
        self.contentType = contentType
        self.responseTopic = responseTopic
        self.correlationData = correlationData
        self.userProperties = userProperties
    }

    public static let none = MQTTProperties()
    public var isEmpty: Bool { self == .none }
}

/// A message received from the broker (topic and payload are copies owned by Swift), or
/// one to send in a batch (`MQTTClient.send(batch:)`).
public struct MQTTMessage: Sendable, Hashable {
    public var topic: String
    public var payload: [UInt8]
    public var qos: QoS
    /// True when the broker sent this from its retained store (at subscribe time).
    public var retain: Bool
    public var properties: MQTTProperties

    public init(
        topic: String, payload: [UInt8], qos: QoS = .atMostOnce, retain: Bool = false,
        properties: MQTTProperties = .none
    ) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = properties
    }

    /// The payload decoded as UTF-8 (invalid sequences replaced).
    public var payloadString: String { String(decoding: payload, as: UTF8.self) }
}
