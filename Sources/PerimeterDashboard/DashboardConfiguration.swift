import Foundation
import PerimeterCore
import PerimeterKit

/// Everything `perimeter dashboard` reads from its configuration (file, `PERIMETER_*`, `--set`).
///
/// ```json
/// {
///   "broker": {"host": "127.0.0.1", "port": 1883},
///   "topics": {"prefix": "perimeter/v1"},
///   "dashboard": {"venue": "museum", "clientId": "perimeter-dashboard", "regions": "config/venues/museum.geojson", "http": "127.0.0.1:8080",
///                 "consumer": "dashboard", "session": "live", "sessionLevel": "always", "coarseMeters": 5000}
/// }
/// ```
/// The evaluator's file may be used as it is: without `dashboard.regions` the regions file of
/// `venues.{venue}.regions` is drawn, and the evaluator's sections are accepted and not read.
public struct DashboardConfiguration: ServiceSettings {
    public var broker: BrokerSettings
    public var prefix: String
    public var venue: String
    public var regionsPath: String
    public var http: (host: String, port: Int)
    /// The dashboard's own service session (`sessions/{consumer}/{session}`), declared while it runs.
    public var consumer: String
    public var session: String
    /// `always` or `whenInUse`; nil (`"none"`) declares no session.
    public var sessionLevel: String?
    /// The grid reduced-accuracy subjects are snapped to (metres), and the circle drawn for them.
    public var coarseMeters: Double
    public var title: String?
    public var log: LogSettings

    public init(
        broker: BrokerSettings, prefix: String = "perimeter/v1", venue: String, regionsPath: String,
        http: (host: String, port: Int) = ("127.0.0.1", 8080), consumer: String = "dashboard", session: String = "live",
        sessionLevel: String? = "always", coarseMeters: Double = 5000, title: String? = nil,
        log: LogSettings = LogSettings()
    ) {
        self.broker = broker
        self.prefix = prefix
        self.venue = venue
        self.regionsPath = regionsPath
        self.http = http
        self.consumer = consumer
        self.session = session
        self.sessionLevel = sessionLevel
        self.coarseMeters = coarseMeters
        self.title = title
        self.log = log
    }

    /// Reads and checks the configuration; throws ``ConfigError`` listing every problem.
    public static func read(_ reader: ConfigReader) throws -> DashboardConfiguration {
        var broker = BrokerSettings.read(from: reader, defaultClientID: "perimeter-dashboard")
        // A file shared with the evaluator names the evaluator's client id in broker.clientId; two
        // clients with one id would throw each other off the broker, so the dashboard has its own.
        broker.clientID = reader.string("dashboard.clientId", default: "perimeter-dashboard")
        let prefix = reader.string("topics.prefix", default: "perimeter/v1")
        let venues = reader.children(of: "venues")
        let venue =
            reader.optionalString("dashboard.venue") ?? (venues.count == 1 ? venues[0] : nil)
            ?? reader.optionalString("venue.name") ?? ""
        if venue.isEmpty || Topics.separator(in: venue) != nil || venue.hasPrefix("_") {
            reader.reject("dashboard.venue", "name the venue shown: one topic level, e.g. museum (got '\(venue)')")
        }
        let regions =
            reader.optionalString("dashboard.regions") ?? reader.optionalString("venues.\(venue).regions")
            ?? reader.optionalString("venue.regions")
        if regions == nil { reader.reject("dashboard.regions", "name the regions file (GeoJSON) to draw") }
        var http: (host: String, port: Int) = ("127.0.0.1", 8080)
        let text = reader.string("dashboard.http", default: "127.0.0.1:8080")
        let parts = text.split(separator: ":")
        if parts.count == 2, let port = Int(parts[1]), (0...65535).contains(port) {
            http = (String(parts[0]), port)
        } else {
            reader.reject("dashboard.http", "expected host:port like 127.0.0.1:8080, got '\(text)'")
        }
        let consumer = reader.string("dashboard.consumer", default: "dashboard")
        let session = reader.string("dashboard.session", default: "live")
        let level = reader.string("dashboard.sessionLevel", default: "always")
        if !["always", "whenInUse", "none"].contains(level) {
            reader.reject("dashboard.sessionLevel", "one of always, whenInUse, none (got '\(level)')")
        }
        let coarse = reader.double("dashboard.coarseMeters", default: 5000, range: 10...1_000_000)
        let title = reader.optionalString("dashboard.title")
        let log = LogSettings.read(from: reader)
        // A shared file: the evaluator's and the notifier's sections are theirs.
        for section in ["evaluator", "venues", "adapters", "venue", "notifier", "channels"] { reader.claim(section) }
        try reader.finish()
        return DashboardConfiguration(
            broker: broker, prefix: prefix, venue: venue, regionsPath: regions ?? "", http: http, consumer: consumer,
            session: session, sessionLevel: level == "none" ? nil : level, coarseMeters: coarse, title: title, log: log)
    }
}
