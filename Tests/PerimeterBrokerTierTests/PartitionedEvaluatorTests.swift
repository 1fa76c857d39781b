import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Synchronization
import Testing

/// Real `perimeter evaluator` processes sharing one venue's partitions on the three-node cluster
/// (docs/scale.md, "The evaluator on partitions"): the broker's mapping routes each agent's
/// observations to its partition, each evaluator subscribes to the partitions its leases hold,
/// and its outputs carry the partition and the fencing token.
enum PartitionedTier {
    /// Set by the suite's tests before anything starts (one test at a time: `.serialized`).
    nonisolated(unsafe) static var partitioning = try! Partitioning(count: 2)

    /// A transition or state as received, with the fields the gate added.
    struct Stamped: Sendable {
        var topic: String
        var partition: Int
        var token: UInt64
        var subject: String
        var event: String?
        var id: String?

        init?(_ message: MQTTMessage) {
            guard let json = try? JSONParser.parse(message.payload), let partition = json["partition"]?.intValue,
                let token = json["token"]?.intValue
            else { return nil }
            self.topic = message.topic
            self.partition = partition
            self.token = UInt64(token)
            self.subject = json["subject"]?.stringValue ?? ""
            self.event = json["event"]?.stringValue
            self.id = json["id"]?.stringValue
        }
    }

    static func stamped(_ messages: [MQTTMessage]) -> [Stamped] { messages.compactMap(Stamped.init) }

    final class Counter: Sendable {
        let value = Atomic<Int>(0)
    }

    /// What a test adds to the venue's configuration: more settings (`gateways`), other regions,
    /// how far back a partition taken is read (`partitions.replay`, nil: the default), its own
    /// partitioning (nil: ``partitioning``, which a suite running beside this one may set).
    struct Venue: Sendable {
        var extra: JSONObject = [:]
        var regions: JSONValue = Tier.regions
        var replay: Double?
        var partitioning: Partitioning?
    }

    /// Sets the suite's partitioning to `count` partitions and starts a three-node cluster
    /// that maps the test venue's observations by it, stopped by `cleanup`.
    static func cluster(partitions count: Int, cleanup: Cleanup) async throws -> NATSCluster {
        partitioning = try Partitioning(count: count)
        return try await cluster(mapping: partitioning, cleanup: cleanup)
    }

    /// A three-node cluster that maps the test venue's observations by `partitioning`, stopped
    /// by `cleanup` (the suite's partitioning left as it is).
    static func cluster(mapping partitioning: Partitioning, cleanup: Cleanup) async throws -> NATSCluster {
        let cluster = try await NATSCluster.start(
            mappings: [partitioning.natsMapping(topics: Topics(venue: Tier.venue))])
        cleanup.add { await cluster.stop() }
        return cluster
    }

    /// Writes an evaluator's configuration for the venue split in `count` partitions, its
    /// leases on the cluster (TTL `ttl`, margin 1 s), connected to `node`, a snapshot every 20
    /// journal rows (so that a restart starts from one).
    /// - Parameters:
    ///   - leaseNodes: the nodes whose NATS URLs the leases use (nil: all three).
    ///   - httpPort: where `/metrics` and `/healthz` listen on loopback (nil: nowhere).
    static func configuration(
        _ instance: String, cluster: NATSCluster, node: Int, ttl: Double, venue: Venue = Venue(),
        leaseNodes: [Int]? = nil, httpPort: Int? = nil, cleanup: Cleanup
    ) throws -> String {
        let count = (venue.partitioning ?? partitioning).count
        var venueSettings = venue.extra
        let urls = leaseNodes.map { $0.map { cluster.clientURLs[$0] } } ?? cluster.clientURLs
        var partitions: JSONObject = [
            "count": .number(Double(count)), "nats": .array(urls.map(JSONValue.string)),
            "ttl": .number(ttl), "margin": 1,
        ]
        if let replay = venue.replay { partitions["replay"] = .number(replay) }
        venueSettings["partitions"] = .object(partitions)
        var evaluatorExtra: JSONObject = ["snapshotEvery": 20]
        if let httpPort { evaluatorExtra["http"] = .string("127.0.0.1:\(httpPort)") }
        let directory = try Tier.directory("partitioned-\(instance)")
        cleanup.add { try? FileManager.default.removeItem(at: directory) }
        return try Tier.evaluatorConfiguration(
            in: directory,
            broker: [
                "hosts": .string("127.0.0.1:\(cluster.nodes[node].mqttPort)"), "protocol": "3.1.1",
                "clientId": .string("perimeter-evaluator-\(instance)"),
            ],
            extra: ["topics": ["natsSafe": true]],
            venueExtra: venueSettings,
            instance: instance, evaluatorExtra: evaluatorExtra, regions: venue.regions)
    }

    /// Waits until `child` has printed `marker` on at least `times` lines.
    static func waitForLines(
        _ child: ChildProcess, containing marker: String, times: Int = 1, timeout: Duration = .seconds(60)
    ) async throws {
        let found: Bool? = try await waitForValue(timeout: timeout, every: .milliseconds(20)) {
            child.output.split(separator: "\n").count { $0.contains(marker) } >= times ? true : nil
        }
        if found == nil {
            throw TimeoutError(what: "\(times)× '\(marker)': \(child.output.suffix(4000))", timeout: timeout)
        }
    }

    /// One fix of a test subject: round `round`, alternately inside the hall and 1.1 km away
    /// (every fix a transition), dated `t0 + round × step` seconds.
    struct Fix: Sendable {
        var subject: String
        var round: Int
        var t: Double
        var lat: Double { round % 2 == 0 ? 45.0 : 45.01 }
        var payload: String { #"{"subject":"\#(subject)","t":\#(t),"lat":\#(lat),"lon":13.0,"acc":5}"# }
    }

    /// The fixes of `rounds` rounds of `subjects`, in publishing order.
    static func fixes(subjects: [String], rounds: Range<Int>, t0: Double, step: Double) -> [Fix] {
        rounds.flatMap { round in
            subjects.map { Fix(subject: $0, round: round, t: t0 + Double(round) * step) }
        }
    }

    /// Publishes `fixes` (each subject its own agent) at QoS 1, `every` apart (nil: as fast as
    /// the client takes them); `after(round)` is awaited after each round's last fix.
    static func publish(
        _ publisher: MQTTClient, _ fixes: [Fix], every: Duration? = nil, after: (Int) async throws -> Void = { _ in }
    ) async throws {
        for (index, fix) in fixes.enumerated() {
            try await publisher.publish("\(Tier.root)/obs/\(fix.subject)/gps", fix.payload, qos: .atLeastOnce)
            // Sleep, not a clock: the pace of live traffic offered to other processes (evaluators, NATS); assertions wait on what arrives.
            if let every { try await Task.sleep(for: every) }
            if index + 1 == fixes.count || fixes[index + 1].round != fix.round { try await after(fix.round) }
        }
    }

    /// Fixes of `subjects` round after round until cancelled (dated 0.2 s apart per round).
    static func traffic(
        _ publisher: MQTTClient, subjects: [String], every: Duration, sent: Counter
    ) -> Task<
        Void, Never
    > {
        Task {
            let t0 = Date().timeIntervalSince1970
            var round = 0
            while !Task.isCancelled {
                let batch = fixes(subjects: subjects, rounds: round..<(round + 1), t0: t0, step: 0.2)
                try? await publish(publisher, batch, every: every)
                sent.value.add(batch.count, ordering: .relaxed)
                round += 1
            }
        }
    }

    /// A region's occupancy as a consumer following topics.md's rules sees it: the last total
    /// and the latest part of every partition of `partitions` (those received). An output
    /// carrying a lower token than one already seen for its partition is dropped (under load a
    /// holder past its lease may still land a part after its successor's), and within one token
    /// a part numbered (`n`) no later than the one kept (a QoS 1 message the broker sent again)
    /// is ignored: `OccupancyParts`, as the evaluator summing the parts does.
    static func occupancy(
        of region: String, in messages: [MQTTMessage], partitions: Range<Int> = partitioning.all
    ) -> (total: Int?, parts: [Int]) {
        var total: Int?
        var board = OccupancyParts()
        var fencing = FencingWatch()
        let totalTopic = "\(Tier.root)/occupancy/\(region)"
        for message in messages {
            let json = try? JSONParser.parse(message.payload)
            if let partition = json?["partition"]?.intValue, let token = json?["token"]?.intValue, token >= 0,
                !fencing.accept(venue: "test", partition: partition, token: UInt64(token))
            {
                continue
            }
            if message.topic == totalTopic {
                total = json?["count"]?.intValue
            } else if message.topic.hasPrefix(totalTopic + "/p/"),
                let (partition, part) = OccupancyParts.part(from: message.payload)
            {
                board.note(venue: "test", region: region, partition: partition, part)
            }
        }
        return (total, partitions.compactMap { board.parts[region]?[$0]?.count })
    }

    /// What a fresh subscription on `port` reads of `region`'s retained occupancy (the total
    /// and the latest part per partition, as ``occupancy(of:in:partitions:)`` reads them), for a
    /// failure message: a part the live subscription never got may still be in the broker's
    /// retained store (a delivery lost) or not (never published).
    static func retainedOccupancy(
        of region: String, partitions: Range<Int> = partitioning.all, port: Int, cleanup: Cleanup
    ) async -> String {
        await retainedPicture(of: region, partitions: partitions, port: port, cleanup: cleanup).said
    }

    /// The retained total and parts of `region` as a new subscriber on `port` reads them, and
    /// what it read, said.
    static func retainedPicture(
        of region: String, partitions: Range<Int> = partitioning.all, port: Int, cleanup: Cleanup
    ) async -> (total: Int?, parts: [Int], said: String) {
        do {
            let fresh = try await NATSClusterTests.connectedInbox(
                "retained-\(UUID().uuidString.prefix(8))", port: port,
                filters: ["\(Tier.root)/occupancy/\(region)", "\(Tier.root)/occupancy/\(region)/p/+"],
                cleanup: cleanup)
            let messages =
                (try? await fresh.waitFor("the retained total and parts", timeout: .seconds(15)) {
                    Set($0.map(\.topic)).count == partitions.count + 1
                }) ?? fresh.messages
            let (total, parts) = occupancy(of: region, in: messages, partitions: partitions)
            return (
                total, parts,
                "retained, read afresh: total \(total as Any), parts \(parts) (\(partHistory(of: region, in: messages)))"
            )
        } catch {
            return (nil, [], "retained not read: \(error)")
        }
    }

    /// At the end of a test, when the subscriber's stream did not bring a region's occupancy to
    /// `inside` within its wait: the retained picture read afresh decides. Right there, the
    /// evaluators published the right parts and total and only the subscriber on another node
    /// missed a part's last value (docs/scale.md, "Occupancy": open, NATS's delivery); said
    /// and not failed. Wrong there too: an issue.
    static func expectRetainedOccupancy(
        of region: String, inside: Int, partitions: Range<Int> = partitioning.all, port: Int,
        received: [MQTTMessage], cleanup: Cleanup
    ) async {
        let (streamTotal, streamParts) = occupancy(of: region, in: received, partitions: partitions)
        let retained = await retainedPicture(of: region, partitions: partitions, port: port, cleanup: cleanup)
        let said =
            "\(region) at the end: the subscriber's stream gave total \(streamTotal as Any), parts \(streamParts), expected \(inside); parts received: \(partHistory(of: region, in: received)); \(retained.said)"
        if retained.total == inside && retained.parts.count == partitions.count
            && retained.parts.reduce(0, +) == inside
        {
            print(
                "partitioned occupancy: the subscriber missed a part's last value, the retained picture is right: \(said)"
            )
        } else {
            Issue.record(Comment(rawValue: said))
        }
    }

    /// Every part of `region` received, per partition, in arrival order: `token/n=count`.
    static func partHistory(of region: String, in messages: [MQTTMessage]) -> String {
        let prefix = "\(Tier.root)/occupancy/\(region)/p/"
        var history: [Int: [String]] = [:]
        for message in messages where message.topic.hasPrefix(prefix) {
            guard let (partition, part) = OccupancyParts.part(from: message.payload) else { continue }
            history[partition, default: []].append(
                "\(part.token)/\(part.position.map(String.init) ?? "-")=\(part.count)")
        }
        return history.sorted { $0.key < $1.key }.map { "p\($0.key): \($0.value.joined(separator: " "))" }
            .joined(separator: "; ")
    }

    /// The partitions `child` holds by its last `held=` line.
    static func held(_ child: ChildProcess) -> Set<Int>? {
        guard let line = child.output.split(separator: "\n").last(where: { $0.contains(" held=") }),
            let field = line.split(separator: " ").first(where: { $0.hasPrefix("held=") })
        else { return nil }
        return Set(field.dropFirst(5).split(separator: ",").compactMap { Int($0) })
    }

    /// What `children` (instance → process) hold, once it is a settled layout of `count`
    /// partitions (``PartitionAssignment/isSettled(_:count:)``: every partition held by one,
    /// each its share); nil before. Which partitions each holds depends on the order in which
    /// they came in: the layout is sticky.
    static func settledLayout(_ children: [String: ChildProcess], count: Int) -> [String: Set<Int>]? {
        let layout = children.mapValues { held($0) ?? [] }
        return PartitionAssignment.isSettled(layout, count: count) ? layout : nil
    }

    /// The partitions `child`'s lease keeper acquired, in its output after `offset` characters.
    static func acquired(_ child: ChildProcess, after offset: Int) -> Set<Int> {
        partitions(in: child, after: offset, lines: "partition leases changed", field: "acquired=")
    }

    /// The partitions `child` said it took over in its output after `offset` characters.
    static func takenOver(_ child: ChildProcess, after offset: Int) -> Set<Int> {
        partitions(in: child, after: offset, lines: "partitions taken over", field: "partitions=")
    }

    /// The partition numbers in `field` (`name=1,2,3`) of the log lines containing `lines`.
    static func partitions(in child: ChildProcess, after offset: Int, lines marker: String, field: String) -> Set<Int> {
        let output = child.output
        guard output.count > offset else { return [] }
        var found: Set<Int> = []
        for line in output.dropFirst(offset).split(separator: "\n") where line.contains(marker) {
            guard let value = line.split(separator: " ").first(where: { $0.hasPrefix(field) }) else { continue }
            found.formUnion(value.dropFirst(field.count).split(separator: ",").compactMap { Int($0) })
        }
        return found
    }

    /// Starts `perimeter evaluator` for `instance` on `node`, killed by `cleanup` (resumed first,
    /// should it be stopped).
    /// - Parameter path: a configuration written before (a restart), else a new one.
    static func evaluator(
        _ instance: String, node: Int, cluster: NATSCluster, ttl: Double = 6, venue: Venue = Venue(),
        path: String? = nil, cleanup: Cleanup
    ) async throws -> ChildProcess {
        let path =
            try path ?? configuration(instance, cluster: cluster, node: node, ttl: ttl, venue: venue, cleanup: cleanup)
        let child = try ChildProcess(Products.executable("perimeter"), ["evaluator", "--config", path])
        cleanup.add {
            child.subprocess.signal(SIGCONT)
            if child.subprocess.isRunning { child.kill(SIGKILL) }
        }
        try await child.waitForLine(containing: "evaluator running", timeout: .seconds(60))
        return child
    }
}

@Suite("Broker tier: one venue's partitions on several evaluators", .serialized)
struct PartitionedEvaluatorTests {
    /// Two evaluators hold partition 0 and 1; the holder of 0 is stopped with SIGSTOP past its
    /// lease, the other takes partition 0 over, the first is resumed with SIGCONT. On the
    /// consumer's stream in arrival order, with the fencing rule (drop a token below the highest
    /// seen for the partition): no output of the resumed evaluator with its old token passes.
    /// Measured and printed: how long partition 0 was unserved, and how many such outputs were
    /// even sent (the outbox asks the lease right before each publish and holds them back).
    @Test("SIGSTOP a partition's evaluator past its lease, another takes over, SIGCONT: nothing stale passes")
    func pausedEvaluator() async throws {
        try await Cleanup.around { cleanup in
            let cluster = try await PartitionedTier.cluster(partitions: 2, cleanup: cleanup)
            let subjects = (0..<8).map { "s\($0)" }
            let byPartition = Dictionary(grouping: subjects, by: PartitionedTier.partitioning.partition(of:))
            #expect(byPartition.count == 2, "the test's subjects should fall in both partitions")

            let inbox = try await NATSClusterTests.connectedInbox(
                "consumer", port: cluster.nodes[2].mqttPort,
                filters: Tier.transitionFilters + ["\(Tier.root)/occupancy/#"], cleanup: cleanup)
            let a = try await PartitionedTier.evaluator("a", node: 0, cluster: cluster, cleanup: cleanup)
            try await PartitionedTier.waitForLines(a, containing: "held=0,1")
            let b = try await PartitionedTier.evaluator("b", node: 1, cluster: cluster, cleanup: cleanup)
            // Two members: partition 0 is a's, 1 is b's (a gives it up).
            try await PartitionedTier.waitForLines(b, containing: "acquired=1")

            let publisher = try MQTTClient(NATSClusterTests.client("agents", port: cluster.nodes[2].mqttPort))
            cleanup.add { await publisher.disconnect() }
            try await publisher.connect(timeout: .seconds(20))
            let sent = PartitionedTier.Counter()
            let traffic = PartitionedTier.traffic(publisher, subjects: subjects, every: .milliseconds(25), sent: sent)
            cleanup.add { traffic.cancel() }
            // Both serving: transitions of both partitions, each under one token.
            let first: [MQTTMessage]
            do {
                first = try await inbox.waitFor("transitions of both partitions", timeout: .seconds(60)) { messages in
                    Set(PartitionedTier.stamped(messages).filter { $0.event != nil }.map(\.partition)) == [0, 1]
                }
            } catch {
                throw ChildFailure(
                    message: "\(error)\n--- a:\n\(a.output.suffix(6000))\n--- b:\n\(b.output.suffix(6000))")
            }
            let tokenA = try #require(
                PartitionedTier.stamped(first).first { $0.partition == 0 && $0.event != nil }?.token)

            a.subprocess.signal(SIGSTOP)
            let stoppedAt = ContinuousClock.now
            try await PartitionedTier.waitForLines(b, containing: "acquired=0")
            let movedAfter = ContinuousClock.now - stoppedAt
            try await inbox.waitFor("partition 0's transitions with b's token", timeout: .seconds(30)) { messages in
                PartitionedTier.stamped(messages).contains { $0.partition == 0 && $0.event != nil && $0.token > tokenA }
            }
            a.subprocess.signal(SIGCONT)
            try await PartitionedTier.waitForLines(a, containing: "lost=0", timeout: .seconds(30))
            // The later marker: b gives partition 0 back to the member that wants it, and a's
            // transitions with its new token arrive, after anything a sent before on the same
            // connection.
            let stream = try await inbox.waitFor("a's transitions on 0 with a newer token", timeout: .seconds(60)) {
                messages in
                let all = PartitionedTier.stamped(messages).filter { $0.partition == 0 && $0.event != nil }
                guard let tokenB = all.first(where: { $0.token > tokenA })?.token else { return false }
                return all.contains { $0.token > tokenB }
            }
            traffic.cancel()
            let zero = PartitionedTier.stamped(stream).filter { $0.partition == 0 }
            let tokenB = try #require(zero.first { $0.token > tokenA }?.token)
            let newTokenA = try #require(zero.last?.token)
            #expect(tokenA < tokenB && tokenB < newTokenA)

            var watch = FencingWatch()
            var seenB = false
            var staleArrived = 0
            var staleAccepted = 0
            for message in zero {
                let accepted = watch.accept(venue: Tier.venue, partition: 0, token: message.token)
                if message.token == tokenB { seenB = true }
                if message.token == tokenA && seenB {
                    staleArrived += 1
                    if accepted { staleAccepted += 1 }
                }
            }
            #expect(staleAccepted == 0, "an output of the paused evaluator passed the fencing rule")
            // The outbox asks before each publish: a held back what it processed after its
            // deadline (the observations queued for it while it was stopped).
            let heldBack = a.output.split(separator: "\n").filter { $0.contains("outputs held back") }
            let heldBackCount = heldBack.compactMap { line in
                line.split(separator: " ").first { $0.hasPrefix("messages=") }.flatMap { Int($0.dropFirst(9)) }
            }.reduce(0, +)
            // Each subject's outputs stay within its partition.
            for message in PartitionedTier.stamped(stream) where !message.subject.isEmpty {
                #expect(PartitionedTier.partitioning.partition(of: message.subject) == message.partition)
            }
            print(
                "partitioned evaluators: partition 0 moved \(movedAfter) after SIGSTOP (TTL 6 s); tokens a \(tokenA) → b \(tokenB) → a \(newTokenA); "
                    + "\(staleArrived) outputs with a's old token arrived after b's first (all dropped by the rule); "
                    + "a held back \(heldBackCount) outputs after its deadline; \(sent.value.load(ordering: .relaxed)) observations sent"
            )
        }
    }

    /// One venue on three evaluators (P = 6, two partitions each); `kill -9` of one while it
    /// still has rounds of the agents' fixes to process, five more rounds published while its
    /// partitions are unserved, six once they are taken over. Its partitions move once their leases expire, and
    /// only they (the layout is sticky: the survivors keep theirs); each new holder starts
    /// from the retained states and reads the partition's stream from 30 s back. Asserted: the
    /// killed one's partitions are taken over within 10 s of the kill (measured and printed);
    /// the subscriber's transitions, deduplicated by id, are exactly those the pure evaluator
    /// gives for the same fixes (a fault-free run); the retained occupancy total and the sum of
    /// the parts equal the number of subjects inside at the end. Then the killed one restarts on
    /// its database (from a snapshot), gets its partitions back from the live holders, and one
    /// more round gives exactly the fault-free run's next transitions; occupancy reads 0.
    /// The lease TTL of the kill test. A dead holder's partitions come free `ttl` after its last
    /// renewal (up to `ttl/3` before the death) and are taken at a survivor's next round: with
    /// 6 s that was 4.9–8.1 s on a quiet machine and beside two CPU hogs, but 17.9 s beside two
    /// hogs while the evaluator suite ran too (rounds of ~10 JetStream requests each slowed down).
    /// 4 s keeps the issue's 10 s there; a late renewal may then move a partition from a live
    /// holder, which costs a handover and nothing else (the test's assertions cover that).
    static let killTTL = 4.0

    @Test("kill -9 one of three evaluators mid-replay: its partitions move within 10 s, nothing lost or invented")
    func killedEvaluator() async throws {
        try await Cleanup.around { cleanup in
            let cluster = try await PartitionedTier.cluster(partitions: 6, cleanup: cleanup)
            let partitioning = PartitionedTier.partitioning
            let subjects = (0..<24).map { "v\($0)" }
            #expect(Set(subjects.map(partitioning.partition(of:))) == Set(0..<6), "subjects in every partition")
            let inbox = try await NATSClusterTests.connectedInbox(
                "consumer", port: cluster.nodes[1].mqttPort,
                filters: Tier.transitionFilters + ["\(Tier.root)/occupancy/#"], cleanup: cleanup)

            let pathA = try PartitionedTier.configuration(
                "a", cluster: cluster, node: 0, ttl: Self.killTTL, cleanup: cleanup)
            let a = try await PartitionedTier.evaluator(
                "a", node: 0, cluster: cluster, path: pathA, cleanup: cleanup)
            let b = try await PartitionedTier.evaluator(
                "b", node: 1, cluster: cluster, ttl: Self.killTTL, cleanup: cleanup)
            let c = try await PartitionedTier.evaluator(
                "c", node: 2, cluster: cluster, ttl: Self.killTTL, cleanup: cleanup)
            // Three members, two partitions each (which ones depends on the order they came in).
            let members = ["a": a, "b": b, "c": c]
            let settled: [String: Set<Int>]? = try await waitForValue(timeout: .seconds(60), every: .milliseconds(50)) {
                PartitionedTier.settledLayout(members, count: 6)
            }
            guard let layout = settled else {
                throw ChildFailure(
                    message:
                        "the three never settled on 2 partitions each: \(members.mapValues { PartitionedTier.held($0) as Any })"
                )
            }
            let doomed = layout["a"]!

            let publisher = try MQTTClient(NATSClusterTests.client("agents", port: cluster.nodes[2].mqttPort))
            cleanup.add { await publisher.disconnect() }
            try await publisher.connect(timeout: .seconds(20))
            // Dated in the recent past, a second apart per round.
            // 17 rounds: everyone ends inside.
            let fixes = PartitionedTier.fixes(
                subjects: subjects, rounds: 0..<17, t0: (Date().timeIntervalSince1970 - 40).rounded(), step: 1)
            var killedAt: ContinuousClock.Instant?
            var offsets: [Int] = []
            // Rounds 0–10 without pause: a is killed after round 5, while it still has rounds
            // to process; rounds 6–10 reach its partitions while they are unserved (the new
            // holders read them back from the stream). Rounds 11–16 come once they are taken
            // over (read live).
            try await PartitionedTier.publish(publisher, fixes.filter { $0.round < 11 }) { round in
                guard round == 5 else { return }
                offsets = [b.output.count, c.output.count]
                a.subprocess.signal(SIGKILL)
                killedAt = .now
            }
            let killed = try #require(killedAt)

            // The killed one's partitions taken over, measured from the kill.
            // Leased: a survivor's keeper holds them; taken over: it has also read their retained
            // states and started reading their streams.
            var leasedAfter: Duration?
            let moved: Duration? = try await waitForValue(timeout: .seconds(30), every: .milliseconds(20)) {
                if leasedAfter == nil,
                    PartitionedTier.acquired(b, after: offsets[0]).union(PartitionedTier.acquired(c, after: offsets[1]))
                        .isSuperset(of: doomed)
                {
                    leasedAfter = ContinuousClock.now - killed
                }
                let taken = PartitionedTier.takenOver(b, after: offsets[0])
                    .union(PartitionedTier.takenOver(c, after: offsets[1]))
                return taken.isSuperset(of: doomed) ? ContinuousClock.now - killed : nil
            }
            // Only the dead member's partitions moved: each survivor still holds what it held,
            // and took over nothing else (no handover between live members).
            for (name, child, offset) in [("b", b, offsets[0]), ("c", c, offsets[1])] {
                let now = PartitionedTier.held(child) ?? []
                let taken = PartitionedTier.takenOver(child, after: offset)
                #expect(
                    now.isSuperset(of: layout[name]!) && taken.isSubset(of: doomed),
                    "\(name) held \(layout[name]!.sorted()), now \(now.sorted()), took over \(taken.sorted())")
            }
            try await PartitionedTier.publish(publisher, fixes.filter { $0.round >= 11 })

            // The fault-free run: the pure evaluator on the same fixes.
            let regions = Tier.regions.serialized()
            var settings = VenueSettings(id: Tier.venue, privacy: .open)
            settings.trust.reporters = []
            var reference = VenueEvaluator(settings: settings, regions: RegionParser.parse(text: regions).regions)
            var expected: Set<String> = []
            var described: [String: String] = [:]
            // The transitions (not states) the reference gives for a fix.
            func referenceTransitions(_ fix: PartitionedTier.Fix) -> [RegionEvent] {
                let input = Inbound.fix(
                    PerimeterCore.Fix(
                        subject: fix.subject, t: Date(timeIntervalSince1970: fix.t),
                        position: GeoPoint(lon: 13.0, lat: fix.lat), accuracy: 5))
                guard case .success(let outputs) = reference.handle(input, agent: fix.subject, receivedAt: Date())
                else { return [] }
                return outputs.compactMap { output in
                    guard case .event(let event) = output, event.kind != .state else { return nil }
                    return event
                }
            }
            for fix in fixes {
                for event in referenceTransitions(fix) {
                    expected.insert(event.id)
                    described[event.id] =
                        "\(event.kind) \(event.subject) seq \(event.seq) (partition \(partitioning.partition(of: event.subject)))"
                }
            }
            let inside = reference.occupants(of: "hall").count
            let transitions = expected
            #expect(expected.count == subjects.count * 17, "one transition per fix")
            #expect(inside == subjects.count)

            do {
                try await inbox.waitFor("the fault-free run's transitions", timeout: .seconds(60)) { messages in
                    Set(messages.compactMap(Transition.init).map(\.id)) == transitions
                }
            } catch {
                let got = Set(inbox.messages.compactMap(Transition.init).map(\.id))
                let missing = expected.subtracting(got).map { described[$0] ?? $0 }.sorted()
                let problem =
                    "\(error): \(missing.count) missing (\(missing.prefix(10).joined(separator: "; "))), \(got.subtracting(expected).count) not in the fault-free run; "
                    + "b: \(String(b.output.suffix(3000))) c: \(String(c.output.suffix(3000)))"
                Issue.record(Comment(rawValue: problem))
            }
            // Occupancy: the last total and the last part of every partition.
            let last = { @Sendable (messages: [MQTTMessage]) in PartitionedTier.occupancy(of: "hall", in: messages) }
            do {
                try await inbox.waitFor("the occupancy total and parts at the end", timeout: .seconds(30)) { messages in
                    let (total, parts) = last(messages)
                    return total == inside && parts.count == 6 && parts.reduce(0, +) == inside
                }
            } catch {
                await PartitionedTier.expectRetainedOccupancy(
                    of: "hall", inside: inside, port: cluster.nodes[1].mqttPort, received: inbox.messages,
                    cleanup: cleanup)
            }
            // The killed one restarts from its snapshot and journal, holds nothing until its
            // leases say so, and gets its share back from the live holders (handovers
            // between live evaluators). One more round (everyone leaves) then gives exactly the
            // fault-free run's next transitions: nothing replayed is made twice with a new id.
            let restartedAt = ContinuousClock.now
            let restarted = try await PartitionedTier.evaluator(
                "a", node: 0, cluster: cluster, path: pathA, cleanup: cleanup)
            #expect(restarted.output.contains("state restored from a snapshot"), "\(restarted.output.suffix(2000))")
            let membersAfter = ["a": restarted, "b": b, "c": c]
            let back: [String: Set<Int>]? = try await waitForValue(timeout: .seconds(40), every: .milliseconds(50)) {
                guard let layout = PartitionedTier.settledLayout(membersAfter, count: 6),
                    PartitionedTier.takenOver(restarted, after: 0).isSuperset(of: layout["a"]!)
                else { return nil }
                return layout
            }
            let backAfter = ContinuousClock.now - restartedAt
            #expect(back != nil, "a did not get two partitions back: \(restarted.output.suffix(3000))")
            let finalRound = PartitionedTier.fixes(subjects: subjects, rounds: 17..<18, t0: fixes[0].t, step: 1)
            var after = transitions
            for fix in finalRound {
                for event in referenceTransitions(fix) { after.insert(event.id) }
            }
            #expect(after.count == transitions.count + subjects.count)
            try await PartitionedTier.publish(publisher, finalRound)
            let afterRestart = after
            do {
                try await inbox.waitFor("the next round's transitions after the restart", timeout: .seconds(40)) {
                    messages in
                    Set(messages.compactMap(Transition.init).map(\.id)) == afterRestart
                }
                do {
                    try await inbox.waitFor("occupancy 0 after everyone left", timeout: .seconds(30)) { messages in
                        let (total, parts) = last(messages)
                        return total == 0 && parts.count == 6 && parts.allSatisfy { $0 == 0 }
                    }
                } catch {
                    // As above: the retained picture, read afresh, decides (the NATS miss).
                    await PartitionedTier.expectRetainedOccupancy(
                        of: "hall", inside: 0, port: cluster.nodes[1].mqttPort, received: inbox.messages,
                        cleanup: cleanup)
                }
            } catch {
                let got = Set(inbox.messages.compactMap(Transition.init).map(\.id))
                Issue.record(
                    Comment(
                        rawValue:
                            "\(error): \(afterRestart.subtracting(got).count) missing, \(got.subtracting(afterRestart).count) not in the fault-free run; a: \(String(restarted.output.suffix(3000)))"
                    ))
            }
            let movedText = moved.map { "\($0)" } ?? "not within 30 s"
            #expect(
                moved.map { $0 < .seconds(10) } == true, "the killed evaluator's partitions moved after \(movedText)")
            print(
                "partitioned evaluators, kill -9 of one of three: its partitions \(doomed.sorted()) leased by survivors \(leasedAfter.map { "\($0)" } ?? "-") and taken over \(movedText) after the kill (TTL \(Self.killTTL) s); "
                    + "\(expected.count) transitions as in the fault-free run; occupancy \(inside) = total = sum of 6 parts; "
                    + "restarted from its snapshot, a had \(back?["a"]?.sorted() ?? []) back \(backAfter) after its start, and the next round's \(subjects.count) exits came as in the fault-free run\n"
                    + ([b, c].flatMap { child in
                        child.output.split(separator: "\n").filter {
                            $0.contains("partitions taken over") || $0.contains("partition leases changed")
                        }
                    }.joined(separator: "\n")))
        }
    }
}
