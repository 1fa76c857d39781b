import Foundation
import PerimeterCore
import PerimeterTestSupport
import Testing

private let start = Date(timeIntervalSince1970: 1_700_000_000)
private let origin = GeoPoint(lon: 2.336, lat: 48.86)
private let away = GeoPoint(lon: 2.36, lat: 48.86)

/// The evaluator's visits: the detector behind the privacy gate, on a manual clock.
@Suite("Venue evaluator: visits")
struct VenueEvaluatorVisitTests {
    static let session: JSONValue = ["subjects": "*", "level": "always"]

    /// An evaluator with no regions where `ann` has `status` (and reduced accuracy if asked),
    /// and a consumer session at `level` (none when nil).
    static func evaluator(
        _ status: AuthorizationStatus, reduced: Bool = false, level: String? = "always", clock: ManualClock
    ) -> VenueEvaluator {
        var evaluator = VenueEvaluator(settings: VenueSettings(id: "museum"), regions: [])
        let record: JSONValue = ["status": .string(status.rawValue), "accuracy": .string(reduced ? "reduced" : "full")]
        _ = evaluator.handle(.authorization(subject: "ann", record), agent: nil, receivedAt: clock.now)
        if let level {
            _ = evaluator.handle(
                .session(consumer: "guide", session: "s", ["subjects": "*", "level": .string(level)]), agent: nil,
                receivedAt: clock.now)
        }
        return evaluator
    }

    /// Ann stays 11 minutes (a fix a minute), then leaves and is seen away 3 minutes: the
    /// visits published, as `arrival` / `departure`.
    static func stayAndLeave(_ evaluator: inout VenueEvaluator, clock: ManualClock, inUse: Bool = false) -> [String] {
        var outputs: [EvaluatorOutput] = []
        if inUse {
            _ = evaluator.handle(.usage(subject: "ann", ["inUse": true]), agent: nil, receivedAt: clock.now)
        }
        for minute in 0...14 {
            let fix = Fix(subject: "ann", t: clock.now, position: minute <= 11 ? origin : away, accuracy: 5)
            if case .success(let more) = evaluator.handle(.fix(fix), agent: "ann", receivedAt: clock.now) {
                outputs += more
            }
            outputs += evaluator.tick(now: clock.now)
            clock.advance(by: 60)
        }
        return outputs.compactMap { output in
            guard case .visit(let visit) = output else { return nil }
            return visit.kind.rawValue
        }
    }

    @Test(
        "visits go out only for always subjects the gate would deliver events of (Core Location: always only)",
        arguments: [
            // (status, reduced, session level, in use, visits published)
            (AuthorizationStatus.always, false, "always" as String?, false, ["arrival", "departure"]),
            (.always, false, nil, false, []),  // no session: serviceSessionRequired
            (.always, false, "whenInUse", false, []),  // a whenInUse session, not in use
            (.always, false, "whenInUse", true, ["arrival", "departure"]),
            (.whenInUse, false, "always", true, []),  // visits need always, even in use
            (.provisionalAlways, false, "always", false, []),  // withheld, not held
            (.always, true, "always", false, []),  // reduced: 5 km fixes are over maxAccuracy
            (.denied, false, "always", false, []),
        ] as [(AuthorizationStatus, Bool, String?, Bool, [String])])
    func gated(status: AuthorizationStatus, reduced: Bool, level: String?, inUse: Bool, expected: [String]) {
        let clock = ManualClock(start)
        var evaluator = Self.evaluator(status, reduced: reduced, level: level, clock: clock)
        #expect(Self.stayAndLeave(&evaluator, clock: clock, inUse: inUse) == expected)
    }

    @Test("the visit's message: visit/{subject}, QoS 1, not retained, event id, venue in the payload")
    func message() throws {
        let clock = ManualClock(start)
        var evaluator = Self.evaluator(.always, clock: clock)
        var visits: [VisitEvent] = []
        for _ in 0...10 {
            let fix = Fix(subject: "ann", t: clock.now, position: origin, accuracy: 5)
            if case .success(let outputs) = evaluator.handle(.fix(fix), agent: "ann", receivedAt: clock.now) {
                for case .visit(let visit) in outputs { visits.append(visit) }
            }
            clock.advance(by: 60)
        }
        let visit = try #require(visits.first)
        let message = try #require(EvaluatorOutput.visit(visit).messages(topics: Topics(venue: "museum")).first)
        #expect(message.topic == "perimeter/v1/museum/visit/ann")
        #expect(message.qos == 1 && !message.retain && message.eventID == visit.id)
        let payload = try JSONParser.parse(message.payloadString)
        #expect(payload["venue"]?.stringValue == "museum" && payload["event"]?.stringValue == "arrival")
        #expect(payload["arrival"]?.stringValue == Timestamp.format(start))
        #expect(evaluator.currentVisit(of: "ann")?.seq == 1)
    }

    @Test("a subject that is denied or erased is forgotten: no departure, and its visits start again")
    func forgotten() {
        for denyBy in ["authorization", "erase"] {
            let clock = ManualClock(start)
            var evaluator = Self.evaluator(.always, clock: clock)
            for _ in 0...10 {
                _ = evaluator.handle(
                    .fix(Fix(subject: "ann", t: clock.now, position: origin, accuracy: 5)), agent: "ann",
                    receivedAt: clock.now)
                clock.advance(by: 60)
            }
            #expect(evaluator.currentVisit(of: "ann") != nil)
            if denyBy == "erase" {
                _ = evaluator.erase("ann", at: clock.now)
            } else {
                _ = evaluator.handle(
                    .authorization(subject: "ann", ["status": "denied"]), agent: nil, receivedAt: clock.now)
            }
            #expect(evaluator.currentVisit(of: "ann") == nil, "\(denyBy)")
        }
    }

    @Test("a snapshot keeps the visit under way")
    func snapshot() throws {
        let clock = ManualClock(start)
        var evaluator = Self.evaluator(.always, clock: clock)
        for _ in 0...10 {
            _ = evaluator.handle(
                .fix(Fix(subject: "ann", t: clock.now, position: origin, accuracy: 5)), agent: "ann",
                receivedAt: clock.now)
            clock.advance(by: 60)
        }
        let data = try VenueEvaluator.snapshotEncoder().encode(evaluator.snapshot)
        let restored = VenueEvaluator(
            settings: evaluator.settings,
            restoring: try VenueEvaluator.snapshotDecoder().decode(VenueEvaluator.Snapshot.self, from: data))
        #expect(restored.currentVisit(of: "ann") == evaluator.currentVisit(of: "ann"))
        #expect(restored.currentVisit(of: "ann") != nil)
    }
}
