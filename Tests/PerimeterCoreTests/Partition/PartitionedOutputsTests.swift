import Foundation
import PerimeterCore
import Testing

@Suite("Partitions: an evaluator's inputs, outputs, tokens and occupancy parts")
struct PartitionedOutputsTests {
    static let p = try! Partitioning(count: 4)
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    /// Ids with known partitions out of 4 (pinned in PartitioningTests: a1→3, a2→2, a3→1, a4→0).
    @Test("the known ids' partitions", arguments: [("a1", 3), ("a2", 2), ("a3", 1), ("a4", 0)])
    func known(id: String, partition: Int) {
        #expect(Self.p.partition(of: id) == partition)
        #expect(Self.p.partition(ofLevel: Topics.level(id)) == partition)
    }

    @Test("an id's partition from its topic level equals the id's", arguments: ["x/y", "a+b", "100%", "plain", "é"])
    func level(id: String) {
        #expect(Self.p.partition(ofLevel: Topics.level(id)) == Self.p.partition(of: id))
    }

    @Test(
        "a mapped observation's topic is read back as the agent published it",
        arguments: [
            ("perimeter/v1/museum/p/3/obs/a1/gps", 3, "perimeter/v1/museum/obs/a1/gps"),
            ("perimeter/v1/museum/p/0/obs/x%2Fy/ble", 0, "perimeter/v1/museum/obs/x%2Fy/ble"),
            // Not a mapped observation: other venues, other shapes, bad numbers.
            ("perimeter/v1/zoo/p/3/obs/a1/gps", nil, nil),
            ("perimeter/v1/museum/obs/a1/gps", nil, nil),
            ("perimeter/v1/museum/p/x/obs/a1/gps", nil, nil),
            ("perimeter/v1/museum/p/03/obs/a1/gps", nil, nil),
            ("perimeter/v1/museum/p/-1/obs/a1/gps", nil, nil),
            ("perimeter/v1/museum/p/3/obs/a1", nil, nil),
            ("perimeter/v1/museum/p/3/state/a1/gps", nil, nil),
        ] as [(String, Int?, String?)])
    func unpartitioned(topic: String, partition: Int?, original: String?) {
        let result = Partitioning.unpartitioned(topic, prefix: "perimeter/v1", venues: ["museum"])
        #expect(result?.partition == partition)
        #expect(result?.topic == original)
    }

    static func fix(_ subject: String) -> Inbound {
        .fix(Fix(subject: subject, t: t0, position: GeoPoint(lon: 13, lat: 45)))
    }

    static func beacon(_ minor: UInt16) -> BeaconSighting {
        BeaconSighting(
            identity: .iBeacon(uuid: BeaconPrefix(high: 1, low: 2), major: 1, minor: minor), rssi: -60)
    }

    @Test("inputs are kept for the subjects of held partitions; venue-wide ones by everyone")
    func restrict() {
        let held: Set<Int> = [3, 2]  // a1, a2
        let gateway: (String) -> Bool = { $0 == "gw" }
        let cases: [(Inbound, Inbound?)] = [
            (Self.fix("a1"), Self.fix("a1")),
            (Self.fix("a3"), nil),
            // A scanner's own scan: its subject (or its agent) decides.
            (
                .beacons(BeaconReport(agent: "a4", t: Self.t0, sightings: [Self.beacon(1)])), nil
            ),
            (
                .beacons(BeaconReport(agent: "phone", subject: "a2", t: Self.t0, sightings: [Self.beacon(1)])),
                .beacons(BeaconReport(agent: "phone", subject: "a2", t: Self.t0, sightings: [Self.beacon(1)]))
            ),
            // A gateway's scan: its sightings (tags) are split by their own partitions.
            (
                .tags(
                    TagReport(
                        gateway: "gw", t: Self.t0,
                        sightings: [
                            TagSighting(subject: "a1", rssi: -50), TagSighting(subject: "a3", rssi: -50),
                        ])),
                .tags(TagReport(gateway: "gw", t: Self.t0, sightings: [TagSighting(subject: "a1", rssi: -50)]))
            ),
            (.tags(TagReport(gateway: "gw", t: Self.t0, sightings: [TagSighting(subject: "a4", rssi: -50)])), nil),
            // An empty scan says "nothing heard": every holder takes it.
            (
                .tags(TagReport(gateway: "gw", t: Self.t0, sightings: [])),
                .tags(TagReport(gateway: "gw", t: Self.t0, sightings: []))
            ),
            (.admin(command: "erase", subject: "a3"), .admin(command: "erase", subject: "a3")),
            (.preferences(subject: "a4", SubjectPreferences()), .preferences(subject: "a4", SubjectPreferences())),
            (.regionRemove(id: "hall"), .regionRemove(id: "hall")),
        ]
        for (input, expected) in cases {
            #expect(Self.p.restrict(input, to: held, isGateway: gateway) == expected, "\(input)")
        }
        // A gateway's beacon scan: sightings kept by their canonical identity's partition.
        let sightings = (1...40).map { Self.beacon(UInt16($0)) }
        let scan = Inbound.beacons(BeaconReport(agent: "gw", t: Self.t0, sightings: sightings))
        guard case .beacons(let kept)? = Self.p.restrict(scan, to: held, isGateway: gateway) else {
            Issue.record("a gateway scan with sightings of held partitions was dropped")
            return
        }
        #expect(kept.sightings == sightings.filter { held.contains(Self.p.partition(of: $0.identity.canonical)) })
        #expect(!kept.sightings.isEmpty && kept.sightings.count < sightings.count)
    }

    @Test(
        "an output needs the lease of its subject's partition, or the one its topic names",
        arguments: [
            ("enter/hall/a1", 3), ("exit/hall/a2", 2), ("dwell/hall/a3", 1), ("state/hall/a4", 0),
            ("ranging/hall/a1", 3), ("live/dashboard/a2", 2), ("self/enter/hall/a3", 1), ("place/a1", 3),
            ("visit/a2", 2), ("diagnostics/a3", 1), ("subjects/a4/prompt", 0), ("admin/erased/a1", 3),
            ("admin/shown/a2", 2), ("occupancy/hall/p/2", 2), ("occupancy/hall", 0),
            // Names no subject: not fenced.
            ("deadletter/evaluator", nil), ("waypoints/owntracks-x", nil), ("admin/erase/a1", nil),
            ("occupancy/hall/p/9", nil), ("occupancy/hall/p/x", nil), ("regions/hall", nil),
        ] as [(String, Int?)])
    func outputPartition(suffix: String, expected: Int?) {
        let root = "perimeter/v1/museum"
        #expect(Self.p.partition(ofOutput: "\(root)/\(suffix)", root: root) == expected)
        #expect(Self.p.partition(ofOutput: "perimeter/v1/zoo/\(suffix)", root: root) == nil)
    }

    @Test(
        "the token goes first into a JSON object payload; anything else is left as it is",
        arguments: [
            (#"{"count":1}"#, #"{"partition":2,"token":17,"count":1}"#),
            ("{}", #"{"partition":2,"token":17}"#),
            ("{ }", #"{"partition":2,"token":17 }"#),
            ("", ""),
            ("[1]", "[1]"),
        ])
    func stamp(payload: String, expected: String) throws {
        let stamped = Partitioning.stamp(Array(payload.utf8), partition: 2, token: 17)
        #expect(String(decoding: stamped, as: UTF8.self) == expected)
        if payload.hasPrefix("{") {
            let json = try JSONParser.parse(stamped)
            #expect(json["token"]?.intValue == 17 && json["partition"]?.intValue == 2)
        }
    }

    @Test("occupancy: the total is the sum of the latest parts; a stale owner's part is ignored")
    func occupancy() {
        let t = Self.t0
        var parts = OccupancyParts()
        // (region, partition, count, t offset, token, taken, total after)
        let steps: [(String, Int, Int, Double, UInt64, Bool, Int)] = [
            ("hall", 0, 3, 0, 10, true, 3),
            ("hall", 1, 2, 1, 11, true, 5),
            ("hall", 1, 4, 2, 11, true, 7),  // same holder, new count
            ("hall", 1, 9, 3, 5, false, 7),  // an older holder of partition 1: dropped
            ("hall", 1, 1, 4, 20, true, 4),  // partition 1 moved: its new holder's part
            ("cafe", 1, 6, 5, 11, false, 4),  // the old holder's token, another region: still stale
            ("cafe", 0, 2, 6, 10, true, 4),
        ]
        for (region, partition, count, offset, token, taken, total) in steps {
            let part = OccupancyParts.Part(count: count, t: t.addingTimeInterval(offset), token: token)
            #expect(parts.note(venue: "museum", region: region, partition: partition, part) == taken)
            #expect(parts.total(of: "hall")?.count == total)
        }
        #expect(parts.total(of: "hall")?.t == t.addingTimeInterval(4))
        #expect(parts.total(of: "cafe")?.count == 2)
        #expect(parts.total(of: "lobby") == nil)
        parts.clear(region: "cafe", partition: 0)
        #expect(parts.total(of: "cafe") == nil)
    }

    @Test(
        "occupancy: within one token, a part numbered no later than the one kept (a QoS 1 redelivery) is ignored",
        arguments: [
            // (count, token, n) noted in order → taken?; the total after each.
            [(4, 10, 100, true, 4), (3, 10, 120, true, 3), (4, 10, 100, false, 3), (2, 10, 130, true, 2)],
            [(4, 10, 100, true, 4), (4, 10, 100, false, 4), (5, 10, 101, true, 5)],
            // A new holder's numbers start anywhere: its token decides first.
            [(4, 10, 500, true, 4), (1, 12, 20, true, 1), (4, 10, 501, false, 1), (2, 12, 21, true, 2)],
            // Parts without a number (an older evaluator) are taken as before.
            [(4, 10, -1, true, 4), (3, 10, -1, true, 3), (5, 10, 7, true, 5), (6, 10, -1, true, 6)],
        ] as [[(Int, UInt64, Int64, Bool, Int)]])
    func occupancyRedelivered(_ steps: [(Int, UInt64, Int64, Bool, Int)]) {
        var parts = OccupancyParts()
        for (index, (count, token, n, taken, total)) in steps.enumerated() {
            let part = OccupancyParts.Part(
                count: count, t: Self.t0, token: token, position: n >= 0 ? n : nil)
            #expect(parts.note(venue: "museum", region: "hall", partition: 1, part) == taken, "step \(index)")
            #expect(parts.total(of: "hall")?.count == total, "step \(index)")
        }
    }

    @Test(
        "the totals to publish: every region whose parts add up to another count than the one published",
        arguments: [
            // (published counts, the regions expected to go out with their counts)
            ([String: Int](), ["cafe": 2, "hall": 7]),  // nothing published yet: all of them
            (["cafe": 2, "hall": 7], [:]),  // all as published: nothing
            (["cafe": 2, "hall": 6], ["hall": 7]),  // a missed change: hall goes out again
            (["cafe": 2, "hall": 7, "shop": 4], [:]),  // shop has no part left: left as it was
            (["hall": 7], ["cafe": 2]),  // cafe never published
            (["cafe": 0, "hall": 70], ["cafe": 2, "hall": 7]),
        ])
    func totalsChanged(published: [String: Int], expected: [String: Int]) {
        var parts = OccupancyParts()
        for (region, partition, count, offset) in [("hall", 0, 3, 0.0), ("hall", 1, 4, 5), ("cafe", 1, 2, 2)] {
            parts.note(
                venue: "museum", region: region, partition: partition,
                OccupancyParts.Part(count: count, t: Self.t0.addingTimeInterval(offset), token: 7))
        }
        let changed = parts.totalsChanged(since: published)
        #expect(changed.map(\.region) == expected.keys.sorted())
        #expect(Dictionary(uniqueKeysWithValues: changed.map { ($0.region, $0.count) }) == expected)
        // Each total carries the latest time among its parts.
        for total in changed {
            #expect(total.t == Self.t0.addingTimeInterval(total.region == "hall" ? 5 : 2))
        }
    }

    @Test("an occupancy part's payload is read back, and a bad one is refused")
    func partPayload() {
        let good = #"{"partition":1,"token":42,"count":3,"t":"2027-01-15T08:00:00.000Z"}"#
        let read = OccupancyParts.part(from: Array(good.utf8))
        #expect(read?.partition == 1 && read?.part.count == 3 && read?.part.token == 42)
        #expect(read?.part.position == nil)
        let numbered = #"{"partition":1,"token":42,"count":3,"t":"2027-01-15T08:00:00.000Z","n":917}"#
        #expect(OccupancyParts.part(from: Array(numbered.utf8))?.part.position == 917)
        for bad in [#"{"count":3}"#, #"{"partition":1,"token":-1,"count":3,"t":"x"}"#, "", "nope"] {
            #expect(OccupancyParts.part(from: Array(bad.utf8)) == nil)
        }
        let topics = Topics(venue: "museum")
        #expect(topics.regionOfOccupancyPart(topics.occupancyPart(region: "a/b", partition: 3)) == "a/b")
        #expect(topics.regionOfOccupancyPart(topics.occupancy(region: "hall")) == nil)
    }
}
