import Foundation
import PerimeterCore
import PerimeterMQTT

/// What a null evaluator publishes for each observation it receives: the topics, payload
/// sizes, QoS, retain flags and MQTT 5 properties of the evaluator's messages, not their content.
///
/// `bench pipeline` records one from the pure evaluator (``BenchPipelineOracle``) and hands it
/// to `perimeter bench null-evaluator` in a file, so that the null process evaluates nothing:
/// it looks up which observation a message is by its topic alone (a subject's reports arrive
/// in order on its own topic, so the n-th message on a topic is the n-th observation the plan
/// lists for that topic) and publishes that observation's shapes.
///
/// The file is text, one record per line, fields separated by tabs:
/// ```
/// perimeter-null-plan  1  {prefix}  {venue}
/// topic  {topic}                    the table the other records refer to, from 0
/// obs  {inbound topic}  {topic},{bytes},{qos},{retain 0|1},{expiry s},{event id bytes}  …
/// ```
struct NullEvaluatorPlan {
    /// One message, by its size and flags.
    struct Shape: Equatable {
        /// Index in ``topics``.
        var topic: Int
        var bytes: Int
        var qos: Int
        var retain: Bool
        /// MQTT 5 message expiry in seconds; 0 for none.
        var expiry: UInt32 = 0
        /// Length of the `event-id` user property the evaluator puts on a transition; 0 for none.
        var eventIDBytes: Int = 0
    }

    struct Observation {
        /// Index in ``topics`` of the topic it arrives on.
        var inbound: Int
        var shapes: [Shape]
    }

    let prefix: String
    /// The venue level of every topic in the plan.
    private(set) var venue: String
    private(set) var topics: [String] = []
    private var topicIndex: [String: Int] = [:]
    private(set) var observations: [Observation] = []

    init(prefix: String = BenchPipelineWorkload.prefix, venue: String = BenchPipelineWorkload.venue) {
        self.prefix = prefix
        self.venue = venue
    }

    /// Where the null evaluator says it is online (retained), like the evaluator's status.
    static func statusTopic(prefix: String, venue: String) -> String { "\(prefix)/_sys/null-evaluator/\(venue)/status" }

    private mutating func intern(_ topic: String) -> Int {
        if let index = topicIndex[topic] { return index }
        topics.append(topic)
        topicIndex[topic] = topics.count - 1
        return topics.count - 1
    }

    /// Adds the next observation: the topic it arrives on and what the evaluator publishes for it.
    mutating func record(inbound: String, published: [OutboundMessage]) {
        let shapes = published.map { message in
            Shape(
                topic: intern(message.topic), bytes: message.payload.count, qos: message.qos, retain: message.retain,
                expiry: message.expiry ?? 0, eventIDBytes: message.eventID?.utf8.count ?? 0)
        }
        observations.append(Observation(inbound: intern(inbound), shapes: shapes))
    }

    /// The same plan with every topic moved from this venue level to `venue`, which must be as
    /// long so that every message keeps its size: each null evaluator gets a topic tree (and
    /// retained messages) of its own, and the real evaluator does not see its observations.
    func moved(to venue: String) -> NullEvaluatorPlan {
        precondition(venue.utf8.count == self.venue.utf8.count, "a venue of another length changes message sizes")
        let from = "\(prefix)/\(self.venue)/"
        let to = "\(prefix)/\(venue)/"
        var moved = self
        moved.venue = venue
        moved.topics = topics.map { $0.hasPrefix(from) ? to + $0.dropFirst(from.count) : $0 }
        moved.topicIndex = Dictionary(moved.topics.enumerated().map { ($1, $0) }) { first, _ in first }
        return moved
    }

    /// Exactly three QoS-1 messages per observation, roughly what the evaluator published before
    /// it added more: its transition (enter or exit) and its first two retained messages (state
    /// and occupancy). Where an observation has fewer, the last one chosen is repeated, and an
    /// observation that publishes nothing gets three 100-byte messages on a filler topic.
    func threeMessages() -> NullEvaluatorPlan {
        var three = self
        let filler = three.intern("\(prefix)/\(venue)/_null/filler")
        three.observations = observations.map { observation in
            let shapes = observation.shapes
            var event =
                shapes.first { $0.eventIDBytes > 0 } ?? shapes.first { !$0.retain } ?? shapes.first
                ?? Shape(topic: filler, bytes: 100, qos: 1, retain: false)
            event.qos = 1
            var retained = Array(shapes.filter(\.retain).prefix(2))
            while retained.count < 2 {
                var copy = retained.last ?? event
                copy.retain = true
                copy.eventIDBytes = 0
                retained.append(copy)
            }
            for index in retained.indices { retained[index].qos = 1 }
            return Observation(inbound: observation.inbound, shapes: [event] + retained)
        }
        return three
    }

    /// How many messages of `observations` go to a topic matching one of `filters`.
    func count(matching filters: [String], in range: Range<Int>) -> Int {
        let matches = topics.map { topic in filters.contains { MQTTTopic.matches(filter: $0, topic: topic) } }
        return observations[range].reduce(0) { total, observation in
            total + observation.shapes.count { matches[$0.topic] }
        }
    }

    /// Per observation of `range` on average: messages, transitions, retained, QoS 0, payload bytes.
    func summary(of range: Range<Int>) -> String {
        let shapes = observations[range].flatMap(\.shapes)
        let n = Double(max(1, range.count))
        func per(_ count: Int) -> String { String(format: "%.2f", Double(count) / n) }
        let bytes = shapes.isEmpty ? 0 : shapes.reduce(0) { $0 + $1.bytes } / shapes.count
        return
            "\(per(shapes.count)) messages per observation (\(per(shapes.count { $0.eventIDBytes > 0 })) transitions, \(per(shapes.count(where: \.retain))) retained, \(per(shapes.count { $0.qos == 0 })) at QoS 0), \(bytes) B payload on average"
    }

    // MARK: - File

    static let magic = "perimeter-null-plan"

    var serialized: String {
        var lines = ["\(Self.magic)\t1\t\(prefix)\t\(venue)"]
        lines.reserveCapacity(topics.count + observations.count + 1)
        for topic in topics { lines.append("topic\t\(topic)") }
        for observation in observations {
            var line = "obs\t\(observation.inbound)"
            for shape in observation.shapes {
                line +=
                    "\t\(shape.topic),\(shape.bytes),\(shape.qos),\(shape.retain ? 1 : 0),\(shape.expiry),\(shape.eventIDBytes)"
            }
            lines.append(line)
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// Reads a plan written by ``serialized``.
    /// - Throws: `ExitCode(1, …)` naming the file and line that does not read.
    static func read(contentsOf path: String) throws -> NullEvaluatorPlan {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: true).makeIterator()
        func problem(_ line: Int, _ what: String) -> ExitCode {
            ExitCode(1, "\(path): line \(line): \(what); the plan is written by 'perimeter bench pipeline'")
        }
        guard let header = lines.next()?.split(separator: "\t", omittingEmptySubsequences: false), header.count == 4,
            header[0] == magic, header[1] == "1"
        else { throw problem(1, "not a null evaluator plan (version 1)") }
        var plan = NullEvaluatorPlan(prefix: String(header[2]), venue: String(header[3]))
        var number = 1
        while let line = lines.next() {
            number += 1
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            switch fields[0] {
            case "topic" where fields.count == 2:
                plan.topics.append(String(fields[1]))
                plan.topicIndex[String(fields[1])] = plan.topics.count - 1
            case "obs" where fields.count >= 2:
                guard let inbound = Int(fields[1]), plan.topics.indices.contains(inbound) else {
                    throw problem(number, "no such inbound topic '\(fields[1])'")
                }
                var shapes: [Shape] = []
                for field in fields.dropFirst(2) {
                    let numbers = field.split(separator: ",").compactMap { Int($0) }
                    guard numbers.count == 6, plan.topics.indices.contains(numbers[0]), numbers[1] >= 0,
                        (0...2).contains(numbers[2]), numbers[4] >= 0
                    else { throw problem(number, "'\(field)' is not topic,bytes,qos,retain,expiry,id bytes") }
                    shapes.append(
                        Shape(
                            topic: numbers[0], bytes: numbers[1], qos: numbers[2], retain: numbers[3] != 0,
                            expiry: UInt32(clamping: numbers[4]), eventIDBytes: numbers[5]))
                }
                plan.observations.append(Observation(inbound: inbound, shapes: shapes))
            default:
                throw problem(number, "expected a 'topic' or 'obs' record")
            }
        }
        return plan
    }
}
