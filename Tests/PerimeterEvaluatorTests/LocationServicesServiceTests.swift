import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// Visits and the live location stream end to end: a real mosquitto, a real evaluator process.
@Suite("Visits and live positions (service)", .serialized)
struct LocationServicesServiceTests {
    static let origin = (lat: 48.86, lon: 2.336)

    /// Fixes of `ann` dated in the past (the evaluator refuses only future times): 12 minutes in
    /// one place, then three minutes 2 km east.
    static func publishStay(_ harness: EvaluatorHarness, from base: Date) async throws {
        for minute in 0...14 {
            let east = minute <= 11 ? 0 : 0.027
            try await harness.publish(
                harness.topics.gps(agent: "ann"),
                [
                    "t": .string(Timestamp.format(base.addingTimeInterval(Double(minute) * 60))),
                    "lat": .number(origin.lat), "lon": .number(origin.lon + east), "acc": 5,
                ])
        }
    }

    @Test(
        "an always subject's stay is published as an arrival and a departure on visit/{subject}; live positions go to the consumer with a live session only, and stop when it ends"
    )
    func visitsAndLive() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([]), venue: ["privacy": ["inUseGrace": 1]],
            evaluator: ["http": "127.0.0.1:0"])
        try await Cleanup.around { cleanup in
            cleanup.add { await harness.stop() }
            try await harness.startEvaluator()
            try await harness.publish(harness.topics.authorization(subject: "ann"), ["status": "always"], retain: true)
            // guide-app asks for live positions of ann; shop has a session but no live stream.
            try await harness.publish(
                "perimeter/v1/test/sessions/guide-app/live", ["subjects": ["ann"], "level": "always", "live": true],
                retain: true)
            try await harness.publish(
                "perimeter/v1/test/sessions/shop/s", ["subjects": "*", "level": "always"], retain: true)
            try await harness.settle()
            let base = Date().addingTimeInterval(-1200)
            try await Self.publishStay(harness, from: base)
            let visits = try await harness.waitFor("the arrival and the departure") { messages in
                messages.filter { $0.topic == "perimeter/v1/test/visit/ann" }.count >= 2
            }.filter { $0.topic == "perimeter/v1/test/visit/ann" }
            let arrival = try #require(visits.first?.json)
            let departure = try #require(visits.dropFirst().first?.json)
            #expect(arrival["event"]?.stringValue == "arrival" && departure["event"]?.stringValue == "departure")
            #expect(arrival["venue"]?.stringValue == "test")
            #expect(arrival["arrival"]?.stringValue == Timestamp.format(base))
            #expect(departure["departure"]?.stringValue == Timestamp.format(base.addingTimeInterval(660)))
            #expect(
                arrival["id"]?.stringValue
                    == VisitEvent.makeID(venue: "test", subject: "ann", kind: .arrival, arrival: base))
            #expect(visits.first?.properties.userProperties.contains { $0.name == "event-id" } == true)

            // Live: one position per fix (a minute apart, above minInterval), to guide-app only.
            try await harness.settle()
            let live = harness.messages.filter { $0.topic.contains("/live/") }
            #expect(live.count == 15)
            #expect(live.allSatisfy { $0.topic == "perimeter/v1/test/live/guide-app/ann" })
            #expect(live.first?.json?["accuracy"]?.stringValue == "full")
            #expect(live.first?.json?["t"]?.stringValue == Timestamp.format(base))
            // Half a second after the last one: sooner than minInterval (1 s), not sent.
            try await harness.publish(
                harness.topics.gps(agent: "ann"),
                [
                    "t": .string(Timestamp.format(base.addingTimeInterval(840.5))), "lat": .number(Self.origin.lat),
                    "lon": .number(Self.origin.lon + 0.027), "acc": 5,
                ])
            try await harness.settle()
            #expect(harness.messages.filter { $0.topic.contains("/live/") }.count == 15)

            // The session ends: one stopped message, then nothing for the next fix.
            try await harness.publish("perimeter/v1/test/sessions/guide-app/live", text: "", retain: true)
            let stopped = try await harness.waitFor("the stream stopped") { messages in
                messages.contains { $0.topic == "perimeter/v1/test/live/guide-app/ann" && $0.json?["stopped"] != nil }
            }.last { $0.json?["stopped"] != nil }
            #expect(stopped?.json?["reason"]?.stringValue == "sessionEnded")
            try await harness.publish(
                harness.topics.gps(agent: "ann"),
                [
                    "t": .string(Timestamp.format(base.addingTimeInterval(1000))), "lat": .number(Self.origin.lat),
                    "lon": .number(Self.origin.lon), "acc": 5,
                ])
            try await harness.settle()
            #expect(harness.messages.filter { $0.topic.contains("/live/") }.count == 16)

            // What /metrics counted of it (docs/operations.md).
            let port = try harness.metricsPort()
            let metrics = try httpGet(port: port, path: "/metrics").body
            for series in [
                #"perimeter_visits_total{kind="arrival",venue="test"} 1"#,
                #"perimeter_visits_total{kind="departure",venue="test"} 1"#,
                #"perimeter_live_updates_total{result="published",venue="test"} 15"#,
                #"perimeter_live_updates_total{result="rate_limited",venue="test"} 1"#,
                #"perimeter_live_updates_total{result="no_session",venue="test"} 1"#,
                #"perimeter_live_stops_total{reason="sessionEnded",venue="test"} 1"#,
                "# TYPE perimeter_live_updates_total counter",
            ] {
                #expect(metrics.contains(series), "missing \(series)")
            }
            #expect(!metrics.contains(#"result="coarsened""#), "ann chose full accuracy")

            // perimeter subjects show: cy's visit under way (ten minutes in one place, no departure).
            try await harness.publish(harness.topics.authorization(subject: "cy"), ["status": "always"], retain: true)
            for minute in 0...10 {
                try await harness.publish(
                    harness.topics.gps(agent: "cy"),
                    [
                        "t": .string(Timestamp.format(base.addingTimeInterval(Double(minute) * 60))),
                        "lat": .number(Self.origin.lat), "lon": .number(Self.origin.lon), "acc": 5,
                    ])
            }
            try await harness.waitFor("cy's arrival") { $0.contains { $0.topic == "perimeter/v1/test/visit/cy" } }
            let shown = try await runProduct([
                "subjects", "show", "cy", "--config", harness.configPath, "--timeout", "60",
            ])
            #expect(shown.status == .exited(0), "\(shown.stderr)")
            let visit = try JSONParser.parse(shown.stdout)["visit"]
            #expect(visit?["arrival"]?.stringValue == Timestamp.format(base))
            #expect(visit?["lat"]?.doubleValue.map { abs($0 - Self.origin.lat) < 1e-9 } == true)
            #expect(visit?["acc"]?.doubleValue == 5)
            #expect(visit?["fixes"] == 11)
            #expect(visit?["published"] == true)
            let annShown = try await runProduct(["subjects", "show", "ann", "--config", harness.configPath])
            #expect(try JSONParser.parse(annShown.stdout)["visit"] == .null, "ann left: her visit ended")
        }
    }

    @Test("a whenInUse subject: no visits (Core Location gives them only with always), no live positions out of use")
    func whenInUseGetsNoVisits() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([]), venue: ["privacy": ["inUseGrace": 1]])
        try await Cleanup.around { cleanup in
            cleanup.add { await harness.stop() }
            try await harness.startEvaluator()
            try await harness.publish(
                harness.topics.authorization(subject: "ann"), ["status": "whenInUse"], retain: true)
            try await harness.publish(
                "perimeter/v1/test/sessions/guide-app/live", ["subjects": "*", "level": "always", "live": true],
                retain: true)
            try await harness.settle()
            try await Self.publishStay(harness, from: Date().addingTimeInterval(-1200))
            try await harness.settle()
            #expect(harness.messages("visit").isEmpty)
            #expect(harness.messages("live").isEmpty)
            // In use, the live stream flows (the gate, not a missing fix, kept it quiet above).
            try await harness.publish("perimeter/v1/test/subjects/ann/usage", ["inUse": true])
            try await harness.settle()
            try await harness.publish(
                harness.topics.gps(agent: "ann"),
                [
                    "t": .string(Timestamp.format(Date())), "lat": .number(Self.origin.lat),
                    "lon": .number(Self.origin.lon),
                ])
            try await harness.waitFor("a live position while in use") { messages in
                messages.contains { $0.topic == "perimeter/v1/test/live/guide-app/ann" }
            }
            #expect(harness.messages("visit").isEmpty)
        }
    }
}
