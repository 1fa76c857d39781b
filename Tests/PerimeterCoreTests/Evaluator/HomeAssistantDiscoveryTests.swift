import Foundation
import PerimeterCore
import Testing

private func at(_ seconds: Double) -> Date { Date(timeIntervalSince1970: 1_700_000_000 + seconds) }

private func region(_ json: String) -> Region {
    let (_, region, problems) = RegionParser.parseFeature(try! JSONParser.parse(json), index: 0)
    precondition(problems.isEmpty, "\(problems)")
    return region!
}

private let hall = region(
    #"{"type":"Feature","id":"hall","properties":{"radius":30,"place":true,"name":"Great hall"},"geometry":{"type":"Point","coordinates":[2.336,48.86]}}"#
)
private let lobby = region(
    #"{"type":"Feature","id":"lobby.east","properties":{"beacon":{"uuid":"2f234454-cf6d-4a0f-adf2-f4911ba9ffa6","major":1}},"geometry":null}"#
)
private let inside = GeoPoint(lon: 2.336, lat: 48.86)

private let settings = HomeAssistantSettings(
    subjects: [try! Glob("visitor-*")], topicPrefix: "perimeter/v1",
    availabilityTopic: "perimeter/v1/_sys/evaluator/1/status")

/// The discovery outputs among `outputs`, as `component/object set|cleared`, each checked
/// against Home Assistant's schema on the way.
private func discoveries(_ outputs: [EvaluatorOutput], prefix: String = "homeassistant") -> [String] {
    outputs.compactMap { output in
        guard case .discovery(let topic, let config) = output else { return nil }
        let payload = config.map { Array($0.serialized().utf8) } ?? []
        let problems = HomeAssistantSchema.problems(topic: topic, payload: payload, discoveryPrefix: prefix)
        #expect(problems.isEmpty, "\(topic): \(problems)")
        let levels = topic.split(separator: "/")
        return "\(levels[levels.count - 4])/\(levels[levels.count - 2]) \(config == nil ? "cleared" : "set")"
    }
}

private func venue(
    privacy: PrivacySettings = PrivacySettings(defaultSessions: [ServiceSession(level: .always)]),
    homeAssistant: HomeAssistantSettings? = settings, regions: [Region] = [hall, lobby]
) -> VenueEvaluator {
    var venue = VenueSettings(id: "museum", privacy: privacy)
    venue.homeAssistant = homeAssistant
    venue.trust.reporters = [try! ReporterRule.make(agent: "agent", subjects: ["*"]).get()]
    return VenueEvaluator(settings: venue, regions: regions)
}

private func authorization(_ subject: String, _ status: String) -> Inbound {
    .authorization(subject: subject, ["status": .string(status)])
}

private func handle(_ venue: inout VenueEvaluator, _ input: Inbound, agent: String? = nil) -> [String] {
    switch venue.handle(input, agent: agent, receivedAt: at(0)) {
    case .success(let outputs): discoveries(outputs)
    case .failure(let error): ["rejected \(error)"]
    }
}

@Suite("Home Assistant discovery")
struct HomeAssistantDiscoveryTests {
    @Test(
        "object ids keep [a-zA-Z0-9-], double '_', hex-escape every other byte",
        arguments: [
            ("gallery-1", "gallery-1"), ("a_b", "a__b"), ("a.b", "a_2eb"), ("café", "caf_c3_a9"),
            ("a/b", "a_2fb"), ("espresense:phone:1", "espresense_3aphone_3a1"), ("_", "__"),
        ])
    func objectIDs(id: String, expected: String) {
        #expect(HomeAssistantDiscovery.objectID(id) == expected)
    }

    @Test("object ids are one to one and always in Home Assistant's character class")
    func objectIDsAreInjective() {
        let ids = ["a_2e", "a.", "a__", "a_", "a_5f", "a-b", "a b", "a+b", "a#b", "A", "a", "ä", "a\u{308}", "1", "_1"]
        let encoded = ids.map(HomeAssistantDiscovery.objectID)
        #expect(Set(encoded).count == ids.count, "\(encoded)")
        for id in encoded {
            let problems = HomeAssistantSchema.problems(topic: "homeassistant/sensor/n/\(id)/config", payload: [])
            #expect(problems.isEmpty, "\(id): \(problems)")
        }
    }

    @Test(
        "every config Perimeter builds passes the schema, under the default and a custom prefix",
        arguments: ["homeassistant", "ha/discovery"])
    func configsPassTheSchema(prefix: String) throws {
        var custom = settings
        custom.discoveryPrefix = prefix
        let discovery = HomeAssistantDiscovery(settings: custom, venue: "museum")
        let configs = discovery.regionConfigs(hall) + discovery.regionConfigs(lobby) + [discovery.tracker("visitor.1")]
        for (topic, config) in configs {
            let problems = HomeAssistantSchema.problems(
                topic: topic, payload: Array(config.serialized().utf8), discoveryPrefix: prefix)
            #expect(problems.isEmpty, "\(topic): \(problems)")
        }
        #expect(
            configs.map(\.topic) == [
                "\(prefix)/sensor/perimeter_museum/hall/config", "\(prefix)/binary_sensor/perimeter_museum/hall/config",
                "\(prefix)/sensor/perimeter_museum/lobby_2eeast/config",
                "\(prefix)/binary_sensor/perimeter_museum/lobby_2eeast/config",
                "\(prefix)/device_tracker/perimeter_museum/visitor_2e1/config",
            ])
        #expect(Set(configs.compactMap { $0.config["unique_id"]?.stringValue }).count == configs.count)
    }

    @Test("the configs read the evaluator's own retained topics and its status")
    func configsPointAtExistingTopics() {
        let discovery = HomeAssistantDiscovery(settings: settings, venue: "museum")
        let sensor = discovery.occupancySensor(hall).config
        #expect(sensor["state_topic"] == "perimeter/v1/museum/occupancy/hall")
        #expect(sensor["state_class"] == "measurement")
        #expect(sensor["value_template"] == "{{ value_json.count }}")
        #expect(sensor["name"] == "Great hall occupancy")
        let occupied = discovery.occupiedSensor(hall).config
        #expect(occupied["device_class"] == "occupancy")
        #expect(occupied["state_topic"] == "perimeter/v1/museum/occupancy/hall")
        let tracker = discovery.tracker("visitor-1").config
        #expect(tracker["state_topic"] == "perimeter/v1/museum/place/visitor-1")
        for config in [sensor, occupied, tracker] {
            #expect(config["availability"]?.arrayValue?.first?["topic"] == "perimeter/v1/_sys/evaluator/1/status")
            #expect(config["device"]?["identifiers"] == ["perimeter/v1/museum"])
            #expect(config["origin"]?["name"] == "Perimeter")
        }
    }

    /// Payloads the validator must refuse, with the words of its complaint.
    static let refused: [(topic: String, payload: String, problem: String)] = [
        ("homeassistant/sensors/n/o/config", #"{"state_topic":"a"}"#, "is not a component"),
        ("homeassistant/sensor/n/a.b/config", "", "is not of [a-zA-Z0-9_-]+"),
        ("homeassistant/sensor/n/o/state", #"{"state_topic":"a"}"#, "expected <prefix>/<component>"),
        ("homeassistant/sensor/a/b/c/config", #"{"state_topic":"a"}"#, "expected <prefix>/<component>"),
        ("other/sensor/n/o/config", #"{"state_topic":"a"}"#, "does not start with the discovery prefix"),
        ("homeassistant/sensor/n/o/config", #"{"name":"x"}"#, "'state_topic' is required for sensor"),
        ("homeassistant/binary_sensor/n/o/config", #"{"name":"x"}"#, "'state_topic' is required for binary_sensor"),
        ("homeassistant/device_tracker/n/o/config", #"{"name":"x"}"#, "'state_topic' or 'json_attributes_topic'"),
        (
            "homeassistant/sensor/n/o/config", #"{"stat_t":"a","stat_class":"x"}"#,
            "'stat_class' is not a sensor variable"
        ),
        ("homeassistant/sensor/n/o/config", #"{"stat_t":"a","state_topic":"a"}"#, "given twice"),
        ("homeassistant/sensor/n/o/config", #"{"stat_t":"a","dev":{"ids":["x"]}}"#, "'device' needs a 'unique_id'"),
        ("homeassistant/sensor/n/o/config", #"{"stat_t":"a","uniq_id":"u","dev":{"name":"x"}}"#, "'identifiers' or"),
        ("homeassistant/sensor/n/o/config", #"{"stat_t":"a","o":{"sw":"1"}}"#, "'origin.name' is required"),
        ("homeassistant/sensor/n/o/config", #"{"stat_t":"a","stat_cla":"measure"}"#, "'state_class' \"measure\""),
        ("homeassistant/binary_sensor/n/o/config", #"{"stat_t":"a","dev_cla":"occupied"}"#, "not a binary_sensor"),
        ("homeassistant/sensor/n/o/config", #"{"stat_t":"a","dev_cla":"occupancy"}"#, "not a sensor device class"),
        ("homeassistant/sensor/n/o/config", #"{"stat_t":"a/#"}"#, "without wildcards"),
        ("homeassistant/sensor/n/o/config", #"{"stat_t":"a","val_tpl":"value_json.count"}"#, "must be a template"),
        ("homeassistant/sensor/n/o/config", #"{"stat_t":"a","avty":[{"pl_avail":"on"}]}"#, "topic' is required"),
        (
            "homeassistant/sensor/n/o/config", #"{"stat_t":"a","avty_t":"s","avty":[{"t":"s"}]}"#,
            "must not be used together"
        ),
        ("homeassistant/device_tracker/n/o/config", #"{"stat_t":"a","src_type":"wifi"}"#, "'source_type'"),
        ("homeassistant/sensor/n/o/config", "[1]", "not a JSON object"),
        ("homeassistant/sensor/n/o/config", "{", "not JSON"),
    ]

    @Test("the validator refuses what Home Assistant's documentation does not allow", arguments: refused)
    func validatorRefuses(topic: String, payload: String, problem: String) {
        let problems = HomeAssistantSchema.problems(topic: topic, payload: Array(payload.utf8))
        #expect(problems.contains { $0.contains(problem) }, "\(problems)")
    }

    @Test("abbreviated keys, a node-less topic and an empty (removing) payload are accepted")
    func validatorAccepts() {
        let abbreviated =
            #"{"stat_t":"a","uniq_id":"u","dev":{"ids":"x","mf":"m"},"o":{"name":"n","sw":"1","url":"https://x"},"avty":[{"t":"s","pl_avail":"up","val_tpl":"{{ value }}"}],"stat_cla":"total_increasing","unit_of_meas":"x"}"#
        #expect(
            HomeAssistantSchema.problems(topic: "homeassistant/sensor/o/config", payload: Array(abbreviated.utf8)) == []
        )
        #expect(HomeAssistantSchema.problems(topic: "homeassistant/binary_sensor/n/o/config", payload: []) == [])
    }

    @Test("off by default: regions come and go without a discovery message")
    func offByDefault() {
        var museum = venue(homeAssistant: nil)
        #expect(handle(&museum, .regionUpsert(hall)) == [])
        #expect(handle(&museum, .regionRemove(id: "hall")) == [])
        #expect(museum.reconcileHomeAssistant(retained: [:]).isEmpty)
    }

    @Test("a region defined, changed and deleted: its two configs set, set again, cleared")
    func regionLifecycle() {
        var museum = venue(regions: [])
        let configs = ["sensor/kiosk set", "binary_sensor/kiosk set"]
        let kiosk = region(
            #"{"type":"Feature","id":"kiosk","properties":{"radius":5},"geometry":{"type":"Point","coordinates":[2.336,48.86]}}"#
        )
        #expect(handle(&museum, .regionUpsert(kiosk)) == configs)
        #expect(handle(&museum, .regionUpsert(kiosk)) == configs)
        #expect(handle(&museum, .regionRemove(id: "kiosk")) == ["sensor/kiosk cleared", "binary_sensor/kiosk cleared"])
        #expect(handle(&museum, .regionRemove(id: "kiosk")) == [])
        // A regions file reloaded (SIGHUP): removed ones cleared, new ones set.
        let outputs = museum.reload([hall], previous: [], at: at(1))
        #expect(discoveries(outputs) == ["sensor/hall set", "binary_sensor/hall set"])
    }

    /// Privacy inputs in order, and the tracker changes each gives.
    static let trackerSteps: [(input: Inbound, expected: [String])] = [
        (authorization("visitor-1", "always"), ["device_tracker/visitor-1 set"]),
        (authorization("visitor-1", "always"), []),
        (authorization("staff-1", "always"), []),
        (authorization("visitor-1", "denied"), ["device_tracker/visitor-1 cleared"]),
        (authorization("visitor-1", "whenInUse"), ["device_tracker/visitor-1 set"]),
        (.authorization(subject: "visitor-1", nil), ["device_tracker/visitor-1 cleared"]),
        (authorization("visitor-2", "provisionalAlways"), ["device_tracker/visitor-2 set"]),
        (.admin(command: "erase", subject: "visitor-2"), ["device_tracker/visitor-2 cleared"]),
        (.admin(command: "erase", subject: "visitor-2"), []),
    ]

    @Test("a listed subject has a device_tracker exactly while the gate lets it be used")
    func trackersFollowTheGate() {
        var museum = venue()
        for (index, step) in Self.trackerSteps.enumerated() {
            #expect(handle(&museum, step.input) == step.expected, "step \(index)")
        }
        #expect(museum.homeAssistantTrackerSubjects.isEmpty)
    }

    @Test("without a session covering the subject there is no tracker; a session adds it, its end removes it")
    func trackersNeedASession() {
        var museum = venue(privacy: PrivacySettings())
        #expect(handle(&museum, authorization("visitor-1", "always")) == [])
        let session: JSONValue = ["subjects": ["visitor-1"], "level": "always"]
        #expect(
            handle(&museum, .session(consumer: "ha", session: "s1", session)) == ["device_tracker/visitor-1 set"])
        #expect(handle(&museum, .session(consumer: "ha", session: "s1", nil)) == ["device_tracker/visitor-1 cleared"])
    }

    @Test("a subject allowed by default gets its tracker with its first observation, place or not, once")
    func trackerWithFirstObservation() {
        var museum = venue(privacy: .open)
        let far = GeoPoint(lon: 2.4, lat: 48.9)
        let steps: [(subject: String, position: GeoPoint, expected: [String])] = [
            ("visitor-7", far, ["device_tracker/visitor-7 set"]),
            ("visitor-7", inside, []),
            ("guard-1", inside, []),
            ("visitor-8", inside, ["device_tracker/visitor-8 set"]),
        ]
        for (index, step) in steps.enumerated() {
            let fix = Inbound.fix(
                Fix(subject: step.subject, t: at(Double(index)), position: step.position, accuracy: 3))
            #expect(handle(&museum, fix, agent: "agent") == step.expected, "step \(index)")
        }
        // Not allowed (no record, people undetermined): its observations are dropped, no tracker.
        var closed = venue(privacy: PrivacySettings(defaultSessions: [ServiceSession(level: .always)]))
        let fix = Inbound.fix(Fix(subject: "visitor-9", t: at(0), position: inside, accuracy: 3))
        #expect(handle(&closed, fix, agent: "agent") == [])
    }

    @Test("the tracker set survives a snapshot: a restored venue still clears a withdrawn tracker")
    func trackersInSnapshot() throws {
        var museum = venue()
        #expect(handle(&museum, authorization("visitor-1", "always")) == ["device_tracker/visitor-1 set"])
        let data = try VenueEvaluator.snapshotEncoder().encode(museum.snapshot)
        let snapshot = try VenueEvaluator.snapshotDecoder().decode(VenueEvaluator.Snapshot.self, from: data)
        var restored = VenueEvaluator(settings: museum.settings, restoring: snapshot)
        #expect(handle(&restored, authorization("visitor-1", "denied")) == ["device_tracker/visitor-1 cleared"])
    }

    @Test("at start: configs for what is there, nothing when the broker has them, all cleared when turned off")
    func reconcile() {
        var museum = venue()
        _ = handle(&museum, authorization("visitor-1", "always"))
        let first = museum.reconcileHomeAssistant(retained: [:])
        #expect(
            discoveries(first) == [
                "binary_sensor/hall set", "binary_sensor/lobby_2eeast set", "device_tracker/visitor-1 set",
                "sensor/hall set", "sensor/lobby_2eeast set",
            ])
        var retained: [String: [UInt8]] = [:]
        for case .discovery(let topic, let config?) in first { retained[topic] = Array(config.serialized().utf8) }
        #expect(museum.reconcileHomeAssistant(retained: retained).isEmpty)
        // Another venue's configs and other retained topics are not ours to touch.
        retained["homeassistant/sensor/perimeter_zoo/hall/config"] = Array("{}".utf8)
        retained["homeassistant/sensor/hall/config"] = Array("{}".utf8)
        #expect(museum.reconcileHomeAssistant(retained: retained).isEmpty)
        // A changed device name changes every payload; this venue never heard of visitor-1.
        var renamed = settings
        renamed.deviceName = "The Museum"
        var named = venue(homeAssistant: renamed)
        #expect(
            discoveries(named.reconcileHomeAssistant(retained: retained)) == [
                "binary_sensor/hall set", "binary_sensor/lobby_2eeast set", "device_tracker/visitor-1 cleared",
                "sensor/hall set", "sensor/lobby_2eeast set",
            ])
        // Turned off: every config of this venue cleared, the others left.
        var off = venue(homeAssistant: nil)
        #expect(
            discoveries(off.reconcileHomeAssistant(retained: retained)) == [
                "binary_sensor/hall cleared", "binary_sensor/lobby_2eeast cleared", "device_tracker/visitor-1 cleared",
                "sensor/hall cleared", "sensor/lobby_2eeast cleared",
            ])
    }

    @Test("a discovery output is one retained QoS 1 message; a removal has an empty payload")
    func outboundMessages() {
        let topics = Topics(venue: "museum")
        let set = EvaluatorOutput.discovery(
            topic: "homeassistant/sensor/perimeter_museum/hall/config", config: ["a": 1])
        #expect(
            set.messages(topics: topics) == [
                OutboundMessage(
                    topic: "homeassistant/sensor/perimeter_museum/hall/config", payload: Array(#"{"a":1}"#.utf8),
                    qos: 1,
                    retain: true)
            ])
        let cleared = EvaluatorOutput.discovery(topic: "homeassistant/sensor/perimeter_museum/hall/config", config: nil)
        #expect(cleared.messages(topics: topics).map(\.payload) == [[]])
        #expect(cleared.messages(topics: topics).map(\.retain) == [true])
    }
}
