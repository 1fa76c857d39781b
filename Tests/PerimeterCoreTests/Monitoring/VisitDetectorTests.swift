import Foundation
import PerimeterCore
import PerimeterTestSupport
import Testing

/// One step of a visit scenario: a fix `metres` east of the origin (with an accuracy), or a
/// tick of the venue clock; each step first moves the manual clock to `at` seconds.
enum VisitStep: Sendable {
    case fix(at: Double, east: Double, acc: Double? = 5)
    case tick(at: Double)
}

private let origin = GeoPoint(lon: 2.336, lat: 48.86)
private let start = Date(timeIntervalSince1970: 1_700_000_000)

/// A point `metres` east of the origin.
private func east(_ metres: Double) -> GeoPoint {
    GeoPoint(lon: origin.lon + metres / (111_320 * cos(origin.lat * .pi / 180)), lat: origin.lat)
}

/// Runs the steps through a detector with the given parameters on a manual clock; the
/// events as `arrival @a (by @t)` / `departure @a-@d (by @t)` with times in seconds from the start.
private func run(_ steps: [VisitStep], _ parameters: VisitParameters = VisitParameters()) -> [String] {
    let clock = ManualClock(start)
    var detector = VisitDetector(venue: "museum", parameters: parameters)
    var events: [VisitEvent] = []
    for step in steps {
        switch step {
        case .fix(let t, let metres, let acc):
            clock.set(start.addingTimeInterval(t))
            events += detector.process(
                Fix(subject: "ann", t: clock.now, position: east(metres), accuracy: acc, source: "gps"))
        case .tick(let t):
            clock.set(start.addingTimeInterval(t))
            events += detector.advance(to: clock.now)
        }
    }
    func s(_ date: Date) -> String { "@\(Int(date.timeIntervalSince(start)))" }
    return events.map { event in
        switch event.kind {
        case .arrival: "arrival \(s(event.arrival)) (by \(s(event.t)))"
        case .departure: "departure \(s(event.arrival))-\(s(event.departure!)) (by \(s(event.t)))"
        }
    }
}

/// Fixes every `every` seconds from `from` to `to` at `metres` east.
private func stay(_ from: Double, _ to: Double, at metres: Double = 0, every: Double = 60) -> [VisitStep] {
    stride(from: from, through: to, by: every).map { .fix(at: $0, east: metres) }
}

@Suite("Visit detector")
struct VisitDetectorTests {
    @Test(
        "stays become visits by the documented thresholds (radius 100 m, dwell 600 s, departure 120 s, accuracy 100 m)",
        arguments: [
            // 10 minutes within the radius: an arrival dated at the first fix, confirmed by the fix at 600.
            ("a stay of minimumDwell is a visit", stay(0, 600), ["arrival @0 (by @600)"]),
            ("9 minutes are not", stay(0, 540), []),
            // Wandering 80 m from the centre is still staying; 150 m is not.
            (
                "within the radius", stay(0, 300) + stay(360, 600, at: 80),
                ["arrival @0 (by @600)"]
            ),
            (
                "leaving: departure dated at the last fix inside, confirmed departureAfter after the first outside",
                stay(0, 600) + [.fix(at: 660, east: 500), .fix(at: 720, east: 1000), .fix(at: 780, east: 1500)],
                ["arrival @0 (by @600)", "departure @0-@600 (by @780)"]
            ),
            (
                "an excursion shorter than departureAfter is part of the visit",
                stay(0, 600) + [.fix(at: 660, east: 500), .fix(at: 720, east: 10)] + stay(780, 900),
                ["arrival @0 (by @600)"]
            ),
            (
                "the clock ends a visit when the subject is seen outside and then falls silent",
                stay(0, 600) + [.fix(at: 660, east: 500), .tick(at: 779), .tick(at: 780)],
                ["arrival @0 (by @600)", "departure @0-@600 (by @780)"]
            ),
            (
                "no departure is invented for a subject that falls silent inside",
                stay(0, 600) + [.tick(at: 86_400)], ["arrival @0 (by @600)"]
            ),
            (
                "the next stay keeps its true arrival: the excursion's fixes that stay together",
                stay(0, 600) + stay(660, 1320, at: 1000),
                ["arrival @0 (by @600)", "departure @0-@600 (by @780)", "arrival @660 (by @1260)"]
            ),
            (
                "a fix coarser than maxAccuracy is not used (not even to leave)",
                stay(0, 600) + [.fix(at: 660, east: 5000, acc: 150), .fix(at: 800, east: 5000, acc: 150)],
                ["arrival @0 (by @600)"]
            ),
            (
                "an older fix is ignored",
                stay(0, 600) + [.fix(at: 300, east: 5000), .fix(at: 500, east: 5000)], ["arrival @0 (by @600)"]
            ),
            (
                "moving steadily is no visit",
                (0...30).map { VisitStep.fix(at: Double($0) * 60, east: Double($0) * 80) },
                []
            ),
            (
                "a gap inside the radius is part of the stay (a logger that stops while stationary)",
                [.fix(at: 0, east: 0), .fix(at: 1200, east: 20)], ["arrival @0 (by @1200)"]
            ),
        ] as [(String, [VisitStep], [String])])
    func thresholds(_ name: String, steps: [VisitStep], expected: [String]) {
        #expect(run(steps) == expected, "\(name)")
    }

    @Test(
        "each threshold is a setting",
        arguments: [
            (VisitParameters(minimumDwell: 300), stay(0, 300), ["arrival @0 (by @300)"]),
            (VisitParameters(radius: 50), stay(0, 300) + stay(360, 600, at: 80), []),
            (
                VisitParameters(departureAfter: 300),
                stay(0, 600) + [.fix(at: 660, east: 500), .fix(at: 780, east: 500)], ["arrival @0 (by @600)"]
            ),
            (
                VisitParameters(maxAccuracy: 200),
                stay(0, 600) + [.fix(at: 660, east: 5000, acc: 150), .fix(at: 800, east: 5000, acc: 150)],
                ["arrival @0 (by @600)", "departure @0-@600 (by @800)"]
            ),
        ] as [(VisitParameters, [VisitStep], [String])])
    func settings(_ parameters: VisitParameters, steps: [VisitStep], expected: [String]) {
        #expect(run(steps, parameters) == expected)
    }

    @Test("centre, accuracy and ids: the mean of the stay, its spread or the fixes' accuracy, deterministic ids")
    func payload() throws {
        var detector = VisitDetector(venue: "museum")
        var events: [VisitEvent] = []
        // Half the fixes 40 m west, half 40 m east: centre at the origin, spread 40 m.
        for (index, t) in stride(from: 0.0, through: 600, by: 60).enumerated() {
            events += detector.process(
                Fix(
                    subject: "ann", t: start.addingTimeInterval(t), position: east(index % 2 == 0 ? -40 : 40),
                    accuracy: 5))
        }
        events += detector.process(
            Fix(subject: "ann", t: start.addingTimeInterval(660), position: east(40), accuracy: 5))
        let arrival = try #require(events.first)
        #expect(arrival.kind == .arrival && arrival.seq == 1 && arrival.fixes == 11)
        #expect(Geodesy.distance(arrival.centre, origin) < 4)
        #expect(abs(arrival.accuracy - 40) < 1)
        #expect(arrival.id == VisitEvent.makeID(venue: "museum", subject: "ann", kind: .arrival, arrival: start))
        #expect(arrival.id != VisitEvent.makeID(venue: "museum", subject: "ann", kind: .departure, arrival: start))
        #expect(arrival.id.count == 32)
        #expect(arrival.payload["departure"] == .null)
        #expect(arrival.payload["arrival"]?.stringValue == "2023-11-14T22:13:20.000Z")
        // A stay of one repeated point: the accuracy is the fixes' own.
        var still = VisitDetector(venue: "museum")
        var stillEvents: [VisitEvent] = []
        for t in stride(from: 0.0, through: 600, by: 60) {
            stillEvents += still.process(
                Fix(subject: "bob", t: start.addingTimeInterval(t), position: origin, accuracy: 12))
        }
        #expect(stillEvents.map(\.accuracy) == [12])
    }

    @Test("memory is bounded per subject: a day of fixes in one place holds what one fix does")
    func boundedMemory() throws {
        var detector = VisitDetector(venue: "museum")
        _ = detector.process(Fix(subject: "ann", t: start, position: origin, accuracy: 5))
        let one = try JSONEncoder().encode(detector.snapshot).count
        for t in stride(from: 1.0, through: 86_400, by: 1) {
            _ = detector.process(
                Fix(
                    subject: "ann", t: start.addingTimeInterval(t),
                    position: east(t.truncatingRemainder(dividingBy: 50)), accuracy: 5))
        }
        let day = try JSONEncoder().encode(detector.snapshot).count
        #expect(day < one + 200, "snapshot grew from \(one) to \(day) bytes")
        #expect(detector.subjectCount == 1)
        detector.forget(subject: "ann")
        #expect(detector.subjectCount == 0)
    }

    @Test("a restored snapshot continues exactly like the original")
    func snapshot() throws {
        var original = VisitDetector(venue: "museum")
        for step in stay(0, 600) + [.fix(at: 660, east: 500)] {
            if case .fix(let t, let metres, let acc) = step {
                _ = original.process(
                    Fix(subject: "ann", t: start.addingTimeInterval(t), position: east(metres), accuracy: acc))
            }
        }
        let data = try JSONEncoder().encode(original.snapshot)
        var restored = VisitDetector(
            venue: "museum", parameters: VisitParameters(),
            restoring: try JSONDecoder().decode(VisitDetector.State.self, from: data))
        let later = start.addingTimeInterval(780)
        let expected = original.advance(to: later)
        #expect(expected.map(\.kind) == [.departure])
        #expect(restored.advance(to: later) == expected)
    }
}
