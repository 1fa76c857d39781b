import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Synchronization
import Testing

/// A real mosquitto on a free port, a real `perimeter evaluator` process, and an observer
/// that records everything the venue's topics (and OwnTracks' event topics) carry.
final class EvaluatorHarness: Sendable {
    static let venue = "test"
    let broker: MosquittoBroker
    let directory: URL
    let configPath: String
    let observer: MQTTClient
    let publisher: MQTTClient
    private let process = Mutex<ChildProcess?>(nil)
    private let received: Inbox

    var topics: Topics { Topics(venue: Self.venue) }

    /// - Parameters:
    ///   - regions: the venue's regions file (a GeoJSON FeatureCollection).
    ///   - venue: extra `venues.test.*` settings (gateways, staleAfter …).
    init(
        regions: JSONValue, venue: JSONObject = JSONObject(), evaluator extra: JSONObject = JSONObject(),
        adapters: Bool = false, brokerConfiguration: [String] = []
    ) async throws {
        broker = try await TestBroker.start(extraConfiguration: brokerConfiguration)
        directory = TestScratch.root.appendingPathComponent("perimeter-eval-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let regionsPath = directory.appendingPathComponent("regions.geojson").path
        try regions.serialized().write(toFile: regionsPath, atomically: true, encoding: .utf8)
        var venueSettings = venue
        venueSettings["regions"] = .string(regionsPath)
        // Tests of other parts run with everyone authorized; privacy tests set their own.
        if venueSettings["privacy"] == nil { venueSettings["privacy"] = ["open": true] }
        var evaluator: JSONObject = [
            "database": .string(directory.appendingPathComponent("evaluator.sqlite").path), "tickInterval": 0.2,
            "statsInterval": 1, "leaseWait": 0.3,
        ]
        evaluator["instance"] = "t1"
        for (key, value) in extra { evaluator[key] = value }
        var config: JSONObject = [
            "broker": ["host": "127.0.0.1", "port": .number(Double(broker.port)), "clientId": "evaluator-under-test"],
            "evaluator": .object(evaluator), "venues": .object(JSONObject([(Self.venue, .object(venueSettings))])),
            "log": ["level": "info"],
        ]
        if adapters { config["adapters"] = ["ownTracks": .string(Self.venue), "espresense": .string(Self.venue)] }
        configPath = directory.appendingPathComponent("evaluator.json").path
        try JSONValue.object(config).serialized().write(toFile: configPath, atomically: true, encoding: .utf8)

        observer = try await broker.connectedClient("observer")
        try await observer.subscribe("perimeter/v1/\(Self.venue)/#", qos: .atLeastOnce)
        try await observer.subscribe("perimeter/v1/_sys/#", qos: .atMostOnce)
        try await observer.subscribe("owntracks/+/+/event", qos: .atLeastOnce)
        publisher = try await broker.connectedClient("publisher")
        received = Inbox(observer)
    }

    /// Starts (or restarts) the evaluator process and waits until it is subscribed.
    func startEvaluator(environment: [String: String]? = nil) async throws {
        let child = try ChildProcess(
            Products.executable("perimeter"), ["evaluator", "--config", configPath], environment: environment)
        process.withLock { $0 = child }
        try await child.waitForLine(containing: "evaluator running", timeout: .seconds(30))
    }

    /// Stops the evaluator with SIGTERM and waits for it to exit.
    func stopEvaluator() async {
        process.withLock { $0?.kill(SIGTERM) }
        _ = try? await waitForEvaluatorExit()
    }

    private let inProcess = Mutex<(task: Task<Void, any Error>, service: EvaluatorService)?>(nil)
    private let logs = InMemoryLogHandler()

    /// The manual clock of an evaluator started with ``startInProcess(clock:)``; nil otherwise.
    var clock: ManualClock? {
        inProcess.withLock { $0?.service.clock as? ManualClock }
    }

    /// Runs the evaluator in this process on `clock` (same configuration file as the process):
    /// for timing rules, which the test then drives by advancing the clock.
    /// - Parameter waitUntilRunning: false to return at once (the broker may be down).
    func startInProcess(clock: ManualClock, waitUntilRunning: Bool = true) async throws {
        let configuration = try EvaluatorConfiguration.read(ConfigReader(filePath: configPath))
        let service = EvaluatorService(
            configuration: configuration, logger: logs.logger(label: "evaluator", level: .info), clock: clock)
        inProcess.withLock { $0 = (Task { try await service.run() }, service) }
        guard waitUntilRunning else { return }
        try await waitUntil("the in-process evaluator running", timeout: .seconds(60)) {
            !self.logs.records(containing: "evaluator running").isEmpty
        }
    }

    /// How many records the in-process evaluator logged with `text` in their message.
    func logged(_ text: String) -> Int { logs.records(containing: text).count }

    /// Waits until the in-process evaluator has journalled and processed everything published
    /// before this call: a marker published after it comes back through the journal, then the
    /// cursor passes it. Only then may a test move the clock.
    /// With the evaluator in a process of its own, the marker is a message it refuses: its dead
    /// letter is published after everything before it was processed.
    func settle() async throws {
        let marker = "perimeter/v1/\(Self.venue)/obs/settle-\(UUID().uuidString.prefix(8))/gps"
        guard let service = inProcess.withLock({ $0?.service }) else {
            try await publisher.publish(marker, "{}", qos: .atLeastOnce)
            try await waitFor("the dead letter of \(marker)", timeout: .seconds(120)) { messages in
                messages.contains {
                    $0.topic.hasSuffix("/deadletter/evaluator") && $0.json?["topic"]?.stringValue == marker
                }
            }
            return
        }
        try await publisher.publish(marker, "{}", qos: .atLeastOnce)
        let row: Int64? = try await waitForValue(timeout: .seconds(60), every: .milliseconds(1)) {
            service.progress.journalRow(of: marker)
        }
        let seq = try #require(row, "the marker never reached the journal")
        try await waitUntil("the evaluator past its marker", timeout: .seconds(60)) {
            service.progress.processed.load(ordering: .acquiring) >= seq
        }
    }

    /// Sends `signal` to the evaluator process without waiting for it to exit (SIGHUP: re-read
    /// the regions files; `kill(_:)` would wait for an exit that never comes).
    func signalEvaluator(_ signal: Int32) {
        process.withLock { $0?.subprocess.signal(signal) }
    }

    /// `kill -9` the evaluator.
    func killEvaluator() {
        process.withLock { $0?.kill(SIGKILL) }
    }

    var evaluatorOutput: String {
        process.withLock { $0?.output }
            ?? logs.records.map { "\($0.level) \($0.message) \($0.metadata)" }.joined(separator: "\n")
    }

    /// The port of the evaluator's /metrics and /healthz, from its "metrics and health" log line.
    func metricsPort() throws -> Int {
        let line = evaluatorOutput.split(separator: "\n").first { $0.contains("metrics and health") } ?? ""
        return try #require(line.split(separator: ":").last.flatMap { Int($0.prefix { $0.isNumber }) })
    }

    /// Waits until the evaluator process has exited (e.g. killed by its own fault injection).
    func waitForEvaluatorExit(timeout: Duration = .seconds(60)) async throws -> Bool {
        try await waitForCondition(timeout: timeout) { !self.isEvaluatorRunning }
    }

    /// The retained messages under the venue as a new subscriber gets them now: topic → payload.
    /// The end is a marker published after subscribing (the broker sends the retained
    /// messages first), not a guess after a fixed sleep.
    func retainedPicture() async throws -> [String: String] {
        let client = try await broker.connectedClient("retained-\(UUID().uuidString.prefix(8))")
        defer { Task { await client.disconnect() } }
        let inbox = Inbox(client)
        defer { inbox.stop() }
        try await client.subscribe("perimeter/v1/\(Self.venue)/#", qos: .atLeastOnce)
        let marker = "perimeter/v1/\(Self.venue)/zz-test-marker/\(UUID().uuidString)"
        try await client.publish(marker, "end", qos: .atLeastOnce)
        let messages = try await inbox.waitFor("the marker", timeout: .seconds(30), context: { "" }) {
            $0.contains { $0.topic == marker }
        }
        var picture: [String: String] = [:]
        for message in messages where message.retain {
            picture[message.topic] = String(decoding: message.payload, as: UTF8.self)
        }
        return picture
    }

    var isEvaluatorRunning: Bool { process.withLock { $0?.subprocess.isRunning ?? false } }

    func publish(_ topic: String, _ payload: JSONValue, qos: QoS = .atLeastOnce, retain: Bool = false) async throws {
        try await publisher.publish(topic, payload.serialized(), qos: qos, retain: retain)
    }

    func publish(_ topic: String, text: String, retain: Bool = false) async throws {
        try await publisher.publish(topic, text, qos: .atLeastOnce, retain: retain)
    }

    /// Everything received so far.
    var messages: [MQTTMessage] { received.messages }

    /// Messages on topics under the venue whose kind (first level after the venue) is `kind`.
    func messages(_ kind: String) -> [MQTTMessage] {
        messages.filter { $0.topic.hasPrefix("perimeter/v1/\(Self.venue)/\(kind)/") }
    }

    /// Transition payloads (enter, exit, dwell), in arrival order.
    var transitions: [JSONObject] {
        messages.filter {
            let kind = $0.topic.split(separator: "/").dropFirst(3).first
            return kind == "enter" || kind == "exit" || kind == "dwell"
        }.compactMap { try? JSONParser.parse($0.payload).objectValue }
    }

    /// Waits until `condition` holds for the messages received, or fails after `timeout`
    /// saying what the evaluator wrote.
    @discardableResult
    func waitFor(
        _ what: String, timeout: Duration = .seconds(30), _ condition: @escaping @Sendable ([MQTTMessage]) -> Bool
    ) async throws -> [MQTTMessage] {
        try await received.waitFor(
            what, timeout: timeout, context: { "evaluator said: \(self.evaluatorOutput.suffix(3000))" }, condition)
    }

    func stop() async {
        process.withLock { child in
            if let child, child.subprocess.isRunning { child.kill(SIGTERM) }
        }
        if let task = inProcess.withLock({ $0?.task }) {
            task.cancel()
            _ = await task.result
        }
        received.stop()
        await observer.disconnect()
        await publisher.disconnect()
        await broker.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}

extension MQTTMessage {
    var json: JSONObject? { try? JSONParser.parse(payload).objectValue }
}

/// GeoJSON helpers for test venues.
enum Venue {
    static func circle(
        _ id: String, lat: Double, lon: Double, radius: Double, extra: [(String, JSONValue)] = []
    )
        -> JSONValue
    {
        [
            "type": "Feature", "id": .string(id),
            "properties": .object(JSONObject([("radius", .number(radius))] + extra)),
            "geometry": ["type": "Point", "coordinates": [.number(lon), .number(lat)]],
        ]
    }

    static func beacons(_ id: String, _ constraint: JSONValue) -> JSONValue {
        ["type": "Feature", "id": .string(id), "properties": ["beacon": constraint], "geometry": nil]
    }

    static func collection(_ features: [JSONValue]) -> JSONValue {
        ["type": "FeatureCollection", "features": .array(features)]
    }
}

/// The fixture track as (time, lat, lon) points.
enum Track {
    static func visnjan() throws -> [(t: Date, lat: Double, lon: Double)] {
        let url = Bundle.module.url(forResource: "Fixtures", withExtension: nil)!
            .appendingPathComponent("gpx/around-visnjan-with-car.gpx")
        let text = try String(contentsOf: url, encoding: .utf8)
        let pattern = try NSRegularExpression(
            pattern: #"<trkpt lat="([-0-9.]+)" lon="([-0-9.]+)">.*?<time>([^<]+)</time>"#)
        let range = NSRange(text.startIndex..., in: text)
        return pattern.matches(in: text, range: range).compactMap { match in
            func group(_ index: Int) -> String { String(text[Range(match.range(at: index), in: text)!]) }
            guard let lat = Double(group(1)), let lon = Double(group(2)), let t = Timestamp.parse(group(3)) else {
                return nil
            }
            return (t, lat, lon)
        }
    }
}
