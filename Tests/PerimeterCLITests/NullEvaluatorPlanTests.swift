import Foundation
import PerimeterCore
import PerimeterMQTT
import Testing

@testable import PerimeterCLI

/// The null evaluators' plan: what the pure evaluator publishes per observation, as sizes and
/// flags, and how the null process plays it back.
@Suite("Null evaluator plan")
struct NullEvaluatorPlanTests {
    static let subjects = 30

    /// Warm-up and two rounds of the bench workload, recorded.
    static func recorded() -> (plan: NullEvaluatorPlan, events: Int, messages: [(topic: String, payload: [UInt8])]) {
        let workload = BenchPipelineWorkload(
            subjects: subjects, circles: 8, beaconRegions: 4, blePercent: 20, interval: 2,
            origin: Date(timeIntervalSince1970: 1_700_000_000))
        var oracle = BenchPipelineOracle(
            settings: VenueSettings(
                id: BenchPipelineWorkload.venue, beaconExitTimeout: BenchPipelineCommand.beaconExitTimeout,
                privacy: .open),
            regionsGeoJSON: workload.regionsGeoJSON)
        let messages = workload.messages(0..<(3 * subjects))
        var plan = NullEvaluatorPlan()
        let events = oracle.expect(messages, first: 0, recording: &plan)
        return (plan, events.count, messages)
    }

    static let transitions = ["perimeter/v1/bench/enter/#", "perimeter/v1/bench/exit/#"]

    @Test("every observation of the workload publishes one transition, QoS 1, with its event id, and retained state")
    func recordsTheEvaluatorsMessages() {
        let (plan, events, messages) = Self.recorded()
        #expect(plan.observations.count == messages.count)
        #expect(plan.count(matching: Self.transitions, in: 0..<messages.count) == events)
        for (observation, message) in zip(plan.observations, messages) {
            #expect(plan.topics[observation.inbound] == message.topic)
            let transitions = observation.shapes.filter { $0.eventIDBytes > 0 }
            #expect(transitions.count == 1, "\(observation.shapes)")
            #expect(transitions.allSatisfy { $0.qos == 1 && !$0.retain && $0.bytes > 50 })
            #expect(observation.shapes.filter(\.retain).count >= 2, "\(observation.shapes)")
        }
    }

    @Test("the file gives back the same plan")
    func roundTrip() throws {
        let plan = Self.recorded().plan.moved(to: "nulle")
        let path = try temporaryFile("plan", plan.serialized)
        let read = try NullEvaluatorPlan.read(contentsOf: path)
        #expect(read.prefix == plan.prefix)
        #expect(read.venue == "nulle")
        #expect(read.topics == plan.topics)
        #expect(read.observations.map(\.inbound) == plan.observations.map(\.inbound))
        #expect(read.observations.map(\.shapes) == plan.observations.map(\.shapes))
    }

    @Test(
        "a file that is not a plan is refused with the file and line",
        arguments: [
            ("hello\n", "line 1: not a null evaluator plan"),
            ("perimeter-null-plan\t1\tp\tv\ntopic\tp/v/a\nobs\t1\n", "line 3: no such inbound topic '1'"),
            ("perimeter-null-plan\t1\tp\tv\ntopic\tp/v/a\nobs\t0\t0,10,1\n", "line 3: '0,10,1' is not"),
            ("perimeter-null-plan\t1\tp\tv\nfoo\n", "line 2: expected a 'topic' or 'obs' record"),
        ])
    func refusesBadFiles(text: String, message: String) throws {
        let path = try temporaryFile("plan", text)
        #expect {
            try NullEvaluatorPlan.read(contentsOf: path)
        } throws: { error in
            "\(error)".contains(path) && "\(error)".contains(message)
        }
    }

    @Test("moving to a venue of the same length keeps every size and moves every topic")
    func moved() {
        let plan = Self.recorded().plan
        let moved = plan.moved(to: "null3")
        #expect(moved.topics.count == plan.topics.count)
        #expect(moved.topics.allSatisfy { $0.hasPrefix("perimeter/v1/null3/") })
        #expect(zip(moved.topics, plan.topics).allSatisfy { $0.utf8.count == $1.utf8.count })
        #expect(moved.observations.map(\.shapes) == plan.observations.map(\.shapes))
    }

    @Test("null-3: the transition and two retained messages, all QoS 1")
    func threeMessages() {
        let plan = Self.recorded().plan
        let three = plan.threeMessages()
        #expect(three.observations.count == plan.observations.count)
        for (short, full) in zip(three.observations, plan.observations) {
            #expect(short.shapes.count == 3)
            #expect(short.shapes.allSatisfy { $0.qos == 1 })
            #expect(short.shapes[0] == full.shapes.first { $0.eventIDBytes > 0 })
            #expect(Array(short.shapes[1...]) == Array(full.shapes.filter(\.retain).prefix(2)))
        }
        // An observation that publishes nothing still gets three messages.
        var empty = NullEvaluatorPlan()
        empty.record(inbound: "perimeter/v1/bench/obs/a/gps", published: [])
        let filled = empty.threeMessages()
        #expect(filled.observations[0].shapes.count == 3)
        #expect(filled.observations[0].shapes.map(\.retain) == [false, true, true])
    }

    @Test("the player gives each topic's observations in order, then nothing")
    func player() {
        var plan = NullEvaluatorPlan()
        let a = "perimeter/v1/bench/obs/a/gps"
        let b = "perimeter/v1/bench/obs/b/gps"
        func message(_ topic: String, _ bytes: Int) -> OutboundMessage {
            OutboundMessage(topic: topic, payload: Array(repeating: 1, count: bytes), qos: 1, retain: true)
        }
        plan.record(inbound: a, published: [message("perimeter/v1/bench/state/x/a", 10)])
        plan.record(inbound: b, published: [message("perimeter/v1/bench/state/x/b", 20)])
        plan.record(inbound: a, published: [message("perimeter/v1/bench/state/x/a", 30), message("t/a", 5)])
        var player = NullEvaluatorPlayer(plan)
        #expect(player.next(on: a)?.map(\.payload.count) == [10])
        #expect(player.next(on: a)?.map(\.payload.count) == [30, 5])
        #expect(player.next(on: a) == nil)
        #expect(player.next(on: b)?.map(\.topic) == ["perimeter/v1/bench/state/x/b"])
        #expect(player.next(on: "elsewhere") == nil)
        #expect(player.played == 3)
        #expect(player.published == 4)
        #expect(player.unplanned == 2)
        #expect(player.next(on: b) == nil)
    }
}
