import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNATS
import Synchronization

/// One partitioned venue as this run serves it (docs/scale.md, "The evaluator on partitions"):
/// its leases and the occupancy parts read back from the broker.
final class PartitionedVenue: Sendable {
    let venue: String
    let topics: Topics
    let settings: EvaluatorConfiguration.VenuePartitions
    let keeper: PartitionLeaseKeeper
    private let connection: NATSConnection
    /// Every partition's latest accepted occupancy part (written on the network thread).
    let board = Mutex(OccupancyParts())
    /// Set when a part arrived since the processor last looked (one wake per batch of them).
    let boardChanged = Atomic<Bool>(false)

    init(
        venue: String, topics: Topics, settings: EvaluatorConfiguration.VenuePartitions, instance: String,
        logger: Logger
    )
        throws
    {
        self.venue = venue
        self.topics = topics
        self.settings = settings
        do {
            connection = try NATSConnection(servers: settings.servers, timeout: .seconds(2))
            let store = try connection.keyValue(bucket: "perimeter-leases", ttl: settings.lease.ttl, replicas: 3)
            keeper = PartitionLeaseKeeper(
                store: store, venue: venue, instance: instance, partitions: settings.partitioning,
                policy: settings.lease, logger: logger)
        } catch {
            throw EvaluatorError(
                "venue '\(venue)': cannot reach the partition leases on \(settings.servers.joined(separator: ",")) "
                    + "(venues.\(venue).partitions.nats): \(error)")
        }
    }

    /// At shutdown: stop publishing, give every lease up, close the connection.
    func close() {
        keeper.releaseAll()
        connection.close()
    }

    /// Takes an occupancy part read back from the broker. Nil when the message is not one of
    /// this venue's parts; else whether the processor must be woken (the first change since it
    /// last looked).
    func notePart(_ message: MQTTMessage) -> Bool? {
        guard let region = topics.regionOfOccupancyPart(message.topic) else { return nil }
        // A cleared part (empty retained payload) or a malformed one: nothing to sum.
        guard let (partition, part) = OccupancyParts.part(from: message.payload),
            settings.partitioning.all.contains(partition),
            board.withLock({ $0.note(venue: venue, region: region, partition: partition, part) })
        else { return false }
        return !boardChanged.exchange(true, ordering: .acquiringAndReleasing)
    }
}

/// The outbox's check right before each publish (``OutboxPublisher/Gate``): a message about a
/// subject of a partitioned venue goes out only while this evaluator may publish for the
/// subject's partition, with `partition` and `token` added to its payload; otherwise it is
/// held back. Messages of other venues, and those naming no subject, pass as they are.
struct PartitionGate: Sendable {
    let venues: [PartitionedVenue]

    func callAsFunction(_ message: MQTTMessage) -> MQTTMessage? {
        for venue in venues where message.topic.hasPrefix(venue.topics.root + "/") {
            guard
                let partition = venue.settings.partitioning.partition(
                    ofOutput: message.topic, root: venue.topics.root)
            else { return message }
            guard let token = venue.keeper.token(for: partition) else { return nil }
            var stamped = message
            stamped.payload = Partitioning.stamp(message.payload, partition: partition, token: token)
            return stamped
        }
        return message
    }
}

/// What the processor keeps about partitioned venues between rows (not shared).
struct PartitionRunState {
    /// The partitions each partitioned venue's journal says are held, as applied.
    var held: [String: Set<Int>] = [:]
    /// The occupancy part last emitted: venue → region → partition → count.
    var partCounts: [String: [String: [Int: Int]]] = [:]
    /// This run's partitioned venues (set once serving).
    var served: [String: PartitionedVenue] = [:]
    /// The partitions subscribed to now, per venue.
    var subscribed: [String: Set<Int>] = [:]
    /// The totals published while holding partition 0: venue → region → count.
    var totals: [String: [String: Int]] = [:]
}

extension EvaluatorRuntime {
    /// The original topic of an observation delivered under its partition (the broker's
    /// mapping), so that it routes and dead-letters as any observation.
    func unpartitioned(_ row: EvaluatorStore.InboxRow) -> EvaluatorStore.InboxRow {
        guard row.kind == .arrival, !partitionedIDs.isEmpty,
            let original = Partitioning.unpartitioned(row.topic, prefix: configuration.prefix, venues: partitionedIDs)
        else { return row }
        var row = row
        row.topic = original.topic
        return row
    }

    /// The inputs of a partitioned venue's message restricted to the subjects of the
    /// partitions held (a gateway's scan names subjects of every partition).
    func restrictToHeld(_ inputs: [Inbound], venue: String, evaluator: VenueEvaluator) -> [Inbound] {
        guard let settings = partitionSettings[venue] else { return inputs }
        let held = partitionState.held[venue] ?? []
        return inputs.compactMap {
            settings.partitioning.restrict($0, to: held, isGateway: evaluator.beacons.isGateway)
        }
    }

    /// A `.partitions` row: from here on the venue holds these partitions. Subjects of the
    /// others are dropped (their new holder serves them); every region's part of a newly held
    /// partition is published from what is known of it.
    func applyPartitions(_ row: EvaluatorStore.InboxRow, venue: inout VenueEvaluator) -> [EvaluatorOutput] {
        guard let settings = partitionSettings[row.topic] else { return [] }
        let held = Set(
            ((try? JSONParser.parse(row.payload))?["held"]?.arrayValue ?? []).compactMap(\.intValue).filter {
                settings.partitioning.all.contains($0)
            })
        let before = partitionState.held[row.topic] ?? []
        partitionState.held[row.topic] = held
        let dropped = venue.dropSubjects(at: row.received) { !held.contains(settings.partitioning.partition(of: $0)) }
        for region in partitionState.partCounts[row.topic]?.keys.sorted() ?? [] {
            for partition in before.subtracting(held) {
                partitionState.partCounts[row.topic]?[region]?[partition] = nil
            }
        }
        if !dropped.isEmpty || before != held {
            logger.info(
                "partitions held",
                metadata: [
                    "venue": .string(row.topic), "held": .string(held.sorted().map(String.init).joined(separator: ",")),
                    "subjectsDropped": "\(dropped.count)",
                ])
        }
        guard !held.subtracting(before).isEmpty else { return [] }
        return venue.regionIDs.map { .occupancy(region: $0, count: venue.occupants(of: $0).count, t: row.received) }
    }

    /// A partitioned venue's occupancy as parts: for each partition held, the region's count
    /// among its subjects, when it changed (`occupancy/{region}/p/{n}`, retained). Nil for an
    /// output that is not a partitioned venue's occupancy.
    func occupancyParts(_ output: EvaluatorOutput, venue: String, evaluator: VenueEvaluator) -> [OutboundMessage]? {
        guard case .occupancy(let region, _, let t) = output, let settings = partitionSettings[venue],
            let topics = partitionState.served[venue]?.topics
                ?? Optional(Topics(prefix: configuration.prefix, venue: venue))
        else { return nil }
        var counts: [Int: Int] = [:]
        for partition in partitionState.held[venue] ?? [] { counts[partition] = 0 }
        for subject in evaluator.occupants(of: region) {
            let partition = settings.partitioning.partition(of: subject)
            if counts[partition] != nil { counts[partition]! += 1 }
        }
        var messages: [OutboundMessage] = []
        for (partition, count) in counts.sorted(by: { $0.key < $1.key })
        where partitionState.partCounts[venue]?[region]?[partition] != count {
            partitionState.partCounts[venue, default: [:]][region, default: [:]][partition] = count
            let payload: JSONValue = ["count": .number(Double(count)), "t": .string(Timestamp.format(t))]
            messages.append(
                OutboundMessage(
                    topic: topics.occupancyPart(region: region, partition: partition),
                    payload: Array(payload.serialized().utf8), qos: 1, retain: true))
        }
        return messages
    }

    /// Subscribes to the partitions the leases now hold and journals the change, so that a
    /// replay keeps and drops subjects as this run does. The lost are unsubscribed first; the
    /// new are subscribed after their row is journalled (their observations come after it).
    func followPartitions(_ client: MQTTClient) async throws {
        for (id, venue) in partitionState.served.sorted(by: { $0.key < $1.key }) {
            let now = Set(venue.keeper.held.keys)
            let was = partitionState.subscribed[id] ?? []
            guard now != was else { continue }
            for partition in was.subtracting(now).sorted() {
                try? await client.unsubscribe(venue.topics.partitionObservations(partition))
            }
            try journalPartitions(venue: id, now)
            for partition in now.subtracting(was).sorted() {
                _ = try await client.subscribe(venue.topics.partitionObservations(partition), qos: .atLeastOnce)
            }
            partitionState.subscribed[id] = now
            if now.contains(0) && !was.contains(0) { partitionState.totals[id] = [:] }
        }
    }

    /// Journals the partitions held from here on for a partitioned venue.
    func journalPartitions(venue: String, _ held: Set<Int>) throws {
        let payload: JSONValue = ["held": .array(held.sorted().map { .number(Double($0)) })]
        _ = try inTurn {
            try store.journal(
                .partitions, topic: venue, payload: Array(payload.serialized().utf8), received: clock.now)
        }
    }

    /// While this evaluator holds partition 0 of a venue: the total of each region whose sum of
    /// parts changed, on `occupancy/{region}` (retained; the gate adds partition 0's token).
    func occupancyTotals() -> [OutboxPublisher.Row] {
        var rows: [OutboxPublisher.Row] = []
        for (id, venue) in partitionState.served.sorted(by: { $0.key < $1.key }) {
            guard
                venue.boardChanged.exchange(false, ordering: .acquiringAndReleasing) || partitionState.totals[id] == [:]
            else { continue }
            guard venue.keeper.token(for: 0) != nil else { continue }
            let board = venue.board.withLock { $0 }
            for region in board.parts.keys.sorted() {
                guard let total = board.total(of: region), partitionState.totals[id]?[region] != total.count else {
                    continue
                }
                partitionState.totals[id, default: [:]][region] = total.count
                let payload: JSONValue = [
                    "count": .number(Double(total.count)), "t": .string(Timestamp.format(total.t)),
                ]
                rows.append(
                    OutboxPublisher.Row(
                        number: 0,
                        message: Self.mqttMessage(
                            OutboundMessage(
                                topic: venue.topics.occupancy(region: region),
                                payload: Array(payload.serialized().utf8), qos: 1, retain: true))))
            }
        }
        return rows
    }
}
