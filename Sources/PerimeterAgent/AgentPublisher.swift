import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

/// Turns an agent's messages into topics and payloads, queues them in the SQLite outbox and
/// sends them in batches while the broker is reachable (store and forward).
///
/// GPS readings pass the ``LocationFilter`` (distance filter, desired accuracy) first. Every
/// message is QoS 1: it leaves the outbox only when the broker has acknowledged it, so order
/// and original observation times survive a broker restart, a network cut or an agent restart.
actor AgentPublisher {
    let configuration: AgentConfiguration
    let topics: Topics
    let client: MQTTClient
    private let outbox: AgentOutbox
    private var filter: LocationFilter
    private let logger: Logger
    private(set) var queued = 0
    private(set) var sent = 0
    private(set) var filtered = 0

    private let clock: any TimeSource
    /// The last number (`n`) given to each agent's observations, as in the outbox.
    private var numbers: [String: Int]

    init(configuration: AgentConfiguration, logger: Logger, clock: any TimeSource) throws {
        self.clock = clock
        self.configuration = configuration
        self.logger = logger
        topics = Topics(prefix: configuration.prefix, venue: configuration.venue)
        outbox = try AgentOutbox(path: configuration.databasePath)
        numbers = try outbox.numbers()
        filter = LocationFilter(
            distanceFilter: configuration.distanceFilter, desiredAccuracy: configuration.desiredAccuracy)
        let will = MQTTConfiguration.Will(
            topic: topics.agentStatus(configuration.agent), payload: Array(#"{"online":false}"#.utf8),
            qos: .atLeastOnce, retain: true)
        var mqtt = configuration.broker.mqttConfiguration(will: will)
        mqtt.backoff = .init(initial: .milliseconds(100), maximum: .seconds(5))
        client = try MQTTClient(mqtt)
        let pending = outbox.count
        if pending > 0 {
            logger.info(
                "outbox holds messages from before: sending them first", metadata: ["outbox.pending": "\(pending)"])
        }
    }

    /// The messages for `messages`, after the location filter. Each observation is numbered
    /// (`n`) per agent, continuing from `numbers`; the numbers used are added there.
    func mqttMessages(_ messages: [AgentMessage], numbers: inout [String: Int]) -> [MQTTMessage] {
        func numbered(_ payload: JSONValue, agent: String) -> JSONValue {
            guard case .object(var object) = payload else { return payload }
            let n = numbers[agent, default: 0] + 1
            numbers[agent] = n
            object["n"] = .number(Double(n))
            return .object(object)
        }
        var result: [MQTTMessage] = []
        for message in messages {
            switch message {
            case .gps(let agent, var reading):
                let subject = reading.subject ?? configuration.subject ?? agent ?? configuration.agent
                if reading.subject == nil { reading.subject = configuration.subject }
                switch filter.admit(reading, subject: subject) {
                case .publish:
                    let agent = agent ?? configuration.agent
                    result.append(json(topics.gps(agent: agent), numbered(reading.payload, agent: agent)))
                case .tooInaccurate, .tooClose:
                    filtered += 1
                }
            case .ble(let agent, var scan):
                if scan.subject == nil && agent == nil { scan.subject = configuration.subject }
                let agent = agent ?? configuration.agent
                result.append(json(topics.ble(agent: agent), numbered(scan.payload, agent: agent)))
            case .authorization(let subject, let status, let accuracy):
                result.append(
                    json(
                        topics.authorization(subject: subject),
                        ["status": .string(status), "accuracy": .string(accuracy)], retain: true))
            case .usage(let subject, let inUse):
                result.append(json(topics.usage(subject: subject), ["inUse": .bool(inUse)]))
            case .preferences(let subject, let locale, let place):
                var object: JSONObject = ["locale": .string(locale)]
                if let place { object["defaultPlace"] = .string(place) }
                result.append(json(topics.preferences(subject: subject), .object(object), retain: true))
            }
        }
        return result
    }

    private func json(_ topic: String, _ payload: JSONValue, retain: Bool = false) -> MQTTMessage {
        MQTTMessage(
            topic: topic, payload: Array(payload.serialized().utf8), qos: .atLeastOnce, retain: retain,
            properties: MQTTProperties(contentType: "application/json"))
    }

    /// Queues the messages (one transaction); the sender publishes them.
    func submit(_ messages: [AgentMessage]) throws {
        // Numbers are kept only once the messages that used them are stored: a failed append
        // leaves no gap.
        var used = numbers
        let outgoing = mqttMessages(messages, numbers: &used)
        let changed = used.filter { numbers[$0.key] != $0.value }
        try outbox.append(outgoing, numbers: changed, at: clock.now)
        numbers = used
        queued += outgoing.count
        if !outgoing.isEmpty { wake.yield() }
    }

    var pending: Int { outbox.count }

    /// Wakes the sender: new messages, a connection change, acknowledgements. Coalescing: one
    /// pending wake is enough whatever happened meanwhile.
    private let (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))

    /// Sends the outbox, oldest first, while connected; returns when cancelled or the client
    /// closes. Rows go out through the pipeline's ``OutboxPublisher`` (acknowledgements
    /// pipelined, at most a few batches out, so a broker that is gone for hours leaves the
    /// backlog on disk, not in memory) and leave the outbox once acknowledged. It waits for a
    /// wake instead of polling: an idle agent costs nothing.
    func runSender() async throws {
        let wake = wake
        let publisher = OutboxPublisher(
            client: client, maxUnacknowledged: max(1, configuration.batchSize) * 4, onAcknowledged: { wake.yield() })
        let client = client
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await publisher.run() }
            group.addTask { [logger] in
                // Said when the broker goes, about once a minute while it stays away (the
                // client's backoff tops out at 5 s), and when it is back.
                var lost = false
                for await state in client.connectionStates() {
                    wake.yield()
                    switch state {
                    case .reconnecting(let attempt, let error) where attempt == 1 || attempt % 12 == 0:
                        lost = true
                        let pending = await self.pending
                        logger.warning(
                            attempt == 1
                                ? "broker connection lost; observations wait in the outbox"
                                : "broker still unreachable; observations wait in the outbox",
                            metadata: [
                                "attempt": "\(attempt)", "error": .string(error),
                                "outbox.pending": "\(pending)",
                            ])
                    case .connected where lost:
                        lost = false
                        let pending = await self.pending
                        logger.notice(
                            "broker connection back; sending the outbox", metadata: ["outbox.pending": "\(pending)"])
                    default: break
                    }
                }
            }
            defer { group.cancelAll() }
            /// The last row handed to the publisher: rows after it are still to send.
            var handedThrough: Int64 = 0
            wake.yield()
            for await _ in wakes {
                if Task.isCancelled { break }
                try record(publisher.takeAcknowledged())
                guard client.state.isConnected else {
                    // libmosquitto resends what it holds after reconnecting; the rest waits here.
                    continue
                }
                while true {
                    var rows = try outbox.rows(after: handedThrough, limit: configuration.batchSize)
                    if rows.count < configuration.batchSize && configuration.batchInterval > 0 && !rows.isEmpty {
                        try await clock.sleep(seconds: configuration.batchInterval)
                        rows = try outbox.rows(after: handedThrough, limit: configuration.batchSize)
                    }
                    guard let last = rows.last else { break }
                    do {
                        try await publisher.send(
                            rows.map { OutboxPublisher.Row(number: $0.seq, message: $0.message) })
                    } catch let error as MQTTError {
                        if case .closed = error.kind { return }
                        // Not queued (the connection dropped meanwhile): the next wake tries again.
                        logger.debug("send failed, retrying", metadata: ["error": "\(error)"])
                        break
                    }
                    handedThrough = last.seq
                    try record(publisher.takeAcknowledged())
                }
            }
        }
    }

    /// Forgets acknowledged rows (in send order, so through the highest); a refusal by the
    /// broker is said and set aside with them: resending would only repeat it.
    private func record(_ acknowledged: OutboxPublisher.Acknowledged) throws {
        for refusal in acknowledged.refused {
            logger.warning(
                "the broker refused a message: set aside",
                metadata: ["mqtt.topic": .string(refusal.topic), "error": "\(refusal.error)"])
        }
        guard let highest = (acknowledged.sent + acknowledged.refused.map(\.number)).max() else { return }
        try outbox.remove(through: highest)
        removalWatch?.yield()
        sent += acknowledged.sent.count + acknowledged.refused.count
    }

    /// Publishes the retained online status on every (re)connection: after a lost connection
    /// the broker has published the last will (`online: false`) in the meantime.
    func runStatus() async {
        for await state in client.connectionStates() {
            guard case .connected = state else { continue }
            do {
                try await client.publish(
                    topics.agentStatus(configuration.agent), statusPayload(online: true), qos: .atLeastOnce,
                    retain: true)
                logger.info("connected; status online", metadata: ["broker": .string(client.configuration.endpoint)])
            } catch {
                logger.warning("status not published", metadata: ["error": "\(error)"])
            }
        }
    }

    nonisolated func statusPayload(online: Bool) -> String {
        var object: JSONObject = ["online": .bool(online), "t": .string(Timestamp.format(clock.now))]
        if online {
            object["caps"] = .array(configuration.caps.map { .string($0) })
            object["mode"] = .string(configuration.mode)
            object["version"] = .string(AgentService.version)
        }
        return JSONValue.object(object).serialized()
    }

    /// Waits until the outbox is empty (or `timeout` passes on the agent's clock); true when
    /// it is. Woken by the acknowledgements that empty rows out (it looked every 20 ms). Each
    /// call listens on a stream of its own (a cancelled iteration ends an `AsyncStream`).
    func drain(timeout: Duration) async -> Bool {
        if outbox.isEmpty { return true }
        let (removals, removed) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        removalWatch = removed
        defer { removalWatch = nil }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [clock] in try? await clock.sleep(for: timeout) }
            group.addTask {
                for await _ in removals {
                    if await self.isEmpty { break }
                }
            }
            await group.next()
            group.cancelAll()
        }
        return outbox.isEmpty
    }

    private var isEmpty: Bool { outbox.isEmpty }

    /// Rung when acknowledged rows leave the outbox, while ``drain(timeout:)`` waits.
    private var removalWatch: AsyncStream<Void>.Continuation?

    /// Says offline (retained) and disconnects cleanly.
    func shutdown() async {
        if client.state.isConnected {
            try? await client.publish(
                topics.agentStatus(configuration.agent), statusPayload(online: false), qos: .atLeastOnce, retain: true)
        }
        await client.disconnect()
    }
}
