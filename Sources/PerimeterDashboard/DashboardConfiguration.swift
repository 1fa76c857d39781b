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
///                 "consumer": "dashboard", "session": "live", "sessionLevel": "always", "coarseMeters": 5000,
///                 "passwordFile": "/etc/perimeter/dashboard.password", "allowedHosts": ["dashboard.museum.example"],
///                 "behindTLS": true, "sessionHours": 12, "connectionsPerIP": 64, "maxStreams": 900, "idleTimeoutSeconds": 30,
///                 "timeZone": "Europe/Paris", "floorPlans": "/var/lib/perimeter/floorplans"}
/// }
/// ```
/// The password is never in this file: `dashboard.passwordFile` names a file of its own (not
/// readable by every user), or `PERIMETER_DASHBOARD_PASSWORD` holds it.
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
    /// The venue's time zone: every time on the page is shown in it, and the page names it
    /// (`dashboard.timeZone`, else `venues.{venue}.timeZone`, else UTC).
    public var timeZone: TimeZone
    /// The directory holding the uploaded floor plans and their georeferences
    /// (`dashboard.floorPlans`); nil: no floor plans can be uploaded.
    public var floorPlansPath: String?
    /// The one password that opens the dashboard (from `dashboard.passwordFile` or
    /// `PERIMETER_DASHBOARD_PASSWORD`); the service refuses to start without one.
    public var password: String?
    /// Host names the dashboard answers to (`Host` header, port ignored): loopback names, the
    /// listening address, and `dashboard.allowedHosts`.
    public var allowedHosts: [String]
    /// Reached over HTTPS (a proxy terminates TLS): the session cookie is `Secure`.
    public var behindTLS: Bool
    public var sessionHours: Double
    /// The HTTP server's limits (connections per client address, streams, idle timeout).
    public var limits: HTTPServer.Limits
    public var log: LogSettings

    public init(
        broker: BrokerSettings, prefix: String = "perimeter/v1", venue: String, regionsPath: String,
        http: (host: String, port: Int) = ("127.0.0.1", 8080), consumer: String = "dashboard", session: String = "live",
        sessionLevel: String? = "always", coarseMeters: Double = 5000, title: String? = nil,
        timeZone: TimeZone = TimeZone(identifier: "UTC")!, floorPlansPath: String? = nil, password: String? = nil,
        allowedHosts: [String]? = nil, behindTLS: Bool = false, sessionHours: Double = 12,
        limits: HTTPServer.Limits = HTTPServer.Limits(), log: LogSettings = LogSettings()
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
        self.timeZone = timeZone
        self.floorPlansPath = floorPlansPath
        self.password = password
        self.allowedHosts = allowedHosts ?? DashboardRoutes.defaultHosts(listening: http.host)
        self.behindTLS = behindTLS
        self.sessionHours = sessionHours
        self.limits = limits
        self.log = log
    }

    static let passwordHint =
        "put it in a file of its own (chmod 600, owned by the dashboard's user) named by dashboard.passwordFile, "
        + "or in PERIMETER_DASHBOARD_PASSWORD (e.g. a systemd EnvironmentFile of mode 0640)"

    /// Reads a password file: its first line; refused when every user may read the file.
    static func readPassword(file path: String, reader: ConfigReader) -> String? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            let data = FileManager.default.contents(atPath: path)
        else {
            reader.reject("dashboard.passwordFile", "cannot read \(path)")
            return nil
        }
        let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue ?? 0
        if mode & 0o004 != 0 {
            reader.reject(
                "dashboard.passwordFile",
                "\(path) is readable by every user (mode \(String(mode, radix: 8))): chmod 600 \(path)")
            return nil
        }
        let password = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).first.map(String.init)
        guard let password, !password.isEmpty else {
            reader.reject("dashboard.passwordFile", "\(path) is empty: its first line is the password")
            return nil
        }
        return password
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
        let zoneName =
            reader.optionalString("dashboard.timeZone") ?? reader.optionalString("venues.\(venue).timeZone")
            ?? reader.optionalString("venue.timeZone") ?? "UTC"
        let timeZone = TimeZone(identifier: zoneName)
        if timeZone == nil {
            reader.reject("dashboard.timeZone", "'\(zoneName)' is not an IANA time zone (e.g. Europe/Paris)")
        }
        let floorPlans = reader.optionalString("dashboard.floorPlans")
        var password = reader.environmentSecret("dashboard.password", instead: passwordHint)
        if let path = reader.optionalString("dashboard.passwordFile") {
            if password != nil {
                reader.reject(
                    "dashboard.passwordFile", "give the password once: this file or PERIMETER_DASHBOARD_PASSWORD")
            }
            password = readPassword(file: path, reader: reader)
        } else if password == nil {
            reader.reject("dashboard.passwordFile", "the dashboard needs a password: \(passwordHint)")
        } else if password?.isEmpty == true {
            reader.reject("dashboard.password", "PERIMETER_DASHBOARD_PASSWORD is empty")
        }
        let hosts =
            DashboardRoutes.defaultHosts(listening: http.host) + (reader.stringList("dashboard.allowedHosts") ?? [])
        for host in hosts where host.isEmpty || host.contains(where: { $0 == "/" || $0 == ":" && !host.hasPrefix("[") })
        {
            reader.reject(
                "dashboard.allowedHosts",
                "'\(host)' is not a host name (no scheme, path or port): e.g. dashboard.museum.example")
        }
        let behindTLS = reader.bool("dashboard.behindTLS", default: false)
        let sessionHours = reader.double("dashboard.sessionHours", default: 12, range: 0.01...720)
        var limits = HTTPServer.Limits()
        limits.connectionsPerIP = reader.int(
            "dashboard.connectionsPerIP", default: limits.connectionsPerIP, range: 2...100_000)
        limits.streams = reader.int("dashboard.maxStreams", default: limits.streams, range: 1...100_000)
        limits.idleTimeoutSeconds = reader.int(
            "dashboard.idleTimeoutSeconds", default: limits.idleTimeoutSeconds, range: 2...3600)
        let log = LogSettings.read(from: reader)
        // A shared file: the evaluator's and the notifier's sections are theirs.
        // `topics.natsSafe` only narrows the ids the evaluator accepts: nothing for the dashboard.
        for section in ["evaluator", "venues", "adapters", "venue", "notifier", "channels", "topics.natsSafe"] {
            reader.claim(section)
        }
        try reader.finish()
        return DashboardConfiguration(
            broker: broker, prefix: prefix, venue: venue, regionsPath: regions ?? "", http: http, consumer: consumer,
            session: session, sessionLevel: level == "none" ? nil : level, coarseMeters: coarse, title: title,
            timeZone: timeZone ?? TimeZone(identifier: "UTC")!, floorPlansPath: floorPlans, password: password,
            allowedHosts: hosts.map { $0.lowercased() }, behindTLS: behindTLS,
            sessionHours: sessionHours, limits: limits, log: log)
    }
}
