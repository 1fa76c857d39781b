import Foundation
import PerimeterCore
import PerimeterDashboard
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Reads a Server-Sent Events stream over a plain socket, as a browser's EventSource would.
final class EventStreamReader: Sendable {
    private let fd: Int32
    private let text = Mutex("")

    init(port: Int, path: String = "/events", cookie: String) throws {
        fd = try sendHTTPGet(
            port: port, path: path, headers: ["Accept: text/event-stream", "Cookie: \(cookie)"],
            readTimeout: .milliseconds(50))
    }

    /// Everything received so far.
    var received: String {
        var buffer = [UInt8](repeating: 0, count: 65536)
        let count = recv(fd, &buffer, buffer.count, 0)
        if count > 0 { text.withLock { $0 += String(decoding: buffer[0..<count], as: UTF8.self) } }
        return text.withLock { $0 }
    }

    /// Waits until the stream received so far satisfies `condition`. The dashboard runs in the
    /// test process, so on a loaded machine it shares two threads with CPU-bound tests: 60 s.
    @discardableResult
    func waitFor(_ what: String, timeout: Duration = .seconds(60), _ condition: (String) -> Bool) async throws -> String
    {
        let text: String? = try await waitForValue(timeout: timeout) {
            let current = received
            return condition(current) ? current : nil
        }
        guard let text else {
            throw TimeoutError(what: "\(what); stream so far: \(received.suffix(2000))", timeout: timeout)
        }
        return text
    }

    /// The data of the last `state` event received.
    func lastState() -> JSONValue? {
        let frames = received.components(separatedBy: "event: state\ndata: ")
        guard frames.count > 1, let line = frames.last?.split(separator: "\n").first else { return nil }
        return try? JSONValue(parsing: String(line))
    }

    func close() { Glibc.close(fd) }
}

/// The password every test dashboard is given.
let testPassword = "correct horse battery staple"

/// Runs a dashboard service; returns the task running it, the port it listens on (0 when it
/// never said within five seconds) and its address (for sign-in links).
func startDashboard(
    _ configuration: DashboardConfiguration, log: InMemoryLogHandler = InMemoryLogHandler(),
    clock: any TimeSource = SystemTimeSource()
)
    async throws -> (running: Task<Void, any Error>, port: Int, address: DashboardAddress?)
{
    let listening = Mutex<DashboardAddress?>(nil)
    let service = try DashboardService(
        configuration: configuration, logger: Logger(label: "test", handler: log), clock: clock
    ) { address in listening.withLock { $0 = address } }
    let running = Task { try await service.run() }
    let address = try await waitForValue(timeout: .seconds(5), every: .milliseconds(10)) {
        listening.withLock { $0 }
    }
    let port = address.flatMap { URLComponents(string: $0.url)?.port } ?? 0
    return (running, port, address)
}

/// Signs in with the password; returns the `Cookie` header value for later requests.
func signIn(port: Int, password: String = testPassword) throws -> String {
    let response = try httpRequest(
        port: port, method: "POST", path: "/login",
        body: "password=\(password.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)&next=%2F")
    guard response.status == 303, let cookie = response.header("Set-Cookie")?.split(separator: ";").first else {
        throw ChildFailure(message: "sign-in failed: \(response.status) \(response.body.prefix(300))")
    }
    return String(cookie)
}

/// A signed-in GET: status and body.
func authenticatedGet(port: Int, path: String, cookie: String) throws -> HTTPExchange {
    try httpRequest(port: port, path: path, headers: ["Cookie: \(cookie)"])
}

@Suite("Dashboard service against a real broker")
struct DashboardServiceTests {
    @Test("The page, the map and the event stream; privacy end to end; the session declared and ended")
    func endToEnd() async throws {
        let broker = try await TestBroker.start()
        let publisher = try await broker.connectedClient("publisher")
        let watcher = try await broker.connectedClient("watcher")
        _ = try await watcher.subscribe("perimeter/v1/test/sessions/#", qos: .atLeastOnce)
        let regions = try DashboardFixtures.regionsFile()
        let configuration = DashboardConfiguration(
            broker: BrokerSettings(port: broker.port, clientID: "dashboard-under-test"), venue: "test",
            regionsPath: regions, http: ("127.0.0.1", 0), coarseMeters: 2000, password: testPassword)
        let (running, port, _) = try await startDashboard(configuration)
        #expect(port > 0, "the dashboard never said where it listens")
        let cookie = try signIn(port: port)

        // The session is declared (retained) once the dashboard is connected.
        let session = try await nextMessages(watcher, count: 1, timeout: .seconds(30))
        #expect(session.first?.topic == "perimeter/v1/test/sessions/dashboard/live")
        #expect(session.first?.payloadString.contains(#""subjects":"*""#) == true)

        let page = try authenticatedGet(port: port, path: "/", cookie: cookie)
        #expect(page.status == 200)
        #expect(page.body.contains("<svg") && page.body.contains("id=\"region-gallery-1\""))
        let script = try authenticatedGet(port: port, path: "/dashboard.js", cookie: cookie)
        #expect(script.body.contains("new EventSource(\"/events\")"))
        #expect(script.header("Content-Type") == "text/javascript; charset=utf-8")
        // Nothing fetched from anywhere but this dashboard: the only src and href are its own
        // style and script, no CSS urls, and the only URL in the page is the SVG namespace (a
        // name, never fetched). No inline script or style either (the CSP forbids them).
        let references =
            page.body.components(separatedBy: #"src=""#).dropFirst().map { $0.prefix { $0 != "\"" } }
            + page.body.components(separatedBy: #"href=""#).dropFirst().map { $0.prefix { $0 != "\"" } }
        #expect(references.sorted() == ["/dashboard.css", "/dashboard.js"], "\(references)")
        for inline in ["<script>", "<style", " style=", " onclick=", " onload=", "@import", "url(", "https://"] {
            #expect(!page.body.contains(inline), "the page holds \(inline)")
        }
        let urls = page.body.components(separatedBy: "http://").dropFirst()
        #expect(!urls.isEmpty && urls.allSatisfy { $0.hasPrefix("www.w3.org/2000/svg\"") })
        #expect(try authenticatedGet(port: port, path: "/map.svg", cookie: cookie).body.hasPrefix("<svg"))
        #expect(try authenticatedGet(port: port, path: "/nope", cookie: cookie).status == 404)

        let stream = try EventStreamReader(port: port, cookie: cookie)
        try await stream.waitFor("the first state") { $0.contains("event: state") && $0.contains("\"occupancy\"") }
        let root = "perimeter/v1/test"
        // Authorization records as the subjects' apps publish them (retained).
        try await publisher.publish(
            "\(root)/subjects/bob/authorization", #"{"status":"denied"}"#, qos: .atLeastOnce, retain: true)
        try await publisher.publish(
            "\(root)/subjects/cat/authorization", #"{"status":"always","accuracy":"reduced"}"#, qos: .atLeastOnce,
            retain: true)
        // Outputs as the evaluator publishes them.
        for (subject, lat, lon) in [("bob", 48.8606, 2.3354), ("cat", 48.86061, 2.33541), ("eve", 48.86062, 2.33542)] {
            try await publisher.publish(
                "\(root)/enter/gallery-1/\(subject)", DashboardFixtures.enter(subject, "gallery-1", lat: lat, lon: lon),
                qos: .atLeastOnce)
        }
        try await publisher.publish(
            "\(root)/occupancy/gallery-1", #"{"count":3,"t":"2026-12-01T00:10:59.000Z"}"#, qos: .atLeastOnce)
        let text = try await stream.waitFor("eve's enter and the occupancy") {
            $0.contains("\"subject\":\"eve\"") && $0.contains("\"gallery-1\":3")
        }
        #expect(!text.contains("bob"), "a denied subject must not appear in the stream")
        #expect(!text.contains("48.8606") && !text.contains("2.3354"), "no exact coordinates in the stream")
        let state = try #require(stream.lastState())
        let subjects = state["subjects"]?.arrayValue ?? []
        let cat = try #require(subjects.first { $0["id"]?.stringValue == "cat" })
        let eve = try #require(subjects.first { $0["id"]?.stringValue == "eve" })
        #expect(cat["coarse"]?.boolValue == true && (cat["r"]?.doubleValue ?? 0) > 100)
        #expect(eve["coarse"]?.boolValue == false && (eve["r"] == nil))
        stream.close()

        running.cancel()
        _ = try? await running.value
        // Ending the dashboard ends its session (an empty retained payload).
        let ended = try await nextMessages(watcher, count: 1, timeout: .seconds(10))
        #expect(ended.first?.payload.isEmpty == true)
        await publisher.disconnect()
        await watcher.disconnect()
        await broker.stop()
    }

    @Test("A broker that refuses the dashboard's session: a warning, and the dashboard serves on")
    func sessionRefused() async throws {
        // Anonymous clients may read the venue and write nothing (ACL lines before any `user`).
        let acl = TestScratch.root.appendingPathComponent("perimeter-acl-\(UUID().uuidString)")
            .path
        try "topic read perimeter/v1/#\n".write(toFile: acl, atomically: true, encoding: .utf8)
        let broker = try await TestBroker.start(extraConfiguration: ["acl_file \(acl)"])
        let configuration = DashboardConfiguration(
            broker: BrokerSettings(port: broker.port, clientID: "dashboard-refused"), venue: "test",
            regionsPath: try DashboardFixtures.regionsFile(), http: ("127.0.0.1", 0), password: testPassword)
        let log = InMemoryLogHandler()
        let (running, port, _) = try await startDashboard(configuration, log: log)
        let stream = try EventStreamReader(port: port, cookie: try signIn(port: port))
        try await stream.waitFor("a state with the broker connected") {
            $0.contains(#""id":"dashboard broker connection","online":true"#)
        }
        stream.close()
        #expect(!log.records(containing: "could not declare the dashboard's session").isEmpty)
        // Had run() thrown, its server would be closed now.
        #expect(try httpGet(port: port, path: "/healthz").status == 200)
        running.cancel()
        _ = try? await running.value
        await broker.stop()
        try? FileManager.default.removeItem(atPath: acl)
    }

    @Test("A held page ends only after its delay, with the live script already running")
    func heldPage() async throws {
        let broker = try await TestBroker.start()
        let configuration = DashboardConfiguration(
            broker: BrokerSettings(port: broker.port, clientID: "dashboard-held"), venue: "test",
            regionsPath: try DashboardFixtures.regionsFile(), http: ("127.0.0.1", 0), password: testPassword)
        let (running, port, _) = try await startDashboard(configuration)
        let cookie = try signIn(port: port)
        let started = ContinuousClock.now
        let page = try httpRequest(port: port, path: "/snapshot/1", headers: ["Cookie: \(cookie)"])
        let elapsed = ContinuousClock.now - started
        #expect(page.body.contains("<script src=\"/dashboard.js\"></script>"))
        #expect(page.body.contains("</html>\n"))
        #expect(elapsed >= .milliseconds(950), "took \(elapsed)")
        #expect(try authenticatedGet(port: port, path: "/snapshot/x", cookie: cookie).status == 404)
        running.cancel()
        _ = try? await running.value
        await broker.stop()
    }
}
