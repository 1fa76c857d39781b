import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

/// `perimeter bench null-evaluator` (hidden): the do-nothing evaluator `bench pipeline` runs as
/// a child process beside the real one, to measure the broker's ceiling for the same traffic.
///
/// It connects like the evaluator (persistent session, QoS 1 subscription to the venue's
/// observations) and, for each observation that arrives, publishes the messages its plan lists
/// for it: the same topics, payload sizes, QoS, retain flags and MQTT 5 properties as the
/// evaluator's, with no evaluation, journal, SQLite or payload parsing. It keeps up to the
/// client's in-flight window of acknowledgements outstanding instead of waiting for each batch,
/// so it is a ceiling, not a model of the evaluator's batching.
struct BenchNullEvaluatorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "null-evaluator", abstract: "The null evaluator 'bench pipeline' starts (internal).",
        discussion: """
            Subscribes at QoS 1 to {prefix}/{venue}/obs/+/+ (prefix and venue from the plan) and
            publishes, for each observation that arrives, the messages the plan lists for it.
            Says {"online":true} (retained) on {prefix}/_sys/null-evaluator/{venue}/status once
            subscribed; stops on SIGTERM. 'perimeter bench pipeline' writes the plan and starts this.
            """,
        isHidden: true)

    @Option(help: "The plan 'perimeter bench pipeline' wrote.", valueName: "file")
    var plan: String

    @Option(help: "The broker's host.", valueName: "host")
    var host: String = "127.0.0.1"

    @Option(help: "The broker's port.", valueName: "port")
    var port: Int

    mutating func validate() throws {
        guard (1...65_535).contains(port) else { throw ValidationError("--port must be 1…65,535") }
    }

    func run() async throws {
        let plan = try NullEvaluatorPlan.read(contentsOf: plan)
        var player = NullEvaluatorPlayer(plan)
        let topics = Topics(prefix: plan.prefix, venue: plan.venue)
        var configuration = MQTTConfiguration(
            host: host, port: port, clientID: "perimeter-null-\(plan.venue)-\(getpid())", cleanStart: false,
            sessionExpiry: 86_400)
        // Nothing may be dropped: a lost observation would stall the bench, not speed it up.
        configuration.inboundBufferSize = 10_000_000
        let client = try MQTTClient(configuration)
        try await client.connect()
        try await client.subscribe(topics.allObservations, qos: .atLeastOnce)
        try await client.publish(
            NullEvaluatorPlan.statusTopic(prefix: plan.prefix, venue: plan.venue), #"{"online":true}"#,
            qos: .atLeastOnce, retain: true)

        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await _ in Signals.termination() {
                    await client.disconnect()
                    return
                }
            }
            try await NullRelay.run(client) { player.next(on: $0.topic) }
            group.cancelAll()
        }
        FileHandle.standardError.write(
            Data(
                "null evaluator \(plan.venue): \(player.played) observations played, \(player.published) messages published, \(player.unplanned) unplanned\n"
                    .utf8))
    }
}

/// Turns each arriving observation into its planned messages.
struct NullEvaluatorPlayer {
    private let plan: NullEvaluatorPlan
    /// Per inbound topic: the observations that arrive on it, in order, and how many have.
    private var queues: [String: (observations: [Int], next: Int)] = [:]
    /// One zero-filled payload per size, shared by every message of that size.
    private var payloads: [Int: [UInt8]] = [:]
    private var eventIDs: [Int: String] = [:]
    private(set) var played = 0
    private(set) var published = 0
    private(set) var unplanned = 0

    init(_ plan: NullEvaluatorPlan) {
        self.plan = plan
        for (index, observation) in plan.observations.enumerated() {
            queues[plan.topics[observation.inbound], default: ([], 0)].observations.append(index)
            for shape in observation.shapes {
                payloads[shape.bytes] = [UInt8](repeating: 0x30, count: shape.bytes)
                eventIDs[shape.eventIDBytes] = String(repeating: "0", count: shape.eventIDBytes)
            }
        }
    }

    /// The messages for the next observation on `topic`; nil when the plan has no more for it.
    mutating func next(on topic: String) -> [MQTTMessage]? {
        guard let queue = queues[topic], queue.next < queue.observations.count else {
            unplanned += 1
            return nil
        }
        queues[topic]!.next += 1
        played += 1
        let observation = queue.observations[queue.next]
        let shapes = plan.observations[observation].shapes
        published += shapes.count
        return shapes.map { shape in
            var payload = payloads[shape.bytes]!
            // An event's filler starts with its observation's number (the latency phase's key).
            if shape.eventIDBytes > 0 {
                let number = Array("\(observation)-".utf8)
                if number.count <= payload.count { payload.replaceSubrange(0..<number.count, with: number) }
            }
            return MQTTMessage(
                topic: plan.topics[shape.topic], payload: payload,
                qos: QoS(rawValue: Int32(shape.qos)) ?? .atLeastOnce, retain: shape.retain,
                properties: MQTTProperties(
                    messageExpiry: shape.expiry > 0 ? shape.expiry : nil, contentType: "application/json",
                    userProperties: shape.eventIDBytes > 0
                        ? [UserProperty("event-id", eventIDs[shape.eventIDBytes]!)] : []
                ))
        }
    }
}
