import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

/// Attempts the outbox's due rows over their channels, several at once, and records each
/// outcome: delivered; pending again after a backoff (capped, exponential, with jitter; a
/// peer's Retry-After wins); failed for good; dead after `maxAttempts` — the last two with a
/// message on `deadletter/notifier`. Works on a database connection of its own.
final class Deliverer: @unchecked Sendable {
    // @unchecked: used by the one task that runs `run()`; its store connection stays there.
    private let configuration: NotifierConfiguration
    private let store: NotifierStore
    private let sender: ChannelSender
    private let client: MQTTClient
    private let logger: Logger
    private let metrics: Metrics
    private let doorbell: Doorbell
    private var random = SystemRandomNumberGenerator()

    init(
        configuration: NotifierConfiguration, client: MQTTClient, logger: Logger, metrics: Metrics, doorbell: Doorbell
    ) throws {
        self.configuration = configuration
        store = try NotifierStore(path: configuration.databasePath)
        sender = ChannelSender(client: client, prefix: configuration.prefix, timeout: configuration.delivery.timeout)
        self.client = client
        self.logger = logger
        self.metrics = metrics
        self.doorbell = doorbell
    }

    typealias Finished = (row: NotifierStore.OutboxRow, outcome: DeliveryOutcome)

    func run() async {
        let capacity = configuration.delivery.concurrency
        await withTaskGroup(of: Finished?.self) { group in
            var inFlight: Set<Int64> = []
            while !Task.isCancelled {
                do {
                    let rows = try store.due(now: Date(), excluding: inFlight, limit: capacity - inFlight.count)
                    for row in rows {
                        guard let channel = configuration.channels[row.channel] else {
                            try finish((row, .failed("channel '\(row.channel)' is no longer configured")))
                            continue
                        }
                        inFlight.insert(row.number)
                        group.addTask { [sender] in (row, await sender.send(row, over: channel)) }
                    }
                } catch {
                    logger.error("outbox read failed", metadata: ["error": "\(error)"])
                }
                if inFlight.isEmpty {
                    let next = (try? store.nextDue()).flatMap { $0 }
                    await doorbell.wait(seconds: min(1, max(0.01, next?.timeIntervalSinceNow ?? 1)))
                    continue
                }
                if inFlight.count < capacity {
                    // Come back for rows that fall due meanwhile, without waiting for a slow peer.
                    group.addTask {
                        try? await Task.sleep(for: .milliseconds(200))
                        return nil
                    }
                }
                guard let finished = await group.next() else { continue }
                guard let finished else { continue }
                inFlight.remove(finished.row.number)
                do { try finish(finished) } catch {
                    logger.error("outbox update failed", metadata: ["error": "\(error)"])
                }
            }
            group.cancelAll()
        }
    }

    private func finish(_ finished: Finished) throws {
        let (row, outcome) = finished
        let attempts = row.attempts + 1
        let now = Date()
        let channel = row.channel
        switch outcome {
        case .delivered:
            try store.record(row.number, state: .delivered, attempts: attempts, error: nil, retryAt: nil, now: now)
            metrics.add("perimeter_notifications_total", labels: ["channel": channel, "result": "sent"])
            metrics.observe(
                "perimeter_notification_latency_seconds", now.timeIntervalSince(row.created),
                labels: ["channel": channel])
        case .retry(let reason, let after) where attempts < configuration.delivery.maxAttempts:
            let delay =
                after
                ?? retryBackoff(
                    attempt: attempts, initial: configuration.delivery.initialBackoff,
                    maximum: configuration.delivery.maxBackoff, unit: Double.random(in: 0...1, using: &random))
            try store.record(
                row.number, state: .pending, attempts: attempts, error: reason,
                retryAt: now.addingTimeInterval(min(delay, 86_400)), now: now)
            metrics.add("perimeter_notifications_total", labels: ["channel": channel, "result": "retried"])
            logger.info(
                "delivery will be retried",
                metadata: [
                    "key": .string(row.key), "channel": .string(channel), "attempt": "\(attempts)",
                    "reason": .string(reason), "retryIn": "\(delay)",
                ])
        case .retry(let reason, _):
            try giveUp(row, state: .dead, attempts: attempts, reason: reason, now: now)
        case .failed(let reason):
            try giveUp(row, state: .failed, attempts: attempts, reason: reason, now: now)
        }
    }

    private func giveUp(
        _ row: NotifierStore.OutboxRow, state: NotifierStore.State, attempts: Int, reason: String, now: Date
    ) throws {
        try store.record(row.number, state: state, attempts: attempts, error: reason, retryAt: nil, now: now)
        metrics.add("perimeter_notifications_total", labels: ["channel": row.channel, "result": state.rawValue])
        logger.error(
            state == .dead ? "notification dead after its last attempt" : "notification failed for good",
            metadata: ["key": .string(row.key), "channel": .string(row.channel), "reason": .string(reason)])
        let record: JSONValue = [
            "key": .string(row.key), "state": .string(state.rawValue), "rule": .string(row.rule),
            "channel": .string(row.channel), "subject": .string(row.subject), "attempts": .number(Double(attempts)),
            "reason": .string(reason), "t": .string(Timestamp.format(now)),
            "notification": (try? JSONParser.parse(row.record)) ?? .null,
        ]
        let topic = "\(configuration.prefix)/\(row.venue)/deadletter/notifier"
        let client = client
        let logger = logger
        Task {
            do { try await client.publish(topic, record.serialized(), qos: .atLeastOnce) } catch {
                logger.error("deadletter publish failed", metadata: ["error": "\(error)"])
            }
        }
    }
}
