import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// How long what the evaluator says about a subject lasts, end to end (issue 19): an OwnTracks
/// last will, ESPresense room places, ranging from live, silent and offline scanners, and
/// erasure. (An agent's own MQTT last will is `EvaluatorServiceTests.lastWill`.) Timing rules
/// run on the in-process evaluator's manual clock; the pure rules are table-tested in
/// PerimeterCoreTests (`VenueEvaluatorTests.lastWill`, `roomPlacesExpire`,
/// `BeaconEngineTests` ranging).
@Suite("Wills, expiry, ranging rate and erasure (service)", .serialized)
struct LifetimeServiceTests {
    static let uuid = "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6"

    @Test("OwnTracks lwt: the device's subject goes unknown at once (staleAfter 300 s), with no exit (issue 19)")
    func ownTracksLastWill() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30)]),
            venue: ["staleAfter": 300], adapters: true)
        try await Cleanup.around { cleanup in
            cleanup.add { await harness.stop() }
            try await harness.startEvaluator()
            let tst = Date().timeIntervalSince1970.rounded(.down)
            try await harness.publish(
                "owntracks/jane/phone",
                ["_type": "location", "tid": "JJ", "acc": 5, "lat": 48.86, "lon": 2.336, "tst": .number(tst)])
            let state = harness.topics.state(region: "hall", subject: "owntracks:jane:phone")
            try await harness.waitFor("jane inside the hall") { messages in
                messages.contains { $0.topic == state && $0.json?["state"] == "inside" }
            }
            // What the app leaves as its last will (the booklet's `lwt`), delivered by the broker.
            try await harness.publish("owntracks/jane/phone", ["_type": "lwt", "tst": .number(tst + 1)])
            // "At once": within the wait, 300 s before staleAfter could say so. The occupancy is
            // published right after the state, so both are waited for (seeing the state first and
            // asserting the occupancy was there already failed under load).
            let occupancy = harness.topics.occupancy(region: "hall")
            let messages = try await harness.waitFor("unknown and occupancy 0 at once", timeout: .seconds(20)) {
                messages in
                messages.contains { $0.topic == state && $0.json?["state"] == "unknown" }
                    && messages.last { $0.topic == occupancy }?.json?["count"] == 0
            }
            let unknown = try #require(messages.last { $0.topic == state }?.json)
            #expect(unknown["reason"] == "agentOffline")
            // The unknown state is published with whatever the will caused: no exit came before it.
            #expect(harness.messages("exit").isEmpty)
            #expect(
                !harness.messages.contains { $0.topic == "owntracks/jane/phone/event" && $0.json?["event"] == "leave" })
        }
    }

    @Test(
        "ESPresense: a room place expires staleAfter after the device was last heard, on the evaluator's clock (issue 19)"
    )
    func espresensePlaceExpires() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([]), venue: ["staleAfter": 300], adapters: true)
        try await Cleanup.around { cleanup in
            cleanup.add { await harness.stop() }
            let clock = ManualClock(Date())
            let base = clock.now
            try await harness.startInProcess(clock: clock)
            let watch = "espresense:watch-a"
            let tag = "espresense:watch-b"
            try await harness.publish("espresense/devices/watch-a/kitchen", ["rssi": -60, "rssi@1m": -59])
            try await harness.waitFor("watch-a in the kitchen") { messages in
                messages.contains { $0.topic == harness.topics.place(subject: watch) && $0.json?["place"] == "kitchen" }
            }
            try await harness.settle()
            clock.advance(by: 100)
            try await harness.publish("espresense/devices/watch-b/office", ["rssi": -60, "rssi@1m": -59])
            try await harness.waitFor("watch-b in the office") { messages in
                messages.contains { $0.topic == harness.topics.place(subject: tag) && $0.json?["place"] == "office" }
            }
            try await harness.settle()
            clock.advance(by: 199)  // 299 s after watch-a was heard
            try await harness.settle()
            clock.advance(by: 1)  // 300 s: watch-a's place expires at this tick
            let messages = try await harness.waitFor("watch-a's place expires") { messages in
                messages.contains { $0.topic == harness.topics.place(subject: watch) && $0.json?["place"] == .null }
            }
            let expired = try #require(
                messages.first { $0.topic == harness.topics.place(subject: watch) && $0.json?["place"] == .null }?.json)
            #expect(expired["t"]?.stringValue == Timestamp.format(base.addingTimeInterval(300)), "not a tick sooner")
            // The same tick left watch-b (heard 100 s later) where it was.
            #expect(!messages.contains { $0.topic == harness.topics.place(subject: tag) && $0.json?["place"] == .null })
            try await harness.settle()
            clock.advance(by: 100)
            let later = try await harness.waitFor("watch-b's place expires") { messages in
                messages.contains { $0.topic == harness.topics.place(subject: tag) && $0.json?["place"] == .null }
            }
            let second = later.first { $0.topic == harness.topics.place(subject: tag) && $0.json?["place"] == .null }
            #expect(second?.json?["t"]?.stringValue == Timestamp.format(base.addingTimeInterval(400)))
            let retained = try await harness.retainedPicture()
            #expect(retained[harness.topics.place(subject: watch)].map { $0.contains(#""place":null"#) } == true)
        }
    }

    /// A scan of the gallery's beacon `minor`, dated now on `clock`.
    static func scan(_ harness: EvaluatorHarness, _ agent: String, minor: Int, clock: ManualClock) async throws {
        try await harness.publish(
            harness.topics.ble(agent: agent),
            [
                "t": .number(clock.now.timeIntervalSince1970),
                "adverts": [
                    ["uuid": .string(uuid), "major": 3, "minor": .number(Double(minor)), "rssi": -60, "tx": -59]
                ],
            ])
    }

    static func rangingCount(_ harness: EvaluatorHarness, _ agent: String) -> Int {
        harness.messages.filter { $0.topic == harness.topics.ranging(region: "gallery", subject: agent) }.count
    }

    @Test(
        "ranging: scans at 1 Hz give one report a second; a silent scanner stops after five, an offline one at once (issue 19)"
    )
    func rangingRate() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Venue.beacons("gallery", ["uuid": .string(Self.uuid), "major": 3])]))
        try await Cleanup.around { cleanup in
            cleanup.add { await harness.stop() }
            let clock = ManualClock(Date())
            try await harness.startInProcess(clock: clock)
            for agent in ["phone-2", "phone-3"] {
                try await harness.publish(
                    harness.topics.agentStatus(agent), ["online": true, "caps": ["ble-scan", "ranging"]], retain: true)
            }
            // Ten seconds of scans at 1 Hz from three phones: ten reports each (issue 19: 6 in 10 s).
            for second in 1...10 {
                for (index, agent) in ["phone-1", "phone-2", "phone-3"].enumerated() {
                    try await Self.scan(harness, agent, minor: index + 1, clock: clock)
                }
                try await harness.settle()
                clock.advance(by: 1)
                try await harness.waitFor("ranging for second \(second)") { _ in
                    ["phone-1", "phone-2", "phone-3"].allSatisfy { Self.rangingCount(harness, $0) >= second }
                }
            }
            for agent in ["phone-1", "phone-2", "phone-3"] { #expect(Self.rangingCount(harness, agent) == 10) }

            // phone-2 falls silent; phone-3's agent goes offline; phone-1 goes on scanning, and its
            // report of each second is the marker that the tick of that second was processed.
            try await harness.publish(harness.topics.agentStatus("phone-3"), ["online": false], retain: true)
            try await harness.waitFor("phone-3 unknown at once") { messages in
                messages.contains {
                    $0.topic == harness.topics.state(region: "gallery", subject: "phone-3")
                        && $0.json?["state"] == "unknown"
                }
            }
            for second in 11...20 {
                try await Self.scan(harness, "phone-1", minor: 1, clock: clock)
                try await harness.settle()
                clock.advance(by: 1)
                try await harness.waitFor("phone-1's report for second \(second)") { _ in
                    Self.rangingCount(harness, "phone-1") >= second
                }
            }
            #expect(Self.rangingCount(harness, "phone-1") == 20)
            #expect(Self.rangingCount(harness, "phone-3") == 10, "nothing after the agent went offline")
            // Silent: reports (of beacons no longer heard) for at most five rangingIntervals, then none.
            let silent = Self.rangingCount(harness, "phone-2") - 10
            #expect(silent <= 5, "\(silent) reports after phone-2 fell silent (it was ranged every second before)")
            let last = harness.messages.last {
                $0.topic == harness.topics.ranging(region: "gallery", subject: "phone-2")
            }
            let proximity = last?.json?["beacons"]?.arrayValue?.first?["proximity"]?.stringValue
            #expect(proximity == nil || proximity == "unknown", "a silent scanner's beacons are not ranged as heard")
        }
    }

    @Test(
        "subjects erase leaves no retained topic under the venue naming the subject, whoever published it (issue 19)"
    )
    func eraseLeavesNothingRetained() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([
                Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30),
                Venue.beacons("gallery", ["uuid": .string(Self.uuid), "major": 3]),
            ]),
            // The gate on (diagnostics are published), with a default session for everyone.
            venue: ["privacy": ["defaultSessions": [["subjects": "*", "level": "always"]]]])
        try await Cleanup.around { cleanup in
            cleanup.add { await harness.stop() }
            try await harness.startEvaluator()
            let now = Date().timeIntervalSince1970
            try await harness.publish(harness.topics.authorization(subject: "gus"), ["status": "always"], retain: true)
            try await harness.publish(
                harness.topics.preferences(subject: "gus"), ["defaultPlace": "hall"], retain: true)
            // Retained by others under the venue: a usage record and a topic the evaluator never writes.
            try await harness.publish(harness.topics.usage(subject: "gus"), ["inUse": true], retain: true)
            try await harness.publish("perimeter/v1/test/notes/gus/badge", ["note": "lost"], retain: true)
            try await harness.publish(
                harness.topics.gps(agent: "gus"), ["t": .number(now), "lat": 48.86, "lon": 2.336, "acc": 3])
            try await harness.publish(
                harness.topics.ble(agent: "gus"),
                [
                    "t": .number(now + 0.5),
                    "adverts": [["uuid": .string(Self.uuid), "major": 3, "minor": 1, "rssi": -60, "tx": -59]],
                ])
            try await harness.waitFor("gus in the hall and the gallery, with diagnostics") { messages in
                messages.contains { $0.topic.hasSuffix("/state/hall/gus") && $0.json?["state"] == "inside" }
                    && messages.contains { $0.topic.hasSuffix("/state/gallery/gus") && $0.json?["state"] == "inside" }
                    && messages.contains { $0.topic == harness.topics.diagnostics(subject: "gus") }
                    && messages.contains { $0.topic == harness.topics.place(subject: "gus") }
            }
            func naming(_ picture: [String: String]) -> [String] {
                picture.filter { !$0.value.isEmpty && $0.key.split(separator: "/").contains("gus") }.keys.sorted()
            }
            let before = naming(try await harness.retainedPicture())
            let expected = [
                "gallery", "hall", "notes", "place", "diagnostics", "authorization", "preferences", "usage",
            ]
            for part in expected {
                #expect(
                    before.contains { $0.contains("/\(part)/") || $0.hasSuffix("/\(part)") }, "\(part) in \(before)")
            }
            let erased = try await runProduct([
                "subjects", "erase", "gus", "--config", harness.configPath, "--timeout", "60",
            ])
            #expect(erased.status == .exited(0), "\(erased.stderr)")
            // The picture is read up to a marker published after the erasure was answered.
            let after = try await harness.retainedPicture()
            #expect(
                naming(after) == [], "\(naming(after).map { "\($0) = \(after[$0] ?? "")" }) stdout: \(erased.stdout)")
            // The other regions' retained topics are untouched (occupancy is about no one).
            #expect(try await harness.retainedPicture()[harness.topics.occupancy(region: "hall")] != nil)
        }
    }
}
