import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// The evaluator as a real process against a real mosquitto.
@Suite("Region evaluator service", .serialized)
struct EvaluatorServiceTests {
    /// Two 40 m circles on the Višnjan track: around its 26th and its 76th point.
    /// The Višnjan car track with two circles on it. Its times are moved so that point
    /// `present` (default: the last) is now: the evaluator's venue time is its own clock, and a
    /// track left in 2020 would go stale at its first tick.
    static func trackVenue(
        present: Int? = nil
    ) throws -> (
        regions: JSONValue, points: [(t: Date, lat: Double, lon: Double)]
    ) {
        let recorded = try Track.visnjan()
        let shift = Date().timeIntervalSince(recorded[present ?? recorded.count - 1].t)
        let points = recorded.map { (t: $0.t.addingTimeInterval(shift), lat: $0.lat, lon: $0.lon) }
        let first = points[25]
        let second = points[75]
        let regions = Venue.collection([
            Venue.circle("bend", lat: first.lat, lon: first.lon, radius: 40),
            Venue.circle("hill", lat: second.lat, lon: second.lon, radius: 40),
        ])
        return (regions, points)
    }

    static func fix(_ point: (t: Date, lat: Double, lon: Double), accuracy: Double = 5) -> JSONValue {
        [
            "t": .string(Timestamp.format(point.t)), "lat": .number(point.lat), "lon": .number(point.lon),
            "acc": .number(accuracy),
        ]
    }

    /// After a crash and restart: waits for every expected transition of "car", then for a
    /// marker published last (it comes back after anything the car caused), and checks that
    /// nothing was invented or lost and that duplicates carry the same id and content.
    /// Returns the car's transitions as seen.
    static func expectFaultFreeEvents(
        _ harness: EvaluatorHarness, expected: [RegionEvent], marker point: (t: Date, lat: Double, lon: Double)
    ) async throws -> [JSONObject] {
        try await harness.waitFor("every expected transition", timeout: .seconds(60)) { _ in
            Set(harness.transitions.compactMap { $0["id"]?.stringValue }).isSuperset(of: expected.map(\.id))
        }
        try await harness.publish(harness.topics.gps(agent: "marker"), fix(point))
        try await harness.waitFor("the marker's enter") { $0.contains { $0.topic.hasSuffix("/enter/bend/marker") } }
        let seen = harness.transitions.filter { $0["subject"] == "car" }
        #expect(Set(seen.compactMap { $0["id"]?.stringValue }) == Set(expected.map(\.id)))
        for id in Set(seen.compactMap { $0["id"]?.stringValue }) {
            let copies = Set(seen.filter { $0["id"]?.stringValue == id }.map { JSONValue.object($0).serialized() })
            #expect(copies.count == 1, "duplicates of \(id) differ: \(copies)")
        }
        return seen
    }

    /// What the pure engine says the track gives: the expected transitions, ids included.
    static func expectedTransitions(
        regions: JSONValue, points: [(t: Date, lat: Double, lon: Double)], subject: String
    )
        -> [RegionEvent]
    {
        var engine = GeofenceEngine(
            regions: RegionParser.parse(regions).regions, parameters: GeofenceParameters(venue: EvaluatorHarness.venue))
        var events: [RegionEvent] = []
        for point in points {
            let fix = Fix(
                subject: subject, t: point.t, position: GeoPoint(lon: point.lon, lat: point.lat), accuracy: 5)
            if case .success(let produced) = engine.process(fix) { events += produced }
        }
        return events.filter { $0.kind != .state }
    }

    @Test("a real GPX track replayed as observations gives exactly the expected enter/exit sequence")
    func gpxTrack() async throws {
        let (regions, points) = try Self.trackVenue()
        // The track spans 9 minutes and ends now: its early fixes lie more than the default
        // 300 s behind the evaluator's clock, and a tick between two of them would make the car
        // stale (unknown, occupancy down and up again). A longer staleAfter keeps it one story.
        let harness = try await EvaluatorHarness(regions: regions, venue: ["staleAfter": 3600])
        try await harness.startEvaluator()
        for point in points {
            try await harness.publish(harness.topics.gps(agent: "car"), Self.fix(point))
        }
        let expected = Self.expectedTransitions(regions: regions, points: points, subject: "car")
        #expect(
            expected.map { "\($0.kind.rawValue) \($0.region)" } == [
                "enter bend", "exit bend", "enter hill", "exit hill",
            ])
        try await harness.waitFor("4 transitions") { messages in
            messages.filter { $0.topic.contains("/enter/") || $0.topic.contains("/exit/") }.count >= 4
        }
        let seen = harness.transitions
        #expect(seen.map { $0["id"]?.stringValue } == expected.map(\.id))
        #expect(
            seen.map { "\($0["event"]?.stringValue ?? "") \($0["region"]?.stringValue ?? "")" } == [
                "enter bend", "exit bend", "enter hill", "exit hill",
            ])
        #expect(seen.allSatisfy { $0["venue"] == "test" && $0["subject"] == "car" && $0["seq"] != nil })
        // Retained state and occupancy follow the transitions.
        let state = harness.messages("state").last { $0.topic.hasSuffix("/hill/car") }?.json
        #expect(state?["state"] == "outside")
        let occupancy = harness.messages("occupancy").filter { $0.topic.hasSuffix("/bend") }.compactMap(\.json)
        // Occupancy is retained state: a new region says 0, the enter makes it 1 once, the last
        // word is 0. The retained picture may be republished once connected, and under load that
        // can come while the car is inside (1 again, then the exit's 0): a value repeated is
        // the same word, so repeats are collapsed before counting the rises.
        #expect(occupancy.last?["count"]?.intValue == 0)
        let counts = occupancy.compactMap { $0["count"]?.intValue }
        let changes = counts.enumerated().filter { $0.offset == 0 || counts[$0.offset - 1] != $0.element }.map(
            \.element)
        // At most one rise: an enter and its exit in one group publish only the last value.
        #expect(changes.filter { $0 == 1 }.count <= 1, "at most one rise to 1: \(counts)")
        #expect(occupancy.allSatisfy { [0, 1].contains($0["count"]?.intValue) }, "\(occupancy)")
        await harness.stop()
    }

    @Test(
        "capabilities: a gps-only agent's BLE scan is a dead letter (no enter, ranging or place); unknown names refused (issue 19)"
    )
    func capabilities() async throws {
        let uuid = "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6"
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Venue.beacons("gallery", ["uuid": .string(uuid), "major": 3])]))
        try await harness.startEvaluator()
        try await harness.publish(
            harness.topics.agentStatus("phone-2"), ["online": true, "caps": ["gps"]], retain: true)
        try await harness.publish(harness.topics.agentStatus("phone-3"), ["online": true, "caps": ["gps", "wifi"]])
        let scan: JSONValue = [
            "t": .number(Date().timeIntervalSince1970),
            "adverts": [["uuid": .string(uuid), "major": 3, "minor": 1, "rssi": -60, "tx": -59]],
        ]
        try await harness.publish(harness.topics.ble(agent: "phone-2"), scan)
        try await harness.waitFor("two dead letters") { _ in harness.messages("deadletter").count == 2 }
        let letters = harness.messages("deadletter").compactMap(\.json)
        #expect(letters.allSatisfy { $0["code"] == "capability" })
        let reasons = letters.compactMap { $0["reason"]?.stringValue }
        #expect(reasons.contains { $0.contains("caps[1]: 'wifi' is not a capability") })
        #expect(reasons.contains { $0.contains("announced caps [gps]") && $0.contains("needs 'ble-scan'") })
        try await harness.settle()
        #expect(harness.messages("enter").isEmpty)
        #expect(harness.messages("ranging").isEmpty)
        #expect(harness.messages("place").isEmpty)
        await harness.stop()
    }

    @Test("the regions file wins: an MQTT delete of a file region is a dead letter and the region stays (issue 19)")
    func filePrecedence() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30)]))
        try await harness.startEvaluator()
        try await harness.publish(harness.topics.region("hall"), text: "", retain: true)
        try await harness.waitFor("the refusal") { _ in !harness.messages("deadletter").isEmpty }
        let letter = try #require(harness.messages("deadletter").first?.json)
        #expect(letter["code"] == "region")
        #expect(letter["reason"]?.stringValue?.contains("defined in the venue's regions file") == true)
        try await harness.publish(
            harness.topics.gps(agent: "phone-6"),
            ["t": .number(Date().timeIntervalSince1970), "lat": 48.86, "lon": 2.336, "acc": 3])
        try await harness.waitFor("enter hall: still monitored") {
            $0.contains { $0.topic.hasSuffix("/enter/hall/phone-6") }
        }
        await harness.stop()
    }

    @Test("a region shrunk on regions/{id} re-decides who is inside: exit and occupancy 0 at once (issue 19)")
    func regionShrunk() async throws {
        // Defined over MQTT (the regions file wins for its own ids).
        let harness = try await EvaluatorHarness(regions: Venue.collection([]))
        try await harness.startEvaluator()
        try await harness.publish(
            harness.topics.region("hall"), Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30), retain: true)
        try await harness.waitFor("hall's occupancy") { messages in
            messages.contains { $0.topic == harness.topics.occupancy(region: "hall") }
        }
        try await harness.publish(
            harness.topics.gps(agent: "phone-5"),
            [
                "t": .number(Date().timeIntervalSince1970), "lat": .number(48.86 + 20 / 111_320.0), "lon": 2.336,
                "acc": 3,
            ])
        try await harness.waitFor("enter hall") { $0.contains { $0.topic.hasSuffix("/enter/hall/phone-5") } }
        try await harness.publish(
            harness.topics.region("hall"), Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 10), retain: true)
        try await harness.waitFor("exit hall") { $0.contains { $0.topic.hasSuffix("/exit/hall/phone-5") } }
        let exit = try #require(harness.messages("exit").first?.json)
        #expect(exit["source"] == "regionChanged")
        try await harness.waitFor("occupancy 0") { messages in
            messages.last { $0.topic == harness.topics.occupancy(region: "hall") }?.json?["count"] == 0
        }
        await harness.stop()
    }

    @Test("BLE scanner mode: enter with refinement, ranging nearest first; gateway mode: tags located and placed")
    func bleScannerAndGateway() async throws {
        let uuid = "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6"
        let regions = Venue.collection([
            Venue.beacons("gallery", ["uuid": .string(uuid), "major": 3]),
            Venue.circle("desk", lat: 45.0, lon: 13.0, radius: 6),
        ])
        let gateways: JSONValue = [
            ["id": "gw-a", "lat": 45.0, "lon": 13.0, "floor": 0, "zone": "office"],
            ["id": "gw-b", "lat": 45.0, "lon": 13.0002, "floor": 0, "zone": "corridor"],
        ]
        let harness = try await EvaluatorHarness(regions: regions, venue: ["gateways": gateways])
        try await harness.startEvaluator()
        let now = Date().timeIntervalSince1970
        let scan: JSONValue = [
            "t": .number(now),
            "adverts": [
                ["uuid": .string(uuid), "major": 3, "minor": 1, "rssi": -75, "tx": -59],
                ["uuid": .string(uuid), "major": 3, "minor": 2, "rssi": -55, "tx": -59],
                ["uuid": .string(uuid), "major": 4, "minor": 9, "rssi": -50, "tx": -59],
            ],
        ]
        try await harness.publish(harness.topics.ble(agent: "phone-1"), scan)
        try await harness.waitFor("ranging for phone-1") { messages in
            messages.contains { $0.topic.hasSuffix("/ranging/gallery/phone-1") }
        }
        let enter = try #require(harness.messages("enter").first?.json)
        #expect(enter["region"] == "gallery")
        #expect(enter["source"] == "ble")
        #expect(enter["refinement"]?["major"] == 3)
        let ranging = try #require(harness.messages("ranging").first?.json)
        let minors = ranging["beacons"]?.arrayValue?.compactMap { $0["minor"]?.intValue }
        #expect(minors == [2, 1], "nearest first; the major-4 beacon is not in the region")
        let proximity = ranging["beacons"]?.arrayValue?.first?["proximity"]?.stringValue
        #expect(proximity == "near")
        try await harness.waitFor("place of phone-1") { messages in
            messages.contains { $0.topic.hasSuffix("/place/phone-1") }
        }
        #expect(harness.messages("place").first?.json?["place"] == "gallery")
        #expect(harness.messages("place").first?.json?["source"] == "beacon")

        // Gateway mode: gw-a hears the tag loudest; it is at the desk, in the office.
        let tag: JSONValue = ["uuid": "e2c56db5-dffb-48d2-b060-d0f5a71096e0", "major": 1, "minor": 2, "rssi": -50]
        try await harness.publish(harness.topics.ble(agent: "gw-a"), ["t": .number(now), "adverts": [tag]])
        try await harness.publish(
            harness.topics.ble(agent: "gw-b"),
            [
                "t": .number(now + 0.5),
                "adverts": [["uuid": "e2c56db5-dffb-48d2-b060-d0f5a71096e0", "major": 1, "minor": 2, "rssi": -80]],
            ])
        let tagSubject = "ibeacon:e2c56db5-dffb-48d2-b060-d0f5a71096e0:1:2"
        try await harness.waitFor("the tag enters the desk") { messages in
            messages.contains { $0.topic.hasSuffix("/enter/desk/\(tagSubject)") }
        }
        let deskEnter = harness.messages("enter").compactMap(\.json).first { $0["region"] == "desk" }
        #expect(deskEnter?["source"] == "ble-gateway")
        // The place goes out after the enter (a later message of the same group): wait for it.
        try await harness.waitFor("the tag's place") { messages in
            messages.contains { $0.topic.hasSuffix("/place/\(tagSubject)") }
        }
        let place = harness.messages("place").last { $0.topic.hasSuffix(tagSubject) }?.json
        #expect(place?["place"] == "office")
        await harness.stop()
    }

    @Test("one bad advert refuses only that advert: a valid iBeacon beside a malformed Eddystone-URL enters its region")
    func oneBadAdvertRefusesOnlyThatAdvert() async throws {
        // The beacontools vectors (MIT, ../shared/data/ble/vectors.json): their iBeacon, and
        // their Eddystone-URL with the scheme byte made 0x07, which no scheme is.
        let iBeacon = "0201061aff4c0002154141414141414141414141414141414100010001f8"
        let malformedURL = "0303aafe1316aafe10f8076769746875620063697472757a"
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([
                Venue.beacons("gallery", ["uuid": "41414141-4141-4141-4141-414141414141", "major": 1])
            ]))
        try await harness.startEvaluator()
        let scan: JSONValue = [
            "t": .number(Date().timeIntervalSince1970),
            "adverts": [["data": .string(iBeacon), "rssi": -60], ["data": .string(malformedURL), "rssi": -70]],
        ]
        try await harness.publish(harness.topics.ble(agent: "phone-1"), scan)
        try await harness.waitFor("phone-1 enters the gallery") { messages in
            messages.contains { $0.topic.hasSuffix("/enter/gallery/phone-1") }
        }
        let letters = try await harness.waitFor("the refused advert's dead letter") { messages in
            messages.contains { $0.topic == "perimeter/v1/test/deadletter/evaluator" }
        }
        let letter = try #require(letters.first { $0.topic.hasSuffix("/deadletter/evaluator") }?.json)
        #expect(letter["topic"]?.stringValue == harness.topics.ble(agent: "phone-1"))
        #expect(letter["part"] == "adverts[1]")
        #expect(letter["code"] == "advert")
        let reason = letter["reason"]?.stringValue ?? ""
        #expect(reason.hasPrefix("adverts[1].data: ") && reason.contains("Eddystone-URL scheme 0x07"), "\(reason)")
        #expect(letter["payload"] == nil, "the scan was used; its payload is not repeated")
        let stats = try await harness.waitFor("stats counting the refused advert") { messages in
            messages.contains { $0.topic.hasSuffix("/stats") && $0.json?["refusedParts"]?["advert"] == 1 }
        }
        #expect(stats.last { $0.topic.hasSuffix("/stats") }?.json?["rejects"]?.objectValue?.isEmpty == true)
        await harness.stop()
    }

    @Test("OwnTracks and ESPresense payloads end to end")
    func adapters() async throws {
        let harness = try await EvaluatorHarness(regions: Venue.collection([]), adapters: true)
        try await harness.startEvaluator()
        let tst = Int(Date().timeIntervalSince1970)
        let waypoint: JSONValue = [
            "_type": "waypoint", "desc": "Office", "lat": 48.8584, "lon": 2.2945, "rad": 50,
            "tst": .number(Double(tst - 100)), "rid": "office-1",
        ]
        // One publisher at QoS 1: the evaluator journals and processes in this order, so the
        // waypoint is a region before the location arrives (no wait needed).
        try await harness.publish("owntracks/jane/phone", waypoint)
        let location: JSONValue = [
            "_type": "location", "tid": "JJ", "acc": 12, "lat": 48.8585, "lon": 2.2946, "tst": .number(Double(tst)),
            "alt": 35, "vac": 3,
        ]
        try await harness.publish("owntracks/jane/phone", location)
        try await harness.waitFor("an OwnTracks transition") { messages in
            messages.contains { $0.topic == "owntracks/jane/phone/event" }
        }
        let transition = try #require(harness.messages.first { $0.topic == "owntracks/jane/phone/event" }?.json)
        #expect(transition["_type"] == "transition")
        #expect(transition["event"] == "enter")
        #expect(transition["rid"] == "office-1")
        #expect(transition["desc"] == "Office")
        #expect(transition["wtst"]?.intValue == tst - 100)
        let enter = harness.messages("enter").first?.json
        #expect(enter?["subject"] == "owntracks:jane:phone")
        #expect(enter?["region"] == "owntracks-office-1")

        let node: JSONValue = [
            "id": "iBeacon:e5b9e3a6-27e2-4c36-a257-7698da5fc140-1-2", "rssi": -70, "rssi@1m": -59, "distance": 3.2,
        ]
        try await harness.publish("espresense/devices/iBeacon:e5b9e3a6-27e2-4c36-a257-7698da5fc140-1-2/kitchen", node)
        try await harness.waitFor("the ESPresense device's place") { messages in
            messages.contains { $0.topic.hasSuffix("/place/ibeacon:e5b9e3a6-27e2-4c36-a257-7698da5fc140:1:2") }
        }
        let place = harness.messages("place").last?.json
        #expect(place?["place"] == "kitchen")
        await harness.stop()
    }

    @Test(
        "live region changes: a new region is monitored, a moved one re-decides its subjects at once, a removed one is unmonitored, never exited"
    )
    func liveRegions() async throws {
        let harness = try await EvaluatorHarness(regions: Venue.collection([]))
        try await harness.startEvaluator()
        let t = Date().timeIntervalSince1970
        try await harness.publish(
            harness.topics.region("kiosk"), Venue.circle("kiosk", lat: 48.86, lon: 2.336, radius: 30), retain: true)
        try await harness.publish(
            harness.topics.gps(agent: "v1"), ["t": .number(t), "lat": 48.86, "lon": 2.336, "acc": 3])
        try await harness.waitFor("enter kiosk") { $0.contains { $0.topic.hasSuffix("/enter/kiosk/v1") } }
        // Moving the region away re-decides v1 against its last fix at once (issue 19): the exit.
        try await harness.publish(
            harness.topics.region("kiosk"), Venue.circle("kiosk", lat: 48.87, lon: 2.336, radius: 30), retain: true)
        try await harness.waitFor("exit kiosk after the move") { $0.contains { $0.topic.hasSuffix("/exit/kiosk/v1") } }
        #expect(harness.messages("exit").first?.json?["source"] == "regionChanged")
        // The next fix at the same place changes nothing more.
        try await harness.publish(
            harness.topics.gps(agent: "v1"), ["t": .number(t + 5), "lat": 48.86, "lon": 2.336, "acc": 3])
        try await harness.publish(
            harness.topics.gps(agent: "v1"), ["t": .number(t + 10), "lat": 48.87, "lon": 2.336, "acc": 3])
        try await harness.waitFor("enter again") { $0.filter { $0.topic.hasSuffix("/enter/kiosk/v1") }.count == 2 }
        // Removing it: unmonitored, no exit.
        try await harness.publish(harness.topics.region("kiosk"), text: "", retain: true)
        try await harness.waitFor("unmonitored") { messages in
            messages.contains { $0.topic.hasSuffix("/state/kiosk/v1") && $0.json?["state"] == "unmonitored" }
        }
        // The occupancy goes out after the states it counts: wait for it rather than read it
        // the moment the state arrived (under two CPU hogs it was still on its way).
        try await harness.waitFor("occupancy 0") { messages in
            messages.last { $0.topic == harness.topics.occupancy(region: "kiosk") }?.json?["count"] == 0
        }
        #expect(harness.messages("exit").filter { $0.topic.hasSuffix("/v1") }.count == 1)
        await harness.stop()
    }

    @Test("an agent's last will: its subject goes unknown at once (staleAfter 300 s), with no exit (issue 19)")
    func lastWill() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30)]),
            venue: ["staleAfter": 300])
        try await harness.startEvaluator()
        let will = try ChildProcess(
            Products.executable("perimeter-testpeer"),
            [
                "mqtt-will", "--port", "\(harness.broker.port)", "--topic", harness.topics.agentStatus("phone-9"),
                "--payload", #"{"online":false}"#,
            ])
        try await will.waitForLine(containing: "ready")
        try await harness.publish(
            harness.topics.agentStatus("phone-9"), ["online": true, "caps": ["gps"]], retain: true)
        try await harness.publish(
            harness.topics.gps(agent: "phone-9"),
            ["t": .number(Date().timeIntervalSince1970), "lat": 48.86, "lon": 2.336, "acc": 3])
        try await harness.waitFor("enter hall") { $0.contains { $0.topic.hasSuffix("/enter/hall/phone-9") } }
        will.kill(SIGKILL)
        try await harness.waitFor("unknown", timeout: .seconds(20)) { messages in
            messages.contains { $0.topic.hasSuffix("/state/hall/phone-9") && $0.json?["state"] == "unknown" }
        }
        #expect(harness.messages("exit").isEmpty)
        let reason = harness.messages("state").last { $0.topic.hasSuffix("/hall/phone-9") }?.json?["reason"]?
            .stringValue
        #expect(reason == "agentOffline")
        await harness.stop()
    }

    @Test(
        "kill -9 in the middle of a replay, then restart: the events equal a fault-free run up to duplicates",
        arguments: [nil, 10])
    func crashAndRestart(snapshotEvery: Int?) async throws {
        let (regions, points) = try Self.trackVenue()
        let harness = try await EvaluatorHarness(
            regions: regions, evaluator: snapshotEvery.map { ["snapshotEvery": .number(Double($0))] } ?? [:])
        try await harness.startEvaluator()
        let expected = Self.expectedTransitions(regions: regions, points: points, subject: "car")
        for (index, point) in points.enumerated() {
            try await harness.publish(harness.topics.gps(agent: "car"), Self.fix(point))
            if index == 40 {
                // Killed once it has worked a while (with snapshots on, after at least one).
                try await harness.waitFor("the first enter") { $0.contains { $0.topic.contains("/enter/") } }
                if snapshotEvery != nil {
                    // Periodic snapshots are written in the background: kill once one has landed.
                    _ = try await harness.waitFor("a periodic snapshot", timeout: .seconds(60)) { _ in
                        harness.evaluatorOutput.contains("background=true")
                    }
                }
                harness.killEvaluator()
            }
            if index == 70 { try await harness.startEvaluator() }
        }
        let seen = try await Self.expectFaultFreeEvents(harness, expected: expected, marker: points[25])
        if snapshotEvery != nil {
            #expect(harness.evaluatorOutput.contains("state restored from a snapshot"), "the restart used a snapshot")
        }
        // First appearances keep the fault-free order.
        var order: [String] = []
        for id in seen.compactMap({ $0["id"]?.stringValue }) where !order.contains(id) { order.append(id) }
        #expect(order == expected.map(\.id))
        await harness.stop()
    }

    @Test(
        "kill -9 inside a group commit (the burst's rows written, not committed, not acknowledged): after a restart the events equal a fault-free run"
    )
    func killInsideGroupCommit() async throws {
        let (regions, points) = try Self.trackVenue()
        let harness = try await EvaluatorHarness(regions: regions)
        try await harness.startEvaluator(environment: ["PERIMETER_FAULT_KILL_IN_JOURNAL": "3"])
        let expected = Self.expectedTransitions(regions: regions, points: points, subject: "car")
        // The whole track at once, without waiting for each acknowledgement: bursts of several
        // messages, one of which the evaluator dies inside.
        try await harness.publisher.publish(
            batch: points.map {
                MQTTMessage(
                    topic: harness.topics.gps(agent: "car"), payload: Array(Self.fix($0).serialized().utf8),
                    qos: .atLeastOnce)
            })
        #expect(try await harness.waitForEvaluatorExit(), "the fault fired")
        let died = harness.evaluatorOutput
        let fault = died.split(separator: "\n").first {
            $0.contains("fault injection: SIGKILL inside a group commit of")
        }
        #expect(fault != nil, "\(died.suffix(2000))")
        print("killInsideGroupCommit: \(fault ?? "no fault line")")
        try await harness.startEvaluator()
        let seen = try await Self.expectFaultFreeEvents(harness, expected: expected, marker: points[25])
        var order: [String] = []
        for id in seen.compactMap({ $0["id"]?.stringValue }) where !order.contains(id) { order.append(id) }
        #expect(order == expected.map(\.id))
        await harness.stop()
    }

    @Test("1,000 hostile messages: each on the deadletter topic with a reason; later answers still right")
    func hostileMessages() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30)]))
        try await harness.startEvaluator()
        var random = SplitMix64(seed: 7)
        let templates: [String] = [
            "{", "[]", "null", #"{"t":"yesterday","lat":1,"lon":2}"#, #"{"t":1,"lat":"north","lon":2}"#,
            #"{"t":1,"lat":91,"lon":2}"#, #"{"t":1,"lat":1,"lon":-181}"#, #"{"t":1,"lat":1e999,"lon":2}"#,
            #"{"t":1,"lat":1,"lon":2,"acc":"big"}"#, #"{"t":1,"adverts":"none"}"#,
            #"{"t":1,"adverts":[{"uuid":"x","major":1,"minor":1,"rssi":-50}]}"#,
            #"{"t":1,"adverts":[{"data":"0201061aff4c000215414141","rssi":-50}]}"#,
            #"{"t":1,"adverts":[{"uuid":"2f234454-cf6d-4a0f-adf2-f4911ba9ffa6","major":1,"minor":1,"rssi":900}]}"#,
            String(repeating: "x", count: 70_000),
        ]
        for number in 0..<1000 {
            var payload = templates[Int(random.next() % UInt64(templates.count))]
            if number % 7 == 0 {
                // Cut short: still never valid (every template is, or opens, a JSON value).
                let bytes = Array(payload.utf8)
                payload = String(decoding: bytes.prefix(Int(random.next() % UInt64(bytes.count))), as: UTF8.self)
            }
            let kind = payload.contains("adverts") ? "ble" : "gps"
            try await harness.publisher.publish(
                "perimeter/v1/test/obs/hostile-\(number % 10)/\(kind)", payload: Array(payload.utf8),
                qos: .atLeastOnce)
        }
        try await harness.waitFor("1,000 deadletters", timeout: .seconds(60)) { messages in
            messages.filter { $0.topic == "perimeter/v1/test/deadletter/evaluator" }.count >= 1000
        }
        let deadletters = harness.messages("deadletter").compactMap(\.json)
        #expect(deadletters.count == 1000)
        #expect(deadletters.allSatisfy { ($0["reason"]?.stringValue ?? "").count > 5 && $0["topic"] != nil })
        #expect(deadletters.allSatisfy { ($0["payload"]?.stringValue?.utf8.count ?? 0) <= 512 })
        #expect(harness.isEvaluatorRunning)
        try await harness.publish(
            harness.topics.gps(agent: "visitor"),
            ["t": .number(Date().timeIntervalSince1970), "lat": 48.86, "lon": 2.336, "acc": 3])
        try await harness.waitFor("a correct answer after the storm") { messages in
            messages.contains { $0.topic.hasSuffix("/enter/hall/visitor") }
        }
        let stats = try await harness.waitFor("stats with rejects") { messages in
            messages.contains { $0.topic.hasSuffix("/stats") && ($0.json?["rejects"]?.objectValue?.count ?? 0) > 0 }
        }
        #expect(stats.last { $0.topic.hasSuffix("/stats") }?.json?["instance"] == "t1")
        await harness.stop()
    }
}

@Suite("Evaluator metrics and health", .serialized)
struct EvaluatorHealthTests {
    @Test("/metrics has the documented series; /healthz turns unhealthy when the broker stops, healthy when it returns")
    func metricsAndHealth() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30)]),
            evaluator: ["http": "127.0.0.1:0"])
        try await harness.startEvaluator()
        let port = try harness.metricsPort()
        try await harness.publish(
            harness.topics.gps(agent: "v1"),
            ["t": .number(Date().timeIntervalSince1970), "lat": 48.86, "lon": 2.336, "acc": 3])
        try await harness.publish(harness.topics.gps(agent: "v1"), ["lat": "bad"])
        try await harness.waitFor("enter") { $0.contains { $0.topic.hasSuffix("/enter/hall/v1") } }
        let expected = [
            #"perimeter_events_total{event="enter",venue="test"} 1"#,
            #"perimeter_observations_total{result="accepted",venue="test"}"#,
            #"perimeter_observations_total{result="rejected",venue="test"} 1"#,
            "perimeter_outbox_pending 0", "perimeter_broker_connected 1",
            #"perimeter_observation_to_event_seconds_bucket{le="+Inf"} 1"#, "perimeter_delivery_seconds_count",
            "# TYPE perimeter_observation_to_event_seconds histogram",
        ]
        // The enter can arrive before the evaluator has counted the bad message and its own
        // acknowledgements: read until every series is there (or 30 s), then say what is missing.
        var metrics = try httpGet(port: port, path: "/metrics")
        _ = try await waitForCondition(timeout: .seconds(30), every: .milliseconds(100)) {
            metrics = try httpGet(port: port, path: "/metrics")
            return expected.allSatisfy(metrics.body.contains)
        }
        #expect(metrics.status == 200)
        for series in expected {
            #expect(metrics.body.contains(series), "missing \(series)")
        }
        let healthy = try httpGet(port: port, path: "/healthz")
        #expect(healthy.status == 200)
        #expect(try JSONParser.parse(healthy.body)["status"] == "ok")
        await harness.broker.stop()
        var unhealthy = (status: 0, body: "")
        _ = try await waitForCondition(timeout: .seconds(10), every: .milliseconds(100)) {
            unhealthy = try httpGet(port: port, path: "/healthz")
            return unhealthy.status == 503
        }
        #expect(unhealthy.status == 503)
        #expect(try JSONParser.parse(unhealthy.body)["brokerConnected"] == false)
        try await harness.broker.restart()
        var again = (status: 0, body: "")
        _ = try await waitForCondition(timeout: .seconds(15), every: .milliseconds(100)) {
            again = try httpGet(port: port, path: "/healthz")
            return again.status == 200
        }
        #expect(again.status == 200, "healthy again after the broker returned: \(again.body)")
        await harness.stop()
    }

    @Test("started while its broker is down: a warning every 10 s of its clock, from a child that ends with the wait")
    func brokerLate() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30)]))
        await harness.broker.stop()
        let clock = ManualClock(Date())
        try await harness.startInProcess(clock: clock, waitUntilRunning: false)
        // Before it connects (the lease keeper's session comes first), the only sleeper on its
        // clock is the warning's.
        for warnings in 1...2 {
            #expect(try await clock.waitForSleepers(1), "the warning's sleep, round \(warnings)")
            #expect(harness.logged("broker not reachable yet") == warnings - 1)
            clock.advance(by: 10)
            try await waitUntil("warning \(warnings)") { harness.logged("broker not reachable yet") == warnings }
        }
        try await harness.broker.restart()
        try await waitUntil("the evaluator running", timeout: .seconds(60)) {
            harness.logged("evaluator running") == 1
        }
        // "evaluator running" is logged after both waits ended and their children were awaited.
        #expect(harness.logged("broker not reachable yet") == 2)
        await harness.stop()
    }
}

@Suite("Evaluator with a partly invalid regions file", .serialized)
struct PartialRegionsFileTests {
    static let regions = Venue.collection([
        Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30),
        Venue.circle("broken", lat: 48.86, lon: 2.337, radius: -4),
    ])

    @Test(
        "a regions file with an invalid feature is served without it: dead letter naming the feature, /healthz degraded, doctor warns, SIGHUP the same"
    )
    func partialRegionsFileServesTheValidOnes() async throws {
        let harness = try await EvaluatorHarness(regions: Self.regions, evaluator: ["http": "127.0.0.1:0"])
        try await harness.startEvaluator()
        try await harness.publish(
            harness.topics.gps(agent: "v1"),
            ["t": .number(Date().timeIntervalSince1970), "lat": 48.86, "lon": 2.336, "acc": 3])
        try await harness.waitFor("v1 enters the valid region") { $0.contains { $0.topic.hasSuffix("/enter/hall/v1") } }
        let letters = try await harness.waitFor("the invalid feature's dead letter") { messages in
            messages.contains { $0.topic.hasSuffix("/deadletter/evaluator") }
        }
        let letter = try #require(letters.first { $0.topic.hasSuffix("/deadletter/evaluator") }?.json)
        #expect(letter["feature"] == 1)
        #expect(letter["region"] == "broken")
        #expect(letter["code"] == "region")
        #expect(letter["reason"]?.stringValue?.contains("properties.radius must be a finite number") == true)
        #expect(letter["file"]?.stringValue?.hasSuffix("regions.geojson") == true)
        #expect(harness.evaluatorOutput.contains("invalid feature left out"))

        let port = try harness.metricsPort()
        let health = try httpGet(port: port, path: "/healthz")
        #expect(health.status == 200)
        let body = try JSONParser.parse(health.body)
        #expect(body["status"] == "degraded", "\(health.body)")
        let reasons = body["degraded"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(reasons.count == 1 && reasons[0].contains("venue test: 1 problem(s)"), "\(reasons)")
        let metrics = try httpGet(port: port, path: "/metrics")
        #expect(metrics.body.contains(#"perimeter_regions_invalid{venue="test"} 1"#))

        let doctor = try await runProduct(["doctor", "--config", harness.configPath, "--listen", "0.2"])
        #expect(
            doctor.stdout.split(separator: "\n").contains { $0.hasPrefix("warn venue test: degraded: 1 problem(s)") },
            "\(doctor.stdout)")

        // SIGHUP with a file whose other feature is now the invalid one.
        let regionsPath = harness.directory.appendingPathComponent("regions.geojson").path
        try Venue.collection([
            Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 1e308),
            Venue.circle("cafe", lat: 48.86, lon: 2.337, radius: 10),
        ]).serialized().write(toFile: regionsPath, atomically: true, encoding: .utf8)
        harness.signalEvaluator(SIGHUP)
        let after = try await harness.waitFor("the reloaded file's dead letter") { messages in
            messages.contains { $0.topic.hasSuffix("/deadletter/evaluator") && $0.json?["region"] == "hall" }
        }
        let reload = try #require(after.last { $0.topic.hasSuffix("/deadletter/evaluator") }?.json)
        #expect(reload["reason"]?.stringValue?.contains("at most 50000") == true, "\(reload)")
        #expect(try JSONParser.parse(try httpGet(port: port, path: "/healthz").body)["status"] == "degraded")
        await harness.stop()
    }

    @Test("evaluator.strictRegions keeps today's refusal to start, naming the feature and the problem")
    func strictRegionsRefusesToStart() async throws {
        let harness = try await EvaluatorHarness(regions: Self.regions, evaluator: ["strictRegions": true])
        let result = try await runProduct(["evaluator", "--config", harness.configPath], timeout: .seconds(60))
        #expect(result.status != .exited(0))
        let said = result.stdout + result.stderr
        #expect(said.contains("region 'broken' (feature 1): properties.radius must be a finite number"), "\(said)")
        let doctor = try await runProduct(["doctor", "--config", harness.configPath, "--listen", "0.2"])
        #expect(doctor.stdout.contains("FAIL venue test:"), "\(doctor.stdout)")
        await harness.stop()
    }
}

@Suite("perimeter doctor", .serialized)
struct DoctorTests {
    @Test("a healthy deployment: every check ok (anonymous dev broker: the ACL is a warning)")
    func healthy() async throws {
        // $SYS every second (10 s in the shipped configs), so that the dropped-message counter
        // is there when doctor looks, however late this loaded machine starts it.
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30)]),
            brokerConfiguration: ["sys_interval 1"])
        try await harness.startEvaluator()
        // Until doctor is done: on a loaded machine it may start listening seconds from now.
        let publisher = Task {
            var n = 0
            while !Task.isCancelled {
                // Sleep, not a clock: keeps traffic going for doctor (another process) until it is done; no assertion rests on its timing.
                try? await Task.sleep(for: .milliseconds(200))
                n += 1
                try? await harness.publish(
                    harness.topics.gps(agent: "v1"),
                    [
                        "t": .number(Date().timeIntervalSince1970), "lat": 48.9, "lon": 2.336, "acc": 3,
                        "n": .number(Double(n)),
                    ])
            }
        }
        let result = try await runProduct(["doctor", "--config", harness.configPath, "--listen", "20"])
        publisher.cancel()
        #expect(result.status == .exited(0), "\(result.stdout)\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        for expected in [
            "ok   configuration: valid (1 venue(s))", "ok   venue test: 1 regions", "ok   database",
            "ok   broker 127.0.0.1:", "ok   ACL test: may read observations",
            "ok   ACL test: may write its dead-letter",
            "warn ACL test: anonymous access with no ACL", "ok   clock: ", "ok   numbering: ",
        ] {
            #expect(lines.contains { $0.hasPrefix(expected) }, "no line starting '\(expected)' in \(lines)")
        }
        // The broker-loss check ran and found nothing: the counter read as 0, or (a broker up for
        // more than a minute under the whole suite) expired, which $SYS/broker/uptime tells apart
        // from a broker without $SYS.
        #expect(
            lines.contains {
                $0.hasPrefix("ok   broker loss: no message dropped")
                    || $0.hasPrefix("ok   broker loss: nothing dropped in the last minute")
            }, "\(lines)")
        #expect(!lines.contains { $0.contains("broker dropped") }, "a healthy broker dropped nothing: \(lines)")
        // It stopped listening after ten observations (the publisher's five a second over the
        // whole 20 s would be about a hundred); a starved publisher may give fewer than ten in
        // the 20 s, which doctor then reports as they are.
        let clock = lines.first { $0.hasPrefix("ok   clock: ") }
        let seen = clock.flatMap { Int($0.dropFirst("ok   clock: ".count).prefix { $0.isNumber }) }
        #expect(seen.map { (1..<50).contains($0) } == true, "\(clock ?? "no clock line")")
        await harness.stop()
    }

    @Test("a broken deployment: an expired certificate and an unreachable broker, each with what to fix; exit 1")
    func broken() async throws {
        let harness = try await EvaluatorHarness(regions: Venue.collection([]))
        let expired = try await makeExpiredCertificate(in: harness.directory)
        await harness.broker.stop()
        let result = try await runProduct([
            "doctor", "--config", harness.configPath, "--set", "broker.tls.caFile=\(expired)", "--listen", "0.2",
        ])
        #expect(result.status == .exited(1))
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("FAIL TLS CA") && $0.contains("expired on 2020-02-01") }, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("FAIL broker 127.0.0.1:") && $0.contains("check broker.host/port") })
        #expect(lines.contains { $0.hasPrefix("warn database") && $0.contains("missing; the evaluator creates it") })
        await harness.stop()
    }

    /// A self-signed certificate valid only in January 2020 (openssl ca with explicit dates).
    func makeExpiredCertificate(in directory: URL) async throws -> String {
        let ca = directory.appendingPathComponent("expired-ca")
        try FileManager.default.createDirectory(at: ca, withIntermediateDirectories: true)
        try "".write(to: ca.appendingPathComponent("index.txt"), atomically: true, encoding: .utf8)
        try "01\n".write(to: ca.appendingPathComponent("serial"), atomically: true, encoding: .utf8)
        let config = [
            "[ ca ]", "default_ca = local", "[ local ]", "dir = \(ca.path)", "database = \(ca.path)/index.txt",
            "serial = \(ca.path)/serial", "new_certs_dir = \(ca.path)", "default_md = sha256", "policy = anything",
            "[ anything ]", "commonName = supplied",
        ].joined(separator: "\n")
        try config.write(to: ca.appendingPathComponent("ca.cnf"), atomically: true, encoding: .utf8)
        guard let openssl = Subprocess.find("openssl") else {
            throw ChildFailure(message: "openssl is not installed: apt-get install -y openssl")
        }
        for arguments in [
            [
                "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "\(ca.path)/key.pem", "-out", "\(ca.path)/req.pem",
                "-subj", "/CN=expired",
            ],
            [
                "ca", "-batch", "-config", "\(ca.path)/ca.cnf", "-selfsign", "-keyfile", "\(ca.path)/key.pem", "-in",
                "\(ca.path)/req.pem", "-out", "\(ca.path)/cert.pem", "-startdate", "20200101000000Z", "-enddate",
                "20200201000000Z",
            ],
        ] {
            let child = try Subprocess.spawn(openssl, arguments, stdout: .null, stderr: .null)
            guard await child.wait() == .exited(0) else {
                throw ChildFailure(message: "openssl \(arguments.first!) failed")
            }
        }
        return "\(ca.path)/cert.pem"
    }
}
