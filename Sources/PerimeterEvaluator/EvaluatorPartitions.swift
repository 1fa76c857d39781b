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
    /// The stream that keeps the venue's mapped observations (`perimeter-obs-{venue}`).
    let stream: String
    /// Agents whose messages every evaluator of the venue reads (gateways, reporters of
    /// others): their scans and fixes name subjects of every partition.
    let broadcast: Set<String>
    private let followers = Mutex<[Int: NATSStreamFollower]>([:])
    /// The live reads of the broadcast agents' messages, by agent (started at the first take).
    private let broadcastFollowers = Mutex<[String: NATSStreamFollower]>([:])
    /// Partitions taken whose stream could not be read yet, with when they were taken: tried
    /// again every round of the keeper.
    let unread = Mutex<[Int: Date]>([:])
    /// Every partition's latest accepted occupancy part (written on the network thread).
    let board = Mutex(OccupancyParts())
    /// Set when a part arrived since the processor last looked (one wake per batch of them).
    let boardChanged = Atomic<Bool>(false)

    init(
        venue: String, topics: Topics, settings: EvaluatorConfiguration.VenuePartitions, instance: String,
        broadcast: Set<String>, logger: Logger
    ) throws {
        self.venue = venue
        self.topics = topics
        self.settings = settings
        self.broadcast = broadcast
        stream = "perimeter-obs-\(venue)"
        do {
            connection = try NATSConnection(servers: settings.servers, timeout: .seconds(2))
            let store = try connection.keyValue(
                bucket: PartitionLeaseKeeper.bucket, ttl: settings.lease.ttl, replicas: 3)
            // The broker keeps every mapped observation a while, so that a partition's new
            // holder reads what its former holder may have taken without publishing.
            try connection.ensureStream(
                name: stream, subjects: [Self.natsSubject(topics.root) + ".p.*.obs.*.*"],
                maxAge: .seconds(max(60, Int(settings.replay * 2))), replicas: 3)
            keeper = PartitionLeaseKeeper(
                store: store, venue: venue, instance: instance, partitions: settings.partitioning,
                policy: settings.lease, logger: logger)
        } catch {
            throw EvaluatorError(
                "venue '\(venue)': cannot reach the partition leases on \(settings.servers.joined(separator: ",")) "
                    + "(venues.\(venue).partitions.nats): \(error)")
        }
    }

    /// At shutdown: stop reading, stop publishing, give every lease up, close the connection.
    func close() {
        for follower in followers.withLock({ $0 }).values { follower.stop() }
        for follower in broadcastFollowers.withLock({ $0 }).values { follower.stop() }
        keeper.releaseAll()
        connection.close()
    }

    /// An MQTT topic as a NATS subject (`/` is `.`), and back.
    static func natsSubject(_ topic: String) -> String { topic.replacingOccurrences(of: "/", with: ".") }
    static func mqttTopic(_ subject: String) -> String { subject.replacingOccurrences(of: ".", with: "/") }

    /// Reads partition `n`'s observations from the stream, from `start` on and then as they
    /// come, handing each to `journal` (replayed: stored before `takenAt`). Messages of
    /// broadcast agents are left out: they come by MQTT.
    func follow(
        _ partition: Int, from start: Date, takenAt: Date, journal: PartitionStreamJournal
    ) throws(NATSError) {
        let prefix = topics.root + "/p/\(partition)/obs/"
        let broadcast = broadcast
        let follower = try connection.follow(
            subject: Self.natsSubject(topics.partitionObservations(partition)).replacingOccurrences(of: "+", with: "*"),
            from: start
        ) { message in
            let topic = Self.mqttTopic(message.subject)
            if let agent = topic.dropFirst(prefix.count).split(separator: "/").first,
                broadcast.contains(Topics.decodeLevel(String(agent)))
            {
                return
            }
            journal.write(
                message.stored.map { $0 < takenAt } == true ? .replayed : .arrival, topic: topic,
                payload: message.payload)
        }
        let previous = followers.withLock { followers in
            defer { followers[partition] = follower }
            return followers[partition]
        }
        previous?.stop()
    }

    /// The stream subject of a broadcast agent's messages, in whichever partition the mapping
    /// put them (its own): `…p.*.obs.{agent}.*`.
    func broadcastSubject(_ agent: String) -> String {
        Self.natsSubject(topics.observationsInAnyPartition(agent: agent)).replacingOccurrences(of: "+", with: "*")
    }

    /// A broadcast agent's messages stored from `start` on, read back (the reader stays open,
    /// to read what comes next); nil, and said, when the stream cannot be read.
    func readBack(_ agent: String, from start: Date, logger: Logger) -> BroadcastReadBack? {
        do {
            let reader = try connection.reader(subject: broadcastSubject(agent), from: start)
            do {
                return BroadcastReadBack(reader: reader, messages: try reader.readToEnd())
            } catch {
                reader.close()
                throw error
            }
        } catch {
            logger.error(
                "cannot read a gateway's or reporter's observations back from the broker's stream: those of the partitions taken are missed until its next message",
                metadata: ["venue": .string(venue), "agent": .string(agent), "error": "\(error)"])
            return nil
        }
    }

    /// Under the stream journal's lock, right after the rows that take `taken` over: journals
    /// each broadcast agent's messages read back that its live read has already journalled
    /// (they reached only the partitions held then; every later one comes live, after these
    /// rows, to every partition held), in the order they were stored, once for each partition
    /// taken, as `.replayed` with that partition in its topic (only its subjects are taken from
    /// it). An agent not read live yet has all its messages read back journalled here, and is
    /// to be read live from the first one after them (``startLive(_:after:from:journal:logger:)``).
    /// - Returns: how many messages were read back, and the agents to read live from now on
    ///   (with the last sequence read back, nil when none was).
    func catchUp(
        _ readBacks: [String: BroadcastReadBack], taken: [Int], _ locked: PartitionStreamJournal.Locked,
        logger: Logger
    ) -> (count: Int, live: [String: UInt64?]) {
        var replayed: [NATSStreamMessage] = []
        var live: [String: UInt64?] = [:]
        for agent in broadcast.sorted() {
            let subject = broadcastSubject(agent)
            var messages = readBacks[agent]?.messages ?? []
            guard let through = locked.liveThrough(subject) else {
                // The first take: the live read starts after everything journalled here.
                replayed += messages
                live[agent] = .some(messages.last?.sequence)
                locked.startedLive(subject, after: messages.last?.sequence ?? 0)
                continue
            }
            if let reader = readBacks[agent]?.reader, (messages.last?.sequence ?? 0) < through {
                // The live read is ahead of the read back: read on, up to it at least.
                do { messages += try reader.readToEnd() } catch {
                    logger.error(
                        "a gateway's or reporter's observations read back only in part: some are missed for the partitions taken",
                        metadata: ["venue": .string(venue), "agent": .string(agent), "error": "\(error)"])
                }
            }
            replayed += messages.filter { $0.sequence <= through }
        }
        // In the order they were stored, across agents: two gateways may hear one tag in turn.
        replayed.sort { $0.sequence < $1.sequence }
        let prefix = topics.root + "/p/"
        for message in replayed {
            let topic = Self.mqttTopic(message.subject)
            guard topic.hasPrefix(prefix), let slash = topic.dropFirst(prefix.count).firstIndex(of: "/") else {
                continue
            }
            for partition in taken {
                locked.write(.replayed, topic: prefix + "\(partition)" + topic[slash...], payload: message.payload)
            }
        }
        return (replayed.count, live)
    }

    /// Reads `agent`'s messages live from the first after stream sequence `after` (after those
    /// a take journalled), or, when none was read back, from `start` (the take's read back
    /// found nothing stored since then): each is journalled as it is stored.
    func startLive(_ agent: String, after: UInt64?, from start: Date, journal: PartitionStreamJournal, logger: Logger) {
        let subject = broadcastSubject(agent)
        let handler: @Sendable (NATSStreamMessage) -> Void = { message in
            journal.writeLive(subject, message: message)
        }
        do {
            let follower =
                try after.map { try connection.follow(subject: subject, after: $0, handler: handler) }
                ?? connection.follow(subject: subject, from: start, handler: handler)
            broadcastFollowers.withLock { $0[agent] = follower }
        } catch {
            // The next take reads it back again, for its own partitions.
            journal.locked { $0.stoppedLive(subject) }
            logger.error(
                "cannot read a gateway's or reporter's observations from the broker's stream: the subjects it names are not served until the next take",
                metadata: ["venue": .string(venue), "agent": .string(agent), "error": "\(error)"])
        }
    }

    /// Stops reading partition `n`.
    func stopFollowing(_ partition: Int) {
        unread.withLock { _ = $0.removeValue(forKey: partition) }
        followers.withLock { $0.removeValue(forKey: partition) }?.stop()
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

/// A broadcast agent's messages read back from the stream at a take, and the reader, open to
/// read on.
struct BroadcastReadBack: Sendable {
    var reader: NATSStreamReader
    var messages: [NATSStreamMessage]
}

/// Journals what the partitions' streams deliver (on the NATS client's threads), through a
/// connection of its own; one write at a time. A take journals its rows under the same lock
/// (``locked(_:)``), so that no live message of a broadcast agent falls between the read back
/// and the rows it gives.
final class PartitionStreamJournal: @unchecked Sendable {
    // @unchecked: the store and `liveThrough` are used only under `lock`.
    private let store: EvaluatorStore
    private let lock = NSLock()
    private let clock: any TimeSource
    private let logger: Logger
    private let written: @Sendable (String, Int64) -> Void
    /// For each broadcast agent's stream subject read live: the stream sequence of the last
    /// message journalled (or where the live read started after).
    private var liveThrough: [String: UInt64] = [:]

    init(
        path: String, clock: any TimeSource, logger: Logger, written: @escaping @Sendable (String, Int64) -> Void
    ) throws {
        store = try EvaluatorStore(path: path)
        self.clock = clock
        self.logger = logger
        self.written = written
    }

    func write(_ kind: EvaluatorStore.EntryKind, topic: String, payload: [UInt8]) {
        lock.lock()
        defer { lock.unlock() }
        journal(kind, topic: topic, payload: payload)
    }

    /// Journals a broadcast agent's message as it is stored (an arrival), and how far its live
    /// read has gone.
    func writeLive(_ subject: String, message: NATSStreamMessage) {
        lock.lock()
        defer { lock.unlock() }
        journal(.arrival, topic: PartitionedVenue.mqttTopic(message.subject), payload: message.payload)
        liveThrough[subject] = message.sequence
    }

    /// What a take may do while it holds the journal: no other row of the streams is written
    /// meanwhile.
    struct Locked {
        let journal: PartitionStreamJournal

        /// Where the live read of a broadcast agent's stream subject is: the sequence of the
        /// last message journalled; nil when it is not read live.
        func liveThrough(_ subject: String) -> UInt64? { journal.liveThrough[subject] }

        /// A live read starts after stream sequence `sequence` (0: from a time).
        func startedLive(_ subject: String, after sequence: UInt64) { journal.liveThrough[subject] = sequence }

        /// A live read could not start.
        func stoppedLive(_ subject: String) { journal.liveThrough[subject] = nil }

        func write(_ kind: EvaluatorStore.EntryKind, topic: String, payload: [UInt8]) {
            journal.journal(kind, topic: topic, payload: payload)
        }

        /// Writes a row, throwing when it cannot be written.
        func mustWrite(_ kind: EvaluatorStore.EntryKind, topic: String, payload: [UInt8]) throws {
            try journal.journalOrThrow(kind, topic: topic, payload: payload)
        }
    }

    /// Runs `body` holding the journal.
    func locked<T>(_ body: (Locked) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(Locked(journal: self))
    }

    private func journalOrThrow(_ kind: EvaluatorStore.EntryKind, topic: String, payload: [UInt8]) throws {
        let seq = try store.journal(kind, topic: topic, payload: payload, received: clock.now)
        written(topic, seq)
    }

    private func journal(_ kind: EvaluatorStore.EntryKind, topic: String, payload: [UInt8]) {
        do {
            let seq = try store.journal(kind, topic: topic, payload: payload, received: clock.now)
            written(topic, seq)
        } catch {
            logger.error(
                "journal write failed: message lost", metadata: ["topic": .string(topic), "error": "\(error)"])
        }
    }
}

/// The outbox's check right before each publish (``OutboxPublisher/Gate``): a message about a
/// subject of a partitioned venue goes out only while this evaluator may publish for the
/// subject's partition, with `partition` and `token` added to its payload; otherwise it is
/// held back. Messages of other venues, and those naming no subject, pass as they are.
///
/// The lease is asked once per partition per batch, so that a batch goes out or is held back
/// whole for each partition: a lease lost half-way through a batch must not let an
/// observation's retained state out while holding back its transition (its next holder would
/// start from that state and never make the transition again).
///
/// A lease still held but past its deadline (its renewal is late: a slow round, a store
/// election) is waited for, not given up: the keeper's next round either renews it (the batch
/// goes out with the same token) or finds it lost (held back). Giving it up at once would lose
/// the outputs of a partition this evaluator goes on holding.
struct PartitionGate: Sendable {
    let venues: [PartitionedVenue]

    /// Waits while a partition of the batch is held and not publishable.
    func callAsFunction(_ messages: [MQTTMessage]) async -> [MQTTMessage?] {
        var tokens: [String: [Int: UInt64?]] = [:]
        for message in messages {
            guard let (venue, partition) = owner(of: message), tokens[venue.venue]?[partition] == nil else { continue }
            var token = venue.keeper.token(for: partition)
            while token == nil && venue.keeper.held[partition] != nil && !Task.isCancelled {
                await venue.keeper.nextRound()
                token = venue.keeper.token(for: partition)
            }
            tokens[venue.venue, default: [:]][partition] = .some(token)
        }
        return stamped(messages, tokens: tokens)
    }

    /// Without waiting (ranging: QoS 0, worthless late).
    func now(_ messages: [MQTTMessage]) -> [MQTTMessage?] {
        var tokens: [String: [Int: UInt64?]] = [:]
        for message in messages {
            guard let (venue, partition) = owner(of: message) else { continue }
            tokens[venue.venue, default: [:]][partition] = .some(venue.keeper.token(for: partition))
        }
        return stamped(messages, tokens: tokens)
    }

    /// The partitioned venue and partition whose lease a message needs; nil when none.
    private func owner(of message: MQTTMessage) -> (PartitionedVenue, Int)? {
        for venue in venues where message.topic.hasPrefix(venue.topics.root + "/") {
            guard
                let partition = venue.settings.partitioning.partition(ofOutput: message.topic, root: venue.topics.root)
            else { return nil }
            return (venue, partition)
        }
        return nil
    }

    private func stamped(_ messages: [MQTTMessage], tokens: [String: [Int: UInt64?]]) -> [MQTTMessage?] {
        messages.map { message in
            guard let (venue, partition) = owner(of: message) else { return message }
            guard let token = tokens[venue.venue]?[partition] ?? nil else { return nil }
            var stamped = message
            stamped.payload = Partitioning.stamp(message.payload, partition: partition, token: token)
            return stamped
        }
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
    /// The partitions read now, per venue, with the tokens they were taken under.
    var followed: [String: [Int: UInt64]] = [:]
    /// Where the partitions' streams are journalled (set once serving).
    var streamJournal: PartitionStreamJournal?
    /// The totals published while holding partition 0: venue → region → count.
    var totals: [String: [String: Int]] = [:]
}

extension EvaluatorRuntime {
    /// The original topic of an observation delivered under its partition (the broker's
    /// mapping), so that it routes and dead-letters as any observation, and the partition its
    /// topic named (nil for any other row).
    func unpartitioned(_ row: EvaluatorStore.InboxRow) -> (row: EvaluatorStore.InboxRow, partition: Int?) {
        guard row.kind == .arrival || row.kind == .replayed, !partitionedIDs.isEmpty,
            let original = Partitioning.unpartitioned(row.topic, prefix: configuration.prefix, venues: partitionedIDs)
        else { return (row, nil) }
        var row = row
        row.topic = original.topic
        return (row, original.partition)
    }

    /// The inputs of a partitioned venue's message restricted to the subjects of the
    /// partitions held (a gateway's scan names subjects of every partition). A gateway's or
    /// reporter's message read back at a take (`.replayed`) is for the subjects of the
    /// partition its topic names only: the partitions held before had it live.
    /// - Parameter partition: the partition the row's topic named (``unpartitioned(_:)``).
    func restrictToHeld(
        _ inputs: [Inbound], venue: String, isGateway: (String) -> Bool,
        row: EvaluatorStore.InboxRow, partition: Int?
    ) -> [Inbound] {
        guard let settings = partitionSettings[venue] else { return inputs }
        var held = partitionState.held[venue] ?? []
        if row.kind == .replayed, let partition,
            let agent = Self.observingAgent(row.topic, prefix: configuration.prefix),
            broadcastAgents(of: venue).contains(agent)
        {
            held = held.intersection([partition])
        }
        return inputs.compactMap { settings.partitioning.restrict($0, to: held, isGateway: isGateway) }
    }

    /// The agent of an observation's topic, `{prefix}/{venue}/obs/{agent}/{kind}`; nil for any
    /// other topic.
    static func observingAgent(_ topic: String, prefix: String) -> String? {
        guard topic.hasPrefix(prefix + "/") else { return nil }
        let levels = topic.dropFirst(prefix.count + 1).split(separator: "/", omittingEmptySubsequences: false)
        guard levels.count == 4, levels[1] == "obs" else { return nil }
        return Topics.decodeLevel(String(levels[2]))
    }

    /// A `.partitions` row: from here on the venue holds these partitions. Subjects of the
    /// others are dropped (their new holder serves them). A partition taken is followed by its
    /// `.handover` row, which publishes its parts.
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
        // A partition taken publishes its parts after its handover row (from the adopted states).
        return []
    }

    /// A `.handover` row: the partitions' subjects start from their retained states.
    func applyHandover(_ row: EvaluatorStore.InboxRow, venue: inout VenueEvaluator) -> [EvaluatorOutput] {
        guard let settings = partitionSettings[row.topic], let json = try? JSONParser.parse(row.payload) else {
            return []
        }
        let held = partitionState.held[row.topic] ?? []
        let states = (json["states"]?.arrayValue ?? []).compactMap { item -> VenueEvaluator.AdoptedState? in
            guard let state = VenueEvaluator.AdoptedState(payload: Array(item.serialized().utf8)),
                held.contains(settings.partitioning.partition(of: state.subject))
            else { return nil }
            return state
        }
        // Every region's part of the partitions taken (not yet published by this holder), the
        // counts after adoption.
        _ = venue.adopt(states, now: row.received)
        return venue.regionIDs.map { .occupancy(region: $0, count: venue.occupants(of: $0).count, t: row.received) }
    }

    /// A partitioned venue's occupancy as parts: for each partition held, the region's count
    /// among its subjects, when it changed (`occupancy/{region}/p/{n}`, retained). Nil for an
    /// output that is not a partitioned venue's occupancy.
    /// - Parameter occupants: the subjects inside a region of the venue, asked only for a
    ///   partitioned venue's occupancy (read in place: a venue's evaluator is a large value, and
    ///   copying it out of the dictionary for every output was a few percent of processing).
    /// - Parameter position: the journal row's sequence, published as `n` (a part sent again
    ///   by the broker after newer ones is told by it).
    func occupancyParts(
        _ output: EvaluatorOutput, venue: String, position: Int64, occupants: (String) -> Set<String>
    ) -> [OutboundMessage]? {
        guard case .occupancy(let region, _, let t) = output, let settings = partitionSettings[venue],
            let topics = partitionState.served[venue]?.topics
                ?? Optional(Topics(prefix: configuration.prefix, venue: venue))
        else { return nil }
        var counts: [Int: Int] = [:]
        for partition in partitionState.held[venue] ?? [] { counts[partition] = 0 }
        for subject in occupants(region) {
            let partition = settings.partitioning.partition(of: subject)
            if counts[partition] != nil { counts[partition]! += 1 }
        }
        var messages: [OutboundMessage] = []
        for (partition, count) in counts.sorted(by: { $0.key < $1.key })
        where partitionState.partCounts[venue]?[region]?[partition] != count {
            partitionState.partCounts[venue, default: [:]][region, default: [:]][partition] = count
            let payload: JSONValue = [
                "count": .number(Double(count)), "t": .string(Timestamp.format(t)), "n": .number(Double(position)),
            ]
            messages.append(
                OutboundMessage(
                    topic: topics.occupancyPart(region: region, partition: partition),
                    payload: Array(payload.serialized().utf8), qos: 1, retain: true))
        }
        return messages
    }

    /// Follows what the leases now hold (docs/scale.md, "Handover"). A lost partition: its
    /// stream is no longer read, and the change is journalled (its subjects are dropped). The
    /// partitions taken: their subjects' retained states and the broadcast agents' (gateways',
    /// reporters') messages of the last `replay` seconds are read, then journalled in one go,
    /// under the stream journal's lock: the new set held, a `.handover` row (the engines start
    /// from the states), the broadcast messages for the subjects of the partitions taken
    /// (``PartitionedVenue/catchUp(_:taken:_:logger:)``); then each partition's own stream
    /// is read from `replay` seconds back (what was stored before it was taken is journalled
    /// as `.replayed`). Everything goes through the journal, so a replay after a crash does the
    /// same.
    func followPartitions() async throws {
        for (id, venue) in partitionState.served.sorted(by: { $0.key < $1.key }) {
            let holdings = venue.keeper.held
            let now = Set(holdings.keys)
            let plan = PartitionFollowing(followed: partitionState.followed[id] ?? [:], holdings: holdings)
            partitionState.followed[id] = holdings
            if !plan.retaken.isEmpty {
                logger.notice(
                    "partitions lost and taken again since the last look: followed afresh, as taken",
                    metadata: [
                        "venue": .string(id),
                        "partitions": .string(plan.retaken.sorted().map(String.init).joined(separator: ",")),
                    ])
            }
            for partition in plan.released.union(plan.retaken).sorted() { venue.stopFollowing(partition) }
            retryUnread(venue, holding: now)
            guard plan.changed else { continue }
            let taken = plan.taken
            if taken.contains(0) { partitionState.totals[id] = [:] }
            guard !taken.isEmpty, let streamJournal = partitionState.streamJournal else {
                try journalPartitions(venue: id, now)
                continue
            }
            // Losses at once (a partition taken again is lost first: its subjects are dropped and
            // start again from their retained states); the partitions taken are journalled with
            // what they start from.
            if !plan.released.isEmpty || !plan.retaken.isEmpty { try journalPartitions(venue: id, plan.kept) }
            let takenAt = clock.now
            let replayFrom = takenAt.addingTimeInterval(-venue.settings.replay)
            let started = ContinuousClock.now
            var states: [VenueEvaluator.AdoptedState]?
            for _ in 0..<3 where states == nil { states = await retainedStates(venue, partitions: Set(taken)) }
            if states == nil {
                logger.error(
                    "retained states not read after three tries: the partitions taken start from their stream alone (event numbers may repeat)",
                    metadata: ["venue": .string(id)])
            }
            let adopted = states ?? []
            var readBacks: [String: BroadcastReadBack] = [:]
            for agent in venue.broadcast.sorted() {
                readBacks[agent] = venue.readBack(agent, from: replayFrom, logger: logger)
            }
            defer { for readBack in readBacks.values { readBack.reader.close() } }
            let handover: JSONValue = [
                "partitions": .array(taken.map { .number(Double($0)) }), "states": .array(adopted.map(\.json)),
            ]
            let held: JSONValue = ["held": .array(now.sorted().map { .number(Double($0)) })]
            let broadcast = try streamJournal.locked { locked in
                try locked.mustWrite(.partitions, topic: id, payload: Array(held.serialized().utf8))
                try locked.mustWrite(.handover, topic: id, payload: Array(handover.serialized().utf8))
                return venue.catchUp(readBacks, taken: taken, locked, logger: logger)
            }
            for (agent, after) in broadcast.live.sorted(by: { $0.key < $1.key }) {
                venue.startLive(agent, after: after, from: replayFrom, journal: streamJournal, logger: logger)
            }
            venue.unread.withLock { unread in for partition in taken { unread[partition] = takenAt } }
            retryUnread(venue, holding: now)
            logger.notice(
                "partitions taken over",
                metadata: [
                    "venue": .string(id), "partitions": .string(taken.map(String.init).joined(separator: ",")),
                    "states": "\(adopted.count)", "broadcast": "\(broadcast.count)",
                    "seconds": "\(ContinuousClock.now - started)",
                ])
        }
    }

    /// Starts reading the streams of held partitions not read yet (a first try, or one after a
    /// failure: the partition stays held, its observations wait in the stream).
    func retryUnread(_ venue: PartitionedVenue, holding: Set<Int>) {
        guard let journal = partitionState.streamJournal else { return }
        for (partition, takenAt) in venue.unread.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            guard holding.contains(partition) else {
                venue.unread.withLock { _ = $0.removeValue(forKey: partition) }
                continue
            }
            do {
                try venue.follow(
                    partition, from: takenAt.addingTimeInterval(-venue.settings.replay), takenAt: takenAt,
                    journal: journal)
                venue.unread.withLock { _ = $0.removeValue(forKey: partition) }
            } catch {
                logger.error(
                    "cannot read the partition's observations from the broker's stream yet; trying again next round",
                    metadata: ["venue": .string(venue.venue), "partition": "\(partition)", "error": "\(error)"])
            }
        }
    }

    /// The retained `state/{region}/{subject}` of the subjects of `partitions`, read through a
    /// connection of its own (clean session): everything retained arrives before a marker
    /// this connection publishes after subscribing. Nil, and said, when it cannot be read.
    func retainedStates(_ venue: PartitionedVenue, partitions: Set<Int>) async -> [VenueEvaluator.AdoptedState]? {
        let marker = "\(configuration.prefix)/_sys/evaluator/\(Topics.level(configuration.instance))/handover"
        let token = UUID().uuidString
        var mqtt = configuration.broker.mqttConfiguration(clientID: configuration.broker.clientID + "-handover")
        mqtt.cleanStart = true
        let client: MQTTClient
        do {
            client = try MQTTClient(mqtt)
        } catch {
            logger.error("retained states not read", metadata: ["venue": .string(venue.venue), "error": "\(error)"])
            return nil
        }
        do {
            try await client.connect(timeout: .seconds(10))
            let messages = client.messages
            // QoS 0: on NATS a QoS 1 subscription is a JetStream consumer, seconds to create
            // on a busy cluster, and a move waits for this; retained messages come either way.
            _ = try await client.subscribe(marker, qos: .atMostOnce)
            _ = try await client.subscribe("\(venue.topics.root)/state/+/+", qos: .atMostOnce)
            try await client.publish(marker, token, qos: .atMostOnce)
            let prefix = venue.topics.root + "/state/"
            let partitioning = venue.settings.partitioning
            let collected: [VenueEvaluator.AdoptedState]? = try await withThrowingTaskGroup(
                of: [VenueEvaluator.AdoptedState]?.self
            ) { group in
                group.addTask {
                    var states: [VenueEvaluator.AdoptedState] = []
                    for await message in messages {
                        if message.topic == marker && message.payloadString == token { return states }
                        guard message.topic.hasPrefix(prefix), !message.payload.isEmpty else { continue }
                        let levels = message.topic.dropFirst(prefix.count).split(separator: "/")
                        guard levels.count == 2, partitions.contains(partitioning.partition(ofLevel: levels[1])),
                            let state = VenueEvaluator.AdoptedState(payload: message.payload)
                        else { continue }
                        states.append(state)
                    }
                    return nil
                }
                group.addTask { [clock] in
                    try await clock.sleep(seconds: 30)
                    return nil
                }
                let first = try await group.next() ?? nil
                group.cancelAll()
                return first
            }
            await client.disconnect()
            guard let collected else { throw EvaluatorError("the marker did not come back within 30 s") }
            return collected
        } catch {
            await client.disconnect()
            logger.error("retained states not read", metadata: ["venue": .string(venue.venue), "error": "\(error)"])
            return nil
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

    /// How often, in seconds of the service's clock, the holder of partition 0 of a venue
    /// subscribes to the venue's parts again, so that the broker sends every retained part
    /// anew (MQTT 3.1.1 §3.8.4; MQTT 5 with retain handling 0). A part's last value that never
    /// reached this evaluator would otherwise keep its total off until that part changes again:
    /// seen through NATS's MQTT under load, where the totals holder summed 23 while the
    /// retained parts said 24 (docs/scale.md, "Occupancy"). What it already has, the board
    /// ignores (same token, no later position); what it missed changes the board, and the total
    /// follows. A child task of its own: the subscription's acknowledgement (or, offline, the
    /// next connection) is waited for there, not in the processor.
    static let partsRereadInterval: Double = 15

    /// While this evaluator holds partition 0 of a venue: the total of each region whose sum of
    /// parts changed, on `occupancy/{region}` (retained; the gate adds partition 0's token).
    /// - Parameter reconcile: look at every venue's parts whether or not a part came in since
    ///   (each stats interval): a total the parts no longer add up to goes out again, whatever
    ///   change was missed (docs/scale.md, "Occupancy": a suite run under load once ended
    ///   with the total one off its parts for 30 s).
    func occupancyTotals(reconcile: Bool = false) -> [OutboxPublisher.Row] {
        var rows: [OutboxPublisher.Row] = []
        for (id, venue) in partitionState.served.sorted(by: { $0.key < $1.key }) {
            // Only the holder of partition 0 looks (and takes the change): its publish waits
            // for a late renewal in the gate, or is held back if partition 0 was lost.
            guard venue.keeper.held[0] != nil,
                venue.boardChanged.exchange(false, ordering: .acquiringAndReleasing) || partitionState.totals[id] == [:]
                    || reconcile
            else { continue }
            let board = venue.board.withLock { $0 }
            for total in board.totalsChanged(since: partitionState.totals[id] ?? [:]) {
                partitionState.totals[id, default: [:]][total.region] = total.count
                let payload: JSONValue = [
                    "count": .number(Double(total.count)), "t": .string(Timestamp.format(total.t)),
                ]
                rows.append(
                    OutboxPublisher.Row(
                        number: 0,
                        message: Self.mqttMessage(
                            OutboundMessage(
                                topic: venue.topics.occupancy(region: total.region),
                                payload: Array(payload.serialized().utf8), qos: 1, retain: true))))
            }
        }
        return rows
    }
}
