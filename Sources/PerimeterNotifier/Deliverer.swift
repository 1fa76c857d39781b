import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import Synchronization

/// Attempts the outbox's due rows over their channels, several at once, and records each
/// outcome: delivered; pending again after a backoff (capped, exponential, with jitter; a
/// peer's Retry-After wins); failed for good; dead after `maxAttempts` — the last two with a
/// message on `deadletter/notifier`. Works on a database connection of its own.
///
/// One wait point: the loop sleeps on the doorbell, rung by the runtime when it queued rows and
/// by each delivery as it finishes, with a timeout on the clock until the next pending row falls
/// due. With nothing pending it sleeps until rung: an idle notifier costs nothing.
final class Deliverer: @unchecked Sendable {
    // @unchecked: used by the one task that runs `run()`; its store connection stays there.
    private let configuration: NotifierConfiguration
    private let store: NotifierStore
    private let sender: ChannelSender
    private let client: MQTTClient
    private let logger: Logger
    private let metrics: Metrics
    private let doorbell: Doorbell
    private let clock: any TimeSource
    private var random = SystemRandomNumberGenerator()
    /// Outcomes handed over by the deliveries; only the loop in `run()` records them in the store.
    private let finished = Mutex<[Finished]>([])

    /// The longest the loop sleeps while rows are pending. Sleeps are measured on a monotonic
    /// clock but due times are wall-clock times: a step of the wall clock (NTP) delays a
    /// retry by at most this much. With nothing pending there is no timeout at all.
    static let longestWait: Double = 60

    init(
        configuration: NotifierConfiguration, client: MQTTClient, logger: Logger, metrics: Metrics, doorbell: Doorbell,
        clock: any TimeSource
    ) throws {
        self.configuration = configuration
        store = try NotifierStore(path: configuration.databasePath)
        sender = ChannelSender(
            client: client, prefix: configuration.prefix, clock: clock,
            timeZones: Dictionary(
                configuration.venues.map { ($0.id, $0.conventions.timeZone) }, uniquingKeysWith: { first, _ in first }))
        self.client = client
        self.logger = logger
        self.metrics = metrics
        self.doorbell = doorbell
        self.clock = clock
    }

    typealias Finished = (row: NotifierStore.OutboxRow, outcome: DeliveryOutcome)

    func run() async {
        let capacity = configuration.delivery.concurrency
        await withDiscardingTaskGroup { group in
            var inFlight: Set<Int64> = []
            while !Task.isCancelled {
                var deadletters: [(topic: String, record: JSONValue)] = []
                let outcomes = finished.withLock { list in
                    defer { list.removeAll() }
                    return list
                }
                for done in outcomes {
                    inFlight.remove(done.row.number)
                    do {
                        if let deadletter = try finish(done) { deadletters.append(deadletter) }
                    } catch {
                        logger.error("outbox update failed", metadata: ["error": "\(error)"])
                    }
                }
                var timeout: Duration?
                do {
                    for row in try store.due(now: clock.now, excluding: inFlight, limit: capacity - inFlight.count) {
                        guard let channel = configuration.channels[row.channel] else {
                            let reason = "channel '\(row.channel)' is no longer configured"
                            if let deadletter = try finish((row, .failed(reason))) { deadletters.append(deadletter) }
                            continue
                        }
                        inFlight.insert(row.number)
                        group.addTask { [self] in
                            let outcome = await sender.send(row, over: channel)
                            finished.withLock { $0.append((row, outcome)) }
                            doorbell.ring()
                        }
                    }
                    // Full: only a finished delivery (which rings) makes room.
                    if inFlight.count < capacity, let next = try store.nextDue(excluding: inFlight) {
                        timeout = .seconds(min(Self.longestWait, max(0, next.timeIntervalSince(clock.now))))
                    }
                } catch {
                    logger.error("outbox read failed", metadata: ["error": "\(error)"])
                    timeout = .seconds(1)
                }
                for (topic, record) in deadletters {
                    group.addTask { [client, logger] in
                        do { try await client.publish(topic, record.serialized(), qos: .atLeastOnce) } catch {
                            logger.error("deadletter publish failed", metadata: ["error": "\(error)"])
                        }
                    }
                }
                await doorbell.wait(timeout: timeout, on: clock)
            }
            group.cancelAll()
        }
    }

    /// Records an attempt's outcome; returns the deadletter message to publish, if any.
    private func finish(_ finished: Finished) throws -> (topic: String, record: JSONValue)? {
        let (row, outcome) = finished
        let attempts = row.attempts + 1
        let now = clock.now
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
            return try giveUp(row, state: .dead, attempts: attempts, reason: reason, now: now)
        case .failed(let reason):
            return try giveUp(row, state: .failed, attempts: attempts, reason: reason, now: now)
        }
        return nil
    }

    private func giveUp(
        _ row: NotifierStore.OutboxRow, state: NotifierStore.State, attempts: Int, reason: String, now: Date
    ) throws -> (topic: String, record: JSONValue) {
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
        return ("\(configuration.prefix)/\(row.venue)/deadletter/notifier", record)
    }
}
