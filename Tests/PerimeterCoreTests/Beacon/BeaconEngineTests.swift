import Foundation
import PerimeterCore
import Testing

private let uuidA = BeaconPrefix(uuid: "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6")!
private let uuidB = BeaconPrefix(uuid: "E2C56DB5-DFFB-48D2-B060-D0F5A71096E0")!
private let namespace = BeaconPrefix(namespace: "edd1ebeac04e5defa017")!

private func at(_ seconds: Double) -> Date { Date(timeIntervalSince1970: 1_700_000_000 + seconds) }

private func beaconRegion(_ id: String, _ beacon: JSONValue, extra: [(String, JSONValue)] = []) -> Region {
    let feature: JSONValue = [
        "type": "Feature", "id": .string(id), "geometry": nil,
        "properties": .object(JSONObject([("beacon", beacon)] + extra)),
    ]
    let (_, region, problems) = RegionParser.parseFeature(feature, index: 0)
    precondition(problems.isEmpty, "\(problems)")
    return region!
}

private func ibeacon(_ prefix: BeaconPrefix, _ major: UInt16, _ minor: UInt16) -> BeaconIdentity {
    .iBeacon(uuid: prefix, major: major, minor: minor)
}

@Suite("Beacon constraints")
struct BeaconConstraintTests {
    @Test(
        "properties.beacon objects are checked, every problem named",
        arguments: [
            (#"{"uuid":"2f234454-cf6d-4a0f-adf2-f4911ba9ffa6"}"#, nil),
            (#"{"uuid":"2F234454CF6D4A0FADF2F4911BA9FFA6","major":3,"minor":0,"minRssi":-80}"#, nil),
            (#"{"namespace":"edd1ebeac04e5defa017","instance":"0000000000a1"}"#, nil),
            (#"{"id1":"2f234454-cf6d-4a0f-adf2-f4911ba9ffa6","id2":7}"#, nil),
            (#"{"uuid":"not-a-uuid"}"#, "must be a UUID"),
            (#"{"uuid":"2f234454-cf6d-4a0f-adf2-f4911ba9ffa6","major":70000}"#, "integer 0…65535"),
            (#"{"uuid":"2f234454-cf6d-4a0f-adf2-f4911ba9ffa6","minor":4}"#, "minor needs major"),
            (#"{"uuid":"2f234454-cf6d-4a0f-adf2-f4911ba9ffa6","namespace":"edd1ebeac04e5defa017"}"#, "mixes"),
            (#"{"major":3}"#, "needs \"uuid\""),
            (#"{"namespace":"edd1"}"#, "20 hex digits"),
            (#"{"namespace":"edd1ebeac04e5defa017","instance":"xyz"}"#, "12 hex digits"),
            (#"{"uuid":"2f234454-cf6d-4a0f-adf2-f4911ba9ffa6","minRssi":12}"#, "minRssi"),
            (#"{"uuid":"2f234454-cf6d-4a0f-adf2-f4911ba9ffa6","colour":"red"}"#, "colour is not a ibeacon"),
        ] as [(String, String?)])
    func parse(json: String, problem: String?) throws {
        let value = try JSONParser.parse(json)
        let result = BeaconRegionSpec.parse(value)
        switch (result, problem) {
        case (.success, nil): break
        case (.failure(let failure), let expected?):
            let joined = failure.messages.joined(separator: "; ")
            #expect(joined.contains(expected), "\(joined)")
        case (.success, let expected?): Issue.record("accepted \(json), expected a problem with \(expected)")
        case (.failure(let failure), nil): Issue.record("rejected \(json): \(failure.messages)")
        }
    }

    @Test("an invalid beacon object is a region problem, with the region named")
    func regionParser() throws {
        let document = RegionParser.parse(
            text: #"{"type":"Feature","id":"gallery","geometry":null,"properties":{"beacon":{"uuid":"nope"}}}"#)
        let messages = document.problems.map(\.description)
        #expect(messages.count == 1)
        #expect(messages.first?.contains("region 'gallery'") == true)
        #expect(messages.first?.contains("UUID") == true)
    }

    @Test("wildcards: every region a beacon satisfies, through the index")
    func wildcardTable() {
        let matcher = BeaconMatcher([
            beaconRegion("a", ["uuid": .string(uuidA.uuidString)]),
            beaconRegion("a.3", ["uuid": .string(uuidA.uuidString), "major": 3]),
            beaconRegion("a.3.1", ["uuid": .string(uuidA.uuidString), "major": 3, "minor": 1]),
            beaconRegion("a.4.1", ["uuid": .string(uuidA.uuidString), "major": 4, "minor": 1]),
            beaconRegion("b.3", ["uuid": .string(uuidB.uuidString), "major": 3]),
            beaconRegion("ns", ["namespace": "edd1ebeac04e5defa017"]),
            beaconRegion("ns.a1", ["namespace": "edd1ebeac04e5defa017", "instance": "0000000000a1"]),
            beaconRegion("alt", ["id1": .string(uuidA.uuidString)]),
            beaconRegion("alt.7", ["id1": .string(uuidA.uuidString), "id2": 7]),
            beaconRegion("alt.7.9", ["id1": .string(uuidA.uuidString), "id2": 7, "id3": 9]),
        ])
        let table: [(BeaconIdentity, [String])] = [
            (ibeacon(uuidA, 3, 1), ["a", "a.3", "a.3.1"]),
            (ibeacon(uuidA, 3, 2), ["a", "a.3"]),
            (ibeacon(uuidA, 4, 1), ["a", "a.4.1"]),
            (ibeacon(uuidA, 5, 5), ["a"]),
            (ibeacon(uuidB, 3, 1), ["b.3"]),
            (ibeacon(uuidB, 4, 1), []),
            (.eddystone(namespace: namespace, instance: 0xa1), ["ns", "ns.a1"]),
            (.eddystone(namespace: namespace, instance: 0xa2), ["ns"]),
            (.altBeacon(id1: uuidA, id2: 7, id3: 9), ["alt", "alt.7", "alt.7.9"]),
            (.altBeacon(id1: uuidA, id2: 7, id3: 8), ["alt", "alt.7"]),
            // The same 128 bits in another format is another beacon.
            (.altBeacon(id1: uuidB, id2: 3, id3: 1), []),
        ]
        for (identity, expected) in table {
            let found = matcher.regionIDs(matching: identity)
            #expect(found == expected, "\(identity.canonical)")
            // The index agrees with checking every constraint one by one.
            let scanned = matcher.regions.compactMap { $0 }.filter { $0.spec.constraint.matches(identity) }.map(\.id)
            #expect(found == scanned.sorted())
        }
    }

    @Test("regions come and go: replaced and removed constraints stop matching")
    func upsertRemove() {
        var matcher = BeaconMatcher([beaconRegion("r", ["uuid": .string(uuidA.uuidString), "major": 3])])
        #expect(matcher.regionIDs(matching: ibeacon(uuidA, 3, 1)) == ["r"])
        matcher.upsert(beaconRegion("r", ["uuid": .string(uuidA.uuidString), "major": 4]))
        #expect(matcher.regionIDs(matching: ibeacon(uuidA, 3, 1)) == [])
        #expect(matcher.regionIDs(matching: ibeacon(uuidA, 4, 1)) == ["r"])
        let removed = matcher.remove(id: "r")
        #expect(removed)
        #expect(matcher.regionIDs(matching: ibeacon(uuidA, 4, 1)) == [])
        #expect(matcher.count == 0)
    }

    @Test("canonical identity strings read back")
    func canonical() {
        for identity in [
            ibeacon(uuidA, 3, 65535), .eddystone(namespace: namespace, instance: 0xa1),
            .altBeacon(id1: uuidB, id2: 0, id3: 9),
        ] {
            #expect(BeaconIdentity(canonical: identity.canonical) == identity)
            #expect(!identity.canonical.contains("/"))
        }
        #expect(ibeacon(uuidA, 3, 1).canonical == "ibeacon:2f234454-cf6d-4a0f-adf2-f4911ba9ffa6:3:1")
        #expect(BeaconIdentity(canonical: "ibeacon:nope:1:2") == nil)
    }
}

@Suite("RSSI and distance")
struct RSSIModelTests {
    @Test(
        "distance models against hand-computed values",
        arguments: [
            (DistanceModel.logDistance(exponent: 2), -59.0, -59.0, 1.0),
            (.logDistance(exponent: 2), -79, -59, 10),
            (.logDistance(exponent: 2.5), -69, -59, 2.51188643150958),
            (.logDistance(exponent: 2), -53, -59, 0.501187233627272),
            (.altBeaconCurve(), -59, -59, 0.97085),
            (.altBeaconCurve(), -70, -59, 1.9304364502555003),
            (.altBeaconCurve(), -50, -59, 0.19106446691360568),
            (.logDistance(exponent: 2), 0, -59, -1),
            (.logDistance(exponent: 2), .nan, -59, -1),
        ] as [(DistanceModel, Double, Double, Double)])
    func distance(model: DistanceModel, rssi: Double, tx1m: Double, expected: Double) {
        let value = model.distance(rssi: rssi, tx1m: tx1m)
        #expect(abs(value - expected) < 1e-9, "\(model) rssi \(rssi) → \(value)")
    }

    @Test(
        "proximity bands",
        arguments: [
            (0.0, Proximity.immediate), (0.49, .immediate), (0.5, .near), (2.99, .near),
            (3, .far), (40, .far), (-1, .unknown), (.nan, .unknown),
        ])
    func proximity(accuracy: Double, expected: Proximity) {
        #expect(Proximity(accuracy: accuracy) == expected)
    }

    @Test("tx1m: the advert's, else the calibration's, else −59; receivers corrected by rxAdj")
    func calibration() {
        let beacon = ibeacon(uuidA, 1, 1)
        let calibration = BeaconCalibration(receiverAdjustment: ["pixel": 4], tx1m: [beacon: -65])
        #expect(calibration.tx1m(for: beacon, advertised: -61) == -61)
        #expect(calibration.tx1m(for: beacon, advertised: nil) == -65)
        #expect(calibration.tx1m(for: ibeacon(uuidA, 1, 2), advertised: nil) == -59)
        #expect(calibration.adjusted(rssi: -70, agent: "pixel") == -66)
        #expect(calibration.adjusted(rssi: -70, agent: "iphone") == -70)
    }

    @Test("smoothing parses from configuration text")
    func smoothingText() {
        #expect(RSSISmoothing(text: "sinceLastReport") == .sinceLastReport)
        #expect(RSSISmoothing(text: "mean:5") == .runningMean(window: 5))
        #expect(RSSISmoothing(text: "median:2.5") == .median(window: 2.5))
        #expect(RSSISmoothing(text: "median:0") == nil)
        #expect(RSSISmoothing(text: "average") == nil)
    }

    /// Ranges one beacon after the given (time, rssi) samples, reporting at `reportAt`.
    private func ranged(_ smoothing: RSSISmoothing, samples: [(Double, Double)], reportAt: Double) -> RangedBeacon? {
        var engine = BeaconEngine(
            regions: [beaconRegion("r", ["uuid": .string(uuidA.uuidString)])],
            parameters: BeaconParameters(smoothing: smoothing, rangingInterval: 100))
        for (time, rssi) in samples {
            _ = engine.process(
                BeaconReport(
                    agent: "phone", t: at(time), sightings: [BeaconSighting(identity: ibeacon(uuidA, 1, 1), rssi: rssi)]
                ))
        }
        return engine.ranging(at: at(reportAt)).first?.beacons.first
    }

    @Test("smoothing: mean since the last report, running mean and median over a window")
    func smoothing() {
        let samples: [(Double, Double)] = [(0, -80), (1, -60), (2, -62), (3, -64), (4, -90)]
        #expect(ranged(.sinceLastReport, samples: samples, reportAt: 4)?.rssi == -71.2)
        #expect(ranged(.runningMean(window: 2), samples: samples, reportAt: 4)?.rssi == -72)
        #expect(ranged(.median(window: 3.5), samples: samples, reportAt: 4)?.rssi == -63)
        #expect(ranged(.median(window: 10), samples: samples, reportAt: 4)?.rssi == -64)
    }
}

@Suite("Beacon engine")
struct BeaconEngineTests {
    static let regions = [
        beaconRegion("lobby", ["uuid": .string(uuidA.uuidString), "major": 1]),
        beaconRegion("gallery", ["uuid": .string(uuidA.uuidString), "major": 2, "minRssi": -80]),
        beaconRegion("venue", ["uuid": .string(uuidA.uuidString)], extra: [("dwellAfter", 60)]),
    ]

    static func report(
        _ time: Double, _ sightings: [(BeaconIdentity, Double)], agent: String = "phone"
    )
        -> BeaconReport
    {
        BeaconReport(
            agent: agent, t: at(time),
            sightings: sightings.map { BeaconSighting(identity: $0.0, rssi: $0.1, tx1m: -59) }
        )
    }

    static func events(_ engine: inout BeaconEngine, _ report: BeaconReport) -> [String] {
        guard case .success(let update) = engine.process(report) else { return ["rejected"] }
        return update.events.map(Self.describe)
    }

    static func describe(_ event: RegionEvent) -> String {
        let time = Int(event.t.timeIntervalSince1970 - 1_700_000_000)
        if event.kind == .state { return "\(event.region) \(event.state!.rawValue) @\(time)" }
        return "\(event.kind.rawValue) \(event.region) @\(time)"
    }

    @Test("enter on the first matching sighting, with the beacon as refinement; the RSSI floor counts")
    func enterAndRefinement() throws {
        var engine = BeaconEngine(regions: Self.regions)
        let beacon = ibeacon(uuidA, 1, 7)
        let update = try engine.process(Self.report(0, [(beacon, -70)])).get()
        let enter = update.events.filter { $0.kind == .enter }
        #expect(enter.map(\.region).sorted() == ["lobby", "venue"])
        #expect(enter.allSatisfy { $0.refinement == beacon && $0.source == "ble" && $0.seq == 1 })
        let payload = enter[0].payload.objectValue!
        #expect(payload["refinement"]?["major"] == 1)
        #expect(payload["refinement"]?["minor"] == 7)
        // Below gallery's minRssi of −80: not inside gallery.
        #expect(Self.events(&engine, Self.report(1, [(ibeacon(uuidA, 2, 1), -85)])) == [])
        #expect(engine.state(subject: "phone", region: "gallery") == .unknown)
        #expect(
            Self.events(&engine, Self.report(2, [(ibeacon(uuidA, 2, 1), -75)])) == [
                "gallery inside @2", "enter gallery @2",
            ])
    }

    @Test(
        "beacon exit timeout: exit dated when the timeout ran out, once a report shows the beacon gone",
        arguments: [
            // (report times after a sighting at 0, whether each hears the lobby beacon, expected events)
            ([29.0], [false], [String]()),
            ([31], [false], ["lobby outside @30", "exit lobby @30"]),
            ([20, 45], [true, false], []),
            ([20, 51], [true, false], ["lobby outside @50", "exit lobby @50"]),
            // A report after a long silence that hears the beacon again: the stay went on.
            ([100], [true], []),
        ] as [([Double], [Bool], [String])])
    func exitTimeout(times: [Double], hears: [Bool], expected: [String]) {
        var engine = BeaconEngine(regions: [Self.regions[0]])
        let beacon = ibeacon(uuidA, 1, 7)
        _ = engine.process(Self.report(0, [(beacon, -60)]))
        var events: [String] = []
        for (time, heard) in zip(times, hears) {
            events += Self.events(&engine, Self.report(time, heard ? [(beacon, -60)] : []))
        }
        #expect(events == expected)
    }

    @Test("a subject that falls silent is unknown after staleAfter, never exited")
    func silentSubject() {
        var engine = BeaconEngine(regions: [Self.regions[0]])
        _ = engine.process(Self.report(0, [(ibeacon(uuidA, 1, 7), -60)]))
        #expect(engine.advance(to: at(200)).map(Self.describe) == [])
        #expect(engine.advance(to: at(400)).map(Self.describe) == ["lobby unknown @300"])
        #expect(engine.state(subject: "phone", region: "lobby") == .unknown)
        // Heard again: the same stay, no second enter.
        #expect(Self.events(&engine, Self.report(401, [(ibeacon(uuidA, 1, 7), -60)])) == ["lobby inside @401"])
    }

    @Test("without exitNeedsObservation the timeout alone exits, on a tick")
    func timeoutAlone() {
        var engine = BeaconEngine(regions: [Self.regions[0]], parameters: BeaconParameters(exitNeedsObservation: false))
        _ = engine.process(Self.report(0, [(ibeacon(uuidA, 1, 7), -60)]))
        #expect(engine.advance(to: at(29)).map(Self.describe) == [])
        #expect(engine.advance(to: at(35)).map(Self.describe) == ["lobby outside @30", "exit lobby @30"])
    }

    @Test("dwell after dwellAfter inside; an exit carries the strongest beacon of the stay")
    func dwellAndExitRefinement() throws {
        var engine = BeaconEngine(regions: [Self.regions[2]])
        let weak = ibeacon(uuidA, 1, 1)
        let strong = ibeacon(uuidA, 2, 2)
        _ = engine.process(Self.report(0, [(weak, -80)]))
        _ = engine.process(Self.report(10, [(weak, -80), (strong, -55)]))
        _ = engine.process(Self.report(40, [(strong, -56)]))
        #expect(engine.advance(to: at(61)).map(Self.describe) == ["dwell venue @60"])
        let update = try engine.process(Self.report(80, [])).get()
        #expect(update.events.map(Self.describe) == ["venue outside @70", "exit venue @70"])
        #expect(update.events.last?.refinement == strong)
    }

    @Test("ranging: the region's beacons, nearest first, unknown last, at most once a second")
    func rangingOrder() throws {
        var engine = BeaconEngine(regions: [Self.regions[0], Self.regions[1]])
        let near = ibeacon(uuidA, 1, 1)
        let far = ibeacon(uuidA, 1, 2)
        let immediate = ibeacon(uuidA, 1, 3)
        let quiet = ibeacon(uuidA, 1, 4)
        let other = ibeacon(uuidA, 2, 1)
        _ = engine.process(Self.report(0, [(quiet, -60)]))
        #expect(engine.ranging(at: at(0.5)).count == 1)
        _ = engine.process(Self.report(1, [(near, -65), (far, -75), (immediate, -50), (other, -60)]))
        #expect(engine.ranging(at: at(1.2)).isEmpty, "a second report within a second")
        let reports = engine.ranging(at: at(1.5))
        #expect(reports.map(\.region) == ["lobby", "gallery"])
        let lobby = try #require(reports.first)
        #expect(lobby.beacons.map(\.identity) == [immediate, near, far, quiet])
        #expect(lobby.beacons.map(\.proximity) == [.immediate, .near, .far, .unknown])
        #expect(lobby.beacons.last?.accuracy == -1)
        #expect(lobby.beacons.last?.rssi == 0)
        // −65 dBm at tx1m −59, n = 2: 10^(6/20) m.
        #expect(abs(lobby.beacons[1].accuracy - 1.9952623149688795) < 1e-9)
        #expect(reports[1].beacons.map(\.identity) == [other])
        let closest = try #require(engine.closestBeacon(of: "phone"))
        #expect(closest.region == "lobby")
        #expect(closest.beacon.identity == immediate)
    }

    @Test(
        "ranging: one report per tick when ticks come about a second apart, jitter included (issue 19: 6 in 10 s)",
        arguments: [
            // (tick times, scans every second: reports expected)
            ([0.0, 0.9995, 2.0, 2.9993, 4.0, 4.998, 6.0, 6.9991, 8.0, 9.0], 10),
            // A tick 0.3 s late and the next on time, 0.7 s after it: that one is skipped (at most
            // about once a second). The service dates ticks when they fire, so they are not late.
            ([0.0, 1.3, 2.0, 3.0, 4.3, 5.0, 6.0, 7.0, 8.0, 9.0], 8),
            ([0.0, 0.3, 0.6, 0.9, 1.2, 1.5, 1.8, 2.1], 3),  // fast ticks: still about once a second
        ] as [([Double], Int)])
    func rangingRate(ticks: [Double], expected: Int) {
        var engine = BeaconEngine(regions: [Self.regions[0]])
        var reports = 0
        var scanned = -1.0
        for tick in ticks {
            while scanned + 1 <= tick {
                scanned += 1
                _ = engine.process(Self.report(scanned, [(ibeacon(uuidA, 1, 1), -60)]))
            }
            reports += engine.ranging(at: at(tick)).count
        }
        #expect(reports == expected)
    }

    @Test("ranging: a silent scanner gets no empty reports after five intervals; its next scan resumes them")
    func rangingSilentScanner() {
        var engine = BeaconEngine(regions: [Self.regions[0]])
        _ = engine.process(Self.report(0, [(ibeacon(uuidA, 1, 1), -60)]))
        let counts = (1...10).map { engine.ranging(at: at(Double($0))).count }
        #expect(counts == [1, 1, 1, 1, 1, 0, 0, 0, 0, 0])
        #expect(engine.state(subject: "phone", region: "lobby") == .inside, "still inside: no exit is invented")
        _ = engine.process(Self.report(11, []))
        #expect(engine.ranging(at: at(11.5)).first?.beacons.first?.proximity == .unknown)
    }

    @Test("a removed region gives unmonitored, not exit; bad reports are rejected with a reason")
    func removeAndReject() {
        var engine = BeaconEngine(regions: [Self.regions[0]])
        _ = engine.process(Self.report(10, [(ibeacon(uuidA, 1, 7), -60)]))
        #expect(engine.remove(regionID: "lobby", at: at(11)).map(Self.describe) == ["lobby unmonitored @11"])
        #expect(Self.events(&engine, Self.report(12, [(ibeacon(uuidA, 1, 7), -60)])) == [])
        let nan = engine.process(Self.report(13, [(ibeacon(uuidA, 1, 7), .nan)]))
        #expect(nan.rejection?.code == "rssiNotFinite")
        let old = engine.process(Self.report(5, []))
        #expect(old.rejection?.code == "outOfOrder")
        let loud = engine.process(Self.report(14, [(ibeacon(uuidA, 1, 7), 40)]))
        #expect(loud.rejection?.code == "rssiOutOfRange")
    }

    @Test("gateway mode: the tag is at the RSSI-weighted centroid; its room is the strongest gateway's zone")
    func gatewayCentroid() throws {
        let west = GeoPoint(lon: 2.3370, lat: 48.8600)
        let east = Geodesy.destination(west, bearing: .pi / 2, distance: 10)
        let north = Geodesy.destination(west, bearing: 0, distance: 10)
        var engine = BeaconEngine(
            regions: [],
            gateways: [
                Gateway(id: "gw-west", position: west, floor: 1, zone: "room-101"),
                Gateway(id: "gw-east", position: east, floor: 1, zone: "room-102"),
                Gateway(id: "gw-north", position: north, floor: 2, zone: "stairs"),
            ])
        let tag = ibeacon(uuidB, 9, 9)
        let first = try engine.process(Self.report(0, [(tag, -60)], agent: "gw-west")).get()
        #expect(first.locations.count == 1)
        #expect(first.locations[0].subject == "ibeacon:e2c56db5-dffb-48d2-b060-d0f5a71096e0:9:9")
        #expect(Geodesy.distance(try #require(first.locations[0].position), west) < 1e-6)
        #expect(first.events.isEmpty)
        // −70 dBm is a tenth of the power of −60: the centroid is 10 · 0.1/1.1 m east of gw-west.
        let second = try engine.process(Self.report(1, [(tag, -70)], agent: "gw-east")).get()
        let location = try #require(second.locations.first)
        let position = try #require(location.position)
        #expect(abs(Geodesy.distance(position, west) - 10 * 0.1 / 1.1) < 0.01)
        #expect(abs(Geodesy.bearing(west, position) - .pi / 2) < 0.01)
        #expect(location.room == "room-101")
        #expect(location.floor == 1)
        #expect(location.gateways == 2)
        #expect(location.fix?.source == "ble-gateway")
        // The position feeds the geofences like any fix: a 5 m circle round gw-west sees the tag enter.
        var geofences = GeofenceEngine(regions: [Region(id: "desk", shape: .circle(center: west, radius: 5))])
        let entered = try geofences.process(try #require(location.fix)).get().filter { $0.kind == .enter }
        #expect(entered.map(\.region) == ["desk"])
        #expect(entered.first?.subject == location.subject)
        #expect(entered.first?.source == "ble-gateway")
        // Later the east gateway hears it loudest; the west sighting has left the 10 s window.
        let third = try engine.process(Self.report(12, [(tag, -50)], agent: "gw-east")).get()
        #expect(third.locations.first?.room == "room-102")
        #expect(third.locations.first?.gateways == 1)
        #expect(engine.tagCount == 1)
        #expect(engine.subjectCount == 0)
    }

    @Test("gateway mode by adapter: unplaced room nodes name the room; tags need no beacon identity")
    func unplacedRooms() throws {
        var locator = GatewayLocator()
        let kitchen = locator.process(
            TagReport(gateway: "kitchen", t: at(0), sightings: [TagSighting(subject: "espresense:phone-1", rssi: -70)]))
        let office = locator.process(
            TagReport(gateway: "office", t: at(1), sightings: [TagSighting(subject: "espresense:phone-1", rssi: -60)]))
        #expect(kitchen.first?.room == "kitchen")
        #expect(office.first?.room == "office")
        #expect(office.first?.position == nil)
        #expect(office.first?.fix == nil)
        #expect(office.first?.gateways == 2)
        // −60 dBm at the default −59 dBm at 1 m: about 1.1 m from the office node.
        #expect(abs((office.first?.accuracy ?? 0) - 1.1220184543019633) < 1e-9)
        #expect(locator.gateway("kitchen")?.zone == "kitchen")
    }
}

@Suite("Places")
struct PlaceRuleTests {
    static let cafe = PlaceAnswer(place: "cafe", source: .beacon, proximity: .near)

    @Test(
        "the Caffè Macs rule",
        arguments: [
            // previous, evidence, expected
            (nil, PlaceEvidence(nearestBeacon: NearestBeacon(place: "cafe", proximity: .near)), cafe),
            (
                nil, PlaceEvidence(nearestBeacon: NearestBeacon(place: "cafe", proximity: .immediate)),
                PlaceAnswer(place: "cafe", source: .beacon, proximity: .immediate)
            ),
            // A far beacon never switches the place …
            (cafe, PlaceEvidence(nearestBeacon: NearestBeacon(place: "gym", proximity: .far)), cafe),
            (
                cafe, PlaceEvidence(nearestBeacon: NearestBeacon(place: "gym", proximity: .unknown), gpsPlace: "park"),
                cafe
            ),
            // … nor decides one from nothing.
            (
                nil, PlaceEvidence(nearestBeacon: NearestBeacon(place: "gym", proximity: .far), defaultPlace: "home"),
                PlaceAnswer(place: "home", source: .default)
            ),
            // A near beacon switches it.
            (
                cafe, PlaceEvidence(nearestBeacon: NearestBeacon(place: "gym", proximity: .near)),
                PlaceAnswer(place: "gym", source: .beacon, proximity: .near)
            ),
            // No beacons live: GPS, else the default, else nothing.
            (cafe, PlaceEvidence(gpsPlace: "park", defaultPlace: "home"), PlaceAnswer(place: "park", source: .gps)),
            (cafe, PlaceEvidence(defaultPlace: "home"), PlaceAnswer(place: "home", source: .default)),
            (cafe, PlaceEvidence(), nil),
            // Without authorization only the subject's own choice counts.
            (
                cafe,
                PlaceEvidence(
                    nearestBeacon: NearestBeacon(place: "gym", proximity: .immediate), defaultPlace: "home",
                    authorized: false), PlaceAnswer(place: "home", source: .default)
            ),
            (nil, PlaceEvidence(gpsPlace: "park", authorized: false), nil),
        ] as [(PlaceAnswer?, PlaceEvidence, PlaceAnswer?)])
    func rule(previous: PlaceAnswer?, evidence: PlaceEvidence, expected: PlaceAnswer?) {
        #expect(PlaceRule.resolve(previous: previous, evidence: evidence) == expected)
    }
}

extension Result {
    fileprivate var rejection: BeaconRejection? {
        if case .failure(let error) = self { return error as? BeaconRejection }
        return nil
    }
}
