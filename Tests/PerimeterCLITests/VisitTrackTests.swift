import Foundation
import PerimeterAgent
import PerimeterCore
import Testing

/// Visits found in a real track: `Fixtures/gpx/cerknicko-jezero.gpx`, a walk around Lake
/// Cerknica (Slovenia) on 2010-08-05, logged by a Garmin (296 points in 8 logs, 14:23:59–16:23:49
/// UTC; gpxpy's test files, Apache-2.0; see Fixtures/gpx/README.md).
@Suite("Visits in a real track")
struct VisitTrackTests {
    static func visits(_ parameters: VisitParameters) throws -> [VisitEvent] {
        let data = try Data(contentsOf: URL(fileURLWithPath: CLIFixtures.path("gpx/cerknicko-jezero.gpx")))
        let records = try TrackReader(subject: "walker").read(data, format: .gpx, name: "cerknicko-jezero.gpx")
        var detector = VisitDetector(venue: "replay", parameters: parameters)
        var events: [VisitEvent] = []
        for record in records { events += detector.process(try record.fix.get()) }
        #expect(records.count == 296)
        return events
    }

    static func time(_ text: String) -> Date { Timestamp.parse("2010-08-05T\(text)Z")! }

    @Test("the default thresholds find the two stays of the walk, and no departure after the track's end")
    func defaults() throws {
        let events = try Self.visits(VisitParameters())
        #expect(events.map(\.kind) == [.arrival, .departure, .arrival])
        guard events.count == 3 else { return }
        // Stay 1: track points 14:30:27–14:41:43 all lie within 100 m of 45.7697 N, 14.3564 E (the
        // walker lingers ~11 minutes on the path by the lake before heading south at 14:41).
        #expect(events[0].arrival == Self.time("14:30:27"))
        #expect(events[1].arrival == Self.time("14:30:27"))
        #expect(events[1].departure == Self.time("14:41:43"))
        #expect(Geodesy.distance(events[1].centre, GeoPoint(lon: 14.35641, lat: 45.76970)) < 15)
        #expect(
            events[1].id
                == VisitEvent.makeID(
                    venue: "replay", subject: "walker", kind: .departure, arrival: Self.time("14:30:27")))
        // Stay 2: from 15:58:31 (the first point of the log "ACTIVE LOG #6", after a 15 minute
        // pause of the logger) to the end of the track, 16:23:49, at Rakov Škocjan: the file's own
        // waypoint "RAKOV SKOCJAN" (45.791667 N, 14.305100 E) is within 100 m of the centre. The track
        // ends there, so the visit stays open: no departure is invented.
        #expect(events[2].arrival == Self.time("15:58:31"))
        #expect(events[2].departure == nil)
        #expect(Geodesy.distance(events[2].centre, GeoPoint(lon: 14.305100, lat: 45.791667)) < 100)
        #expect(events.allSatisfy { $0.accuracy > 5 && $0.accuracy < 100 })
    }

    @Test("a 5 minute dwell also finds the short stop at 15:04–15:12, when the logger paused")
    func shorterDwell() throws {
        let events = try Self.visits(VisitParameters(minimumDwell: 300))
        // The log "ACTIVE LOG #2" ends at 15:05:08 and "#3" starts at 15:11:36 at the same spot.
        let stop = events.first {
            $0.kind == .departure && $0.arrival <= Self.time("15:05:08")
                && ($0.departure ?? .distantPast) >= Self.time("15:11:36")
        }
        #expect(
            stop != nil,
            "\(events.map { "\($0.kind) \(Timestamp.format($0.arrival)) \($0.departure.map(Timestamp.format) ?? "-")" })"
        )
        #expect(events.filter { $0.kind == .arrival }.count > 3)
    }

    @Test("perimeter replay --visits prints the same visits as the evaluator would publish them, no regions needed")
    func replayCommand() async throws {
        let result = try await perimeter([
            "replay", "--visits", "--venue", "museum", "--subject", "walker",
            CLIFixtures.path("gpx/cerknicko-jezero.gpx"),
        ])
        #expect(result.status == .exited(0), "\(result.stderr)")
        let lines = try result.stdout.split(separator: "\n").map { try JSONValue(parsing: String($0)) }
        let expected = try Self.visits(VisitParameters())
        #expect(lines.map { $0["topic"]?.stringValue } == expected.map { _ in "perimeter/v1/museum/visit/walker" })
        #expect(lines.map { $0["event"]?.stringValue } == expected.map(\.kind.rawValue))
        #expect(lines.map { $0["arrival"]?.stringValue } == expected.map { Timestamp.format($0.arrival) })
        #expect(
            lines.map { $0["id"]?.stringValue }
                == expected.map { visit in
                    VisitEvent.makeID(venue: "museum", subject: "walker", kind: visit.kind, arrival: visit.arrival)
                })
        // Without regions and without --visits there is nothing to replay against.
        let refused = try await perimeter(["replay", CLIFixtures.path("gpx/cerknicko-jezero.gpx")])
        #expect(refused.status == .exited(64))
        #expect(refused.stderr.contains("--regions is required (or --visits"))
    }
}
