/// Everything needed to open and keep an MQTT connection.
public struct MQTTConfiguration: Sendable, Hashable {
    public enum ProtocolVersion: Sendable, Hashable, CustomStringConvertible {
        case v311
        case v5
        public var description: String { self == .v5 ? "5" : "3.1.1" }
    }

    /// TLS settings; any file may be nil where the broker does not need it.
    public struct TLS: Sendable, Hashable {
        public var caFile: String?
        public var caPath: String?
        public var certificateFile: String?
        public var keyFile: String?
        /// Skip host-name verification (tests with self-signed certificates only).
        public var insecure: Bool

        public init(
            caFile: String? = nil, caPath: String? = nil, certificateFile: String? = nil,
            keyFile: String? = nil, insecure: Bool = false
        ) {
            self.caFile = caFile
            self.caPath = caPath
            self.certificateFile = certificateFile
            self.keyFile = keyFile
            self.insecure = insecure
        }
    }

    /// The message the broker publishes for us if the connection dies without a DISCONNECT.
    public struct Will: Sendable, Hashable {
        public var topic: String
        public var payload: [UInt8]
        public var qos: QoS
        public var retain: Bool
        public var properties: MQTTProperties

        public init(
            topic: String, payload: [UInt8], qos: QoS = .atLeastOnce, retain: Bool = true,
            properties: MQTTProperties = .none
        ) {
            self.topic = topic
            self.payload = payload
            self.qos = qos
            self.retain = retain
            self.properties = properties
        }
    }

    /// Reconnect delays: `initial`, doubled after each failed attempt up to `maximum`,
    /// each with up to `jitter` (a fraction) added so that many clients do not retry in step.
    public struct Backoff: Sendable, Hashable {
        public var initial: Duration
        public var maximum: Duration
        public var jitter: Double

        public init(initial: Duration = .milliseconds(250), maximum: Duration = .seconds(30), jitter: Double = 0.2) {
            self.initial = initial
            self.maximum = maximum
            self.jitter = jitter
        }

        /// The delay before reconnect attempt `attempt` (1-based), before jitter.
        public func delay(attempt: Int) -> Duration {
            var delay = initial
            var step = 1
            while step < attempt && delay < maximum {
                delay *= 2
                step += 1
            }
            return min(delay, maximum)
        }
    }

    /// One broker address.
    public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        /// `host:port`.
        public var description: String { "\(host):\(port)" }
    }

    public var host: String
    public var port: Int
    /// Further brokers, tried in turn after ``host``:``port`` (round robin, with the backoff)
    /// after a failed connect or a lost connection: the other nodes of a cluster, or a
    /// standby broker.
    public var alternates: [Endpoint]

    /// Every broker address, ``host``:``port`` first, then the ``alternates``.
    public var endpoints: [Endpoint] { [Endpoint(host: host, port: port)] + alternates }

    public var clientID: String
    /// Seconds between PINGREQs when idle.
    public var keepAlive: Int
    public var username: String?
    public var password: String?
    public var tls: TLS?
    public var protocolVersion: ProtocolVersion
    /// When false the broker keeps the session (subscriptions, queued QoS ≥ 1 messages)
    /// across disconnects for `sessionExpiry` seconds (MQTT 5) or until cleaned (3.1.1).
    public var cleanStart: Bool
    /// MQTT 5 session expiry interval in seconds; `UInt32.max` means never.
    public var sessionExpiry: UInt32
    public var will: Will?
    public var backoff: Backoff
    /// Inbound messages held for a slow consumer before newer ones are dropped (and counted).
    /// 0: nothing is queued on ``MQTTClient/messages``; the client's `onReceive` takes every message.
    public var inboundBufferSize: Int
    /// QoS ≥ 1 messages in flight before further publishes wait in libmosquitto's queue.
    public var maxInflight: Int
    /// QoS ≥ 1 messages the broker may have in flight towards this client (MQTT 5).
    public var receiveMaximum: Int = 1000
    /// The largest packet this client accepts, announced in CONNECT (MQTT 5): the broker sends
    /// nothing larger (it drops such a message for this client). Nil: no limit announced.
    public var maximumPacketSize: UInt32?

    public init(
        host: String = "127.0.0.1", port: Int = 1883, clientID: String, keepAlive: Int = 30,
        username: String? = nil, password: String? = nil, tls: TLS? = nil,
        protocolVersion: ProtocolVersion = .v5, cleanStart: Bool = true, sessionExpiry: UInt32 = 3600,
        will: Will? = nil, backoff: Backoff = Backoff(), inboundBufferSize: Int = 10_000, maxInflight: Int = 100,
        alternates: [Endpoint] = []
    ) {
        self.host = host
        self.port = port
        self.alternates = alternates
        self.clientID = clientID
        self.keepAlive = keepAlive
        self.username = username
        self.password = password
        self.tls = tls
        self.protocolVersion = protocolVersion
        self.cleanStart = cleanStart
        self.sessionExpiry = sessionExpiry
        self.will = will
        self.backoff = backoff
        self.inboundBufferSize = inboundBufferSize
        self.maxInflight = maxInflight
    }

    /// The configured broker addresses for messages: `host:port`, or several separated by
    /// commas when there are alternates (``MQTTClient/endpoint`` says which one is in use).
    public var endpoint: String { endpoints.map(\.description).joined(separator: ",") }
}
