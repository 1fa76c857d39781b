import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// Home Assistant discovery end to end: a real mosquitto, a real `perimeter evaluator`, the
/// configs read back both by an MQTT client and by `mosquitto_sub`.
@Suite("Home Assistant discovery (service)")
struct HomeAssistantServiceTests {
    static let sensor = "homeassistant/sensor/perimeter_test/gallery/config"
    static let occupied = "homeassistant/binary_sensor/perimeter_test/gallery/config"
    static let tracker = "homeassistant/device_tracker/perimeter_test/visitor-1/config"

    /// The retained messages under `homeassistant/#` as `mosquitto_sub` prints them (`topic
    /// payload` per line): it runs with `--retained-only`, which makes it exit at the first
    /// message that is not retained — a marker the test publishes (again, until it exits, since
    /// the test cannot see when mosquitto_sub has subscribed). Retained messages reach a new
    /// subscription before anything published after it, so at exit every one has been printed.
    static func retainedWithMosquittoSub(port: Int, marker publisher: MQTTClient) async throws -> [String: String] {
        guard let path = Subprocess.find("mosquitto_sub") else {
            throw ChildFailure(message: "mosquitto_sub is not installed; run scripts/setup.sh (mosquitto-clients)")
        }
        let markerTopic = "zz-test/marker-\(UUID().uuidString.prefix(8))"
        let child = try ChildProcess(
            path,
            [
                "-h", "127.0.0.1", "-p", "\(port)", "-v", "--retained-only", "-W", "60", "-t", "homeassistant/#", "-t",
                markerTopic,
            ])
        try await waitUntil("mosquitto_sub to reach the marker", timeout: .seconds(60), every: .milliseconds(200)) {
            try await publisher.publish(markerTopic, "end", qos: .atMostOnce)
            return child.subprocess.poll() != nil
        }
        let (termination, output) = await child.finish()
        #expect(termination == .exited(0), "mosquitto_sub: \(output)")
        var retained: [String: String] = [:]
        for line in output.split(separator: "\n") {
            guard let space = line.firstIndex(of: " ") else { continue }
            retained[String(line[..<space])] = String(line[line.index(after: space)...])
        }
        return retained
    }

    /// The availability topic a config names.
    static func availability(_ message: MQTTMessage) -> String? {
        message.json?["availability"]?.arrayValue?.first?["topic"]?.stringValue
    }

    /// Checks every discovery message received against Home Assistant's schema.
    static func expectValid(_ messages: [MQTTMessage]) {
        for message in messages where message.topic.hasPrefix("homeassistant/") {
            let problems = HomeAssistantSchema.problems(topic: message.topic, payload: message.payload)
            #expect(problems.isEmpty, "\(message.topic): \(problems)")
        }
    }

    /// `venues.museum.homeAssistant` settings, and what the configuration makes of them: the
    /// discovery prefix, subject patterns and availability topic, or the words of the refusal.
    static let settingsCases: [(settings: [String], expected: String)] = [
        ([], "off"),
        (["venues.museum.homeAssistant.enabled=false", "venues.museum.homeAssistant.subjects=a"], "off"),
        (["venues.museum.homeAssistant.enabled=true"], "homeassistant  perimeter/v1/_sys/evaluator/1/status"),
        (
            [
                "venues.museum.homeAssistant.enabled=true", "venues.museum.homeAssistant.discoveryPrefix=ha/disc",
                "venues.museum.homeAssistant.subjects=badge-*,visitor-1", "evaluator.instance=e/2",
            ],
            "ha/disc badge-*,visitor-1 perimeter/v1/_sys/evaluator/e%2F2/status"
        ),
        (
            ["venues.museum.homeAssistant.enabled=true", "venues.museum.homeAssistant.discoveryPrefix=ha/#"],
            "refused venues.museum.homeAssistant.discoveryPrefix: must not hold '+' or '#'"
        ),
        (
            ["venues.museum.homeAssistant.enabled=true", "venues.museum.homeAssistant.discoveryPrefix=ha/"],
            "refused venues.museum.homeAssistant.discoveryPrefix: must not have an empty level"
        ),
        (
            ["venues.museum.homeAssistant.enabled=true", "venues.museum.homeAssistant.subjects=[\"a[1]\"]"],
            "refused venues.museum.homeAssistant.subjects: pattern 'a[1]' uses '['"
        ),
        (["venues.museum.homeAssistant.enable=true"], "refused venues.museum.homeAssistant.enable"),
    ]

    @Test("venues.{id}.homeAssistant: off unless enabled, checked before anything starts", arguments: settingsCases)
    func settings(settings: [String], expected: String) throws {
        try expectConfiguration(settings, expected) { configuration in
            guard let homeAssistant = configuration.venues.first?.settings.homeAssistant else { return "off" }
            return
                "\(homeAssistant.discoveryPrefix) \(homeAssistant.subjects.map(\.pattern).joined(separator: ",")) \(homeAssistant.availabilityTopic)"
        }
    }

    @Test("erasure deletes the stored tracker configs that name the subject in Home Assistant's encoding")
    func erasureDeletesTrackerRows() throws {
        let path = TestScratch.root.appendingPathComponent("ha-erase-\(UUID().uuidString).sqlite")
        defer { try? FileManager.default.removeItem(at: path) }
        let store = try EvaluatorStore(path: path.path)
        let discovery = HomeAssistantDiscovery(settings: HomeAssistantSettings(), venue: "museum")
        // "visitor_1" is "visitor__1" in a config topic: not its topic level.
        let mine = discovery.tracker("visitor_1")
        let other = discovery.tracker("visitor_2")
        let messages = [mine, other].map {
            OutboundMessage(topic: $0.topic, payload: Array($0.config.serialized().utf8), qos: 1, retain: true)
        }
        _ = try store.commit(seq: 1, messages: messages, now: Date())
        try store.erase(subject: "visitor_1", venue: "museum", level: Topics.level("visitor_1"), through: 2)
        #expect(try store.unsent(after: 0, limit: 10).map(\.message.topic) == [other.topic])
        #expect(try store.retainedConfigs().keys.sorted() == [other.topic])
    }

    @Test("config/evaluator.example.json reads, with discovery shown but off")
    func example() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let reader = try ConfigReader(
            filePath: root.appendingPathComponent("config/evaluator.example.json").path, environment: [:])
        let configuration = try EvaluatorConfiguration.read(reader)
        #expect(configuration.venues.map(\.settings.id) == ["museum"])
        #expect(configuration.venues.first?.settings.homeAssistant == nil)
    }

    @Test(
        "discovery on: configs retained, their state topics follow a visitor in and out, region deletion removes them"
    )
    func discoveryEndToEnd() async throws {
        let gallery = Venue.circle(
            "gallery", lat: 48.86, lon: 2.336, radius: 30, extra: [("place", true), ("name", "Gallery")])
        // Defined over MQTT, not in the regions file: the file wins for its ids, and step 4
        // deletes the region over MQTT.
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([]), venue: ["homeAssistant": ["enabled": true, "subjects": ["visitor-*"]]])
        try await harness.observer.subscribe("homeassistant/#", qos: .atLeastOnce)
        try await harness.startEvaluator()
        try await harness.publish(harness.topics.region("gallery"), gallery, retain: true)

        // 1. The region's two configs, retained, valid, pointing at the occupancy topic.
        let configs = try await harness.waitFor("the gallery's two configs") { messages in
            let topics = Set(messages.filter { !$0.payload.isEmpty }.map(\.topic))
            return topics.contains(Self.sensor) && topics.contains(Self.occupied)
        }
        Self.expectValid(configs)
        let sensor = try #require(configs.last { $0.topic == Self.sensor }?.json)
        let occupied = try #require(configs.last { $0.topic == Self.occupied }?.json)
        #expect(sensor["state_class"] == "measurement")
        #expect(occupied["device_class"] == "occupancy")
        let occupancyTopic = try #require(sensor["state_topic"]?.stringValue)
        #expect(occupancyTopic == harness.topics.occupancy(region: "gallery"))
        #expect(occupied["state_topic"]?.stringValue == occupancyTopic)
        let availability = try #require(sensor["availability"]?.arrayValue?.first?["topic"]?.stringValue)
        #expect(availability == "perimeter/v1/_sys/evaluator/t1/status")
        #expect(
            harness.messages.contains { $0.topic == availability && $0.json?["online"] == true },
            "the availability topic says online")

        // 2. mosquitto_sub, a process of its own, sees the retained configs.
        let retained = try await Self.retainedWithMosquittoSub(
            port: harness.broker.port, marker: harness.publisher)
        for topic in [Self.sensor, Self.occupied] {
            let payload = try #require(retained[topic], "mosquitto_sub printed \(retained.keys.sorted())")
            #expect(HomeAssistantSchema.problems(topic: topic, payload: Array(payload.utf8)) == [])
        }

        // 3. A visitor enters: the count on the sensors' state topic goes to 1, the visitor gets a
        // tracker whose state topic names the gallery.
        let t = Date().timeIntervalSince1970
        try await harness.publish(
            harness.topics.gps(agent: "visitor-1"), ["t": .number(t), "lat": 48.86, "lon": 2.336, "acc": 3])
        try await harness.waitFor("occupancy 1 and the tracker") { messages in
            messages.contains { $0.topic == occupancyTopic && $0.json?["count"] == 1 }
                && messages.contains { $0.topic == Self.tracker && !$0.payload.isEmpty }
        }
        let trackerConfig = try #require(harness.messages.last { $0.topic == Self.tracker }?.json)
        let placeTopic = try #require(trackerConfig["state_topic"]?.stringValue)
        #expect(placeTopic == harness.topics.place(subject: "visitor-1"))
        try await harness.waitFor("the place on the tracker's state topic") { messages in
            messages.contains { $0.topic == placeTopic && $0.json?["place"] == "gallery" }
        }

        // 4. … and leaves: the count goes back to 0, the place to none.
        try await harness.publish(
            harness.topics.gps(agent: "visitor-1"), ["t": .number(t + 1), "lat": 48.87, "lon": 2.336, "acc": 3])
        try await harness.waitFor("occupancy 0 and no place") { messages in
            messages.contains { $0.topic == occupancyTopic && $0.json?["count"] == 0 }
                && messages.contains { $0.topic == placeTopic && $0.json?["place"] == .null }
        }

        // 5. The region deleted: both configs cleared (empty retained payloads) …
        try await harness.publish(harness.topics.region("gallery"), text: "", retain: true)
        try await harness.waitFor("the gallery's configs cleared") { messages in
            messages.contains { $0.topic == Self.sensor && $0.payload.isEmpty }
                && messages.contains { $0.topic == Self.occupied && $0.payload.isEmpty }
        }
        Self.expectValid(harness.messages)
        // … and gone from the broker's retained store; the visitor's tracker stays.
        let after = try await Self.retainedWithMosquittoSub(port: harness.broker.port, marker: harness.publisher)
        #expect(after[Self.sensor] == nil && after[Self.occupied] == nil, "\(after.keys.sorted())")
        #expect(after[Self.tracker] != nil, "\(after.keys.sorted())")

        // 6. Erasing the visitor clears its tracker too.
        try await harness.publish(harness.topics.admin("erase", subject: "visitor-1"), text: "")
        try await harness.waitFor("the tracker cleared") { messages in
            messages.contains { $0.topic == Self.tracker && $0.payload.isEmpty }
        }
        await harness.stop()
    }

    @Test("a standby that takes over republishes the configs with its own status as their availability")
    func takeoverMovesAvailability() async throws {
        let broker = try await TestBroker.start()
        let directory = TestScratch.root.appendingPathComponent(
            "perimeter-ha-takeover-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let regions = directory.appendingPathComponent("regions.geojson").path
        try Venue.collection([Venue.circle("gallery", lat: 48.86, lon: 2.336, radius: 30)]).serialized()
            .write(toFile: regions, atomically: true, encoding: .utf8)
        let observer = try await broker.connectedClient("observer")
        let inbox = Inbox(observer)
        try await observer.subscribe("homeassistant/#", qos: .atLeastOnce)
        try await observer.subscribe("perimeter/v1/_sys/evaluator/b/stats", qos: .atMostOnce)
        func start(_ instance: String, role: String) async throws -> ChildProcess {
            let config: JSONValue = [
                "broker": [
                    "host": "127.0.0.1", "port": .number(Double(broker.port)),
                    "clientId": .string("evaluator-\(instance)"),
                ],
                "evaluator": [
                    "instance": .string(instance), "role": .string(role), "leaseWait": 0.5, "tickInterval": 0.2,
                    "statsInterval": 0.2, "standbyWindow": 1,
                    "database": .string(directory.appendingPathComponent("\(instance).sqlite").path),
                ],
                "venues": [
                    "test": [
                        "regions": .string(regions), "privacy": ["open": true], "homeAssistant": ["enabled": true],
                    ]
                ],
            ]
            let path = directory.appendingPathComponent("\(instance).json").path
            try config.serialized().write(toFile: path, atomically: true, encoding: .utf8)
            let child = try ChildProcess(Products.executable("perimeter"), ["evaluator", "--config", path])
            try await child.waitForLine(containing: "evaluator running", timeout: .seconds(30))
            return child
        }
        let active = try await start("a", role: "active")
        let standby = try await start("b", role: "standby")
        defer {
            for child in [active, standby] where child.subprocess.isRunning { child.kill(SIGTERM) }
        }
        try await inbox.waitFor("a's configs", timeout: .seconds(30), context: { active.output }) { messages in
            messages.contains {
                $0.topic == Self.sensor && Self.availability($0) == "perimeter/v1/_sys/evaluator/a/status"
            }
        }
        // The standby's own outbox (its configs among it) is past its standbyWindow and dropped:
        // only a republish at takeover can bring its configs out.
        try await inbox.waitFor("b's outbox emptied", timeout: .seconds(30), context: { standby.output }) { messages in
            let unsent = messages.filter { $0.topic.hasSuffix("/b/stats") }.compactMap {
                $0.json?["outboxUnsent"]?.intValue
            }
            guard let first = unsent.firstIndex(where: { $0 > 0 }) else { return false }
            return unsent[first...].contains(0)
        }
        active.kill(SIGKILL)
        let messages = try await inbox.waitFor(
            "b's configs after the takeover", timeout: .seconds(60), context: { standby.output }
        ) { messages in
            [Self.sensor, Self.occupied].allSatisfy { topic in
                messages.contains {
                    $0.topic == topic && Self.availability($0) == "perimeter/v1/_sys/evaluator/b/status"
                }
            }
        }
        Self.expectValid(messages)
        inbox.stop()
        await observer.disconnect()
        standby.kill(SIGTERM)
        await broker.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    @Test("turned on for a venue that already has regions: the restarted evaluator publishes their configs")
    func enabledLater() async throws {
        let gallery = Venue.circle("gallery", lat: 48.86, lon: 2.336, radius: 30)
        let harness = try await EvaluatorHarness(regions: Venue.collection([gallery]))
        try await harness.observer.subscribe("homeassistant/#", qos: .atLeastOnce)
        try await harness.startEvaluator()
        try await harness.settle()
        await harness.stopEvaluator()
        #expect(!harness.messages.contains { $0.topic.hasPrefix("homeassistant/") }, "off by default")
        // Same database, same regions file; discovery turned on.
        var config = try #require(
            try JSONParser.parse(Array(try Data(contentsOf: URL(fileURLWithPath: harness.configPath)))).objectValue)
        var venues = try #require(config["venues"]?.objectValue)
        var venue = try #require(venues[EvaluatorHarness.venue]?.objectValue)
        venue["homeAssistant"] = ["enabled": true]
        venues[EvaluatorHarness.venue] = .object(venue)
        config["venues"] = .object(venues)
        try JSONValue.object(config).serialized().write(toFile: harness.configPath, atomically: true, encoding: .utf8)
        try await harness.startEvaluator()
        let messages = try await harness.waitFor("the gallery's configs") { messages in
            messages.contains { $0.topic == Self.sensor } && messages.contains { $0.topic == Self.occupied }
        }
        Self.expectValid(messages)
        await harness.stop()
    }
}
