import Foundation
import PerimeterCore
import Testing

/// A partition's handover on the pure evaluator (docs/scale.md, "Handover"): the old holder
/// processes a subject's observations up to a cut and leaves its retained states; the new one
/// adopts them and processes the observations from `replay` before the cut on (those it reads
/// back from the partition's stream, which the old holder had processed too). The transitions
/// of the two together must be exactly those of one evaluator that saw everything: same ids,
/// same kinds, none missing, none more.
@Suite("Partitions: a handover from retained states gives the fault-free run's transitions")
struct HandoverTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    static let uuid = "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6"
    static let beacon = BeaconIdentity.iBeacon(uuid: BeaconPrefix(uuid: uuid)!, major: 1, minor: 2)
    static let subject = "phone-1"

    /// One observation of the subject: a scan that hears the lobby's beacon or not, a fix
    /// inside the hall or 1.1 km away, or its agent's last will (its states go unknown).
    enum Observation: Sendable, CustomStringConvertible {
        case scan(Double, hears: Bool)
        case fix(Double, inside: Bool)
        case offline(Double)

        var t: Double {
            switch self {
            case .scan(let t, _), .fix(let t, _), .offline(let t): t
            }
        }

        var input: Inbound {
            let date = HandoverTests.t0.addingTimeInterval(t)
            switch self {
            case .scan(_, let hears):
                return .beacons(
                    BeaconReport(
                        agent: HandoverTests.subject, t: date,
                        sightings: hears ? [BeaconSighting(identity: HandoverTests.beacon, rssi: -60)] : []))
            case .fix(_, let inside):
                return .fix(
                    Fix(
                        subject: HandoverTests.subject, t: date,
                        position: GeoPoint(lon: 13, lat: inside ? 45 : 45.01), accuracy: 5))
            case .offline:
                return .agentStatus(AgentStatus(agent: HandoverTests.subject, online: false, t: date))
            }
        }

        var description: String {
            switch self {
            case .scan(let t, let hears): "\(hears ? "hear" : "miss")@\(Int(t))"
            case .fix(let t, let inside): "\(inside ? "in" : "out")@\(Int(t))"
            case .offline(let t): "offline@\(Int(t))"
            }
        }
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var observations: [Observation]
        /// How many observations the old holder processed.
        var cut: Int
        /// How many of those the new holder reads back (the partition's stream from `replay`
        /// seconds back): it reads from the first of them on.
        var replay: Int
        /// When a transition of the new holder is dated otherwise than the fault-free run's
        /// (same id), by `"{kind} #{seq}"`: its time, seconds after t0.
        var movedTo: [String: Double] = [:]
        var testDescription: String { name }
    }

    /// Scans every 10 s from `from` through `to`, hearing the beacon or not.
    static func scans(_ from: Double, _ to: Double, hears: Bool) -> [Observation] {
        stride(from: from, through: to, by: 10).map { .scan($0, hears: hears) }
    }

    /// A beacon-region history with an enter, an exit and an enter again (seq 3 before the cut):
    /// heard 0…20 (enter at 0), not heard 30…60 (exit at 50), heard again 70…
    static let backAgain = scans(0, 20, hears: true) + scans(30, 60, hears: false)

    static let cases: [Case] = [
        Case(
            name: "beacon region, inside (seq 3) at the move, heard in the window read back; leaves later",
            observations: backAgain + scans(70, 120, hears: true) + scans(130, 170, hears: false),
            cut: 13, replay: 3),
        Case(
            name: "beacon region, outside (seq 2) at the move; comes back, leaves again",
            observations: backAgain + scans(70, 90, hears: false) + scans(100, 110, hears: true)
                + scans(120, 150, hears: false),
            cut: 10, replay: 2),
        Case(
            name: "beacon region, inside, heard last before the window read back: the exit comes later, same id",
            observations: backAgain + scans(70, 80, hears: true) + scans(90, 130, hears: false),
            // The cut after the scan at 100; read back from 100: the exit due at 110 (80 + 30)
            // comes at 130 (100 + 30), the first scan at or after it.
            cut: 11, replay: 1, movedTo: ["exit #4": 130]),
        Case(
            name: "beacon region, inside, the exit made by the old holder is in the window read back",
            observations: backAgain + scans(70, 80, hears: true) + scans(90, 130, hears: false)
                + scans(140, 150, hears: true),
            cut: 13, replay: 4),
        Case(
            name: "beacon region, inside, the move right after the enter",
            observations: backAgain + scans(70, 70, hears: true) + scans(80, 120, hears: false),
            cut: 8, replay: 1),
        Case(
            name: "geofence, inside (seq 3) at the move; leaves and comes back",
            observations: [
                .fix(0, inside: true), .fix(10, inside: false), .fix(20, inside: true), .fix(30, inside: true),
                .fix(40, inside: false), .fix(50, inside: true),
            ],
            cut: 4, replay: 2),
        Case(
            name: "unknown after an agent's last will, inside before: back inside is the same stay, no enter",
            observations: scans(0, 20, hears: true) + [.fix(21, inside: true), .offline(25)]
                + scans(100, 100, hears: true) + [.fix(101, inside: true)] + scans(110, 140, hears: false)
                + [.fix(141, inside: false)],
            cut: 5, replay: 1),
        Case(
            name: "beacon region and geofence together",
            observations: [
                .scan(0, hears: true), .fix(1, inside: true), .scan(10, hears: false), .fix(11, inside: false),
                .scan(40, hears: false), .fix(41, inside: true), .scan(50, hears: true), .fix(51, inside: false),
                .scan(60, hears: true), .scan(90, hears: false), .fix(91, inside: true),
            ],
            cut: 6, replay: 2),
    ]

    static func evaluator() -> VenueEvaluator {
        let text = """
            {"type":"FeatureCollection","features":[
              {"type":"Feature","id":"hall","properties":{"radius":50},"geometry":{"type":"Point","coordinates":[13.0,45.0]}},
              {"type":"Feature","id":"lobby","geometry":null,"properties":{"beacon":{"uuid":"\(uuid)","major":1}}}
            ]}
            """
        let document = RegionParser.parse(text: text)
        precondition(document.problems.isEmpty, "\(document.problems)")
        return VenueEvaluator(settings: VenueSettings(id: "venue", privacy: .open), regions: document.regions)
    }

    /// The events an evaluator published for `observations`, in order (refused ones give none).
    static func run(_ evaluator: inout VenueEvaluator, _ observations: some Sequence<Observation>) -> [RegionEvent] {
        var events: [RegionEvent] = []
        for observation in observations {
            let at = t0.addingTimeInterval(observation.t)
            guard case .success(let outputs) = evaluator.handle(observation.input, agent: subject, receivedAt: at)
            else { continue }
            for case .event(let event) in outputs { events.append(event) }
        }
        return events
    }

    @Test("the old holder's transitions and the new one's are the fault-free run's", arguments: cases)
    func handover(_ row: Case) throws {
        var reference = Self.evaluator()
        let expected = Self.run(&reference, row.observations).filter { $0.kind != .state }
        #expect(Set(expected.map(\.id)).count == expected.count, "the reference repeats an id")

        var old = Self.evaluator()
        let before = Self.run(&old, row.observations.prefix(row.cut))
        // The retained picture the old holder leaves: the last state of each region, as published.
        var retained: [String: VenueEvaluator.AdoptedState] = [:]
        for event in before where event.kind == .state {
            retained[event.region] = VenueEvaluator.AdoptedState(payload: Array(event.payload.serialized().utf8))
        }
        #expect(retained.count == Set(before.filter { $0.kind == .state }.map(\.region)).count)

        let readBack = row.observations[(row.cut - row.replay)...]
        let takenAt = Self.t0.addingTimeInterval(row.observations[row.cut - 1].t + 5)
        var new = Self.evaluator()
        _ = new.adopt(retained.values.sorted { $0.region < $1.region }, now: takenAt)
        let after = Self.run(&new, readBack)

        let got = (before + after).filter { $0.kind != .state }
        // Each id once (a transition the new holder makes again has the old holder's id).
        var byID: [String: RegionEvent] = [:]
        for event in got { byID[event.id] = byID[event.id] ?? event }
        let describe: ([RegionEvent]) -> String = { events in
            events.map { "\($0.kind) \($0.region) #\($0.seq)@\(Int($0.t.timeIntervalSince(Self.t0)))" }
                .joined(separator: ", ")
        }
        #expect(
            Set(byID.keys) == Set(expected.map(\.id)),
            "expected \(describe(expected)); got \(describe(got)) (old holder: \(describe(before.filter { $0.kind != .state })))"
        )
        for event in expected {
            guard let made = byID[event.id] else { continue }
            #expect(made.kind == event.kind && made.region == event.region)
            let moved = row.movedTo["\(event.kind) #\(event.seq)"]
            let at = made.t.timeIntervalSince(Self.t0)
            #expect(at == (moved ?? event.t.timeIntervalSince(Self.t0)), "\(event.kind) \(event.region) at \(at)")
        }
        // Both end in the same states.
        for region in ["hall", "lobby"] {
            #expect(
                new.state(subject: Self.subject, region: region)
                    == reference.state(subject: Self.subject, region: region))
        }
        #expect(new.occupants(of: "lobby") == reference.occupants(of: "lobby"))
        #expect(new.occupants(of: "hall") == reference.occupants(of: "hall"))
    }

    /// The states of the events among `outputs`, by region.
    static func states(_ outputs: [EvaluatorOutput]) -> [String: RegionEvent] {
        var states: [String: RegionEvent] = [:]
        for case .event(let event) in outputs where event.kind == .state { states[event.region] = event }
        return states
    }

    @Test("a stay longer than staleAfter is not made unknown by the take: the subject goes stale staleAfter after it")
    func longStay() throws {
        var old = Self.evaluator()
        // In the lobby and in the hall from 0 on, observed every minute until 360 (staleAfter 300 s).
        var observations: [Observation] = []
        for t in stride(from: 0.0, through: 360, by: 60) {
            observations += [.scan(t, hears: true), .fix(t + 1, inside: true)]
        }
        var retained: [VenueEvaluator.AdoptedState] = []
        for event in Self.run(&old, observations) where event.kind == .state {
            retained.append(try #require(VenueEvaluator.AdoptedState(payload: Array(event.payload.serialized().utf8))))
        }
        #expect(retained.map(\.t).max() == Self.t0.addingTimeInterval(1), "the states are as old as the stay")
        #expect(Self.states(old.tick(now: Self.t0.addingTimeInterval(400))).isEmpty)

        var new = Self.evaluator()
        let takenAt = Self.t0.addingTimeInterval(405)
        _ = new.adopt(retained, now: takenAt)
        #expect(Self.states(new.tick(now: takenAt.addingTimeInterval(1))).isEmpty, "unknown at the first tick")
        #expect(new.occupants(of: "lobby") == [Self.subject] && new.occupants(of: "hall") == [Self.subject])
        // Nothing comes: stale staleAfter after the take (the old holder: after its last observation).
        let stale = Self.states(new.tick(now: takenAt.addingTimeInterval(301)))
        for region in ["hall", "lobby"] {
            #expect(stale[region]?.state == .unknown && stale[region]?.reason == "stale", "\(region): \(stale)")
            #expect(stale[region]?.t == takenAt.addingTimeInterval(300))
            #expect(stale[region]?.lastKnown == .inside)
        }
    }
}
