import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

/// What the management commands (`perimeter regions list|get|put|delete`, `perimeter rules …`)
/// read from a configuration file: the broker (address, credentials, TLS) and topic prefix
/// every service shares, the venue, and what the venue's services would check a change against.
///
/// Any service's file will do (evaluator, notifier, `perimeter up`'s): the sections of the
/// other services are accepted unread. Keys that belong to no service are still refused.
struct ManagementSettings {
    var broker: BrokerSettings
    var topics: Topics
    /// The notifier's channel names, when the file configures channels: live rules are checked
    /// against them as the notifier will check them. Nil when the file names none.
    var channels: Set<String>?
    /// The venue's rules file, when the file names one (for `regions put --dry-run`).
    var rulesPath: String?
    /// The venue's regions file, when the file names one: the evaluator's regions that no
    /// retained topic shows (for `regions put --dry-run`).
    var regionsPath: String?
    /// The evaluator's `evaluator.maxPayloadBytes` (a larger region is refused unread).
    var maxPayloadBytes: Int

    static let otherSections = [
        "evaluator", "notifier", "adapters", "dashboard", "agent", "gpsd", "replay", "simulator", "hci", "log",
        "channels", "venues", "venue",
    ]

    static func read(config: String?, overrides: [String], venue: String?) throws -> ManagementSettings {
        let reader = try ConfigReader.forCommand(config: config, overrides: overrides)
        let broker = BrokerSettings.read(from: reader, defaultClientID: "perimeter-manage")
        let prefix = reader.string("topics.prefix", default: "perimeter/v1")
        _ = reader.bool("topics.natsSafe", default: false)
        if prefix.isEmpty || prefix.hasSuffix("/") || prefix.utf8.contains(where: { $0 == 0x2B || $0 == 0x23 }) {
            reader.reject("topics.prefix", "must be a topic prefix like perimeter/v1 (no '+', '#' or trailing '/')")
        }
        var venues = reader.children(of: "venues")
        if venues.isEmpty, let single = reader.optionalString("venue.name") { venues = [single] }
        let channelNames = reader.children(of: "channels")
        let maxPayload = reader.int("evaluator.maxPayloadBytes", default: 65_536, range: 64...16_777_216)
        guard let chosen = venue ?? (venues.count == 1 ? venues.first : nil) else {
            for section in otherSections { reader.claim(section) }
            try reader.finish()
            throw ExitCode(
                64,
                venues.isEmpty
                    ? "name the venue with --venue (the configuration names none)"
                    : "name the venue with --venue (this configuration serves \(venues.joined(separator: ", ")))")
        }
        if let problem = Topics.idProblem(chosen) ?? Topics.separator(in: chosen).map({ "holds '\($0)'" }) {
            throw ExitCode(64, "--venue '\(chosen)': \(problem); a venue id is one topic level")
        }
        if !venues.isEmpty && !venues.contains(chosen) {
            throw ExitCode(
                64, "venue '\(chosen)' is not in this configuration (\(venues.joined(separator: ", ")))")
        }
        let rulesPath = reader.optionalString("venues.\(chosen).rules")
        let regionsPath =
            reader.optionalString("venues.\(chosen).regions")
            ?? (reader.optionalString("venue.name") == chosen ? reader.optionalString("venue.regions") : nil)
        for section in otherSections { reader.claim(section) }
        try reader.finish()
        return ManagementSettings(
            broker: broker, topics: Topics(prefix: prefix, venue: chosen),
            channels: channelNames.isEmpty ? nil : Set(channelNames), rulesPath: rulesPath, regionsPath: regionsPath,
            maxPayloadBytes: maxPayload)
    }
}

/// A connection to the venue's broker for one management command, with the command's own
/// client id (never the service's: that would disconnect the service).
struct ManagementSession {
    let client: MQTTClient
    let inbox: MessageInbox
    let settings: ManagementSettings
    var topics: Topics { settings.topics }

    static func connect(
        _ settings: ManagementSettings, timeout: Duration = .seconds(10)
    ) async throws
        -> ManagementSession
    {
        let client = try MQTTClient(
            settings.broker.mqttConfiguration(clientID: "perimeter-manage-\(getpid())-\(UInt16.random(in: 0...9999))"))
        do {
            try await client.connect(timeout: timeout)
        } catch {
            let broker = "\(settings.broker.host):\(settings.broker.port)"
            throw ExitCode(1, "cannot connect to the broker at \(broker): \(error)")
        }
        return ManagementSession(client: client, inbox: MessageInbox(client), settings: settings)
    }

    /// The topic the command publishes its end-of-retained marker on: the operator account
    /// may write it (deploy/mosquitto/acl.conf), and no service reads it.
    var markerTopic: String { "\(settings.topics.prefix)/_sys/operator/\(client.configuration.clientID)/marker" }

    /// The retained messages on `filters` (topic → payload, empty payloads left out).
    ///
    /// The broker sends what is retained on a filter when the subscription is made, queued with
    /// the session's other messages; a marker this command publishes afterwards comes back
    /// after all of them, so its arrival says the retained picture is complete.
    func retained(_ filters: [String], timeout: Duration = .seconds(10)) async throws -> [String: [UInt8]] {
        let before = inbox.all.count
        for filter in filters { try await client.subscribe(filter, qos: .atLeastOnce) }
        try await client.subscribe(markerTopic, qos: .atLeastOnce)
        let token = UUID().uuidString
        let hint =
            "may this account publish there? (deploy/mosquitto/acl.conf gives the operator account "
            + "\(settings.topics.prefix)/_sys/operator/#)"
        do {
            try await client.publish(markerTopic, token, qos: .atLeastOnce)
        } catch {
            throw ExitCode(1, "the broker refused the end-of-retained marker on \(markerTopic) (\(error)): \(hint)")
        }
        let seen = try await waitForValue(timeout: timeout) {
            inbox.all.dropFirst(before).contains { $0.topic == markerTopic && $0.payloadString == token } ? true : nil
        }
        guard seen == true else {
            throw ExitCode(1, "no end-of-retained marker on \(markerTopic) within \(timeout): \(hint)")
        }
        for filter in filters { try await client.unsubscribe(filter) }
        try await client.unsubscribe(markerTopic)
        var picture: [String: [UInt8]] = [:]
        for message in inbox.all.dropFirst(before) where message.retain && message.topic != markerTopic {
            picture[message.topic] = message.payload
        }
        return picture.filter { !$0.value.isEmpty }
    }

    /// The ids of the retained `{collection}/{id}` topics, with their payloads.
    func retainedCollection(_ collection: String) async throws -> [(id: String, payload: [UInt8])] {
        let prefix = "\(topics.root)/\(collection)/"
        return try await retained(["\(prefix)+"]).compactMap { topic, payload in
            guard topic.hasPrefix(prefix) else { return nil }
            return (Topics.decodeLevel(String(topic.dropFirst(prefix.count))), payload)
        }.sorted { $0.id < $1.id }
    }

    /// Publishes a retained message at QoS 1 and returns once the broker has it (PUBACK).
    func publishRetained(_ topic: String, _ payload: [UInt8], properties: MQTTProperties = .none) async throws {
        do {
            try await client.publish(topic, payload: payload, qos: .atLeastOnce, retain: true, properties: properties)
        } catch let error as MQTTError {
            var message = "could not publish \(topic): \(error)"
            if case .publishRefused = error.kind {
                message += " (regions/+ and rules/+ take the operator account: deploy/mosquitto/acl.conf)"
            }
            throw ExitCode(1, message)
        }
    }

    func close() async {
        inbox.stop()
        await client.disconnect()
    }
}
