import PerimeterMQTT

/// How a service reaches the broker: the `broker.*` settings every service shares.
///
/// With no `broker.host` (or `broker.hosts`) set, `perimeter up` starts its own private broker
/// instead.
///
/// `broker.hosts` lists several brokers (`"10.0.0.1:1883,10.0.0.2:1883"` or a JSON array of
/// `"host:port"` strings): the nodes of a cluster, tried round robin when a connection fails
/// or is lost. Its first entry becomes `host`/`port`, the rest `alternates`.
public struct BrokerSettings: Sendable, Hashable {
    public var host: String
    public var port: Int
    /// Brokers tried after `host`:`port` (from `broker.hosts`).
    public var alternates: [MQTTConfiguration.Endpoint] = []
    public var clientID: String
    public var username: String?
    public var password: String?
    public var caFile: String?
    public var certificateFile: String?
    public var keyFile: String?
    public var protocolVersion: MQTTConfiguration.ProtocolVersion
    public var keepAlive: Int

    public enum ProtocolSetting: String, CaseIterable {
        case v5 = "5"
        case v311 = "3.1.1"
    }

    public init(
        host: String = "127.0.0.1", port: Int = 1883, clientID: String, username: String? = nil,
        password: String? = nil, caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil,
        protocolVersion: MQTTConfiguration.ProtocolVersion = .v5, keepAlive: Int = 30
    ) {
        self.host = host
        self.port = port
        self.clientID = clientID
        self.username = username
        self.password = password
        self.caFile = caFile
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.protocolVersion = protocolVersion
        self.keepAlive = keepAlive
    }

    /// Reads `broker.*` settings; problems are collected in `reader`.
    /// - Parameter embedded: the settings are for a private broker that Perimeter starts:
    ///   `broker.port` 0 (the default) then means "any free port".
    public static func read(
        from reader: ConfigReader, defaultClientID: String, embedded: Bool = false
    ) -> BrokerSettings {
        var settings = BrokerSettings(clientID: defaultClientID)
        if let hosts = reader.stringList("broker.hosts") {
            var endpoints: [MQTTConfiguration.Endpoint] = []
            for (index, entry) in hosts.enumerated() {
                guard let endpoint = Self.endpoint(entry) else {
                    reader.reject(
                        "broker.hosts",
                        "entry \(index + 1) '\(entry)' is not host:port (e.g. 127.0.0.1:1883 or [::1]:1883)")
                    continue
                }
                endpoints.append(endpoint)
            }
            if reader.optionalString("broker.host") != nil || reader.json("broker.port") != nil {
                reader.reject(
                    "broker.hosts", "set either broker.hosts or broker.host and broker.port, not both")
            }
            if let first = endpoints.first {
                settings.host = first.host
                settings.port = first.port
                settings.alternates = Array(endpoints.dropFirst())
            }
        } else {
            settings.host = reader.string("broker.host", default: settings.host)
            settings.port =
                embedded
                ? reader.int("broker.port", default: 0, range: 0...65535)
                : reader.int("broker.port", default: settings.port, range: 1...65535)
        }
        settings.clientID = reader.string("broker.clientId", default: defaultClientID)
        settings.username = reader.optionalString("broker.username")
        settings.password = reader.optionalString("broker.password", secret: true)
        settings.caFile = reader.optionalString("broker.tls.caFile")
        settings.certificateFile = reader.optionalString("broker.tls.certFile")
        settings.keyFile = reader.optionalString("broker.tls.keyFile")
        let version = reader.choice("broker.protocol", default: ProtocolSetting.v5)
        settings.protocolVersion = version == .v5 ? .v5 : .v311
        settings.keepAlive = reader.int("broker.keepAlive", default: settings.keepAlive, range: 5...65535)
        if settings.clientID.isEmpty { reader.reject("broker.clientId", "must not be empty") }
        if (settings.certificateFile == nil) != (settings.keyFile == nil) {
            reader.reject("broker.tls.keyFile", "a client certificate and its key go together: set both or neither")
        }
        if settings.password != nil && settings.username == nil {
            reader.reject("broker.username", "a password was given without a username")
        }
        return settings
    }

    /// Whether `reader` names a broker (`broker.host` or `broker.hosts`); without one,
    /// `perimeter up` starts a private broker.
    public static func isConfigured(in reader: ConfigReader) -> Bool {
        reader.optionalString("broker.host") != nil || reader.stringList("broker.hosts") != nil
    }

    /// `host:port` or `[v6-address]:port` with a port 1–65535; nil otherwise.
    static func endpoint(_ text: String) -> MQTTConfiguration.Endpoint? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (1...65535).contains(port)
        else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty, !host.contains(where: { "/ []".contains($0) }) else { return nil }
        // An unbracketed IPv6 address is ambiguous (is the last group the port?).
        if host.contains(":") && !text.hasPrefix("[") { return nil }
        return MQTTConfiguration.Endpoint(host: host, port: port)
    }

    /// The MQTT client configuration for these settings.
    public func mqttConfiguration(
        clientID: String? = nil, cleanStart: Bool = true, will: MQTTConfiguration.Will? = nil
    ) -> MQTTConfiguration {
        let tls =
            caFile == nil && certificateFile == nil
            ? nil : MQTTConfiguration.TLS(caFile: caFile, certificateFile: certificateFile, keyFile: keyFile)
        return MQTTConfiguration(
            host: host, port: port, clientID: clientID ?? self.clientID, keepAlive: keepAlive, username: username,
            password: password, tls: tls, protocolVersion: protocolVersion, cleanStart: cleanStart, will: will,
            alternates: alternates)
    }
}
