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

    init(port: Int, path: String = "/events") throws {
        fd = try sendHTTPGet(
            port: port, path: path, headers: ["Accept: text/event-stream"], readTimeout: .milliseconds(50))
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

/// Runs a dashboard service; returns the task running it and the port it listens on (0 when it
/// never said within five seconds).
func startDashboard(
    _ configuration: DashboardConfiguration, log: InMemoryLogHandler = InMemoryLogHandler()
)
    async throws -> (running: Task<Void, any Error>, port: Int)
{
    let url = Mutex<String?>(nil)
    let service = try DashboardService(configuration: configuration, logger: Logger(label: "test", handler: log)) {
        address in url.withLock { $0 = address }
    }
    let running = Task { try await service.run() }
    var port = 0
    for _ in 0..<500 where port == 0 {
        if let address = url.withLock({ $0 }) { port = Int(address.split(separator: ":").last!.dropLast())! }
        try await Task.sleep(for: .milliseconds(10))
    }
    return (running, port)
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
            regionsPath: regions, http: ("127.0.0.1", 0), coarseMeters: 2000)
        let (running, port) = try await startDashboard(configuration)
        #expect(port > 0, "the dashboard never said where it listens")

        // The session is declared (retained) once the dashboard is connected.
        let session = try await nextMessages(watcher, count: 1, timeout: .seconds(10))
        #expect(session.first?.topic == "perimeter/v1/test/sessions/dashboard/live")
        #expect(session.first?.payloadString.contains(#""subjects":"*""#) == true)

        let page = try httpGet(port: port, path: "/")
        #expect(page.status == 200)
        #expect(page.body.contains("<svg") && page.body.contains("id=\"region-gallery-1\""))
        #expect(page.body.contains("new EventSource(\"/events\")"))
        // Nothing fetched from anywhere: no src or href attributes, no stylesheets, no CSS urls,
        // and the only URL in the page is the SVG namespace (a name, never fetched).
        for fetching in ["src=", "href=", "<link", "@import", "url(", "https://"] {
            #expect(!page.body.contains(fetching), "the page holds \(fetching)")
        }
        let urls = page.body.components(separatedBy: "http://").dropFirst()
        #expect(!urls.isEmpty && urls.allSatisfy { $0.hasPrefix("www.w3.org/2000/svg\"") })
        #expect(try httpGet(port: port, path: "/map.svg").body.hasPrefix("<svg"))
        #expect(try httpGet(port: port, path: "/nope").status == 404)

        let stream = try EventStreamReader(port: port)
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
        let acl = FileManager.default.temporaryDirectory.appendingPathComponent("perimeter-acl-\(UUID().uuidString)")
            .path
        try "topic read perimeter/v1/#\n".write(toFile: acl, atomically: true, encoding: .utf8)
        let broker = try await TestBroker.start(extraConfiguration: ["acl_file \(acl)"])
        let configuration = DashboardConfiguration(
            broker: BrokerSettings(port: broker.port, clientID: "dashboard-refused"), venue: "test",
            regionsPath: try DashboardFixtures.regionsFile(), http: ("127.0.0.1", 0))
        let log = InMemoryLogHandler()
        let (running, port) = try await startDashboard(configuration, log: log)
        let stream = try EventStreamReader(port: port)
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
            regionsPath: try DashboardFixtures.regionsFile(), http: ("127.0.0.1", 0))
        let (running, port) = try await startDashboard(configuration)
        let started = ContinuousClock.now
        let page = try httpGet(port: port, path: "/snapshot/1")
        let elapsed = ContinuousClock.now - started
        #expect(page.body.hasSuffix("</html>\n"))
        #expect(elapsed >= .milliseconds(950), "took \(elapsed)")
        #expect(try httpGet(port: port, path: "/snapshot/x").status == 404)
        running.cancel()
        _ = try? await running.value
        await broker.stop()
    }
}
