import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNet
import PerimeterStore
import Synchronization

/// `perimeter notifier`: the evaluator's transitions in, location-triggered notifications out
/// over MQTT, webhooks and mail (topics.md, "Notifications").
///
/// Exactly-once effect: every inbound message is journalled in SQLite as it arrives (in a file
/// of its own, ``NotifierArrivals``); processing a batch of them (rule decisions, rule state,
/// outbox rows, at most one per (event, rule, channel)) commits in one transaction, after which
/// the batch leaves the journal (processed again after a crash in between, which fires nothing
/// twice); deliveries are attempted from the outbox and marked after the channel confirmed
/// them. After `kill -9` the undelivered rows are attempted again with the same idempotency key
/// (event id + rule id), which receivers use to drop the repeat.
public struct NotifierService: Service {
    public let configuration: NotifierConfiguration
    public let logger: Logger
    /// Wall time for queueing, retries, deadletters and journalled arrivals; every wait.
    public let clock: any TimeSource
    public var name: String { "notifier" }

    public init(configuration: NotifierConfiguration, logger: Logger, clock: any TimeSource = SystemTimeSource()) {
        self.configuration = configuration
        self.logger = logger
        self.clock = clock
    }

    public func run() async throws {
        let runtime = try NotifierRuntime(configuration: configuration, logger: logger, clock: clock)
        try await runtime.run()
    }
}

/// A start-up failure of the notifier, said plainly.
public struct NotifierError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The notifier's working state for one run of the service.
final class NotifierRuntime {
    let configuration: NotifierConfiguration
    let logger: Logger
    let store: NotifierStore
    /// Checkpoints the database for the processor's and the deliverer's connections, off both
    /// (a child service of `serve`).
    let checkpointer: WALCheckpointer
    let metrics = Metrics()
    private let renderer = NotificationRenderer()
    private var fileRules: [String: [NotificationRule]] = [:] {
        didSet { venueRules = [:] }
    }
    private var topicRules: [String: [String: NotificationRule]] = [:] {
        didSet { venueRules = [:] }
    }
    /// Each venue's rules in the order they are tried (``rules(of:)``), until either list changes.
    private var venueRules: [String: [NotificationRule]] = [:]
    private var regionNames: [String: [String: String]] = [:]
    private let venues: [String: NotifierConfiguration.Venue]
    private let doorbell = Doorbell()
    let clock: any TimeSource
    /// Each webhook channel's kept connections (at most one idle per delivery thread): used by
    /// the deliveries, counted in `/metrics` when it is read.
    let webhookConnections: [String: HTTPClient.Connections]

    init(configuration: NotifierConfiguration, logger: Logger, clock: any TimeSource) throws {
        self.configuration = configuration
        self.logger = logger
        self.clock = clock
        webhookConnections = configuration.channels.compactMapValues { channel in
            guard case .webhook = channel else { return nil }
            return HTTPClient.Connections(capacity: configuration.delivery.concurrency)
        }
        store = try NotifierStore(path: configuration.databasePath)
        checkpointer = WALCheckpointer(path: configuration.databasePath) { [logger] error in
            logger.warning("WAL checkpoint failed; the next commit asks again", metadata: ["error": "\(error)"])
        }
        store.database.leaveCheckpoints(to: checkpointer)
        venues = Dictionary(uniqueKeysWithValues: configuration.venues.map { ($0.id, $0) })
        declareMetrics()
        try loadFiles(failOnProblems: true)
        for (venue, id, source) in try store.topicRules() where venues[venue] != nil {
            if case .success(let rule) = parseRule(source, id: id) { topicRules[venue, default: [:]][id] = rule }
        }
    }

    private var channelNames: Set<String> { Set(configuration.channels.keys) }

    private func parseRule(_ source: String, id: String) -> Result<NotificationRule, RuleError> {
        guard let value = try? JSONParser.parse(source) else {
            return .failure(RuleError(rule: "rule '\(id)'", ["not JSON"]))
        }
        return RuleParser.parse(rule: value, channels: channelNames, place: "rule '\(id)'")
    }

    /// Reads every venue's rules file and regions file. At start a problem stops the notifier;
    /// on SIGHUP the rules in use stay and the problem is logged.
    func loadFiles(failOnProblems: Bool) throws {
        for venue in configuration.venues {
            if let path = venue.rulesPath {
                do {
                    guard let data = FileManager.default.contents(atPath: path) else {
                        throw NotifierError("venue '\(venue.id)': cannot read rules file \(path)")
                    }
                    let document: JSONValue
                    do { document = try JSONParser.parse(data) } catch {
                        throw NotifierError("venue '\(venue.id)': \(path) is not JSON: \(error)")
                    }
                    let (rules, problems) = RuleParser.parse(document: document, channels: channelNames)
                    if !problems.isEmpty {
                        throw NotifierError("venue '\(venue.id)': \(path): \(problems.joined(separator: "; "))")
                    }
                    fileRules[venue.id] = rules
                    logger.info("rules loaded", metadata: ["venue": .string(venue.id), "rules": "\(rules.count)"])
                    // A live rule accepted before the file gained its id: the file's rule is the
                    // one used (ids are one namespace; the file is the operator's reviewed copy).
                    for rule in rules where topicRules[venue.id]?[rule.id] != nil {
                        logger.warning(
                            "live rule shadowed by the rules file's rule with the same id; delete one of them",
                            metadata: ["venue": .string(venue.id), "rule": .string(rule.id)])
                    }
                } catch {
                    if failOnProblems { throw error }
                    logger.error("rules file not reloaded; keeping the rules in use", metadata: ["error": "\(error)"])
                }
            }
            var names = (try? store.regionNames(venue: venue.id)) ?? [:]
            if let path = venue.regionsPath, let data = FileManager.default.contents(atPath: path) {
                for region in RegionParser.parse(bytes: data).regions {
                    if let name = region.name { names[region.id] = name }
                }
            }
            regionNames[venue.id] = names
        }
    }

    // MARK: - Running

    private var statusTopic: String {
        "\(configuration.prefix)/_sys/notifier/\(Topics.level(configuration.instance))/status"
    }

    var subscriptions: [String] {
        configuration.venues.map(\.id).sorted().flatMap { venue -> [String] in
            let root = "\(configuration.prefix)/\(venue)"
            return [
                "\(root)/enter/+/+", "\(root)/exit/+/+", "\(root)/dwell/+/+", "\(root)/self/+/+/+",
                "\(root)/subjects/+/preferences", "\(root)/rules/+", "\(root)/regions/+", "\(root)/admin/erased/+",
            ]
        }
    }

    func run() async throws {
        // One connection to the arrivals, held exclusively while the notifier runs: the network
        // thread journals through it, the processing loop reads and removes batches through it,
        // in turns (``ArrivalJournal/withProcessorTurn(_:)``), never at the same time.
        let arrivals = try NotifierArrivals(
            path: NotifierArrivals.path(for: configuration.databasePath), exclusive: true)
        try moveEarlierInbox(to: arrivals)
        let clock = clock
        let backlog = ArrivalsBacklog(
            waiting: try arrivals.count(), highWater: configuration.maxJournalBacklog, now: clock.now)
        defer { backlog.intake.openForever() }
        // Woken only by what needs work: an arrival (journalled before the wake, so the drain
        // that follows finds it) or SIGHUP. No ticker: an idle notifier sleeps.
        let wakes = Wakes<Reload>()
        let journal = ArrivalJournal(logger: logger) { messages in
            let now = clock.now
            try arrivals.journal(messages, received: now)
            backlog.journalled(messages.count, now: now)
            wakes.work()
        }
        var mqtt = configuration.broker.mqttConfiguration(
            cleanStart: false,
            will: MQTTConfiguration.Will(
                topic: statusTopic, payload: Array(#"{"online":false}"#.utf8), qos: .atLeastOnce, retain: true))
        mqtt.sessionExpiry = UInt32(configuration.sessionExpiry)
        // Arrivals are journalled on the network thread; nothing is queued on `client.messages`.
        mqtt.inboundBufferSize = 0
        let client = try MQTTClient(
            mqtt, onReceive: { journal.append($0) },
            onBurstEnd: {
                journal.flush()
                backlog.intake.waitForRoom()
            })
        let server = try startHTTP(client, journal: journal, backlog: backlog)
        defer { server?.stop() }
        try await client.connect(timeout: .seconds(366 * 86_400))
        for filter in subscriptions { try await client.subscribe(filter, qos: .atLeastOnce) }
        try await client.publish(
            statusTopic, #"{"online":true,"instance":"\#(configuration.instance)"}"#, qos: .atLeastOnce, retain: true)
        logger.info(
            "notifier running",
            metadata: [
                "venues": .string(venues.keys.sorted().joined(separator: ",")), "broker": .string("\(client.endpoint)"),
                "channels": .string(channelNames.sorted().joined(separator: ",")),
                "database": .string(configuration.databasePath),
            ])
        for (name, channel) in configuration.channels.sorted(by: { $0.key < $1.key }) {
            if case .mail(let relay, _, _) = channel, relay.startTLS == .never {
                logger.warning(
                    "mail channel sends without TLS (startTLS: never) to a loopback relay",
                    metadata: ["channel": .string(name), "relay": .string("\(relay.host):\(relay.port)")])
            }
        }
        // Notifications go out on a connection of their own: on the receiving one, every publish
        // and every acknowledgement waited behind the journalling of arrivals on its network
        // thread, so during a burst of events almost nothing was delivered (`bench notifier`).
        var outbound = configuration.broker.mqttConfiguration(
            clientID: configuration.broker.clientID + "-out", cleanStart: false)
        outbound.sessionExpiry = UInt32(configuration.sessionExpiry)
        outbound.inboundBufferSize = 1
        outbound.maxInflight = configuration.delivery.mqttInFlight
        let publisher = try MQTTClient(outbound)
        try await publisher.connect(timeout: .seconds(366 * 86_400))
        let deliverer = try Deliverer(
            configuration: configuration, client: publisher, logger: logger, metrics: metrics, doorbell: doorbell,
            clock: clock, turns: turns, connections: webhookConnections, checkpointer: checkpointer)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { for await _ in Signals.hangups() { wakes.send(Reload()) } }
            group.addTask { await deliverer.run() }
            group.addTask { [checkpointer] in await checkpointer.run() }
            wakes.work()
            for await wake in wakes.stream {
                if Task.isCancelled { break }
                switch wake {
                case .work: wakes.tookWork()
                case .control:
                    logger.notice("SIGHUP: re-reading rules and regions files")
                    try loadFiles(failOnProblems: false)
                }
                try await drain(client, from: arrivals, journal: journal, backlog: backlog)
            }
            group.cancelAll()
        }
        try? await client.publish(statusTopic, #"{"online":false}"#, qos: .atLeastOnce, retain: true)
        await publisher.disconnect()
        await client.disconnect()
    }

    /// Moves what an earlier release journalled in the notifier's file and had not processed
    /// into the arrivals, oldest first, before anything new arrives. A crash in between moves
    /// it again: processed twice, which changes nothing.
    private func moveEarlierInbox(to arrivals: NotifierArrivals) throws {
        while true {
            let rows = try store.inbox(limit: 1000)
            guard let first = rows.first?.seq, let last = rows.last?.seq else { return }
            try arrivals.database.transaction {
                for row in rows { try arrivals.journal(topic: row.topic, payload: row.payload, received: row.received) }
            }
            try store.removeInbox(first...last)
            logger.notice("moved unprocessed messages to the arrivals file", metadata: ["messages": "\(rows.count)"])
        }
    }

    /// SIGHUP: re-read the rules and regions files.
    struct Reload: Sendable {}

    /// Journalled messages processed in one transaction: enough that a commit is a small part
    /// of the batch's cost, few enough that the deliverer, which waits for its turn, is not
    /// held up for long.
    static let drainBatch = 128

    /// Turns at writing the notifier's file: the processing loop's and the deliverer's.
    let turns = WriteTurns()

    /// Processes every journalled message, oldest first, one transaction per batch in its turn
    /// with the deliverer, then removes the batch from the arrivals. Reading and removing the
    /// batch take their turns with the journal (the two share the arrivals' one connection). A
    /// crash in between processes the batch again, which changes nothing (``NotifierStore``).
    private func drain(
        _ client: MQTTClient, from arrivals: NotifierArrivals, journal: ArrivalJournal, backlog: ArrivalsBacklog
    ) async throws {
        while true {
            let rows = try journal.withProcessorTurn { try arrivals.inbox(limit: Self.drainBatch) }
            guard let first = rows.first?.seq, let last = rows.last?.seq else { return }
            var deadletters: [(String, JSONValue)] = []
            var enqueued = 0
            // One transaction for the batch: bad input is caught per row (dead-lettered), so
            // only a storage failure rolls the batch back, to be processed again.
            try await turns.run {
                try store.database.transaction {
                    deadletters = []
                    enqueued = 0
                    for row in rows {
                        do {
                            enqueued += try handle(row)
                        } catch let error as InboundError {
                            deadletters.append(deadletter(row, reason: "\(error)"))
                        } catch let error as RuleError {
                            deadletters.append(deadletter(row, reason: "\(error)"))
                        }
                    }
                }
            }
            try journal.withProcessorTurn { try arrivals.removeInbox(first...last) }
            backlog.processed(rows.count, now: clock.now)
            if enqueued > 0 { doorbell.ring() }
            for (topic, record) in deadletters {
                try? await client.publish(topic, record.serialized(), qos: .atLeastOnce)
            }
        }
    }

    private func deadletter(_ row: NotifierStore.InboxRow, reason: String) -> (String, JSONValue) {
        metrics.add("perimeter_notifier_rejects_total")
        logger.warning("rejected", metadata: ["topic": .string(row.topic), "reason": .string(reason)])
        let venue = venueOf(row.topic) ?? "_"
        let record: JSONValue = [
            "topic": .string(row.topic), "reason": .string(reason),
            "payload": .string(String(decoding: row.payload.prefix(512), as: UTF8.self)),
            "payloadBytes": .number(Double(row.payload.count)), "t": .string(Timestamp.format(row.received)),
        ]
        return ("\(configuration.prefix)/\(venue)/deadletter/notifier", record)
    }

    private func venueOf(_ topic: String) -> String? {
        guard topic.hasPrefix(configuration.prefix + "/") else { return nil }
        let rest = topic.dropFirst(configuration.prefix.count + 1)
        return rest.split(separator: "/", maxSplits: 1).first.map(String.init)
    }

    /// One inbound message; returns how many notifications it queued.
    /// - Throws: ``InboundError`` or ``RuleError`` for bad input (dead-lettered, not retried).
    private func handle(_ row: NotifierStore.InboxRow) throws -> Int {
        guard let venue = venueOf(row.topic), venues[venue] != nil else { return 0 }
        if row.payload.count > configuration.maxPayloadBytes {
            throw InboundError(
                code: "tooLarge",
                "payload of \(row.payload.count) bytes exceeds notifier.maxPayloadBytes (\(configuration.maxPayloadBytes))"
            )
        }
        let levels = row.topic.dropFirst(configuration.prefix.count + venue.count + 2).split(
            separator: "/", omittingEmptySubsequences: false
        ).map { Topics.decodeLevel(String($0)) }
        switch (levels.first, levels.count) {
        case ("enter", 3), ("exit", 3), ("dwell", 3):
            var event = try NotifiedEvent.decode(row.payload, selfOnly: false)
            event.venue = venue
            return try fire(event)
        case ("self", 4):
            var event = try NotifiedEvent.decode(row.payload, selfOnly: true)
            event.venue = venue
            return try fire(event)
        case ("subjects", 3):
            let locale = try preferredLocale(row.payload)
            try store.setLocale(venue: venue, subject: levels[1], locale: locale)
        case ("rules", 2):
            try applyRule(id: levels[1], payload: row.payload, venue: venue)
        case ("regions", 2):
            let name =
                row.payload.isEmpty ? nil : (try? JSONParser.parse(row.payload))?["properties"]?["name"]?.stringValue
            try store.setRegionName(venue: venue, region: levels[1], name: name)
            regionNames[venue, default: [:]][levels[1]] = name
        case ("admin", 3) where levels[1] == "erased":
            let dropped = try store.erase(venue: venue, subject: levels[2])
            logger.notice(
                "subject erased",
                metadata: ["venue": .string(venue), "subject": .string(levels[2]), "notifications": "\(dropped)"])
        default: break
        }
        return 0
    }

    /// `{"locale": "de_DE", …}`; an empty payload forgets the preferences.
    private func preferredLocale(_ payload: [UInt8]) throws(InboundError) -> String? {
        if payload.isEmpty { return nil }
        let value: JSONValue
        do { value = try JSONParser.parse(payload) } catch { throw InboundError(code: "json", "\(error)") }
        guard case .object(let object) = value else {
            throw InboundError(code: "schema", "expected a JSON object, got \(value.typeName)")
        }
        switch object["locale"] {
        case nil, .null?: return nil
        case .string(let locale)?
        where !locale.isEmpty && locale.count <= 35
            && locale.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }):
            return locale
        case let other?:
            throw InboundError(
                code: "schema", field: "locale", "expected a locale like de_DE, got \(other.serialized())")
        }
    }

    private func applyRule(id: String, payload: [UInt8], venue: String) throws {
        if payload.isEmpty {
            try store.setTopicRule(venue: venue, id: id, source: nil)
            topicRules[venue]?[id] = nil
            logger.info("rule deleted", metadata: ["venue": .string(venue), "rule": .string(id)])
            return
        }
        let source = String(decoding: payload, as: UTF8.self)
        var rule = try parseRule(source, id: id).get()
        if rule.id != id {
            throw RuleError(rule: "rule '\(id)'", ["the id in the payload ('\(rule.id)') differs from the topic's"])
        }
        if fileRules[venue]?.contains(where: { $0.id == id }) == true {
            throw RuleError(rule: "rule '\(id)'", ["a rule of the venue's rules file has this id; use another"])
        }
        rule.source = (try? JSONParser.parse(source)) ?? rule.source
        try store.setTopicRule(venue: venue, id: id, source: source)
        topicRules[venue, default: [:]][id] = rule
        logger.info("rule set", metadata: ["venue": .string(venue), "rule": .string(id)])
    }

    /// A venue's rules in the order they are tried: the rules file's, then the live ones by id
    /// (a live rule with a file rule's id is shadowed). Worked out once per change of either, not
    /// per event.
    private func rules(of venue: String) -> [NotificationRule] {
        if let rules = venueRules[venue] { return rules }
        let fromFile = fileRules[venue] ?? []
        let fileIDs = Set(fromFile.map(\.id))
        let rules =
            fromFile + (topicRules[venue] ?? [:]).values.filter { !fileIDs.contains($0.id) }.sorted { $0.id < $1.id }
        venueRules[venue] = rules
        return rules
    }

    /// Every rule the event fires, each once per event: outbox rows and rule state together.
    private func fire(_ event: NotifiedEvent) throws -> Int {
        guard let venue = venues[event.venue] else { return 0 }
        let rules = self.rules(of: venue.id)
        var queued = 0
        let now = clock.now
        for rule in rules where rule.matches(event) {
            if try store.hasFired(event: event.id, rule: rule.id) {
                metrics.add("perimeter_notifier_skips_total", labels: ["reason": "duplicate"])
                continue
            }
            let state = try store.ruleState(venue: venue.id, rule: rule.id, subject: event.subject)
            if case .skip(let reason) = rule.verdict(for: event, state: state, timeZone: venue.conventions.timeZone) {
                metrics.add("perimeter_notifier_skips_total", labels: ["reason": reason])
                continue
            }
            // The subject's own device reads in the subject's language; staff in the venue's.
            let locale =
                rule.audience == .subject ? try store.locale(venue: venue.id, subject: event.subject) : nil
            for channel in rule.channels {
                let notification = renderer.render(
                    rule, event: event, channel: channel, recipientLocale: locale, venue: venue.conventions,
                    regionName: regionNames[venue.id]?[event.region])
                if try store.enqueue(notification, now: now) { queued += 1 }
            }
            try store.setRuleState(
                (state ?? RuleState()).firing(at: event.t), venue: venue.id, rule: rule.id, subject: event.subject)
        }
        return queued
    }

    // MARK: - Metrics

    private func declareMetrics() {
        metrics.declare(
            "perimeter_notifications_total", .counter,
            help: "Delivery attempts by channel and result (sent, retried, failed, dead).")
        metrics.declare(
            "perimeter_notification_latency_seconds", .histogram,
            help: "From queueing a notification to its delivery, by channel.",
            buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600])
        metrics.declare(
            "perimeter_notifier_skips_total", .counter,
            help: "Rule matches that sent nothing, by reason (cooldown, disarmed, quietHours, schedule, duplicate).")
        metrics.declare("perimeter_notifier_rejects_total", .counter, help: "Inbound messages dead-lettered.")
        metrics.declare(
            "perimeter_webhook_connections_opened_total", .counter,
            help:
                "Connections opened for webhook deliveries, by channel (as many as the deliveries when the receiver keeps none open)."
        )
        metrics.declare(
            "perimeter_notifier_arrivals_pending", .gauge,
            help: "Events journalled and not yet processed (the arrivals file's backlog).")
        ArrivalJournal.declareMetrics(in: metrics)
        IntakeGate.declareMetrics(in: metrics)
        metrics.declare("perimeter_notifier_outbox", .gauge, help: "Outbox rows by state.")
        metrics.declare("perimeter_broker_connected", .gauge, help: "1 while connected to the broker, as last checked.")
    }

    private func startHTTP(
        _ client: MQTTClient, journal: ArrivalJournal, backlog: ArrivalsBacklog
    ) throws -> HTTPServer? {
        guard let http = configuration.http else { return nil }
        let metrics = metrics
        let path = configuration.databasePath
        let connections = webhookConnections
        let server = try HTTPServer(host: http.host, port: http.port) { request in
            switch request {
            case "/metrics":
                metrics.set("perimeter_broker_connected", client.state.isConnected ? 1 : 0)
                for (channel, kept) in connections {
                    metrics.set(
                        "perimeter_webhook_connections_opened_total", Double(kept.opened), labels: ["channel": channel])
                }
                journal.updateMetrics(metrics)
                backlog.intake.updateMetrics(metrics)
                metrics.set(
                    "perimeter_notifier_arrivals_pending",
                    Double(backlog.pending))
                if let store = try? NotifierStore(path: path, readOnly: true) {
                    for state in NotifierStore.State.allCases {
                        metrics.set(
                            "perimeter_notifier_outbox", Double((try? store.count(state)) ?? 0),
                            labels: ["state": state.rawValue])
                    }
                }
                return HTTPServer.Response(
                    contentType: "text/plain; version=0.0.4; charset=utf-8", body: metrics.exposition())
            case "/healthz":
                let connected = client.state.isConnected
                // Degraded is still healthy (200): arrivals the journal could not write are lost.
                let degraded = [journal.degradation].compactMap { $0 }.map(JSONValue.string)
                let body: JSONValue = [
                    "status": .string(!connected ? "unhealthy" : degraded.isEmpty ? "ok" : "degraded"),
                    "brokerConnected": .bool(connected), "degraded": .array(degraded),
                ]
                return HTTPServer.Response(
                    status: connected ? 200 : 503, contentType: "application/json", body: body.serialized() + "\n")
            default:
                return HTTPServer.Response(status: 404, body: "try /metrics or /healthz\n")
            }
        }
        server.start()
        return server
    }
}

/// The arrivals not processed yet, counted in memory: the arrivals file is held by the running
/// notifier alone (``NotifierArrivals``), so `/metrics` cannot count its rows from outside.
/// Waiting = what was there at start + what the journal wrote since − what was processed, as the
/// intake gate counts it (which holds the network thread back past `maxJournalBacklog`).
final class ArrivalsBacklog: Sendable {
    /// Holds the network thread back past `notifier.maxJournalBacklog`.
    let intake: IntakeGate
    /// Counted from the arrivals waiting at the start.
    private let journalled: Atomic<Int>
    private let processedSinceStart = Atomic<Int>(0)

    init(waiting: Int, highWater: Int, now: Date) {
        intake = IntakeGate(highWater: highWater)
        journalled = Atomic(waiting)
        intake.journalled(through: Int64(waiting), now: now)
    }

    /// The network thread committed `count` more arrivals.
    func journalled(_ count: Int, now: Date) {
        intake.journalled(through: Int64(journalled.add(count, ordering: .relaxed).newValue), now: now)
    }

    func processed(_ count: Int, now: Date) {
        intake.processed(through: Int64(processedSinceStart.add(count, ordering: .relaxed).newValue), now: now)
    }

    var pending: Int { Int(intake.backlog) }
}
