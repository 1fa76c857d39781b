import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterNet

/// Everything `perimeter notifier` needs, validated before it starts
/// (`config/notifier.example.json` shows every key).
public struct NotifierConfiguration: ServiceSettings {
    public struct Venue: Sendable {
        public var id: String
        public var conventions: VenueConventions
        /// The venue's rules file (`{"rules": […]}`), re-read on SIGHUP.
        public var rulesPath: String?
        /// The venue's regions file, for region names in texts (live `regions/{id}` topics too).
        public var regionsPath: String?

        public init(id: String, conventions: VenueConventions, rulesPath: String? = nil, regionsPath: String? = nil) {
            self.id = id
            self.conventions = conventions
            self.rulesPath = rulesPath
            self.regionsPath = regionsPath
        }
    }

    /// Where a channel delivers.
    public enum Channel: Sendable {
        /// `notifications/{channel}/{subject}` under the venue, or `topic` with `{venue}`,
        /// `{channel}`, `{subject}`, `{region}`, `{rule}` filled in (each one topic level).
        case mqtt(topic: String?)
        /// HTTP POST of the JSON record to `url` (sent exactly as configured), signed with
        /// `secret` the Standard Webhooks way (`webhook-id`, `webhook-timestamp`,
        /// `webhook-signature: v1,…`) and, for one more release, in `X-Perimeter-Signature`.
        case webhook(url: String, secret: WebhookSecret, options: HTTPClient.Options)
        /// Mail through an SMTP relay.
        case mail(relay: SMTPClient.Relay, from: String, to: [String])

        public var kind: String {
            switch self {
            case .mqtt: "mqtt"
            case .webhook: "webhook"
            case .mail: "mail"
            }
        }
    }

    /// Retry policy: capped exponential backoff with jitter; dead after `maxAttempts`, or
    /// after `maxCrashes` attempts in a row that the notifier did not live to finish.
    public struct Delivery: Sendable {
        public var maxAttempts: Int = 8
        public var initialBackoff: Double = 1
        public var maxBackoff: Double = 300
        /// Per webhook attempt, connection to the end of the answer.
        public var timeout: Double = 10
        /// Per webhook attempt, to set up the connection (TCP and TLS).
        public var connectTimeout: Double = 10
        /// A webhook exchange below 1 byte/s for this long is given up.
        public var stallTimeout: Double = 10
        /// The most bytes read of a webhook receiver's answer body.
        public var maxResponseBytes: Int = 65_536
        /// Webhook and mail deliveries in flight at once (each a connection of its own).
        public var concurrency: Int = 4
        /// MQTT notifications published and not yet acknowledged at once: they go out one after
        /// the other without waiting for each other's PUBACK.
        public var mqttInFlight: Int = 1000
        /// Attempts on one row started and never finished (the process died) before it is set
        /// aside as dead with the reason `crashedDuringDelivery`.
        public var maxCrashes: Int = 3
        public init() {}
    }

    /// How long finished outbox rows are kept, in seconds (pruned every `pruneInterval` on
    /// the service's clock).
    public struct Retention: Sendable {
        public var delivered: Double = 7 * 86_400
        /// Dead and failed rows: long enough for an operator to look and `notifier retry` them.
        public var undeliverable: Double = 30 * 86_400
        public var pruneInterval: Double = 3600
        public init() {}
    }

    public var broker: BrokerSettings
    public var prefix: String
    public var instance: String
    public var databasePath: String
    public var venues: [Venue]
    public var channels: [String: Channel]
    public var delivery: Delivery
    public var retention = Retention()
    public var sessionExpiry: Int = 86_400
    /// Arrivals journalled and not processed at which the notifier stops reading until
    /// processing is down to three quarters of it (the broker queues the rest; ``IntakeGate``).
    public var maxJournalBacklog: Int = 20_000
    /// Larger inbound payloads are dead-lettered unread (`tooLarge`).
    public var maxPayloadBytes: Int = 65_536
    public var http: (host: String, port: Int)?
    public var log: LogSettings

    public init(
        broker: BrokerSettings, prefix: String = "perimeter/v1", instance: String = "1", databasePath: String,
        venues: [Venue], channels: [String: Channel], delivery: Delivery = Delivery(), log: LogSettings = LogSettings()
    ) {
        self.broker = broker
        self.prefix = prefix
        self.instance = instance
        self.databasePath = databasePath
        self.venues = venues
        self.channels = channels
        self.delivery = delivery
        self.log = log
    }

    public static func read(_ reader: ConfigReader) throws -> NotifierConfiguration {
        let instance = reader.string("notifier.instance", default: "1")
        var broker = BrokerSettings.read(from: reader, defaultClientID: "perimeter-notifier-\(instance)")
        let prefix = reader.string("topics.prefix", default: "perimeter/v1")
        let database = reader.string("notifier.database", default: "perimeter-notifier.sqlite")
        var delivery = Delivery()
        delivery.maxAttempts = reader.int("notifier.maxAttempts", default: 8, range: 1...1000)
        delivery.initialBackoff = reader.double("notifier.initialBackoff", default: 1, range: 0.01...3600)
        delivery.maxBackoff = reader.double("notifier.maxBackoff", default: 300, range: 0.01...86_400)
        delivery.timeout = reader.double("notifier.timeout", default: 10, range: 0.1...600)
        delivery.connectTimeout = reader.double(
            "notifier.connectTimeout", default: min(10, delivery.timeout), range: 0.1...600)
        delivery.stallTimeout = reader.double("notifier.stallTimeout", default: 10, range: 1...600)
        delivery.maxResponseBytes = reader.int(
            "notifier.maxResponseBytes", default: 65_536, range: 1024...16_777_216)
        delivery.concurrency = reader.int("notifier.concurrency", default: 4, range: 1...256)
        delivery.mqttInFlight = reader.int("notifier.mqttInFlight", default: 1000, range: 1...65_535)
        delivery.maxCrashes = reader.int("notifier.maxCrashes", default: 3, range: 1...100)
        var retention = Retention()
        retention.delivered = reader.double(
            "notifier.retention.delivered", default: retention.delivered, range: 0...3_650 * 86_400)
        retention.undeliverable = reader.double(
            "notifier.retention.undeliverable", default: retention.undeliverable, range: 0...3_650 * 86_400)
        retention.pruneInterval = reader.double(
            "notifier.retention.pruneInterval", default: retention.pruneInterval, range: 1...86_400)
        let sessionExpiry = reader.int("notifier.sessionExpiry", default: 86_400, range: 0...Int(UInt32.max))
        let http = reader.hostPort("notifier.http")
        let maxPayload = reader.int("notifier.maxPayloadBytes", default: 65_536, range: 64...16_777_216)
        let maxJournalBacklog = reader.int("notifier.maxJournalBacklog", default: 20_000, range: 1_000...100_000_000)
        let log = LogSettings.read(from: reader)
        if delivery.maxBackoff < delivery.initialBackoff {
            reader.reject("notifier.maxBackoff", "must not be below notifier.initialBackoff")
        }
        if retention.delivered < Double(sessionExpiry) {
            reader.reject(
                "notifier.retention.delivered",
                "must be at least notifier.sessionExpiry (\(sessionExpiry) s): the outbox row is what keeps an event "
                    + "redelivered by the broker from firing its rules again")
        }
        if delivery.connectTimeout > delivery.timeout {
            reader.reject("notifier.connectTimeout", "must not be above notifier.timeout (the whole attempt)")
        }

        var venues: [Venue] = []
        for id in reader.venueIDs() {
            let key = "venues.\(id)"
            venues.append(
                Venue(
                    id: id, conventions: reader.venueConventions(key), rulesPath: reader.optionalString("\(key).rules"),
                    regionsPath: reader.optionalString("\(key).regions")))
        }
        var channels: [String: Channel] = [:]
        for name in reader.children(of: "channels") {
            if let channel = readChannel(name, reader, delivery: delivery) { channels[name] = channel }
        }
        if channels.isEmpty { reader.reject("channels", "configure at least one channel (mqtt, webhook or mail)") }
        // One file may configure the whole venue: the other services' settings are theirs.
        for section in ["evaluator", "adapters", "dashboard"] { reader.claim(section) }
        for venue in venues {
            for key in [
                "privacy", "gateways", "pathLossExponent", "staleAfter", "beaconExitTimeout", "requireAccuracy", "kIn",
                "kOut",
            ] {
                reader.claim("venues.\(venue.id).\(key)")
            }
        }
        try reader.finish()
        broker.clientID = broker.clientID.isEmpty ? "perimeter-notifier-\(instance)" : broker.clientID
        var configuration = NotifierConfiguration(
            broker: broker, prefix: prefix, instance: instance, databasePath: database, venues: venues,
            channels: channels, delivery: delivery, log: log)
        configuration.sessionExpiry = sessionExpiry
        configuration.retention = retention
        configuration.http = http
        configuration.maxPayloadBytes = maxPayload
        configuration.maxJournalBacklog = maxJournalBacklog
        return configuration
    }

    private enum Kind: String, CaseIterable { case mqtt, webhook, mail }

    private static func readChannel(
        _ name: String, _ reader: ConfigReader, delivery: Delivery
    ) -> Channel? {
        let key = "channels.\(name)"
        if RuleParser.idProblem(name) != nil {
            reader.reject(key, "a channel name may hold only letters, digits, '.', '_' and '-'")
        }
        guard let kind = reader.optionalString("\(key).type").flatMap(Kind.init(rawValue:)) else {
            reader.reject("\(key).type", "expected mqtt, webhook or mail")
            reader.claim(key)
            return nil
        }
        let caFile = reader.optionalString("\(key).caFile")
        if reader.bool("\(key).insecure", default: false) {
            reader.reject(
                "\(key).insecure",
                "certificate verification cannot be turned off; give the peer's CA certificate in \(key).caFile")
        }
        switch kind {
        case .mqtt:
            let topic = reader.optionalString("\(key).topic")
            if let topic, topic.contains("+") || topic.contains("#") {
                reader.reject("\(key).topic", "a topic to publish on cannot hold '+' or '#'")
            }
            return .mqtt(topic: topic)
        case .webhook:
            let text = reader.string("\(key).url", default: "")
            let secretText = reader.string("\(key).secret", default: "", secret: true)
            // The URL goes to curl byte for byte: no blanks or controls that a parser might
            // drop or turn into something else.
            guard !text.unicodeScalars.contains(where: { $0.value <= 32 || $0.value == 127 }),
                let url = URL(string: text), ["http", "https"].contains(url.scheme?.lowercased() ?? ""),
                url.host != nil
            else {
                reader.reject(
                    "\(key).url",
                    "expected an http:// or https:// URL without blanks or control characters, got '\(text)'")
                return nil
            }
            let secret: WebhookSecret
            do { secret = try WebhookSecret(secretText) } catch {
                reader.reject("\(key).secret", "\(error)")
                return nil
            }
            let options = HTTPClient.Options(
                caFile: caFile, proxy: readProxy("\(key).proxy", reader), connectTimeout: delivery.connectTimeout,
                timeout: delivery.timeout, stallTimeout: delivery.stallTimeout,
                maxResponseBytes: delivery.maxResponseBytes)
            return .webhook(url: text, secret: secret, options: options)
        case .mail:
            let host = reader.string("\(key).host", default: "")
            if host.isEmpty || host.contains(where: { "/@?#% \r\n\t".contains($0) }) {
                reader.reject("\(key).host", "the SMTP relay's host name or address is required, got '\(host)'")
            }
            // Refused with its reason rather than as an unknown value.
            let startTLS: SMTPClient.StartTLS
            if reader.optionalString("\(key).startTLS") == "opportunistic" {
                reader.reject(
                    "\(key).startTLS",
                    "opportunistic STARTTLS can be stripped by anyone on the path; use \"required\" (the default), "
                        + "or \"never\" for a relay on this machine")
                startTLS = .required
            } else {
                startTLS = reader.choice("\(key).startTLS", default: SMTPClient.StartTLS.required)
            }
            let helo = reader.string("\(key).helo", default: "perimeter.localhost")
            if helo.isEmpty
                || !helo.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "-") })
            {
                reader.reject("\(key).helo", "expected a host name (letters, digits, '.', '-'), got '\(helo)'")
            }
            let relay = SMTPClient.Relay(
                host: host, port: reader.int("\(key).port", default: 25, range: 1...65535),
                startTLS: startTLS, caFile: caFile,
                username: reader.optionalString("\(key).username"),
                password: reader.optionalString("\(key).password", secret: true), heloName: helo,
                timeout: reader.double("\(key).timeout", default: 30, range: 0.1...600),
                connectTimeout: delivery.connectTimeout, stallTimeout: delivery.stallTimeout)
            if relay.startTLS == .never && !SMTPClient.isLoopback(host) {
                reader.reject(
                    "\(key).startTLS",
                    "\"never\" is only allowed for a relay on a loopback address (localhost, 127.0.0.1, ::1), "
                        + "not '\(host)'")
            }
            if relay.startTLS == .never && relay.username != nil {
                reader.reject("\(key).username", "credentials are never sent without TLS (startTLS is \"never\")")
            }
            let from = reader.string("\(key).from", default: "")
            var to: [String] = []
            switch reader.json("\(key).to") {
            case .array(let list)?: to = list.compactMap(\.stringValue)
            case .string(let one)?: to = one.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            default: break
            }
            if !isPlainAddress(from) { reader.reject("\(key).from", "the sender's address is required, got '\(from)'") }
            if to.isEmpty || !to.allSatisfy(isPlainAddress) {
                reader.reject("\(key).to", "one or more recipient addresses are required")
            }
            return .mail(relay: relay, from: from, to: to)
        }
    }

    /// `local@domain` with no blanks, brackets or line breaks, the domain a host name.
    private static func isPlainAddress(_ text: String) -> Bool {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        return parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty
            && !text.contains(where: { "<>\r\n\0 \t,".contains($0) })
            && parts[1].allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "-") }
    }

    /// `proxy`: unset (none: `http_proxy` and friends are ignored), `"environment"` (use them),
    /// or a proxy URL.
    private static func readProxy(_ key: String, _ reader: ConfigReader) -> HTTPClient.Proxy {
        guard let text = reader.optionalString(key, secret: true), !text.isEmpty else { return .none }
        if text == "environment" { return .environment }
        guard let url = URL(string: text), url.scheme != nil, url.host != nil else {
            reader.reject(key, "expected \"environment\" or a proxy URL like http://proxy.example:3128")
            return .none
        }
        return .url(text)
    }
}
