import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import Synchronization

/// Watches the retained venue leases and the evaluators' statuses over a connection of its own
/// (clean session: nothing here needs to survive a restart), and publishes this evaluator's
/// leases. The decisions are ``LeasePolicy``'s.
final class LeaseKeeper: Sendable {
    private let client: MQTTClient
    private let prefix: String
    private let me: String
    private let logger: Logger
    private let state = ViewBox()
    private let changes: AsyncStream<Void>.Continuation
    /// Yields whenever a lease or a status changes.
    let changed: AsyncStream<Void>
    private let listener = Mutex<Task<Void, Never>?>(nil)

    private let clock: any TimeSource

    init(configuration: EvaluatorConfiguration, logger: Logger, clock: any TimeSource) throws {
        self.clock = clock
        var mqtt = configuration.broker.mqttConfiguration(clientID: configuration.broker.clientID + "-lease")
        mqtt.cleanStart = true
        client = try MQTTClient(mqtt)
        prefix = configuration.prefix
        me = configuration.instance
        self.logger = logger
        (changed, changes) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    var view: LeasePolicy.View { state.view.withLock { $0 } }

    static func leaseTopic(prefix: String, venue: String) -> String { "\(prefix)/_sys/leases/\(Topics.level(venue))" }

    /// Connects, subscribes, and listens `wait` seconds for the retained leases and statuses.
    func start(wait: Double) async throws {
        try await client.connect(timeout: .seconds(366 * 86_400))
        let messages = client.messages
        let leases = "\(prefix)/_sys/leases/"
        let statuses = "\(prefix)/_sys/evaluator/"
        let task = Task { [state, changes] in
            for await message in messages {
                let json = message.payload.isEmpty ? nil : try? JSONParser.parse(message.payload)
                state.view.withLock { view in
                    if message.topic.hasPrefix(leases) {
                        let venue = Topics.decodeLevel(String(message.topic.dropFirst(leases.count)))
                        view.leases[venue] = json.flatMap(LeasePolicy.Lease.init(json:))
                    } else if message.topic.hasPrefix(statuses), message.topic.hasSuffix("/status") {
                        let instance = Topics.decodeLevel(
                            String(message.topic.dropFirst(statuses.count).dropLast("/status".count)))
                        if json?["online"]?.boolValue == true {
                            view.online.insert(instance)
                        } else {
                            view.online.remove(instance)
                        }
                    }
                }
                changes.yield()
            }
        }
        listener.withLock { $0 = task }
        try await client.subscribe("\(prefix)/_sys/leases/+", qos: .atLeastOnce)
        try await client.subscribe("\(prefix)/_sys/evaluator/+/status", qos: .atLeastOnce)
        if wait > 0 { try await Task.sleep(for: .milliseconds(Int(wait * 1000))) }
    }

    /// Publishes this evaluator's leases on `venues` (retained).
    func claim(_ venues: [String], takenOver: Bool) async throws {
        let lease = LeasePolicy.Lease(instance: me, takenOver: takenOver, since: clock.now)
        for venue in venues.sorted() {
            try await client.publish(
                Self.leaseTopic(prefix: prefix, venue: venue), lease.json.serialized(), qos: .atLeastOnce, retain: true)
            state.view.withLock { $0.leases[venue] = lease }
        }
        logger.notice(
            takenOver ? "venues taken over" : "venues leased",
            metadata: ["venues": .string(venues.sorted().joined(separator: ",")), "instance": .string(me)])
    }

    func stop() async {
        listener.withLock { $0?.cancel() }
        changes.finish()
        await client.disconnect()
    }
}

/// The lease view, shared between the listening task and the service.
final class ViewBox: Sendable {
    let view = Mutex(LeasePolicy.View())
}
