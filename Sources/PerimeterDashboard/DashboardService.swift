import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

extension HTTPServer.StreamWriter: HTTPStreamWriting {}

/// The live dashboard: a consumer of the venue's topics with its own service session, and a
/// small HTTP server for one self-contained page (`/`), its map (`/map.svg`), a live stream
/// (`/events`, Server-Sent Events) and `/healthz`.
public struct DashboardService: Service {
    public let name = "dashboard"
    public let configuration: DashboardConfiguration
    let logger: Logger
    let map: VenueMap
    let renderer: SVGMapRenderer
    let title: String
    private let broadcaster = EventBroadcaster()
    /// Called with the page's URL once the server listens (e.g. for `perimeter up` to print it).
    let onListening: (@Sendable (String) -> Void)?

    /// Reads the regions file and renders the map; nothing connects until ``run()``.
    /// - Throws: when the regions file cannot be read or has problems.
    public init(
        configuration: DashboardConfiguration, logger: Logger, onListening: (@Sendable (String) -> Void)? = nil
    ) throws {
        self.configuration = configuration
        self.logger = logger
        self.onListening = onListening
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

    /// The page with its last lines held back for `seconds`: the browser runs the page's script
    /// and receives live events meanwhile, but the document (and its load event) ends only then,
    /// so a headless browser's `--dump-dom` or `--screenshot` captures the page after that long.
    static func heldPage(_ page: String, seconds: Double) -> HTTPServer.Response {
        let split = page.range(of: "</body>", options: .backwards)?.lowerBound ?? page.endIndex
        let head = String(page[..<split])
        let tail = String(page[split...])
        return .stream(contentType: "text/html; charset=utf-8") { writer in
            guard writer.write(head) else { return }
            let end = Date().addingTimeInterval(seconds)
            while writer.isOpen && Date() < end { Thread.sleep(forTimeInterval: 0.05) }
            writer.write(tail)
        }
    }

    public func run() async throws {
        var model = DashboardModel(
            prefix: configuration.prefix, venue: configuration.venue, map: map, renderer: renderer,
            coarseMeters: configuration.coarseMeters)
        let client = try MQTTClient(configuration.broker.mqttConfiguration())
        let broadcaster = broadcaster
        broadcaster.publish(state: model.view(brokerConnected: false).serialized())
        let server = try HTTPServer(host: configuration.http.host, port: configuration.http.port) {
            [title] path in
            switch path {
            case "/", "/index.html":
                return HTTPServer.Response(
                    contentType: "text/html; charset=utf-8",
                    body: DashboardPage.html(title: title, svg: broadcaster.svg))
            case "/map.svg": return HTTPServer.Response(contentType: "image/svg+xml", body: broadcaster.svg)
            case "/events": return .stream { writer in broadcaster.serve(writer) }
            case let path where path.hasPrefix("/snapshot/"):
                guard let seconds = Double(path.dropFirst("/snapshot/".count)), seconds >= 0, seconds <= 60 else {
                    return HTTPServer.Response(status: 404, body: "try /snapshot/SECONDS (0 to 60)\n")
                }
                return Self.heldPage(DashboardPage.html(title: title, svg: broadcaster.svg), seconds: seconds)
            case "/healthz":
                let connected = client.state.isConnected
                let pages = "\(broadcaster.clientCount) page(s) streaming\n"
                return HTTPServer.Response(
                    status: connected ? 200 : 503,
                    body: (connected ? "ok: broker connected, " : "broker not connected, ") + pages)
            default: return HTTPServer.Response(status: 404, body: "try /\n")
            }
        }
        server.start()
        defer {
            server.stop()
            broadcaster.wakeAll()
        }
        let url = "http://\(configuration.http.host):\(server.port)/"
        logger.info("dashboard listening", metadata: ["url": .string(url)])
        onListening?(url)

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
        broadcaster.publish(state: model.view(brokerConnected: true).serialized())

        // States are sent at most every 100 ms; feed lines at once.
        let (wakes, wake) = AsyncStream.makeStream(of: MQTTMessage?.self, bufferingPolicy: .unbounded)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await message in client.messages { wake.yield(message) }
                wake.finish()
            }
            group.addTask {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(100))
                    wake.yield(nil)
                }
            }
            var dirty = false
            var mapDirty = false
            for await message in wakes {
                if Task.isCancelled { break }
                guard let message else {
                    // A burst of retained regions at subscribe time redraws the map once.
                    if mapDirty {
                        broadcaster.publish(map: model.svg)
                        mapDirty = false
                    }
                    if dirty {
                        broadcaster.publish(state: model.view(brokerConnected: client.state.isConnected).serialized())
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
            }
            group.cancelAll()
        }
        if configuration.sessionLevel != nil {
            try? await client.publish(sessionTopic, "", qos: .atLeastOnce, retain: true)
        }
        await client.disconnect()
    }
}
