import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterMQTT

/// `perimeter subjects show|erase ID`: what the evaluator holds about a subject, and erasure.
struct SubjectsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subjects", abstract: "Show or erase what Perimeter holds about one subject.",
        subcommands: [SubjectsShowCommand.self, SubjectsEraseCommand.self])
}

/// Reaches a running evaluator over MQTT with the evaluator's own configuration.
struct SubjectRequest {
    let client: MQTTClient
    let topics: Topics
    let inbox: MessageInbox
    /// The same connection as a management session: its end-of-retained marker.
    let session: ManagementSession

    static func connect(config: String?, settings: [String], venue: String?) async throws -> SubjectRequest {
        let reader = try ConfigReader.forCommand(config: config, overrides: settings)
        let configuration = try EvaluatorConfiguration.read(reader)
        let venues = configuration.venues.map(\.settings.id)
        guard let chosen = venue ?? (venues.count == 1 ? venues.first : nil) else {
            throw ExitCode(
                64, "name the venue with --venue (this configuration serves \(venues.joined(separator: ", ")))")
        }
        guard venues.contains(chosen) else {
            throw ExitCode(
                64, "venue '\(chosen)' is not served by this configuration (\(venues.joined(separator: ", ")))")
        }
        let client = try MQTTClient(
            configuration.broker.mqttConfiguration(clientID: "perimeter-subjects-\(getpid())"))
        try await client.connect(timeout: .seconds(10))
        let inbox = MessageInbox(client)
        let topics = Topics(prefix: configuration.prefix, venue: chosen)
        let settings = ManagementSettings(
            broker: configuration.broker, topics: topics, channels: nil, rulesPath: nil, regionsPath: nil,
            maxPayloadBytes: configuration.limits.maxPayloadBytes)
        return SubjectRequest(
            client: client, topics: topics, inbox: inbox,
            session: ManagementSession(client: client, inbox: inbox, settings: settings))
    }

    /// Sends `admin/{command}/{subject}` and returns the evaluator's answer.
    func ask(_ command: String, subject: String, answer: String, timeout: Duration) async throws -> JSONValue {
        let reply = topics.admin(answer, subject: subject)
        try await client.subscribe(reply, qos: .atLeastOnce)
        try await client.publish(topics.admin(command, subject: subject), "{}", qos: .atLeastOnce)
        let message = try await waitForValue(timeout: timeout) { inbox.all.first(where: { $0.topic == reply }) }
        if let message { return (try? JSONParser.parse(message.payload)) ?? .null }
        throw ExitCode(1, "no answer on \(reply) within \(timeout): is the evaluator running for this venue?")
    }

    /// Every retained topic under the venue that names the subject as one of its first four
    /// levels there, whatever follows (`place/{s}`, `state/{r}/{s}`, `subjects/{s}/usage`, a
    /// `notes/{s}/badge` of someone else's), read up to this command's own end-of-retained
    /// marker: complete, not whatever arrived within a fixed wait (issue 19: a retained
    /// `{kind}/{s}/{more}` survived an erasure reported as done).
    func retainedTopics(of subject: String) async throws -> [String] {
        let level = Topics.level(subject)
        let filters = (0..<4).map { depth in
            ([topics.root] + Array(repeating: "+", count: depth) + [level, "#"]).joined(separator: "/")
        }
        return try await session.retained(filters).keys.sorted()
    }
}

/// `perimeter subjects show ID`.
struct SubjectsShowCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract:
            "Print a subject's authorization, usage, sessions, states, place, held events, diagnostics, open visit and full-accuracy grant.",
        discussion: """
            Asks the running evaluator (admin/show/{subject}) with its own configuration file.
            `visit` is the visit under way (arrival, centre lat/lon, acc in metres, fixes, and
            whether its events may be published now), null when there is none;
            `temporaryFullAccuracy` is the grant in force (session, purpose, until: "sessionEnd"
            — it ends with the session it was granted to), null when there is none.
            """)

    @Argument(help: "The subject id.", valueName: "id")
    var subject: String

    @Option(help: "The evaluator's configuration file.", valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(help: "The venue (when the configuration serves several).", valueName: "id")
    var venue: String?

    @Option(help: "Seconds to wait for the evaluator.", valueName: "s")
    var timeout: Double = 10

    func run() async throws {
        let request = try await SubjectRequest.connect(config: config, settings: set, venue: venue)
        let answer = try await request.ask(
            "show", subject: subject, answer: "shown", timeout: .milliseconds(Int(timeout * 1000)))
        print(answer.serialized())
        await request.client.disconnect()
    }
}

/// `perimeter subjects erase ID`.
struct SubjectsEraseCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "erase", abstract: "Erase a subject everywhere: state, held events, rows, retained topics.",
        discussion: """
            Asks the running evaluator to forget the subject (admin/erase/{subject}): it drops
            the subject's state, place, preferences, privacy records and held events, deletes
            its journal and outbox rows, takes a fresh snapshot and clears the
            retained topics it knows of. Then this command clears any retained topic left under
            the venue that names the subject in one of its first four levels there (read up to
            an end-of-retained marker on {prefix}/_sys/operator/…), and checks that none remains.
            """)

    @Argument(help: "The subject id.", valueName: "id")
    var subject: String

    @Option(help: "The evaluator's configuration file.", valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(help: "The venue (when the configuration serves several).", valueName: "id")
    var venue: String?

    @Option(help: "Seconds to wait for the evaluator.", valueName: "s")
    var timeout: Double = 10

    func run() async throws {
        let request = try await SubjectRequest.connect(config: config, settings: set, venue: venue)
        let answer = try await request.ask(
            "erase", subject: subject, answer: "erased", timeout: .milliseconds(Int(timeout * 1000)))
        let cleared = answer["cleared"]?.arrayValue?.count ?? 0
        let left = try await request.retainedTopics(of: subject)
        for topic in left { try await request.client.publish(topic, payload: [], qos: .atLeastOnce, retain: true) }
        let remaining = try await request.retainedTopics(of: subject)
        await request.client.disconnect()
        guard remaining.isEmpty else {
            throw ExitCode(1, "retained topics still name '\(subject)': \(remaining.joined(separator: ", "))")
        }
        print(
            #"{"subject":\#(JSONValue.string(subject).serialized()),"erased":true,"clearedByEvaluator":\#(cleared),"clearedAfter":\#(left.count)}"#
        )
    }
}
