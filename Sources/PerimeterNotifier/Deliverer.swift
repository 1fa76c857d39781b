import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNet
import PerimeterStore
import Synchronization

/// Attempts the outbox's due rows over their channels, several at once, and records each
/// outcome: delivered; pending again after a backoff (capped, exponential, with jitter; a
/// peer's Retry-After wins); failed for good; dead after `maxAttempts` — the last two with a
/// message on `deadletter/notifier`. Works on a database connection of its own, its writes in
/// turns with the processing loop's (``WriteTurns``).
///
/// Two bounds on what is in flight: webhook and mail deliveries, at most `concurrency`, each on
/// a thread of a pool of that many from its start to the report of its outcome; MQTT
/// notifications, at most `mqttInFlight`, published in batches one after the other without
/// waiting for each other's PUBACK (a batch reports when all of its acknowledgements are in).
/// One notification at a time awaiting its PUBACK was a round trip and a task wake-up each.
///
/// An attempt is recorded before it is sent (its count goes up, the row is marked in flight,
/// committed), so the attempt number is never reused and a delivery that kills the process
/// cannot be repeated forever: at start, rows still in flight count one crash each, and a row
/// at `maxCrashes` crashes in a row is set aside as dead (`crashedDuringDelivery`).
///
/// One wait point: the loop sleeps on the doorbell, rung by the runtime when it queued rows and
/// by each delivery (or batch of MQTT publishes) as it finishes, with a timeout on the clock
/// until the next pending row falls due or the next pruning of old rows (`notifier.retention`),
/// whichever is sooner, and at most a minute (rows re-queued by `notifier retry` are seen
/// without a ring): an idle notifier wakes once a minute for one indexed query. While
/// deliveries are out and no row waits for its due time, the wait has no timeout: the end of a
/// delivery rings.
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
    private let turns: WriteTurns
    private var random = SystemRandomNumberGenerator()
    /// Outcomes handed over by the deliveries; only the loop in `run()` records them in the store.
    private let finished = Mutex<[Finished]>([])
    /// The MQTT channels, and the others (webhooks and mail), each sorted.
    private let mqttChannels: [String]
    private let otherChannels: [String]

    /// The longest the loop sleeps while rows are pending. Sleeps are measured on a monotonic
    /// clock but due times are wall-clock times: a step of the wall clock (NTP) delays a
    /// retry by at most this much. With nothing pending there is no timeout at all.
    static let longestWait: Double = 60

    /// The most MQTT notifications one task publishes and collects the acknowledgements of:
    /// small enough that acknowledged rows are recorded (and their room refilled) while later
    /// batches are still out.
    static let publishBatch = 100

    init(
        configuration: NotifierConfiguration, client: MQTTClient, logger: Logger, metrics: Metrics, doorbell: Doorbell,
        clock: any TimeSource, turns: WriteTurns, connections: [String: HTTPClient.Connections],
        checkpointer: WALCheckpointer? = nil
    ) throws {
        self.configuration = configuration
        store = try NotifierStore(path: configuration.databasePath)
        if let checkpointer { store.database.leaveCheckpoints(to: checkpointer) }
        sender = ChannelSender(
            client: client, pool: BlockingPool(size: configuration.delivery.concurrency, name: "notifier-delivery"),
            prefix: configuration.prefix, clock: clock,
            connections: connections,
            timeZones: Dictionary(
                configuration.venues.map { ($0.id, $0.conventions.timeZone) }, uniquingKeysWith: { first, _ in first }))
        self.client = client
        self.logger = logger
        self.metrics = metrics
        self.doorbell = doorbell
        self.clock = clock
        self.turns = turns
        let mqtt = configuration.channels.compactMap { name, channel in
            if case .mqtt = channel { name } else { nil }
        }.sorted()
        mqttChannels = mqtt
        otherChannels = configuration.channels.keys.filter { !mqtt.contains($0) }.sorted()
    }

    typealias Finished = (row: NotifierStore.OutboxRow, outcome: DeliveryOutcome)

    /// `PERIMETER_FAULT_KILL_IN_DELIVERY=channel`: the crash test's fault injection (SIGKILL
    /// once an attempt on that channel is recorded, before it is sent — a delivery that takes
    /// the process down). Unset in production.
    private static let faultKillInDelivery = ProcessInfo.processInfo.environment["PERIMETER_FAULT_KILL_IN_DELIVERY"]

    /// Room for more deliveries of each kind.
    private struct Room {
        var mqtt: Int
        var other: Int
        let mqttChannels: [String]
        let otherChannels: [String]

        /// The channels of each kind with room, and how many more of that kind may start. One
        /// query per kind: one for both read rows of a kind without room only to leave them
        /// (with webhooks saturated and a thousand MQTT publishes of room, a thousand webhook
        /// rows a turn, records included: a fifth of the notifier's time, `bench notifier`).
        var kinds: [(channels: [String], room: Int)] {
            [(mqttChannels, mqtt), (otherChannels, other)].filter { $0.room > 0 && !$0.channels.isEmpty }
        }
    }

    func run() async {
        var deadletters = await turns.run { recoverInterrupted() }
        var nextPrune = clock.now
        await withDiscardingTaskGroup { group in
            var inFlight = (mqtt: 0, other: 0)
            while !Task.isCancelled {
                if clock.now >= nextPrune {
                    deadletters += await turns.run {
                        prune()
                        return failUnconfigured()
                    }
                    nextPrune = clock.now.addingTimeInterval(configuration.retention.pruneInterval)
                }
                var timeout: Duration?
                let done = takeFinished()
                let doneMQTT = done.count(where: { isMQTT($0.row) })
                var room = Room(
                    mqtt: configuration.delivery.mqttInFlight - (inFlight.mqtt - doneMQTT),
                    other: configuration.delivery.concurrency - (inFlight.other - (done.count - doneMQTT)),
                    mqttChannels: mqttChannels, otherChannels: otherChannels)
                do {
                    var starting: [(NotifierStore.OutboxRow, NotifierConfiguration.Channel)] = []
                    var begun: [NotifierStore.OutboxRow] = []
                    // One transaction a turn: the outcomes that came in and the attempts about to
                    // start (committed before the first byte goes out). A commit per outcome was
                    // most of the loop's cost with many deliveries in flight.
                    var turnDeadletters: [(topic: String, record: JSONValue)] = []
                    try await turns.run {
                        try store.database.transaction {
                            turnDeadletters = []
                            starting = []
                            for outcome in done {
                                if let deadletter = try finish(outcome) { turnDeadletters.append(deadletter) }
                            }
                            for kind in room.kinds {
                                for row in try store.due(
                                    now: clock.now, channels: kind.channels, limit: kind.room)
                                {
                                    // Configured: the query names only configured channels.
                                    if let channel = configuration.channels[row.channel] {
                                        starting.append((row, channel))
                                    }
                                }
                            }
                            begun = try store.begin(starting.map(\.0))
                        }
                    }
                    inFlight.mqtt -= doneMQTT
                    inFlight.other -= done.count - doneMQTT
                    deadletters += turnDeadletters
                    var batch: [(row: NotifierStore.OutboxRow, template: String?)] = []
                    for (row, (_, channel)) in zip(begun, starting) {
                        if let fault = Self.faultKillInDelivery, fault == row.channel { kill(getpid(), SIGKILL) }
                        if case .mqtt(let template) = channel {
                            inFlight.mqtt += 1
                            batch.append((row, template))
                            if batch.count == Self.publishBatch { startPublishing(&batch, in: &group) }
                            continue
                        }
                        inFlight.other += 1
                        // On a pool thread from start to finish: no task to hand over to and back.
                        sender.pool.execute { [self] in
                            let outcome = sender.deliver(row, over: channel)
                            finished.withLock { $0.append((row, outcome)) }
                            doorbell.ring()
                        }
                    }
                    startPublishing(&batch, in: &group)
                    // Full: only a finished delivery (which rings) makes room.
                    room.mqtt = configuration.delivery.mqttInFlight - inFlight.mqtt
                    room.other = configuration.delivery.concurrency - inFlight.other
                    if let next = try room.kinds.compactMap({ try store.nextDue(channels: $0.channels) }).min() {
                        timeout = .seconds(min(Self.longestWait, max(0, next.timeIntervalSince(clock.now))))
                    }
                } catch {
                    // Rolled back: the outcomes are recorded on the next turn (their rows stay in
                    // flight meanwhile, so nothing starts them again).
                    finished.withLock { $0.insert(contentsOf: done, at: 0) }
                    logger.error("outbox update failed", metadata: ["error": "\(error)"])
                    timeout = .seconds(1)
                }
                // At most a minute even when idle: rows re-queued by `notifier retry` (another
                // process) go out without waiting for anything else to ring.
                let untilPrune = Duration.seconds(
                    min(Self.longestWait, max(0, nextPrune.timeIntervalSince(clock.now))))
                // Unless something is out and nothing waits to start but for room: then the end
                // of a delivery rings (a webhook or a mail within its timeout, an MQTT batch on its
                // acknowledgements or the connection's end), and that turn looks at pruning and at
                // re-queued rows. A timed wait is a task group with a sleeping child, armed and
                // cancelled at every turn: with webhooks saturated, a turn per delivery.
                if timeout != nil || inFlight.mqtt + inFlight.other == 0 {
                    timeout = min(timeout ?? untilPrune, untilPrune)
                }
                publish(deadletters, in: &group)
                deadletters.removeAll()
                await doorbell.wait(timeout: timeout, on: clock)
            }
            group.cancelAll()
        }
        // Webhooks and mail under way (not cancellable) run to their end, at most their timeout.
        await sender.pool.finish()
        sender.pool.stop()
        // Deliveries that ended while shutting down are recorded, so that a clean stop leaves
        // nothing in flight (which the next start would count as a crash).
        let done = takeFinished()
        await turns.run {
            for outcome in done { _ = try? finish(outcome) }
        }
    }

    private func isMQTT(_ row: NotifierStore.OutboxRow) -> Bool {
        if case .mqtt? = configuration.channels[row.channel] { true } else { false }
    }

    /// Publishes `batch` (MQTT rows whose attempts are recorded) here, in order, and collects
    /// its acknowledgements in one task that reports every outcome at once; empties `batch`.
    private func startPublishing(
        _ batch: inout [(row: NotifierStore.OutboxRow, template: String?)], in group: inout DiscardingTaskGroup
    ) {
        guard !batch.isEmpty else { return }
        let rows = batch
        batch.removeAll(keepingCapacity: true)
        let receipts = sender.queue(rows)
        group.addTask { [self] in
            let outcomes = await sender.outcomes(of: receipts)
            finished.withLock { $0.append(contentsOf: zip(rows.map(\.row), outcomes).map { ($0, $1) }) }
            doorbell.ring()
        }
    }

    private func takeFinished() -> [Finished] {
        finished.withLock { list in
            defer { list.removeAll() }
            return list
        }
    }

    private func publish(
        _ deadletters: [(topic: String, record: JSONValue)], in group: inout DiscardingTaskGroup
    ) {
        for (topic, record) in deadletters {
            group.addTask { [client, logger] in
                do { try await client.publish(topic, record.serialized(), qos: .atLeastOnce) } catch {
                    logger.error("deadletter publish failed", metadata: ["error": "\(error)"])
                }
            }
        }
    }

    /// Rows whose attempt was under way when the process died: set aside after `maxCrashes`
    /// in a row, due again otherwise. Returns the deadletters of those set aside.
    private func recoverInterrupted() -> [(topic: String, record: JSONValue)] {
        do {
            let setAside = try store.recoverInterrupted(
                maxCrashes: configuration.delivery.maxCrashes, maxAttempts: configuration.delivery.maxAttempts,
                now: clock.now)
            return setAside.map { row, reason in
                metrics.add("perimeter_notifications_total", labels: ["channel": row.channel, "result": "dead"])
                logger.error(
                    "notification set aside: its delivery never finished",
                    metadata: ["key": .string(row.key), "channel": .string(row.channel), "reason": .string(reason)])
                return deadletter(row, state: .dead, attempts: row.attempts, reason: reason, now: clock.now)
            }
        } catch {
            logger.error("outbox recovery failed", metadata: ["error": "\(error)"])
            return []
        }
    }

    /// Fails the pending rows of channels no longer configured (at start and with each pruning:
    /// a row re-queued for such a channel by `notifier retry` meanwhile waits for the next).
    /// Returns their deadletters.
    private func failUnconfigured() -> [(topic: String, record: JSONValue)] {
        do {
            var deadletters: [(topic: String, record: JSONValue)] = []
            try store.database.transaction {
                deadletters = []
                for row in try store.pending(outside: configuration.channels.keys.sorted()) {
                    deadletters.append(
                        try giveUp(
                            row, state: .failed, attempts: row.attempts,
                            reason: "channel '\(row.channel)' is no longer configured", now: clock.now))
                }
            }
            return deadletters
        } catch {
            logger.error("outbox update failed", metadata: ["error": "\(error)"])
            return []
        }
    }

    /// Deletes finished rows past their retention (`notifier.retention`).
    private func prune() {
        do {
            let pruned = try store.prune(
                now: clock.now, delivered: configuration.retention.delivered,
                undeliverable: configuration.retention.undeliverable)
            if pruned > 0 { logger.info("outbox pruned", metadata: ["rows": "\(pruned)"]) }
        } catch {
            logger.error("outbox pruning failed", metadata: ["error": "\(error)"])
        }
    }

    /// Records an attempt's outcome; returns the deadletter message to publish, if any.
    private func finish(_ finished: Finished) throws -> (topic: String, record: JSONValue)? {
        let (row, outcome) = finished
        let attempts = row.attempts  // counted when the attempt began
        let now = clock.now
        let channel = row.channel
        switch outcome {
        case .delivered:
            try store.record(row.number, state: .delivered, attempts: attempts, error: nil, retryAt: nil, now: now)
            metrics.add("perimeter_notifications_total", labels: ["channel": channel, "result": "sent"])
            metrics.observe(
                "perimeter_notification_latency_seconds", now.timeIntervalSince(row.created),
                labels: ["channel": channel])
        case .retry(let reason, let after) where attempts - row.retryBase < configuration.delivery.maxAttempts:
            let delay =
                after
                ?? retryBackoff(
                    attempt: attempts - row.retryBase, initial: configuration.delivery.initialBackoff,
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
        return deadletter(row, state: state, attempts: attempts, reason: reason, now: now)
    }

    /// The `deadletter/notifier` message for a row given up on.
    private func deadletter(
        _ row: NotifierStore.OutboxRow, state: NotifierStore.State, attempts: Int, reason: String, now: Date
    ) -> (topic: String, record: JSONValue) {
        let record: JSONValue = [
            "key": .string(row.key), "state": .string(state.rawValue), "rule": .string(row.rule),
            "channel": .string(row.channel), "subject": .string(row.subject), "attempts": .number(Double(attempts)),
            "reason": .string(reason), "t": .string(Timestamp.format(now)),
            "notification": (try? JSONParser.parse(row.record)) ?? .null,
        ]
        return ("\(configuration.prefix)/\(row.venue)/deadletter/notifier", record)
    }
}
