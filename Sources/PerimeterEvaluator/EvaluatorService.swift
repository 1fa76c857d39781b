import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNet
import PerimeterStore
import Synchronization

/// `perimeter evaluator`: observations in over MQTT; enter, exit, dwell, state, occupancy,
/// ranging and place out (topics.md is the contract).
///
/// Crash safety: every inbound message is journalled in SQLite on the MQTT network thread as
/// it arrives (libmosquitto has already acknowledged it by then; the journal write is the
/// only window). The journal is processed in order by the pure ``VenueEvaluator``; a row's
/// outputs go to the outbox in the same transaction that advances the processed cursor, and
/// are published after the commit and marked sent on PUBACK. After `kill -9` the journal up
/// to the cursor is replayed to rebuild the engines, unacknowledged outbox rows are published
/// again with their original event ids, and processing goes on.
public struct EvaluatorService: Service {
    /// Mosquitto's count of messages it dropped (queue limits, in-flight limits) since it started.
    public static let brokerDroppedTopic = "$SYS/broker/publish/messages/dropped"

    public let configuration: EvaluatorConfiguration
    public let logger: Logger
    /// Where the service's time comes from: arrival times, ticks, lag, stats, the standby window.
    public let clock: any TimeSource
    /// How far the service has got: what it journalled last, what it has processed. Tests that
    /// move a manual clock wait on it to know an input was taken before time moves on.
    public let progress = EvaluatorProgress()
    public var name: String { "evaluator" }

    public init(configuration: EvaluatorConfiguration, logger: Logger, clock: any TimeSource = SystemTimeSource()) {
        // Event ids are hashed by libcrypto (byte-identical to the core's pure SHA-256).
        var configuration = configuration
        for index in configuration.venues.indices {
            configuration.venues[index].settings.geofence.idHasher = EventIDHasher(LibcryptoSHA256())
            configuration.venues[index].settings.beacons.idHasher = EventIDHasher(LibcryptoSHA256())
        }
        self.configuration = configuration
        self.logger = logger
        self.clock = clock
    }

    public func run() async throws {
        let runtime = try EvaluatorRuntime(
            configuration: configuration, logger: logger, clock: clock, progress: progress)
        try await runtime.run()
    }
}

/// How far an evaluator has got (see ``EvaluatorService/progress``).
public final class EvaluatorProgress: Sendable {
    /// The last journal row processed.
    public let processed = Atomic<Int64>(0)
    private let recent = Mutex<[(topic: String, seq: Int64)]>([])

    public init() {}

    func journalled(_ topic: String, seq: Int64) {
        recent.withLock { recent in
            recent.append((topic, seq))
            if recent.count > 256 { recent.removeFirst(recent.count - 128) }
        }
    }

    /// The journal row of the latest arrival on `topic` among the recent ones, if any.
    public func journalRow(of topic: String) -> Int64? {
        recent.withLock { $0.last { $0.topic == topic }?.seq }
    }
}

/// Why the evaluator serves less than it was configured to (a regions file with invalid
/// features): read by `/healthz` on the HTTP thread, written by the runtime.
final class Degradation: Sendable {
    private let reasons = Mutex<[String: [String]]>([:])

    /// Replaces the reasons from one source (`file:{venue}`, `reload:{venue}`).
    func set(_ source: String, _ list: [String]) {
        reasons.withLock { $0[source] = list.isEmpty ? nil : list }
    }

    var all: [String] { reasons.withLock { reasons in reasons.keys.sorted().flatMap { reasons[$0]! } } }
}

/// What the evaluator counts, published on `{prefix}/_sys/evaluator/{instance}/stats`.
struct EvaluatorStats {
    var observations: [String: Int] = [:]
    var events: [String: Int] = [:]
    var rejects: [String: Int] = [:]
    /// Parts of accepted messages refused on their own (bad adverts), by code.
    var refusedParts: [String: Int] = [:]
    var privacyDrops: [String: Int] = [:]
    var ignored = 0
    var published = 0
    var lastLag: Double = 0

    func payload(queueDepth: Int, unsent: Int, instance: String, journalFailures: Int, now: Date) -> JSONValue {
        func object(_ counts: [String: Int]) -> JSONValue {
            .object(JSONObject(counts.sorted { $0.key < $1.key }.map { ($0.key, .number(Double($0.value))) }))
        }
        return [
            "instance": .string(instance), "t": .string(Timestamp.format(now)),
            "observationsIn": object(observations), "eventsOut": object(events), "rejects": object(rejects),
            "refusedParts": object(refusedParts),
            "privacyDrops": object(privacyDrops),
            "ignored": .number(Double(ignored)), "published": .number(Double(published)),
            "queueDepth": .number(Double(queueDepth)), "outboxUnsent": .number(Double(unsent)),
            "lagSeconds": .number((lastLag * 1000).rounded() / 1000),
            "journalFailures": .number(Double(journalFailures)),
        ]
    }
}

/// The evaluator's working state for one run of the service (one task; not shared).
final class EvaluatorRuntime {
    let configuration: EvaluatorConfiguration
    let logger: Logger
    let clock: any TimeSource
    let store: EvaluatorStore
    /// Checkpoints the database for the processor's and the network thread's connections, off
    /// both (a child service of `serve`).
    let checkpointer: WALCheckpointer
    private var venues: [String: VenueEvaluator] = [:]
    /// The counters processing adds to, handed to ``metrics`` once per group of rows.
    private var counts = Metrics.Counts()

    /// Changes the evaluator of `venue` (one served) in place. Not `venues[venue]!.…`:
    /// Dictionary's `modify` copies the value it writes back, and a copy of a venue's evaluator
    /// retains and releases every table in it; per row, that was ~4% of processing (`perf`,
    /// `bench pipeline --transition-every 10`). `Dictionary.Values` yields the element itself.
    func withVenue<Result>(_ venue: String, _ body: (inout VenueEvaluator) -> Result) -> Result {
        let index = venues.index(forKey: venue)!
        return body(&venues.values[index])
    }
    private let topics: [String: Topics]
    private let venueIDs: Set<String>
    /// Venues split over several evaluators (`venues.{id}.partitions`), and what this
    /// evaluator holds of them (EvaluatorPartitions.swift).
    let partitionSettings: [String: EvaluatorConfiguration.VenuePartitions]
    let partitionedIDs: Set<String>
    var partitionState = PartitionRunState()
    /// The venues whose publisher is decided by the retained leases: those not partitioned.
    private var leasedVenueIDs: [String] { venueIDs.subtracting(partitionedIDs).sorted() }
    private var fileText: [String: String] = [:]
    private var fileRegionIDs: [String: Set<String>] = [:]
    private var cursor: Int64 = 0
    private var stats = EvaluatorStats()
    /// Agents' message numbers, per venue and agent: gaps are input lost on the way.
    private var sequences = SequenceWatch()
    /// Messages missing from agents' numbering since start, per venue.
    private var missing: [String: Int] = [:]
    /// Journal rows processed since the last snapshot.
    private var sinceSnapshot = 0
    private var snapshotSoon = false
    /// `/metrics` (Prometheus text) and what `/healthz` reads.
    let metrics = Metrics()
    /// Invalid regions-file features being left out: `/healthz` says `degraded`.
    let degradation = Degradation()

    /// What a snapshot holds: every venue's state and what the runtime needs to apply rows
    /// exactly as before (the regions files as last applied).
    struct Snapshot: Codable {
        var venues: [String: VenueEvaluator.Snapshot]
        var fileText: [String: String]
        var fileRegionIDs: [String: Set<String>]
        /// Written by versions whose venue clock was the latest observation time (moved on by
        /// the wall time since it arrived); read only to report a clock a future-dated
        /// observation had pushed ahead. Venue time is the service's clock now.
        var clockEvents: [String: Date]?
        var clockWalls: [String: Date]?
        /// The partitions each partitioned venue held as of the snapshot (the rows after it
        /// are filtered by them); absent before partitions.
        var partitionsHeld: [String: [Int]]? = nil
    }

    /// What one journal row produced.
    struct Applied {
        var venue: String?
        var outputs: [EvaluatorOutput] = []
        var deadletter: OutboundMessage?
        /// One per part of an accepted message refused on its own (a bad advert of a scan).
        var partDeadletters: [OutboundMessage] = []
    }

    let progress: EvaluatorProgress

    init(
        configuration: EvaluatorConfiguration, logger: Logger, clock: any TimeSource,
        progress: EvaluatorProgress = EvaluatorProgress()
    ) throws {
        self.progress = progress
        self.configuration = configuration
        self.logger = logger
        self.clock = clock
        store = try EvaluatorStore(path: configuration.databasePath)
        checkpointer = WALCheckpointer(path: configuration.databasePath) { [logger] error in
            logger.warning("WAL checkpoint failed; the next commit asks again", metadata: ["error": "\(error)"])
        }
        store.database.leaveCheckpoints(to: checkpointer)
        var topics: [String: Topics] = [:]
        for venue in configuration.venues {
            venues[venue.settings.id] = VenueEvaluator(settings: venue.settings, regions: [])
            topics[venue.settings.id] = Topics(prefix: configuration.prefix, venue: venue.settings.id)
        }
        self.topics = topics
        venueIDs = Set(topics.keys)
        var partitionSettings: [String: EvaluatorConfiguration.VenuePartitions] = [:]
        for venue in configuration.venues { partitionSettings[venue.settings.id] = venue.partitions }
        self.partitionSettings = partitionSettings
        partitionedIDs = Set(partitionSettings.keys)
        declareMetrics()
        try replay()
    }

    // MARK: - Start-up

    /// Rebuilds the engines from the latest snapshot and the journal after it, up to the
    /// processed cursor, publishing nothing.
    private func replay() throws {
        cursor = try store.processedCursor()
        var after: Int64 = 0
        var count = 0
        let started = ContinuousClock.now
        if let (seq, data) = try store.loadSnapshot() {
            let snapshot: Snapshot
            let decoding = ContinuousClock.now
            do {
                snapshot = try VenueEvaluator.decodeSnapshot(
                    Snapshot.self, from: data, source: "the state snapshot in \(configuration.databasePath)")
            } catch {
                // The journal up to the snapshot is gone: replaying what is left would start
                // from a state that never was. Refuse, and say what to do.
                throw EvaluatorError(
                    "cannot read \(error) (written by another version, or damaged). The journal before it was dropped "
                        + "when it was written, so the state cannot be rebuilt without it: restore the database from a "
                        + "backup, run the version that wrote it, or move the database aside to start from an empty state."
                )
            }
            logger.info(
                "snapshot decoded",
                metadata: [
                    "format": .string(BinaryFormat.isBinary(data) ? "binary" : "json"),
                    "seconds": "\(ContinuousClock.now - decoding)",
                ])
            for venue in configuration.venues {
                if let state = snapshot.venues[venue.settings.id] {
                    venues[venue.settings.id] = VenueEvaluator(settings: venue.settings, restoring: state)
                }
            }
            fileText = snapshot.fileText
            fileRegionIDs = snapshot.fileRegionIDs
            partitionState.held = (snapshot.partitionsHeld ?? [:]).mapValues(Set.init)
            for (venue, ids) in fileRegionIDs where venues[venue]?.fileRegionIDs.isEmpty == true {
                withVenue(venue) { $0.noteFileRegions(ids) }
            }
            for (venue, text) in fileText { _ = noteRegionsFile(venue: venue, RegionParser.parse(text: text)) }
            reportFutureClocks(snapshot)
            after = seq
            logger.info("state restored from a snapshot", metadata: ["seq": "\(seq)", "bytes": "\(data.count)"])
        }
        while after < cursor {
            let rows = try store.inbox(after: after, through: cursor, limit: 4096)
            guard let last = rows.last else { break }
            for row in rows { _ = apply(row) }
            count += rows.count
            after = last.seq
        }
        metrics.add(&counts)
        if count > 0 {
            logger.info(
                "state rebuilt from the journal",
                metadata: ["rows": "\(count)", "seconds": "\(ContinuousClock.now - started)"])
        }
        sinceSnapshot = count
        if sinceSnapshot >= configuration.snapshotEvery { try takeSnapshot() }
        returnFreedMemoryToSystem()
    }

    private var currentSnapshot: Snapshot {
        Snapshot(
            venues: venues.mapValues(\.snapshot), fileText: fileText, fileRegionIDs: fileRegionIDs,
            partitionsHeld: partitionState.held.mapValues { $0.sorted() })
    }

    /// Reports what a future-dated observation did to a database written by an older version:
    /// a venue clock ahead of its wall clock (gone now: venue time is the service's clock),
    /// and subjects whose tracks are dated ahead of now (they are reset, so that their
    /// genuine observations are not refused as out of order from now on).
    private func reportFutureClocks(_ snapshot: Snapshot) {
        let now = clock.now
        for venue in configuration.venues {
            let id = venue.settings.id
            let skew = venue.settings.trust.maxFutureSkew
            if let event = snapshot.clockEvents?[id], let wall = snapshot.clockWalls?[id],
                event.timeIntervalSince(wall) > skew
            {
                metrics.add("perimeter_clock_repairs_total", labels: ["venue": id, "what": "venueClock"])
                logger.warning(
                    "the venue clock had been moved ahead by a future-dated observation; venue time now follows the service's clock",
                    metadata: [
                        "venue": .string(id), "venueClock": .string(Timestamp.format(event)),
                        "wall": .string(Timestamp.format(wall)),
                    ])
            }
            guard venues.keys.contains(id) else { continue }
            let repaired = withVenue(id) { $0.resetTracks(datedAfter: now.addingTimeInterval(skew), at: now) }
            if !repaired.isEmpty {
                metrics.add(
                    "perimeter_clock_repairs_total", Double(repaired.count), labels: ["venue": id, "what": "subjects"])
                logger.warning(
                    "subjects whose last observation was dated in the future were reset (their states become unknown until they are observed again)",
                    metadata: ["venue": .string(id), "subjects": "\(repaired.count)"])
            }
        }
    }

    /// Saves the whole state as of the cursor and drops the journal up to it, now (at start and
    /// at shutdown, when no background snapshot can be in flight; after an erasure through
    /// ``takeSnapshotNow()``).
    private func takeSnapshot() throws {
        let started = ContinuousClock.now
        let data = try VenueEvaluator.encodeSnapshot(currentSnapshot)
        try store.saveSnapshot(seq: cursor, data: data, now: clock.now)
        sinceSnapshot = 0
        lastSnapshotAt = clock.now
        logger.info(
            "snapshot taken",
            metadata: ["seq": "\(cursor)", "bytes": "\(data.count)", "seconds": "\(ContinuousClock.now - started)"])
    }

    /// A snapshot now, after the one in flight has landed (after an erasure the old snapshot
    /// must not outlive the subject).
    private func takeSnapshotNow() async throws {
        await snapshotWriter.idle()
        try takeSnapshot()
    }

    /// The periodic snapshot: the state is copied here (cheap: value types) and handed to the
    /// ``SnapshotWriter``, which encodes and writes it through its own connection so that
    /// processing does not stop for it. While one is in flight the next waits for a later turn.
    private func takeSnapshotInBackground() {
        guard snapshotWriter.offer(SnapshotWriter.Job(snapshot: currentSnapshot, seq: cursor, now: clock.now)) else {
            return
        }
        sinceSnapshot = 0
        lastSnapshotAt = clock.now
    }

    /// Writes the snapshots ``takeSnapshotInBackground()`` hands over (a child of `run()`).
    private(set) lazy var snapshotWriter = SnapshotWriter { [path = configuration.databasePath, logger] job in
        let started = ContinuousClock.now
        do {
            let data = try VenueEvaluator.encodeSnapshot(job.snapshot)
            try EvaluatorStore(path: path).saveSnapshot(seq: job.seq, data: data, now: job.now)
            returnFreedMemoryToSystem()
            logger.info(
                "snapshot taken",
                metadata: [
                    "seq": "\(job.seq)", "bytes": "\(data.count)", "seconds": "\(ContinuousClock.now - started)",
                    "background": "true",
                ])
        } catch {
            logger.error(
                "snapshot failed; the journal is kept and the next snapshot tries again",
                metadata: ["error": "\(error)"])
        }
    }

    /// Journals each venue's regions file when it differs from what the journal last applied.
    ///
    /// A file with invalid features is served without them (each is logged here, dead-lettered
    /// when the row is applied, and `/healthz` says `degraded`), unless the venue sets
    /// `strictRegions`: then it is refused as a whole — at start (`failOnProblems`) the
    /// evaluator does not start; on SIGHUP the regions in use stay.
    private func journalRegionFiles(failOnProblems: Bool) throws {
        for venue in configuration.venues {
            guard let path = venue.regionsPath else { continue }
            let id = venue.settings.id
            guard let data = FileManager.default.contents(atPath: path) else {
                if failOnProblems { throw EvaluatorError("venue '\(id)': cannot read regions file \(path)") }
                logger.error("cannot read regions file; keeping the regions in use", metadata: ["path": .string(path)])
                continue
            }
            let text = String(decoding: data, as: UTF8.self)
            let document = RegionParser.parse(text: text)
            degradation.set("reload:\(id)", [])
            for warning in document.warnings {
                logger.warning(
                    "regions file: coordinate clamped", metadata: ["path": .string(path), "where": "\(warning)"])
            }
            if !document.problems.isEmpty && venue.strictRegions {
                let problems = document.problems.map(\.description).joined(separator: "; ")
                if failOnProblems { throw EvaluatorError("venue '\(id)': \(path): \(problems)") }
                logger.error(
                    "regions file has problems and strictRegions is set; keeping the regions in use",
                    metadata: ["path": .string(path), "problems": .string(problems)])
                degradation.set(
                    "reload:\(id)",
                    ["venue \(id): \(path) not reloaded (strictRegions): \(document.problems.count) problem(s)"])
                continue
            }
            for problem in document.problems {
                logger.error(
                    "regions file: invalid feature left out; serving the valid ones",
                    metadata: ["venue": .string(id), "path": .string(path), "problem": "\(problem)"])
            }
            if fileText[id] != text {
                try store.journal(.regionsFile, topic: id, payload: Array(data), received: clock.now)
                logger.info(
                    "regions file loaded", metadata: ["venue": .string(id), "regions": "\(document.regions.count)"])
            }
        }
    }

    // MARK: - Running

    /// Whether this evaluator publishes (active) or only processes (standby).
    private var publishing = true

    func run() async throws {
        lastSnapshotAt = clock.now
        try journalRegionFiles(failOnProblems: true)
        try reconcileHomeAssistant()
        // Who serves the venues is settled before the main session subscribes anything.
        let lease = try LeaseKeeper(configuration: configuration, logger: logger, clock: clock)
        // The broker may come up after us: the first connect waits for it.
        try await sayingWhileTheBrokerIsAway(endpoint: configuration.broker.mqttConfiguration().endpoint) {
            try await lease.start(wait: configuration.leaseWait)
        }
        // The lease keeper's session ends when serving ends, however it ends, before run returns.
        do {
            try await serve(lease: lease)
        } catch {
            await lease.stop()
            throw error
        }
        await lease.stop()
    }

    /// Runs `connecting` (connects that wait for the broker as long as it takes, the clients
    /// backing off) while a child task warns every 10 s of the service's clock that the broker
    /// is not reachable yet; the child ends with the wait.
    private func sayingWhileTheBrokerIsAway(endpoint: String, _ connecting: () async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [logger, clock] in
                while (try? await clock.sleep(for: .seconds(10))) != nil {
                    logger.warning("broker not reachable yet; still trying", metadata: ["broker": .string(endpoint)])
                }
            }
            defer { group.cancelAll() }
            try await connecting()
        }
    }

    /// Serves the venues once the lease keeper runs: settles who publishes, then journals,
    /// processes and publishes until cancelled.
    private func serve(lease: LeaseKeeper) async throws {
        switch LeasePolicy.start(
            role: configuration.role, me: configuration.instance, venues: leasedVenueIDs, view: lease.view)
        {
        case .refuse(let reason):
            throw EvaluatorError(reason)
        case .active: publishing = true
        case .standby: publishing = false
        }
        let journalStore = try EvaluatorStore(path: configuration.databasePath)
        journalStore.database.leaveCheckpoints(to: checkpointer)
        // Partitioned venues: leases first; nothing is held until they say so (after a restart
        // what this evaluator held may have moved: its subjects are dropped).
        let partitioned = try partitionedIDs.sorted().map { id in
            try PartitionedVenue(
                venue: id, topics: topics[id]!, settings: partitionSettings[id]!, instance: configuration.instance,
                broadcast: broadcastAgents(of: id), logger: logger)
        }
        for venue in partitioned {
            partitionState.served[venue.venue] = venue
            try journalPartitions(venue: venue.venue, [])
        }
        defer { for venue in partitioned { venue.close() } }
        let gate = partitioned.isEmpty ? nil : PartitionGate(venues: partitioned)
        // Ticks, stats, lease changes, reloads and reconnections each count; arrivals and
        // acknowledgements only say "there is work" (coalesced).
        let wakes = Wakes<Wake>()
        let signalWork: @Sendable () -> Void = { wakes.work() }
        if !partitioned.isEmpty {
            partitionState.streamJournal = try PartitionStreamJournal(
                path: configuration.databasePath, clock: clock, logger: logger
            ) { [progress] topic, seq in
                progress.journalled(topic, seq: seq)
                signalWork()
            }
        }
        let limit = configuration.limits.maxPayloadBytes
        let metrics = metrics
        let intake = IntakeGate(highWater: configuration.maxJournalBacklog)
        self.intake = intake
        intake.processed(through: cursor, now: clock.now)
        defer { intake.openForever() }
        let journal = ArrivalJournal(logger: logger) { [clock, progress] messages in
            // Sizes are checked before anything is stored: an oversized payload leaves a stub.
            let received = clock.now
            let seqs = try journalStore.journal(
                messages.map {
                    $0.payload.count > limit
                        ? (.oversized, $0.topic, Array(String($0.payload.count).utf8))
                        : (.arrival, $0.topic, $0.payload)
                }, received: received
            ) {
                if let least = Self.faultKillInJournal, messages.count >= least {
                    Self.killInsideGroupCommit(messages.count)
                }
            }
            for (message, seq) in zip(messages, seqs) { progress.journalled(message.topic, seq: seq) }
            if let last = seqs.last { intake.journalled(through: last, now: received) }
            signalWork()
        }
        // What arrives is journalled, except what is kept in memory only.
        let receive: @Sendable (MQTTMessage) -> Void = { message in
            if message.topic == EvaluatorService.brokerDroppedTopic {
                EvaluatorService.noteBrokerDropped(message.payload, retained: message.retain, metrics: metrics)
                return
            }
            // Occupancy parts are summed, not evaluated: kept in memory, never journalled.
            for venue in partitioned {
                guard let wake = venue.notePart(message) else { continue }
                if wake { wakes.send(.occupancy) }
                return
            }
            journal.append(message)
        }
        var mqtt = configuration.broker.mqttConfiguration(
            cleanStart: false,
            will: MQTTConfiguration.Will(
                topic: statusTopic, payload: Array(#"{"online":false}"#.utf8), qos: .atLeastOnce, retain: true))
        mqtt.sessionExpiry = UInt32(configuration.sessionExpiry)
        // Announced in CONNECT (MQTT 5): the broker sends nothing larger. Between the payload
        // limit and this, an arrival is journalled as a stub and dead-lettered.
        mqtt.maximumPacketSize = UInt32(clamping: configuration.limits.maxPayloadBytes * 4 + 65_536)
        // Arrivals are journalled (and the processor woken) on the network thread; nothing is
        // queued on `client.messages` (a second copy of each message that nobody read).
        mqtt.inboundBufferSize = 0
        arrivals = journal
        // After each burst: its group commit, then (past `maxJournalBacklog`) a pause before the
        // next read, so that the processor keeps the CPU and the broker keeps the rest.
        let client = try MQTTClient(
            mqtt, onReceive: receive,
            onBurstEnd: {
                journal.flush()
                intake.waitForRoom()
            })
        // Outputs go out on a connection of their own. On the one connection, the network thread
        // that reads arrivals (and waits its turn at the journal while the processor commits)
        // also read the outputs' acknowledgements: under 4× overload the evaluator processed
        // 2,654 observations/s while 39/s of their events reached consumers (`bench pipeline`).
        // Its own session (clean start off) says whether the broker kept the retained picture.
        var outbound = configuration.broker.mqttConfiguration(
            clientID: configuration.broker.clientID + "-out", cleanStart: false)
        outbound.sessionExpiry = UInt32(configuration.sessionExpiry)
        let output = try MQTTClient(outbound)
        let server = try startHTTP(client, output: output, journal: journal, intake: intake)
        defer { server?.stop() }
        // The broker may have gone since the lease keeper's connect: the same wait, said the same way.
        try await sayingWhileTheBrokerIsAway(endpoint: mqtt.endpoint) {
            try await client.connect(timeout: .seconds(366 * 86_400))
        }
        for filter in subscriptions { try await client.subscribe(filter, qos: .atLeastOnce) }
        // Loss the evaluator can see: Mosquitto counts messages it dropped (queue limits). Other
        // brokers may refuse `$SYS`; that is said once and costs nothing else.
        do {
            _ = try await client.subscribe(EvaluatorService.brokerDroppedTopic, qos: .atMostOnce)
        } catch {
            logger.notice(
                "the broker's dropped-message counter is not available; loss at the broker cannot be reported",
                metadata: ["topic": .string(EvaluatorService.brokerDroppedTopic), "error": "\(error)"])
        }
        try await output.connect(timeout: .seconds(366 * 86_400))
        try await publishStatus(client)
        if publishing && !leasedVenueIDs.isEmpty { try await lease.claim(leasedVenueIDs, takenOver: false) }
        logger.info(
            "evaluator running",
            metadata: [
                "venues": .string(venueIDs.sorted().joined(separator: ",")), "broker": .string("\(client.endpoint)"),
                "database": .string(configuration.databasePath), "role": .string(publishing ? "active" : "standby"),
            ])
        var publisherGate: OutboxPublisher.Gate?
        if let gate { publisherGate = { await gate($0) } }
        let publisher = OutboxPublisher(
            client: output, maxUnacknowledged: configuration.maxUnacknowledged, gate: publisherGate
        ) {
            signalWork()
        }
        self.publisher = publisher
        let snapshotWriter = snapshotWriter
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await publisher.run() }
            group.addTask { await snapshotWriter.run() }
            group.addTask { [checkpointer] in await checkpointer.run() }
            if publishing { try await publishUnsent() }
            group.addTask { [clock, tick = configuration.tickInterval] in
                while true {
                    try await clock.sleep(seconds: tick)
                    wakes.send(.tick(clock.now))
                }
            }
            group.addTask { [clock, interval = configuration.statsInterval] in
                while true {
                    try await clock.sleep(seconds: interval)
                    wakes.send(.stats)
                }
            }
            group.addTask {
                // Every connection after the first, and a first one without a stored session,
                // may meet a broker that lost its retained messages: republish the picture.
                var first = true
                for await state in output.connectionStates() {
                    guard case .connected(let sessionPresent) = state else { continue }
                    defer { first = false }
                    if first && sessionPresent { continue }
                    wakes.send(.reconnected)
                }
            }
            group.addTask {
                for await _ in Signals.hangups() { wakes.send(.reload) }
            }
            group.addTask {
                for await _ in lease.changed { wakes.send(.lease) }
            }
            for venue in partitioned {
                // The keeper's own monotonic clock (ContinuousClock: it counts through a pause);
                // its rounds run off the cooperative pool (they block on the store).
                group.addTask { [keeper = venue.keeper, ttl = venue.settings.lease.ttl, venue, metrics] in
                    while !Task.isCancelled {
                        let round = await keeper.stepAsync()
                        for (kind, partitions) in [
                            ("acquired", round.acquired), ("released", round.released), ("lost", round.lost),
                        ] where !partitions.isEmpty {
                            metrics.add(
                                "perimeter_partition_moves_total", Double(partitions.count),
                                labels: ["venue": venue.venue, "kind": kind])
                        }
                        metrics.set(
                            "perimeter_partitions_held", Double(keeper.held.count), labels: ["venue": venue.venue])
                        if !round.acquired.isEmpty || !round.released.isEmpty || !round.lost.isEmpty
                            || venue.unread.withLock({ !$0.isEmpty })
                        {
                            wakes.send(.partitions)
                        }
                        try await Task.sleep(for: ttl / 6)
                    }
                }
            }
            for venue in partitioned {
                group.addTask {
                    [clock, logger, keeper = venue.keeper, filter = venue.topics.allOccupancyParts, id = venue.venue] in
                    while true {
                        try await clock.sleep(seconds: EvaluatorRuntime.partsRereadInterval)
                        guard keeper.held[0] != nil, client.state.isConnected else { continue }
                        do {
                            _ = try await client.subscribe(filter, qos: .atLeastOnce)
                        } catch {
                            logger.warning(
                                "could not ask for the occupancy parts again",
                                metadata: ["venue": .string(id), "error": "\(error)"])
                        }
                    }
                }
            }
            signalWork()
            for await reason in wakes.stream {
                if Task.isCancelled { break }
                switch reason {
                case .work: wakes.tookWork()
                case .control(.tick(let fired)): try journalTicks(fired: fired)
                case .control(.stats):
                    await publishStats(client, journal: journal)
                    if !partitioned.isEmpty { try await publisher.send(occupancyTotals(reconcile: true)) }
                    if !publishing { try store.dropUnsent(before: clock.now - configuration.standbyWindow) }
                    try keepRetention()
                case .control(.reconnected):
                    if publishing { try await republishRetained() }
                    // Totals are not outbox rows: one in flight when the connection went is sent
                    // again, with every other, as if partition 0 had just been taken.
                    for id in partitionState.served.keys { partitionState.totals[id] = [:] }
                    if !partitioned.isEmpty { try await publisher.send(occupancyTotals()) }
                case .control(.lease): try await followLease(lease, client)
                case .control(.partitions):
                    try await followPartitions()
                    try await publisher.send(occupancyTotals())
                case .control(.occupancy): try await publisher.send(occupancyTotals())
                case .control(.reload):
                    logger.notice("SIGHUP: re-reading regions files")
                    try journalRegionFiles(failOnProblems: false)
                }
                try await drain(output, more: signalWork)
            }
            group.cancelAll()
        }
        // What was acknowledged before the end is recorded; the rest is published again next run.
        try? recordAcknowledged()
        if sinceSnapshot > 0 || snapshotWriter.lostAJob {
            do { try takeSnapshot() } catch {
                logger.error("snapshot at shutdown failed", metadata: ["error": "\(error)"])
            }
        }
        await output.disconnect()
        try? await client.publish(statusTopic, #"{"online":false}"#, qos: .atLeastOnce, retain: true)
        await client.disconnect()
    }

    /// A tick carries the moment its timer fired.
    enum Wake { case tick(Date), stats, reload, lease, reconnected, partitions, occupancy }

    /// Home Assistant discovery as configured now, for the regions and subjects the state
    /// already holds (discovery just turned on, its settings changed, or turned off): committed
    /// to the outbox like any output, and published with the rest once connected.
    private func reconcileHomeAssistant() throws {
        let retained = try store.retainedConfigs()
        for id in venueIDs.sorted() {
            guard let topics = topics[id], venues.keys.contains(id) else { continue }
            let messages = withVenue(id) { $0.reconcileHomeAssistant(retained: retained) }.flatMap {
                $0.messages(topics: topics)
            }
            guard !messages.isEmpty else { continue }
            _ = try store.commit(seq: cursor, messages: messages, now: clock.now)
            logger.info(
                "Home Assistant discovery configs brought up to date",
                metadata: ["venue": .string(id), "messages": "\(messages.count)"])
        }
    }

    /// After a takeover the broker's discovery configs still name the failed evaluator's status
    /// as their availability: publish ours (the retained table holds them with our status topic).
    private func republishDiscovery() async throws {
        guard let publisher else { return }
        let owners = configuration.venues.compactMap { venue in
            venue.settings.homeAssistant.map { HomeAssistantDiscovery(settings: $0, venue: venue.settings.id) }
        }
        guard !owners.isEmpty else { return }
        let configs = try store.retainedConfigs().filter { topic, _ in owners.contains { $0.isOwnConfigTopic(topic) } }
        try await publisher.send(
            configs.sorted { $0.key < $1.key }.map { topic, payload in
                OutboxPublisher.Row(
                    number: 0,
                    message: Self.mqttMessage(OutboundMessage(topic: topic, payload: payload, qos: 1, retain: true)))
            })
        logger.notice(
            "Home Assistant discovery configs republished with this evaluator's availability",
            metadata: ["configs": "\(configs.count)"])
    }

    /// When the last snapshot (which prunes the journal up to it) was taken, on the service's clock.
    private var lastSnapshotAt: Date?

    /// The documented schedule (docs/operations.md, Retention): a snapshot at least every
    /// `snapshotInterval` when anything was journalled since (so a quiet venue's journal does not
    /// wait for `snapshotEvery` rows), and refused outbox rows deleted after `refusedRetention`.
    /// Sent rows keep the last 10,000 to 11,000; erasure removes a subject's rows at once.
    private func keepRetention() throws {
        let now = clock.now
        if sinceSnapshot > 0, let last = lastSnapshotAt, now.timeIntervalSince(last) >= configuration.snapshotInterval {
            takeSnapshotInBackground()
        }
        let dropped = try inTurn { try store.dropRefused(before: now - configuration.refusedRetention) }
        if dropped > 0 {
            logger.info("refused outbox rows past their retention deleted", metadata: ["rows": "\(dropped)"])
        }
    }

    /// The publishing stage (set once connected).
    private var publisher: OutboxPublisher?
    /// The partitioned venues' check before each publish (nil without partitioned venues).
    private var partitionGate: PartitionGate? {
        partitionState.served.isEmpty
            ? nil : PartitionGate(venues: partitionState.served.values.sorted { $0.venue < $1.venue })
    }

    private func publishStatus(_ client: MQTTClient) async throws {
        let status: JSONValue = [
            "online": true, "instance": .string(configuration.instance),
            "role": .string(publishing ? "active" : "standby"),
            "venues": .array(venueIDs.sorted().map(JSONValue.string)),
        ]
        try await client.publish(statusTopic, status.serialized(), qos: .atLeastOnce, retain: true)
    }

    /// Takes the venues over when their holder is gone (a standby), or steps down when a live
    /// standby took them over (an active that was cut off): ``LeasePolicy``.
    private func followLease(_ lease: LeaseKeeper, _ client: MQTTClient) async throws {
        let view = lease.view
        let venues = leasedVenueIDs
        guard !venues.isEmpty else { return }
        if !publishing && LeasePolicy.shouldTakeOver(me: configuration.instance, venues: venues, view: view) {
            let holders = venues.compactMap { view.leases[$0]?.instance }.filter { $0 != configuration.instance }
            try await lease.claim(venues, takenOver: true)
            publishing = true
            try await publishStatus(client)
            metrics.add("perimeter_takeovers_total")
            logger.notice(
                "standby takes over: publishing now",
                metadata: [
                    "from": .string(Set(holders).sorted().joined(separator: ",")),
                    "unsent": "\((try? store.unsentCount()) ?? 0)",
                ])
            try await publishUnsent()
            try await republishDiscovery()
        } else if publishing && LeasePolicy.shouldStepDown(me: configuration.instance, venues: venues, view: view) {
            publishing = false
            try await publishStatus(client)
            logger.warning("another evaluator took the venues over: stepping down to standby")
        }
    }

    private var statusTopic: String {
        "\(configuration.prefix)/_sys/evaluator/\(Topics.level(configuration.instance))/status"
    }

    /// Everything the evaluator listens to, at QoS 1.
    var subscriptions: [String] {
        var filters: [String] = []
        for venue in venueIDs.sorted() {
            let root = "\(configuration.prefix)/\(venue)"
            if partitionSettings[venue] != nil, let topics = topics[venue] {
                // Observations are read from the broker's stream (EvaluatorPartitions.swift).
                filters.append(topics.allOccupancyParts)
            } else {
                filters.append("\(root)/obs/+/+")
            }
            filters += [
                "\(root)/agents/+/status", "\(root)/regions/+", "\(root)/subjects/+/+",
                "\(root)/sessions/+/+", "\(root)/admin/+/+",
            ]
        }
        if configuration.ownTracksVenue != nil { filters.append("owntracks/+/+") }
        if configuration.espresenseVenue != nil { filters.append("espresense/devices/+/+") }
        return filters
    }

    /// A partitioned venue's gateways and reporters of other subjects.
    func broadcastAgents(of venue: String) -> Set<String> {
        guard let settings = configuration.venues.first(where: { $0.settings.id == venue })?.settings else { return [] }
        return Set(settings.gateways.map(\.id) + settings.trust.reporters.map(\.agent))
    }

    /// Journals a tick for every venue, dated when its timer fired (the service's clock); a
    /// tick that changes nothing is dropped again when processed.
    ///
    /// Dated when it fired, not when the processor got to it: ticks taken after a busy drain
    /// came 0.3 s late and the next on time, 0.7 s after it, and ranging (at most once a
    /// second) skipped every such tick — 6 reports in 10 s with scans at 1 Hz (issue 19).
    private func journalTicks(fired: Date) throws {
        let now = clock.now
        let time = min(fired, now)
        for venue in venueIDs.sorted() {
            _ = try inTurn {
                try store.journal(
                    .tick, topic: venue, payload: Array(String(time.timeIntervalSince1970).utf8), received: now)
            }
        }
    }

    /// Runs a write of the processor's while the network thread is not journalling (see
    /// ``ArrivalJournal/withProcessorTurn(_:)``); before the journal exists, at once.
    func inTurn<T>(_ body: () throws -> T) rethrows -> T {
        guard let arrivals else { return try body() }
        return try arrivals.withProcessorTurn(body)
    }

    /// The network thread's journal (set once connected).
    private var arrivals: ArrivalJournal?
    /// Holds the network thread back past `maxJournalBacklog` (set once serving).
    private var intake: IntakeGate?

    /// What processing one journal row gave, before it is committed.
    private struct Processed {
        var row: EvaluatorStore.InboxRow
        var venue: String?
        var messages: [OutboundMessage] = []
        var erased: [String] = []
        /// A tick that changed nothing, or an observation the privacy gate refused: not kept.
        var forget = false
    }

    /// Processes the journal after the cursor, in groups: each group is applied in memory (the
    /// pure core, no lock held), then committed in one short transaction (outbox rows,
    /// the retained picture, what the broker acknowledged meanwhile, the cursor),
    /// then handed to the publisher, which does not wait for the acknowledgements. The journal
    /// writes of the network thread wait at most for that short commit.
    private func drain(_ client: MQTTClient, more: () -> Void) async throws {
        // One group per wake: with a backlog the next group is queued behind the control events
        // already waiting (stats, ticks, a lease change), so they are never starved.
        do {
            let rows = try store.inbox(after: cursor, limit: configuration.groupCommitRows)
            guard !rows.isEmpty else {
                try recordAcknowledged()
                return
            }
            var processed: [Processed] = []
            var ephemeral: [OutboundMessage] = []
            processed.reserveCapacity(rows.count)
            for row in rows {
                var item = process(row)
                item.messages.removeAll { message in
                    guard message.qos == 0 && !message.retain else { return false }
                    ephemeral.append(message)
                    return true
                }
                processed.append(item)
            }
            metrics.add(&counts)
            // A retained topic set earlier in this group is not in the store yet: an erasure later
            // in the group clears those naming its subject too.
            for (index, item) in processed.enumerated() where !item.erased.isEmpty {
                guard let venue = item.venue, let root = topics[venue]?.root else { continue }
                let levels = Set(item.erased.map(Topics.level))
                var clears: [String] = []
                for earlier in processed[..<index] {
                    for message in earlier.messages where message.retain && message.topic.hasPrefix(root + "/") {
                        let named = message.topic.dropFirst(root.count + 1).split(separator: "/").contains {
                            levels.contains(String($0))
                        }
                        if named && !clears.contains(message.topic)
                            && !item.messages.contains(where: { $0.topic == message.topic })
                        {
                            clears.append(message.topic)
                        }
                    }
                }
                processed[index].messages += clears.map {
                    OutboundMessage(topic: $0, payload: [], qos: 1, retain: true)
                }
            }
            Self.coalesceRetained(&processed)
            let acknowledged = publisher?.takeAcknowledged() ?? OutboxPublisher.Acknowledged()
            let now = clock.now
            let toPublish = try inTurn {
                try store.database.transaction {
                    var toPublish: [EvaluatorStore.OutboxRow] = []
                    for item in processed {
                        if let venue = item.venue {
                            for subject in item.erased {
                                try store.erase(
                                    subject: subject, venue: venue, level: Topics.level(subject), through: item.row.seq)
                            }
                        }
                        toPublish += try store.write(seq: item.row.seq, messages: item.messages, now: now)
                        if item.forget { _ = try store.database.run("DELETE FROM inbox WHERE seq = ?", item.row.seq) }
                    }
                    try store.advanceCursor(to: rows.last!.seq)
                    try record(acknowledged)
                    groupCommits += 1
                    if Self.faultKillInGroupCommit > 0 && groupCommits >= Self.faultKillInGroupCommit && rows.count > 1
                    {
                        // Fault injection for the crash test: die with the group's writes done
                        // and its COMMIT not yet made.
                        kill(getpid(), SIGKILL)
                    }
                    return toPublish
                }
            }
            cursor = rows.last!.seq
            progress.processed.store(cursor, ordering: .releasing)
            sinceSnapshot += rows.count
            intake?.processed(through: cursor, now: now)
            stats.lastLag =
                intake?.lag(processing: now.timeIntervalSince(rows.last!.received), now: now)
                ?? now.timeIntervalSince(rows.last!.received)
            metrics.set("perimeter_lag_seconds", stats.lastLag)
            // A standby keeps its outbox for a takeover (dropped after standbyWindow); ranging
            // and other ephemeral messages are the active's to send.
            if publishing { try await publish(toPublish, ephemeral: ephemeral, client) }
            // After an erasure the old snapshot still holds the subject: replace it now.
            if snapshotSoon {
                snapshotSoon = false
                try await takeSnapshotNow()
            } else if sinceSnapshot >= configuration.snapshotEvery {
                takeSnapshotInBackground()
            }
            if rows.count == configuration.groupCommitRows { more() }
        }
    }

    /// Group commits made by this run.
    private var groupCommits = 0

    /// `PERIMETER_FAULT_KILL_IN_GROUP_COMMIT=n`: the crash test's fault injection (SIGKILL
    /// inside the first group commit of more than one row from the n-th on, before its COMMIT).
    /// Unset in production.
    private static let faultKillInGroupCommit =
        ProcessInfo.processInfo.environment["PERIMETER_FAULT_KILL_IN_GROUP_COMMIT"].flatMap { Int($0) } ?? -1

    /// Within one group only the last value of a retained topic is published (and kept): the
    /// retained picture is the current state, and every superseded value would cost the
    /// broker a message (occupancy changes with every enter and exit in a busy region).
    /// Transitions are never coalesced.
    private static func coalesceRetained(_ processed: inout [Processed]) {
        var seen: Set<String> = []
        for index in processed.indices.reversed() {
            var keep: [OutboundMessage] = []
            for message in processed[index].messages.reversed() {
                if message.retain {
                    guard seen.insert(message.topic).inserted else { continue }
                }
                keep.append(message)
            }
            processed[index].messages = keep.reversed()
        }
    }

    /// Runs one journal row through the core and sorts its outputs into what is published,
    /// what the store records and what the service does.
    private func process(_ row: EvaluatorStore.InboxRow) -> Processed {
        let applied = apply(row)
        var item = Processed(row: row, venue: applied.venue)
        item.forget = row.kind == .tick && applied.outputs.isEmpty
        for output in applied.outputs {
            guard let venue = applied.venue, let topics = topics[venue] else { continue }
            if let parts = occupancyParts(
                output, venue: venue, position: row.seq,
                occupants: { region in withVenue(venue) { $0.occupants(of: region) } })
            {
                item.messages += parts
                continue
            }
            switch output {
            case .privacyDrop(_, let reason):
                // An observation the privacy gate refused is not kept (DESIGN.md §5).
                stats.privacyDrops[reason, default: 0] += 1
                counts.add("perimeter_observations_total", ("venue", venue), ("result", "dropped"))
                item.forget = true
            case .unrecordedSubject(let subject, let reason):
                logger.notice(
                    "observations of a subject with no authorization record are dropped (privacy.defaultStatus); publish subjects/{subject}/authorization to let them through",
                    metadata: [
                        "venue": .string(venue), "subject.id": .string(subject), "reason": .string(reason),
                        "mqtt.topic": .string(topics.diagnostics(subject: subject)),
                    ])
            case .erased(let subject, _):
                // Its rows go too: states, journal and outbox rows that name it.
                item.erased.append(subject)
                // Every retained topic under the venue naming it is cleared, not only those the
                // core still knew of (an `unmonitored` state of a region its membership left).
                let named = (try? store.retainedTopics(under: topics.root, naming: Topics.level(subject))) ?? []
                let cleared = Set(output.messages(topics: topics).map(\.topic))
                item.messages += named.filter { !cleared.contains($0) }.map {
                    OutboundMessage(topic: $0, payload: [], qos: 1, retain: true)
                }
                snapshotSoon = true
                logger.notice("subject erased", metadata: ["venue": .string(venue), "subject": .string(subject)])
            case .visit(let visit):
                counts.add("perimeter_visits_total", ("venue", venue), ("kind", visit.kind.rawValue))
            case .event(let event):
                stats.events[event.kind.rawValue, default: 0] += 1
                if event.kind != .state {
                    counts.add("perimeter_events_total", ("venue", venue), ("event", event.kind.rawValue))
                    eventArrivals.append(row.received)
                }
            default: break
            }
            item.messages += output.messages(topics: topics)
        }
        if let venue = applied.venue, partitionSettings[venue] != nil {
            // Transitions before the retained picture (a stable partition: the order within
            // each kind kept): a holder that dies between the two leaves a state older than
            // its transition, and its next holder, starting from that state, makes the
            // transition again (same id), instead of a state that says it was made while it
            // never went out.
            let retained = item.messages.filter(\.retain)
            item.messages = item.messages.filter { !$0.retain } + retained
        }
        // A replayed observation's refusal was its former holder's to report (or the state
        // it started from already covers it: out of order).
        if row.kind != .replayed {
            if let deadletter = applied.deadletter { item.messages.append(deadletter) }
            item.messages += applied.partDeadletters
        }
        if let venue = applied.venue, venues.keys.contains(venue) {
            countLive(withVenue(venue) { $0.takeLiveTally() }, venue: venue)
        }
        return item
    }

    /// `perimeter_live_updates_total{venue,result}` and `perimeter_live_stops_total{venue,reason}`
    /// from what the venue's live streams did for one journal row.
    private func countLive(_ tally: LiveStreams.Tally, venue: String) {
        guard !tally.isEmpty else { return }
        for (result, count) in tally.updates {
            counts.add("perimeter_live_updates_total", ("venue", venue), ("result", result), by: Double(count))
        }
        for (reason, count) in tally.stops {
            counts.add("perimeter_live_stops_total", ("venue", venue), ("reason", reason), by: Double(count))
        }
    }

    /// Hands committed rows to the publisher (it does not wait for their acknowledgements;
    /// ``recordAcknowledged()`` marks them later) and ranging straight to the client at QoS 0.
    private func publish(
        _ rows: [EvaluatorStore.OutboxRow], ephemeral: [OutboundMessage], _ client: MQTTClient
    ) async throws {
        for var message in ephemeral {
            if let gate = partitionGate {
                guard let passed = gate.now([Self.mqttMessage(message)]).first ?? nil else { continue }
                message.payload = passed.payload
            }
            try? await client.publish(
                message.topic, payload: message.payload, qos: .atMostOnce, retain: false,
                properties: MQTTProperties(messageExpiry: message.expiry, contentType: "application/json"))
        }
        guard !rows.isEmpty, let publisher else { return }
        let now = clock.now
        for received in eventArrivals {
            metrics.observe("perimeter_observation_to_event_seconds", now.timeIntervalSince(received))
        }
        eventArrivals.removeAll()
        try await publisher.send(
            rows.map { row in
                OutboxPublisher.Row(number: row.number, message: Self.mqttMessage(row.message))
            })
    }

    static func mqttMessage(_ message: OutboundMessage) -> MQTTMessage {
        MQTTMessage(
            topic: message.topic, payload: message.payload,
            qos: QoS(rawValue: Int32(message.qos)) ?? .atLeastOnce, retain: message.retain,
            properties: MQTTProperties(
                messageExpiry: message.expiry, contentType: "application/json",
                userProperties: message.eventID.map { [UserProperty("event-id", $0)] } ?? []))
    }

    /// Marks what the broker acknowledged since the last look (its own short transaction).
    private func recordAcknowledged() throws {
        guard let acknowledged = publisher?.takeAcknowledged(), !acknowledged.isEmpty else { return }
        try inTurn { try store.database.transaction { try record(acknowledged) } }
    }

    /// Acknowledged rows are marked sent. A refusal (the broker's ACL) is final — retrying
    /// would only repeat it — so the row is set aside (sent = 2) and said loudly.
    private func record(_ acknowledged: OutboxPublisher.Acknowledged) throws {
        guard !acknowledged.isEmpty else { return }
        for refusal in acknowledged.refused {
            metrics.add("perimeter_publish_refused_total")
            logger.error(
                "the broker refused a publish; check the ACL (perimeter doctor)",
                metadata: ["topic": .string(refusal.topic), "error": "\(refusal.error)"])
        }
        try store.markSent(acknowledged.sent)
        if !acknowledged.refused.isEmpty { try store.markRefused(acknowledged.refused.map(\.number)) }
        if !acknowledged.fenced.isEmpty {
            // Held back: the partition's lease is not ours now. Set aside, never retried: sent
            // later (with a newer token, were the partition ours again) a held-back state would
            // overwrite its new holder's newer one.
            try store.markRefused(acknowledged.fenced)
            metrics.add("perimeter_outputs_fenced_total", Double(acknowledged.fenced.count))
            logger.notice(
                "outputs held back: their partition's lease is not held now",
                metadata: ["messages": "\(acknowledged.fenced.count)"])
        }
        stats.published += acknowledged.sent.count
        for roundTrip in acknowledged.roundTrips {
            metrics.observe(
                "perimeter_delivery_seconds",
                Double(roundTrip.components.seconds) + Double(roundTrip.components.attoseconds) / 1e18)
        }
        metrics.set("perimeter_outbox_pending", Double(publisher?.unacknowledged ?? 0))
    }

    /// When the rows of the group being published that produced transitions arrived.
    private var eventArrivals: [Date] = []

    /// Publishes the retained picture as the database holds it (after a reconnect to a broker
    /// that may have lost its retained store). What was in flight when the connection broke is
    /// resent by libmosquitto on reconnecting, before this, so the picture's newer values win.
    private func republishRetained() async throws {
        guard let publisher else { return }
        // A partitioned venue's subjects are left out: this evaluator's table may hold states of
        // a partition it held before, older than its holder's since (the holder's are retained).
        let picture = try store.retainedPicture().filter { message in
            !partitionSettings.contains { venue, settings in
                topics[venue].map { settings.partitioning.partition(ofOutput: message.topic, root: $0.root) != nil }
                    ?? false
            }
        }
        guard !picture.isEmpty else { return }
        var batch: [OutboxPublisher.Row] = []
        for message in picture {
            batch.append(OutboxPublisher.Row(number: 0, message: Self.mqttMessage(message)))
            if batch.count == 1000 {
                try await publisher.send(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        try await publisher.send(batch)
        metrics.add("perimeter_retained_republished_total", Double(picture.count))
        logger.notice("retained picture republished", metadata: ["topics": "\(picture.count)"])
    }

    private func declareMetrics() {
        metrics.declare(
            "perimeter_observations_total", .counter,
            help: "Inbound messages by venue and result (accepted, rejected, dropped by the privacy gate).")
        metrics.declare(
            "perimeter_inbound_rejected_total", .counter,
            help: "Inbound messages refused, by venue and code (json, schema, range, sender, futureTime, tooLarge …).")
        metrics.declare(
            "perimeter_clock_repairs_total", .counter,
            help:
                "Clocks found ahead at start (a database written before future dates were refused), by what was repaired."
        )
        EvaluatorService.declareBrokerLoss(in: metrics)
        metrics.declare("perimeter_events_total", .counter, help: "Events published, by venue and event.")
        metrics.declare(
            "perimeter_parts_refused_total", .counter,
            help: "Parts of accepted messages refused on their own (one bad advert of a scan), by venue and code.")
        metrics.declare("perimeter_outbox_pending", .gauge, help: "Outbox rows committed but not yet acknowledged.")
        metrics.declare(
            "perimeter_visits_total", .counter, help: "Visit arrivals and departures published, by venue and kind.")
        metrics.declare(
            "perimeter_live_updates_total", .counter,
            help:
                "Live positions by venue and result: published, coarsened, rate_limited, refused (per consumer), no_session (per fix)."
        )
        metrics.declare(
            "perimeter_live_stops_total", .counter, help: "Live streams stopped, by venue and reason.")
        ArrivalJournal.declareMetrics(in: metrics)
        IntakeGate.declareMetrics(in: metrics)
        metrics.declare(
            "perimeter_agent_messages_missing_total", .counter,
            help: "Observations missing from agents' numbering (n), by venue: lost between agent and evaluator.")
        metrics.declare(
            "perimeter_regions_invalid", .gauge,
            help: "Problems in the venue's regions file; its invalid features are left out (degraded).")
        metrics.declare(
            "perimeter_publish_refused_total", .counter,
            help: "Publishes the broker refused (ACL); set aside, not retried.")
        metrics.declare("perimeter_lag_seconds", .gauge, help: "Arrival to processing of the last journal row.")
        metrics.declare("perimeter_takeovers_total", .counter, help: "Times this standby took its venues over.")
        metrics.declare(
            "perimeter_partitions_held", .gauge,
            help: "Partitions of a partitioned venue this evaluator holds, as of its lease keeper's last round.")
        metrics.declare(
            "perimeter_partition_moves_total", .counter,
            help: "Partition leases this evaluator acquired, released (to another member) or lost, by venue and kind.")
        metrics.declare(
            "perimeter_outputs_fenced_total", .counter,
            help: "Outputs held back because their partition's lease was not held when they were due (never sent).")
        metrics.declare(
            "perimeter_retained_republished_total", .counter,
            help: "Retained messages republished after connections that may have met a broker without them.")
        metrics.declare("perimeter_queue_depth", .gauge, help: "Journalled messages not yet processed.")
        metrics.declare(
            "perimeter_broker_connected", .gauge, help: "1 while connected to the broker, as last checked.")
        let latencyBuckets = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]
        metrics.declare(
            "perimeter_observation_to_event_seconds", .histogram,
            help: "From an observation's arrival to the publish of the events it caused.", buckets: latencyBuckets)
        metrics.declare(
            "perimeter_delivery_seconds", .histogram, help: "From publishing an outbox group to its last PUBACK.",
            buckets: latencyBuckets)
    }

    /// Starts `/metrics` and `/healthz` when configured. Health: the broker connected, the
    /// database writable (a write transaction opened and rolled back on a connection of its
    /// own), processing lag below `healthMaxLag`.
    private func startHTTP(
        _ client: MQTTClient, output: MQTTClient, journal: ArrivalJournal, intake: IntakeGate
    ) throws -> HTTPServer? {
        guard let http = configuration.http else { return nil }
        let metrics = metrics
        let degradation = degradation
        let path = configuration.databasePath
        let maxLag = configuration.healthMaxLag
        let server = try HTTPServer(host: http.host, port: http.port) { request in
            switch request {
            case "/metrics":
                metrics.set(
                    "perimeter_broker_connected", client.state.isConnected && output.state.isConnected ? 1 : 0)
                journal.updateMetrics(metrics)
                intake.updateMetrics(metrics)
                return HTTPServer.Response(
                    contentType: "text/plain; version=0.0.4; charset=utf-8", body: metrics.exposition())
            case "/healthz":
                var problems: [String] = []
                let connected = client.state.isConnected && output.state.isConnected
                if !client.state.isConnected { problems.append("broker: \(client.state)") }
                if !output.state.isConnected { problems.append("broker (outputs): \(output.state)") }
                var writable = true
                do {
                    let database = try Database(path: path)
                    try database.execute("BEGIN IMMEDIATE; ROLLBACK")
                } catch {
                    writable = false
                    problems.append("database: \(error)")
                }
                let lag = metrics.value("perimeter_lag_seconds") ?? 0
                if lag > maxLag { problems.append("lag: \(lag) s > \(maxLag) s") }
                // Degraded is still healthy (200): it serves, with less than it was given (invalid
                // regions left out, input the broker dropped).
                var degraded = degradation.all
                if let lost = journal.degradation { degraded.append(lost) }
                if let dropped = metrics.value("perimeter_broker_dropped_since_start"), dropped > 0 {
                    degraded.append(
                        "broker: \(Int(dropped)) messages dropped since this evaluator started (\(EvaluatorService.brokerDroppedTopic)): a queue limit loses input"
                    )
                }
                let status = !problems.isEmpty ? "unhealthy" : degraded.isEmpty ? "ok" : "degraded"
                let body: JSONValue = [
                    "status": .string(status), "brokerConnected": .bool(connected),
                    "databaseWritable": .bool(writable), "lagSeconds": .number(lag),
                    "problems": .array(problems.map(JSONValue.string)),
                    "degraded": .array(degraded.map(JSONValue.string)),
                ]
                return HTTPServer.Response(
                    status: problems.isEmpty ? 200 : 503, contentType: "application/json",
                    body: body.serialized() + "\n")
            default:
                return HTTPServer.Response(status: 404, body: "try /metrics or /healthz\n")
            }
        }
        server.start()
        logger.info("metrics and health", metadata: ["url": .string("http://\(http.host):\(server.port)/metrics")])
        return server
    }

    /// Re-publishes what was committed but never acknowledged (a previous run's, or what was
    /// in flight when the connection was lost), oldest first, through the publisher.
    private func publishUnsent() async throws {
        guard let publisher else { return }
        await publisher.drain()
        try recordAcknowledged()
        var after: Int64 = 0
        var total = 0
        while true {
            let rows = try store.unsent(after: after, limit: 1000)
            guard let last = rows.last else { break }
            try await publisher.send(
                rows.map { OutboxPublisher.Row(number: $0.number, message: Self.mqttMessage($0.message)) })
            total += rows.count
            after = last.number
        }
        if total > 0 {
            logger.notice("re-published outbox rows not acknowledged before", metadata: ["rows": "\(total)"])
        }
    }

    private func publishStats(_ client: MQTTClient, journal: ArrivalJournal) async {
        // Rows after the cursor are never deleted, so the newest row's number says how many wait.
        let newest = (try? store.database.scalar("SELECT max(seq) FROM inbox")?.int) ?? nil
        let depth = max(0, (newest ?? 0) - Int(cursor))
        metrics.set("perimeter_queue_depth", Double(depth))
        let payload = stats.payload(
            queueDepth: depth, unsent: (try? store.unsentCount()) ?? 0, instance: configuration.instance,
            journalFailures: journal.lost, now: clock.now)
        try? await client.publish(
            Topics.stats(prefix: configuration.prefix, component: "evaluator", instance: configuration.instance),
            payload.serialized(), qos: .atMostOnce)
    }

    // MARK: - One journal row

    /// Runs one journal row through the core. Deterministic: replay gives the same outputs.
    func apply(_ row: EvaluatorStore.InboxRow) -> Applied {
        let (row, rowPartition) = unpartitioned(row)
        switch row.kind {
        case .partitions:
            let venue = row.topic
            guard venues.keys.contains(venue) else { return Applied() }
            return Applied(venue: venue, outputs: withVenue(venue) { applyPartitions(row, venue: &$0) })
        case .handover:
            let venue = row.topic
            guard venues.keys.contains(venue) else { return Applied() }
            return Applied(venue: venue, outputs: withVenue(venue) { applyHandover(row, venue: &$0) })
        case .tick:
            let venue = row.topic
            guard let seconds = Double(String(decoding: row.payload, as: UTF8.self)), seconds.isFinite,
                venues.keys.contains(venue)
            else {
                return Applied()
            }
            // Ticks journalled by older versions carry the venue clock of then, which a
            // future-dated observation could push ahead: never past the tick's own arrival.
            let now = min(Date(timeIntervalSince1970: seconds), row.received)
            return Applied(venue: venue, outputs: withVenue(venue) { $0.tick(now: now) })
        case .oversized:
            guard let route = InboundDecoder.route(topic: row.topic, prefix: configuration.prefix, venues: venueIDs)
            else { return unrouted(row) }
            let venue =
                route.venue ?? (route.isOwnTracks ? configuration.ownTracksVenue : configuration.espresenseVenue)
            guard let venue, venues.keys.contains(venue) else { return Applied() }
            let size = String(decoding: row.payload, as: UTF8.self)
            return reject(
                row, venue: venue,
                InboundError(
                    code: "tooLarge",
                    "the payload is \(size) bytes; the limit is \(configuration.limits.maxPayloadBytes) bytes (not stored)"
                ))
        case .regionsFile:
            let venue = row.topic
            guard venues.keys.contains(venue) else { return Applied() }
            let text = String(decoding: row.payload, as: UTF8.self)
            let document = RegionParser.parse(text: text)
            let regions = document.regions
            let outputs = withVenue(venue) {
                $0.reload(regions, previous: fileRegionIDs[venue] ?? [], at: row.received)
            }
            fileRegionIDs[venue] = Set(regions.map(\.id))
            fileText[venue] = text
            return Applied(
                venue: venue, outputs: outputs,
                partDeadletters: noteRegionsFile(venue: venue, document, at: row.received))
        case .arrival, .replayed:
            break
        }
        guard let route = InboundDecoder.route(topic: row.topic, prefix: configuration.prefix, venues: venueIDs) else {
            return unrouted(row)
        }
        let venue: String?
        switch route {
        case .ownTracks: venue = configuration.ownTracksVenue
        case .espresense: venue = configuration.espresenseVenue
        default: venue = route.venue
        }
        guard let venue, venues.keys.contains(venue) else {
            stats.ignored += 1
            return Applied()
        }
        // Inputs without a time of their own (region changes, ESPresense) are dated on the
        // service's clock when they arrived; so are the trust checks (future-dated input).
        let receivedAt = row.received
        let decoded: InboundDecoder.Decoded
        do {
            decoded = try InboundDecoder.decode(
                route, payload: row.payload, receivedAt: receivedAt, limits: configuration.limits)
        } catch {
            return reject(row, venue: venue, error)
        }
        let inputs = restrictToHeld(
            decoded.inputs, venue: venue, isGateway: { agent in withVenue(venue) { $0.beacons.isGateway(agent) } },
            row: row,
            partition: rowPartition)
        if inputs.isEmpty && !decoded.inputs.isEmpty {
            // About subjects of partitions another evaluator holds.
            stats.ignored += 1
            return Applied()
        }
        if let n = decoded.sequence, let agent = Self.agent(of: route) { noteSequence(n, agent: agent, venue: venue) }
        if !configuration.forbiddenIDCharacters.isEmpty {
            for input in inputs {
                for id in input.topicIDs {
                    guard let bad = id.first(where: configuration.forbiddenIDCharacters.contains) else { continue }
                    return reject(
                        row, venue: venue,
                        InboundError(
                            code: "id",
                            "the id '\(id)' holds '\(bad)', which this broker refuses in topics (topics.natsSafe)"))
                }
            }
        }
        var outputs: [EvaluatorOutput] = []
        for input in inputs {
            note(input)
            switch withVenue(venue, { $0.handle(input, agent: Self.agent(of: route), receivedAt: receivedAt) }) {
            case .success(let produced): outputs += produced
            case .failure(let error):
                var applied = reject(row, venue: venue, error)
                applied.outputs = outputs
                return applied
            }
        }
        let dropped = outputs.contains { if case .privacyDrop = $0 { true } else { false } }
        if !dropped { counts.add("perimeter_observations_total", ("venue", venue), ("result", "accepted")) }
        return Applied(
            venue: venue, outputs: outputs,
            partDeadletters: decoded.refused.map { refusePart(row, venue: venue, $0) })
    }

    /// `PERIMETER_FAULT_KILL_IN_JOURNAL=N`: the crash test's fault injection (SIGKILL inside
    /// the first group commit of at least N arrivals, once they are written and before the
    /// commit). Unset in production.
    private static let faultKillInJournal = ProcessInfo.processInfo.environment["PERIMETER_FAULT_KILL_IN_JOURNAL"]
        .flatMap { Int($0) }

    private static func killInsideGroupCommit(_ count: Int) {
        FileHandle.standardError.write(
            Data("fault injection: SIGKILL inside a group commit of \(count) arrivals\n".utf8))
        kill(getpid(), SIGKILL)
    }

    /// Notes an agent's message number; a gap is input lost between the agent and us (a broker
    /// queue limit, a bridge): counted, logged with the agent, and `/healthz` says `degraded`.
    private func noteSequence(_ n: Int, agent: String, venue: String) {
        let outcome = sequences.note(agent: "\(venue)/\(agent)", n: n)
        switch outcome {
        case .gap(let after, let next):
            missing[venue, default: 0] += outcome.missing
            metrics.add("perimeter_agent_messages_missing_total", Double(outcome.missing), labels: ["venue": venue])
            logger.warning(
                "messages from an agent never arrived: its numbers skip",
                metadata: [
                    "venue": .string(venue), "agent": .string(agent), "after": "\(after)", "next": "\(next)",
                    "missing": "\(outcome.missing)",
                ])
            degradation.set(
                "sequence:\(venue)",
                [
                    "agents: \(missing[venue]!) messages missing from agents' numbering in venue \(venue) since this evaluator started (the last: \(agent), \(after + 1)…\(next - 1))"
                ])
        case .jumped(let after, let next):
            logger.notice(
                "an agent's numbers jumped; taken as a renumbering, not as loss",
                metadata: ["venue": .string(venue), "agent": .string(agent), "after": "\(after)", "next": "\(next)"])
        case .first, .inOrder, .repeated, .restarted:
            break
        }
    }

    /// The agent whose topic carried a message.
    static func agent(of route: InboundRoute) -> String? {
        switch route {
        case .gps(_, let agent), .ble(_, let agent), .status(_, let agent): agent
        case .ownTracks(let user, let device): InboundDecoder.ownTracksSubject(user: user, device: device)
        case .espresense(_, let room): room
        default: nil
        }
    }

    /// Counts an input. (No input moves any clock: venue time is the service's clock.)
    private func note(_ input: Inbound) {
        let kind: String
        switch input {
        case .fix: kind = "gps"
        case .beacons: kind = "ble"
        case .tags: kind = "tags"
        case .agentStatus: kind = "status"
        case .regionUpsert, .regionRemove: kind = "region"
        default: kind = "privacy"
        }
        stats.observations[kind, default: 0] += 1
    }

    /// A message on one of our venue's topics that no route matches.
    private func unrouted(_ row: EvaluatorStore.InboxRow) -> Applied {
        for venue in venueIDs where row.topic.hasPrefix("\(configuration.prefix)/\(venue)/") {
            return reject(
                row, venue: venue, InboundError(code: "topic", "no such topic in the contract (see topics.md)"))
        }
        stats.ignored += 1
        return Applied()
    }

    /// The deadletter record for a rejected message: `{topic, reason, code, payload (first 512 bytes)}`.
    private func reject(_ row: EvaluatorStore.InboxRow, venue: String, _ error: any Error) -> Applied {
        let code = (error as? InboundError)?.code ?? "error"
        stats.rejects[code, default: 0] += 1
        counts.add("perimeter_observations_total", ("venue", venue), ("result", "rejected"))
        counts.add("perimeter_inbound_rejected_total", ("venue", venue), ("code", code))
        let route = InboundDecoder.route(topic: row.topic, prefix: configuration.prefix, venues: venueIDs)
        let payloadBytes =
            row.kind == .oversized ? Int(String(decoding: row.payload, as: UTF8.self)) ?? 0 : row.payload.count
        let detailed =
            row.kind == .arrival
            && (route.map { venues[venue]?.deadLetterShowsDetail(route: $0, payload: row.payload) ?? false } ?? true)
        var record: JSONObject = [
            "topic": .string(row.topic), "code": .string(code), "payloadBytes": .number(Double(payloadBytes)),
            "t": .string(Timestamp.format(row.received)),
        ]
        if detailed {
            record["reason"] = .string("\(error)")
            record["payload"] = .string(String(decoding: row.payload.prefix(512), as: UTF8.self))
        } else {
            // A subject the privacy gate refuses: no coordinates, no values, only what is wrong where.
            let field = (error as? InboundError)?.field ?? ""
            record["reason"] = .string(
                "\(field.isEmpty ? "" : "\(field): ")\(code) (details withheld: the subject's observations are not shared)"
            )
            record["payload"] = .null
            record["redacted"] = .bool(true)
        }
        logger.debug("rejected", metadata: ["topic": .string(row.topic), "reason": .string("\(error)")])
        let topic = topics[venue]?.deadletter(component: "evaluator") ?? "\(configuration.prefix)/deadletter/evaluator"
        return Applied(
            venue: venue,
            deadletter: OutboundMessage(
                topic: topic, payload: Array(JSONValue.object(record).serialized().utf8), qos: 1, retain: false))
    }
}

extension EvaluatorRuntime {
    /// Records what a regions file being applied leaves out: the venue is degraded while any
    /// feature is invalid. Returns one dead letter per invalid feature, `{file, feature,
    /// region?, reason, code: "region", t}` (none when `at` is nil: a restored snapshot's file
    /// was reported when it was applied).
    func noteRegionsFile(venue: String, _ document: RegionDocument, at received: Date? = nil) -> [OutboundMessage] {
        let path = configuration.venues.first { $0.settings.id == venue }?.regionsPath ?? "regions file"
        let problems = document.problems
        metrics.set("perimeter_regions_invalid", Double(problems.count), labels: ["venue": venue])
        degradation.set(
            "file:\(venue)",
            problems.isEmpty
                ? []
                : [
                    "venue \(venue): \(problems.count) problem(s) in \(path); serving its \(document.regions.count) valid "
                        + "region(s) (first: \(problems[0]))"
                ])
        guard let received, let topic = topics[venue]?.deadletter(component: "evaluator") else { return [] }
        return problems.map { problem in
            var record: JSONObject = [
                "file": .string(path), "reason": .string(problem.description), "code": "region",
                "t": .string(Timestamp.format(received)),
            ]
            if let feature = problem.feature { record["feature"] = .number(Double(feature)) }
            if let id = problem.regionID { record["region"] = .string(id) }
            return OutboundMessage(
                topic: topic, payload: Array(JSONValue.object(record).serialized().utf8), qos: 1, retain: false)
        }
    }

    /// The deadletter record for one part of an accepted message refused on its own (one bad
    /// advert of a scan; the rest of the scan was used): `{topic, reason, code, part,
    /// payloadBytes, t}`. The reason names the part (`adverts[1].data: …`). The payload is not
    /// repeated: the message was used, and it may speak of a subject the privacy gate withholds.
    func refusePart(
        _ row: EvaluatorStore.InboxRow, venue: String, _ error: InboundError
    ) -> OutboundMessage {
        stats.refusedParts[error.code, default: 0] += 1
        metrics.add("perimeter_parts_refused_total", labels: ["venue": venue, "code": error.code])
        let part = error.field.prefix { $0 != "." }
        let record: JSONObject = [
            "topic": .string(row.topic), "reason": .string(error.description), "code": .string(error.code),
            "part": .string(String(part)), "payloadBytes": .number(Double(row.payload.count)),
            "t": .string(Timestamp.format(row.received)),
        ]
        logger.debug(
            "part of a message refused; the rest was used",
            metadata: ["topic": .string(row.topic), "reason": .string(error.description)])
        let topic = topics[venue]?.deadletter(component: "evaluator") ?? "\(configuration.prefix)/deadletter/evaluator"
        return OutboundMessage(
            topic: topic, payload: Array(JSONValue.object(record).serialized().utf8), qos: 1, retain: false)
    }
}

/// A start-up failure of the evaluator, said plainly.
public struct EvaluatorError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension EvaluatorService {
    /// The metrics ``noteBrokerDropped(_:retained:metrics:)`` sets.
    public static func declareBrokerLoss(in metrics: Metrics) {
        metrics.declare(
            "perimeter_broker_messages_dropped", .gauge,
            help: "Messages the broker dropped since it started ($SYS/broker/publish/messages/dropped; Mosquitto).")
        metrics.declare(
            "perimeter_broker_dropped_since_start", .gauge,
            help: "Messages the broker dropped while this evaluator ran: input may have been lost (health: degraded).")
        metrics.declare(
            "perimeter_broker_dropped_baseline", .gauge, help: "The broker's dropped count when first seen.")
    }

    /// Records the broker's dropped-message counter. Mosquitto publishes it retained, only when it
    /// changes, and lets it expire 60 s later: a value that comes from the retained store (at
    /// subscribe time) is the baseline; a first value that comes live is a change made while this
    /// evaluator was subscribed, so it counts as at least one message lost (the baseline is one
    /// less). Growth after the baseline is loss while this evaluator runs (health: `degraded`); a
    /// count below the baseline is a restarted broker, whose count becomes the baseline.
    public static func noteBrokerDropped(_ payload: [UInt8], retained: Bool, metrics: Metrics) {
        guard let count = Double(String(decoding: payload.prefix(32), as: UTF8.self)), count.isFinite, count >= 0
        else { return }
        let baseline = min(metrics.value("perimeter_broker_dropped_baseline") ?? (retained ? count : count - 1), count)
        metrics.set("perimeter_broker_dropped_baseline", max(0, baseline))
        metrics.set("perimeter_broker_messages_dropped", count)
        metrics.set("perimeter_broker_dropped_since_start", count - max(0, baseline))
    }
}
