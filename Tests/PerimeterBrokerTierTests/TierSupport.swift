import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Synchronization

/// What the broker-tier tests share: a one-region venue, a real `perimeter evaluator` process
/// configured for a given broker, observations that make a subject enter and leave, and a
/// collector of received messages.
enum Tier {
    static let venue = "test"
    static let root = "perimeter/v1/test"

    /// The venue's regions: `hall`, a circle of 50 m around 45° N 13° E.
    static let regions: JSONValue = [
        "type": "FeatureCollection",
        "features": [
            [
                "type": "Feature", "id": "hall", "properties": ["radius": 50],
                "geometry": ["type": "Point", "coordinates": [13.0, 45.0]],
            ]
        ],
    ]

    /// A fresh temporary directory.
    static func directory(_ name: String) throws -> URL {
        let url = TestScratch.root.appendingPathComponent(
            "perimeter-\(name)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Writes the evaluator's configuration (one circular region, `hall`, 50 m around 45° N 13° E,
    /// unless `regions` says otherwise; everyone authorized) with the given `broker.*` settings;
    /// returns its path.
    /// - Parameters:
    ///   - venueExtra: more settings of the venue (`partitions`, `gateways`).
    ///   - instance: `evaluator.instance`.
    static func evaluatorConfiguration(
        in directory: URL, broker: JSONObject, extra: JSONObject = [:], venueExtra: JSONObject = [:],
        instance: String = "tier", evaluatorExtra: JSONObject = [:], regions: JSONValue = Tier.regions
    ) throws -> String {
        let regionsPath = directory.appendingPathComponent("regions.geojson").path
        try regions.serialized().write(toFile: regionsPath, atomically: true, encoding: .utf8)
        // agent-1 reports every test subject (docs/security.md: bound by venues.{id}.reporters).
        var venueSettings: JSONObject = [
            "regions": .string(regionsPath), "privacy": ["open": true], "reporters": ["agent-1": ["*"]],
        ]
        for (key, value) in venueExtra { venueSettings[key] = value }
        var config: JSONObject = [
            "broker": .object(broker),
            "evaluator": .object(
                JSONObject(
                    [
                        ("database", .string(directory.appendingPathComponent("evaluator.sqlite").path)),
                        ("tickInterval", 0.2), ("statsInterval", 1), ("instance", .string(instance)),
                    ] + evaluatorExtra.map { ($0.key, $0.value) })),
            "venues": .object(JSONObject([(venue, .object(venueSettings))])),
            "log": ["level": "info"],
        ]
        for (key, value) in extra { config[key] = value }
        let path = directory.appendingPathComponent("evaluator.json").path
        try JSONValue.object(config).serialized().write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Starts `perimeter evaluator` and waits until it has subscribed.
    static func startEvaluator(
        _ configPath: String, timeout: Duration = .seconds(30), cleanup: Cleanup
    ) async throws -> ChildProcess {
        let child = try ChildProcess(Products.executable("perimeter"), ["evaluator", "--config", configPath])
        cleanup.add { if child.subprocess.isRunning { child.kill(SIGTERM) } }
        try await child.waitForLine(containing: "evaluator running", timeout: timeout)
        return child
    }

    /// Publishes two fixes for `subject`: inside the hall at `t`, 1.1 km away at `t + 1`, so the
    /// evaluator emits exactly one enter and one exit.
    static func visit(_ publisher: MQTTClient, subject: String, t: Int) async throws {
        for (offset, lat) in [(0, 45.0), (1, 45.01)] {
            try await publisher.publish(
                "\(root)/obs/agent-1/gps",
                #"{"subject":"\#(subject)","t":\#(t + offset),"lat":\#(lat),"lon":13.0,"acc":5}"#, qos: .atLeastOnce)
        }
    }

    /// Topic filters for the transitions.
    static let transitionFilters = ["\(root)/enter/#", "\(root)/exit/#", "\(root)/dwell/#"]

    /// A test peer script from Peers/.
    static func peer(_ script: String) throws -> String {
        guard let path = Bundle.module.path(forResource: script, ofType: nil, inDirectory: "Peers") else {
            throw ChildFailure(message: "test peer \(script) is missing from the test bundle")
        }
        return path
    }

    /// `/usr/bin/python3`, or a failure saying how to get it.
    static func python() throws -> String {
        let python = "/usr/bin/python3"
        guard FileManager.default.isExecutableFile(atPath: python) else {
            throw ChildFailure(message: "\(python) is missing: run scripts/setup.sh (Debian's python3)")
        }
        return python
    }
}

/// A transition as received: its id, kind and subject.
struct Transition: Hashable, Sendable, CustomStringConvertible {
    var id: String
    var event: String
    var subject: String

    init?(_ message: MQTTMessage) {
        guard let object = try? JSONParser.parse(message.payload).objectValue,
            let id = object["id"]?.stringValue, let event = object["event"]?.stringValue,
            let subject = object["subject"]?.stringValue
        else { return nil }
        self.id = id
        self.event = event
        self.subject = subject
    }

    var description: String { "\(event) \(subject)" }
}

extension Inbox {
    /// The transitions received, duplicates (same id) dropped.
    var transitions: Set<Transition> { Set(messages.compactMap(Transition.init)) }
}

/// The expected transitions for subjects that each entered and left once.
func enterAndExit(_ subjects: [String]) -> Set<String> {
    Set(subjects.flatMap { ["enter \($0)", "exit \($0)"] })
}
