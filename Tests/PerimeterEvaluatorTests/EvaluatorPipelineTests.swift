import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// The evaluator's pipeline as a real process: group commit under `kill -9`, and the retained
/// picture after the broker lost its store.
@Suite("Evaluator pipeline: group commit and the retained picture", .serialized)
struct EvaluatorPipelineTests {
    @Test("kill -9 inside a group commit, then restart: the events equal a fault-free run up to duplicates")
    func killedInsideGroupCommit() async throws {
        let (regions, points) = try EvaluatorServiceTests.trackVenue()
        let harness = try await EvaluatorHarness(regions: regions)
        // A first run makes the persistent session; what is published while it is down arrives
        // at once on the next start, so the journal holds many rows for one group.
        try await harness.startEvaluator()
        await harness.stopEvaluator()
        for point in points {
            try await harness.publish(harness.topics.gps(agent: "car"), EvaluatorServiceTests.fix(point))
        }
        try await harness.startEvaluator(environment: ["PERIMETER_FAULT_KILL_IN_GROUP_COMMIT": "1"])
        #expect(try await harness.waitForEvaluatorExit(), "the fault injection never fired")
        try await harness.startEvaluator()
        let expected = EvaluatorServiceTests.expectedTransitions(regions: regions, points: points, subject: "car")
        _ = try await EvaluatorServiceTests.expectFaultFreeEvents(harness, expected: expected, marker: points[25])
        await harness.stop()
    }

    @Test("a broker restarted without persistence gets the retained picture back, equal to the evaluator's")
    func republishAfterBrokerLostItsStore() async throws {
        let (regions, points) = try EvaluatorServiceTests.trackVenue(present: 59)
        let harness = try await EvaluatorHarness(regions: regions)
        try await harness.startEvaluator()
        // Stop halfway through the track: the car is inside 'bend' or past it, 'hill' ahead.
        for point in points.prefix(60) {
            try await harness.publish(harness.topics.gps(agent: "car"), EvaluatorServiceTests.fix(point))
        }
        try await harness.waitFor("the exit from bend") { $0.contains { $0.topic.contains("/exit/bend/") } }
        let marker = "marker-\(UUID().uuidString.prefix(6))"
        try await harness.publish(harness.topics.gps(agent: marker), EvaluatorServiceTests.fix(points[25]))
        try await harness.waitFor("the marker's state") { $0.contains { $0.topic.hasSuffix("/state/bend/\(marker)") } }
        // Its occupancy is published after its state: the picture is taken once both are out
        // (under load it was taken between them once, so it could never be equalled again).
        try await harness.waitFor("bend's occupancy with the marker") {
            // The last one: the car's own enter said 1 too, before its exit said 0.
            $0.last { $0.topic.hasSuffix("/occupancy/bend") }?.json?["count"] == 1
        }
        let before = try await harness.retainedPicture()
        #expect(before.keys.contains { $0.hasSuffix("/state/bend/car") })
        #expect(before.keys.contains { $0.hasSuffix("/occupancy/bend") })

        // The broker keeps nothing across this restart (no persistence): no session, no retained.
        try await harness.broker.restart()
        let restored = try await waitForValue(timeout: .seconds(60), every: .milliseconds(200)) {
            let now = try await harness.retainedPicture()
            return now == before ? now : nil
        }
        let after = try await harness.retainedPicture()
        #expect(restored == before, "after the restart: \(after) vs \(before)")
        #expect(harness.evaluatorOutput.contains("retained picture republished"))
        await harness.stop()
    }
}
