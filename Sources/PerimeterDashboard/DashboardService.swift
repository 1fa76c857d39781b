import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import Synchronization

/// Where a running dashboard listens, and a way to let someone in once.
public struct DashboardAddress: Sendable {
    /// The page, e.g. `http://127.0.0.1:8080/`.
    public let url: String
    let auth: DashboardAuth

    /// A single-use sign-in link (valid for ten minutes): opening it sets the session cookie
    /// and goes on to `next`. For `perimeter up` and `perimeter dashboard --login-link`.
    public func oneTimeLoginURL(next: String = "/") -> String {
        let target = next.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "%2F"
        return "\(url)login?token=\(auth.issueLoginToken())&next=\(target)"
    }
}

/// The live dashboard: a consumer of the venue's topics with its own service session, and an
/// HTTP server (libmicrohttpd) for one page (`/`) with its style and script, its map
/// (`/map.svg`), a live stream (`/events`, Server-Sent Events), the login (`/login`) and
/// `/healthz`. Everything but `/healthz` and the login form needs a session (``DashboardAuth``);
/// every request must name an allowed host (``DashboardRoutes``).
public struct DashboardService: Service {
    public let name = "dashboard"
    public let configuration: DashboardConfiguration
    let logger: Logger
    let map: VenueMap
    let renderer: SVGMapRenderer
    let title: String
    private let broadcaster = EventBroadcaster()
    let auth: DashboardAuth
    /// The uploaded floor plans, when `dashboard.floorPlans` names their directory.
    let floorPlans: FloorPlans?
    let clock: any TimeSource
    /// Seconds between keep-alive comments on idle streams (which also find pages gone away).
    let heartbeat: Double
    /// How long a change waits for others before the state goes out.
    static let flushDelay: Duration = .milliseconds(100)
    /// Called once the server listens (e.g. for `perimeter up` to print a sign-in link).
    let onListening: (@Sendable (DashboardAddress) -> Void)?

    /// Reads the regions file and renders the map; nothing connects until ``run()``.
    /// - Throws: when no password is configured, or the regions file cannot be read.
    public init(
        configuration: DashboardConfiguration, logger: Logger, clock: any TimeSource = SystemTimeSource(),
        heartbeat: Double = 10, onListening: (@Sendable (DashboardAddress) -> Void)? = nil
    ) throws {
        guard let password = configuration.password, !password.isEmpty else {
            throw ConfigError(
                key: "dashboard.passwordFile", "the dashboard needs a password: \(DashboardConfiguration.passwordHint)")
        }
        self.configuration = configuration
        self.logger = logger
        self.clock = clock
        self.heartbeat = heartbeat
        self.onListening = onListening
        var settings = DashboardAuth.Settings(password: password, secureCookie: configuration.behindTLS)
        settings.sessionLifetime = configuration.sessionHours * 3600
        auth = DashboardAuth(settings: settings, clock: clock)
        if let path = configuration.floorPlansPath {
            do {
                floorPlans = try FloorPlans(directory: path)
            } catch {
                throw ConfigError(key: "dashboard.floorPlans", "cannot use \(path) for floor plans: \(error)")
            }
        } else {
            floorPlans = nil
        }
        guard let data = FileManager.default.contents(atPath: configuration.regionsPath) else {
            throw ConfigError(key: "dashboard.regions", "cannot read \(configuration.regionsPath)")
        }
        let document = data.withUnsafeBytes { RegionParser.parse(bytes: $0.bindMemory(to: UInt8.self)) }
        for problem in document.problems {
            logger.warning(
                "region not drawn", metadata: ["problem": "\(problem)", "file": "\(configuration.regionsPath)"])
        }
        map = VenueMap(title: configuration.title ?? configuration.venue, regions: document.regions)
        renderer = SVGMapRenderer(width: 960, height: 640, margin: 40)
        title = configuration.title ?? "Perimeter — \(configuration.venue)"
        broadcaster.start(svg: renderer.render(map))
    }

    /// The view with the floor plans: for each, its image's address and size, and the matrix
    /// taking its pixels to the map's picture (SVG `matrix(a b c d e f)`).
    static func withFloors(_ view: JSONValue, _ plans: FloorPlans?, _ projection: MapProjection) -> JSONValue {
        guard case .object(var root) = view, let plans else { return view }
        root["floors"] = .array(
            plans.all.compactMap { plan in
                guard let m = try? FloorPlans.transform(plan, projection: projection) else { return nil }
                return [
                    "floor": .number(Double(plan.floor)), "href": .string("/floors/\(plan.floor)/plan"),
                    "width": .number(Double(plan.width)), "height": .number(Double(plan.height)),
                    "matrix": .array([m.a, m.b, m.c, m.d, m.e, m.f].map { .number($0) }),
                ]
            })
        return .object(root)
    }

    static func features(_ map: VenueMap) -> [String: JSONValue] {
        Dictionary(map.regions.map { ($0.id, $0.feature) }, uniquingKeysWith: { first, _ in first })
    }

    public func run() async throws {
        var model = DashboardModel(
            prefix: configuration.prefix, venue: configuration.venue, map: map, renderer: renderer,
            coarseMeters: configuration.coarseMeters)
        let client = try MQTTClient(configuration.broker.mqttConfiguration())
        let broadcaster = broadcaster
        broadcaster.publish(
            state: Self.withFloors(model.view(brokerConnected: false), floorPlans, model.projection).serialized())
        // The region editor publishes as `perimeter regions put` does: retained, QoS 1, typed.
        let properties =
            configuration.broker.protocolVersion == .v5 ? MQTTProperties(contentType: LiveRegions.contentType) : .none
        let editor = RegionEditor(
            venue: configuration.venue, prefix: configuration.prefix, maxPayloadBytes: 65_536, clock: clock
        ) { topic, payload in
            try await client.publish(topic, payload: payload, qos: .atLeastOnce, retain: true, properties: properties)
        }
        let projection = Mutex<MapProjection?>(model.projection)
        // The regions as drawn now, as Features: the editor loads one to change it.
        let features = Mutex<[String: JSONValue]>(Self.features(model.map))
        let floorPlans = floorPlans
        var routes = DashboardRoutes(
            title: title, timeZone: configuration.timeZone.identifier, broadcaster: broadcaster, auth: auth,
            allowedHosts: Set(configuration.allowedHosts), regions: editor
        ) {
            let connected = client.state.isConnected
            let pages = "\(broadcaster.clientCount) page(s) streaming\n"
            return (connected, (connected ? "ok: broker connected, " : "broker not connected, ") + pages)
        }
        routes.floorPlans = floorPlans
        routes.projection = { projection.withLock { $0 } }
        routes.feature = { id in features.withLock { $0[id] } }
        let logger = logger
        // A region drawn in the editor is one GeoJSON Feature of at most the evaluator's default
        // payload bound (64 KiB); every other request body is a small form.
        var limits = configuration.limits
        limits.requestBodyBytes = max(limits.requestBodyBytes, floorPlans == nil ? 65_536 : FloorPlans.maxBytes)
        let server = try HTTPServer(
            host: configuration.http.host, port: configuration.http.port, limits: limits,
            onError: { message in logger.info("http", metadata: ["http.error": .string(message)]) },
            handler: routes.respond)
        defer { server.stop() }
        let url = "http://\(configuration.http.host):\(server.port)/"
        logger.info(
            "dashboard listening",
            metadata: [
                "url": .string(url),
                "dashboard.allowedHosts": .string(configuration.allowedHosts.joined(separator: ",")),
            ])
        onListening?(DashboardAddress(url: url, auth: auth))

        try await client.connect(timeout: .seconds(366 * 86_400))
        for filter in model.subscriptions { _ = try await client.subscribe(filter, qos: .atLeastOnce) }
        let sessionTopic =
            "\(configuration.prefix)/\(configuration.venue)/sessions/\(Topics.level(configuration.consumer))/\(Topics.level(configuration.session))"
        if let level = configuration.sessionLevel {
            // Refused by a broker whose ACL keeps sessions to the consent service: the page still
            // shows what other sessions let through, so say so and carry on.
            do {
                try await client.publish(
                    sessionTopic, #"{"subjects":"*","level":"\#(level)"}"#, qos: .atLeastOnce, retain: true)
            } catch {
                logger.warning(
                    "could not declare the dashboard's session; declare it through the consent service or set dashboard.sessionLevel to none",
                    metadata: ["mqtt.topic": .string(sessionTopic), "error": "\(error)"])
            }
        }
        broadcaster.publish(
            state: Self.withFloors(model.view(brokerConnected: true), floorPlans, model.projection).serialized())

        // States are sent at most every 100 ms: the first change after a quiet spell arms one
        // flush (`nil`) 100 ms later, which sends what changed meanwhile. Feed lines go at once.
        // An idle dashboard wakes only for its keep-alives (it had a 100 ms ticker).
        let (wakes, wake) = AsyncStream.makeStream(of: MQTTMessage?.self, bufferingPolicy: .unbounded)
        // Discarding: the flushes' tasks end by the thousand and must not be kept.
        await withDiscardingTaskGroup { group in
            group.addTask {
                for await message in client.messages { wake.yield(message) }
                wake.finish()
            }
            if let floorPlans {
                group.addTask {
                    for await _ in floorPlans.uploaded { wake.yield(nil) }
                }
            }
            group.addTask { [clock, heartbeat] in
                // Keep-alives on the service's clock: a test advances it instead of waiting.
                while !Task.isCancelled {
                    do { try await clock.sleep(seconds: heartbeat) } catch { break }
                    broadcaster.keepAlive()
                }
            }
            var dirty = false
            var mapDirty = false
            var plansSeen = 0
            var flushArmed = false
            for await message in wakes {
                if Task.isCancelled { break }
                guard let message else {
                    flushArmed = false
                    // A burst of retained regions at subscribe time redraws the map once.
                    if let floorPlans, floorPlans.version != plansSeen {
                        plansSeen = floorPlans.version
                        dirty = true
                    }
                    if mapDirty {
                        projection.withLock { $0 = model.projection }
                        features.withLock { $0 = Self.features(model.map) }
                        broadcaster.publish(map: model.svg)
                        mapDirty = false
                    }
                    if dirty {
                        broadcaster.publish(
                            state: Self.withFloors(
                                model.view(brokerConnected: client.state.isConnected), floorPlans, model.projection
                            ).serialized())
                        dirty = false
                    }
                    continue
                }
                for change in model.apply(topic: message.topic, payload: message.payload) {
                    switch change {
                    case .state: dirty = true
                    case .map: mapDirty = true
                    case .feed(let line): broadcaster.publish(feed: line)
                    case .feedReset: broadcaster.reset(feed: model.feedLines)
                    }
                }
                if (dirty || mapDirty) && !flushArmed {
                    flushArmed = true
                    group.addTask {
                        try? await Task.sleep(for: Self.flushDelay)
                        wake.yield(nil)
                    }
                }
            }
            group.cancelAll()
        }
        if configuration.sessionLevel != nil {
            try? await client.publish(sessionTopic, "", qos: .atLeastOnce, retain: true)
        }
        await client.disconnect()
    }
}
