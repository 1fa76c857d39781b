import Foundation
import Testing

@testable import PerimeterCore

@Suite("Trust policy")
struct TrustPolicyTests {
    static let arrival = Date(timeIntervalSince1970: 1_800_000_000)

    static func rule(_ agent: String, _ subjects: [String]) -> ReporterRule {
        try! ReporterRule.make(agent: agent, subjects: subjects).get()
    }

    @Test(
        "who may report whom: itself always; others only through a binding",
        arguments: [
            ("alice", "alice", true),
            ("mallory", "victim-1", false),
            ("phone-17", "visitor-17", true),
            ("phone-17", "visitor-18", false),
            ("phone-", "visitor-", false),
            ("lora-gw", "tracker-9", true),
            ("lora-gw", "visitor-9", false),
            ("lora-gw", "tracker-", false),
            ("desk", "desk-badge", true),
        ])
    func reporters(agent: String, subject: String, allowed: Bool) {
        let policy = TrustPolicy(
            reporters: [
                Self.rule("phone-*", ["visitor-*"]), Self.rule("lora-gw", ["tracker-*"]),
                Self.rule("desk", ["desk-badge"]),
            ])
        #expect(policy.mayReport(agent: agent, subject: subject) == allowed)
        let fix = Inbound.fix(Fix(subject: subject, t: Self.arrival, position: GeoPoint(lon: 2, lat: 48)))
        #expect((policy.refusal(of: fix, agent: agent, receivedAt: Self.arrival)?.code == "sender") == !allowed)
    }

    @Test(
        "event time: at most maxFutureSkew after arrival; the past is the engines' business",
        arguments: [
            (0.0, nil as String?), (59.0, nil), (60.0, nil), (61.0, "futureTime"), (600.0, "futureTime"),
            (-86_400.0 * 365, nil), (253_402_000_000.0 - 1_800_000_000, "futureTime"),
        ])
    func futureTime(ahead: Double, code: String?) {
        let policy = TrustPolicy(maxFutureSkew: 60)
        let t = Self.arrival.addingTimeInterval(ahead)
        let inputs: [Inbound] = [
            .fix(Fix(subject: "a", t: t, position: GeoPoint(lon: 2, lat: 48))),
            .beacons(BeaconReport(agent: "a", subject: nil, t: t, sightings: [])),
            .agentStatus(AgentStatus(agent: "a", online: false, t: t)),
        ]
        for input in inputs {
            #expect(policy.refusal(of: input, agent: "a", receivedAt: Self.arrival)?.code == code)
        }
    }

    @Test("patterns with more than one '*' or with control characters are refused")
    func badPatterns() {
        #expect((try? ReporterRule.make(agent: "a-*-*", subjects: ["b"]).get()) == nil)
        #expect((try? ReporterRule.make(agent: "a", subjects: ["b\u{0}"]).get()) == nil)
        #expect((try? ReporterRule.make(agent: "a-*", subjects: ["b-*"]).get()) != nil)
    }

    @Test(
        "ids: not empty, at most 256 bytes, no control characters",
        arguments: [
            ("visitor-1", true), ("", false), ("a\u{0}b", false), ("a\u{1F}", false), ("a\u{7F}", false),
            ("a\u{85}", false), ("Zoë/Île", true), (String(repeating: "x", count: 256), true),
            (String(repeating: "x", count: 257), false), (String(repeating: "é", count: 129), false),
        ])
    func ids(id: String, valid: Bool) {
        #expect((Topics.idProblem(id) == nil) == valid)
    }

    @Test("a control character in a topic's id level is refused with code id (brokers other than Mosquitto pass them)")
    func topicLevels() {
        let route = InboundRoute.gps(venue: "v", agent: "a\u{1}b")
        #expect(throws: InboundError.self) {
            try InboundDecoder.decode(route, payload: Array(#"{"t":0,"lat":1,"lon":1}"#.utf8), receivedAt: Self.arrival)
        }
        do {
            _ = try InboundDecoder.decode(route, payload: Array("{}".utf8), receivedAt: Self.arrival)
        } catch {
            #expect(error.code == "id")
            #expect(error.message.contains("U+0001"))
        }
    }

    @Test("regions files: a feature id with a control character is a problem naming it")
    func regionIDs() {
        let text =
            #"{"type":"FeatureCollection","features":[{"type":"Feature","id":"r\u0000","properties":{"radius":5},"geometry":{"type":"Point","coordinates":[2,48]}}]}"#
        let document = RegionParser.parse(text: text)
        #expect(document.regions.isEmpty || !document.problems.isEmpty)
        #expect(document.problems.contains { $0.message.contains("control character") })
    }

    @Test(
        "OwnTracks waypoints: own (default) scopes a circle to its user and drops beacon waypoints; off drops; venue keeps"
    )
    func waypoints() {
        let circle = Region(id: "owntracks-home", shape: .circle(center: GeoPoint(lon: 2, lat: 48), radius: 50))
        let beacon = Region(id: "owntracks-b", shape: .beacon(["uuid": "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6"]))
        let own = TrustPolicy()
        let scoped = own.waypoint(circle, user: "jane")
        #expect(scoped?.subjectPrefix == "owntracks:jane:")
        #expect(scoped?.applies(to: "owntracks:jane:phone") == true)
        #expect(scoped?.applies(to: "owntracks:janet:phone") == false)
        #expect(own.waypoint(beacon, user: "jane") == nil)
        #expect(TrustPolicy(waypoints: .off).waypoint(circle, user: "jane") == nil)
        #expect(TrustPolicy(waypoints: .venue).waypoint(circle, user: "jane")?.subjectPrefix == nil)
    }
}
