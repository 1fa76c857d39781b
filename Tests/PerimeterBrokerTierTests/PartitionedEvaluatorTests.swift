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
    static let count = 2
    static let partitioning = try! Partitioning(count: count)

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

    /// Writes an evaluator's configuration for the venue split in `count` partitions, its
    /// leases on the cluster (TTL 6 s, margin 1 s), connected to `node`.
    static func configuration(
        _ instance: String, cluster: NATSCluster, node: Int, cleanup: Cleanup
    ) throws -> String {
        let directory = try Tier.directory("partitioned-\(instance)")
        cleanup.add { try? FileManager.default.removeItem(at: directory) }
        return try Tier.evaluatorConfiguration(
            in: directory,
            broker: [
                "hosts": .string("127.0.0.1:\(cluster.nodes[node].mqttPort)"), "protocol": "3.1.1",
                "clientId": .string("perimeter-evaluator-\(instance)"),
            ],
            extra: ["topics": ["natsSafe": true]],
            venueExtra: [
                "partitions": [
                    "count": .number(Double(count)), "nats": .array(cluster.clientURLs.map(JSONValue.string)),
                    "ttl": 6, "margin": 1,
                ]
            ],
            instance: instance)
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

    /// Publishes fixes for `subjects`, each its own agent, round-robin every `every`, each
    /// alternately inside the hall and 1.1 km away (every fix a transition), until cancelled.
    static func traffic(
        _ publisher: MQTTClient, subjects: [String], every: Duration, t0: Int, sent: Counter
    ) -> Task<Void, Never> {
        Task {
            var round = 0
            while !Task.isCancelled {
                for subject in subjects {
                    let lat = round % 2 == 0 ? 45.0 : 45.01
                    try? await publisher.publish(
                        "\(Tier.root)/obs/\(subject)/gps",
                        #"{"subject":"\#(subject)","t":\#(t0 + round),"lat":\#(lat),"lon":13.0,"acc":5}"#,
                        qos: .atLeastOnce)
                    sent.value.add(1, ordering: .relaxed)
                    try? await Task.sleep(for: every)
                }
                round += 1
            }
        }
    }
}

@Suite("Broker tier: one venue's partitions on several evaluators")
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
            let cluster = try await NATSCluster.start(
                mappings: [PartitionedTier.partitioning.natsMapping(topics: Topics(venue: Tier.venue))])
            cleanup.add { await cluster.stop() }
            let subjects = (0..<8).map { "s\($0)" }
            let byPartition = Dictionary(grouping: subjects, by: PartitionedTier.partitioning.partition(of:))
            #expect(byPartition.count == 2, "the test's subjects should fall in both partitions")

            let inbox = try await NATSClusterTests.connectedInbox(
                "consumer", port: cluster.nodes[2].mqttPort,
                filters: Tier.transitionFilters + ["\(Tier.root)/occupancy/#"], cleanup: cleanup)
            func evaluator(_ instance: String, node: Int) async throws -> ChildProcess {
                let path = try PartitionedTier.configuration(instance, cluster: cluster, node: node, cleanup: cleanup)
                let child = try ChildProcess(Products.executable("perimeter"), ["evaluator", "--config", path])
                cleanup.add {
                    child.subprocess.signal(SIGCONT)
                    if child.subprocess.isRunning { child.kill(SIGKILL) }
                }
                try await child.waitForLine(containing: "evaluator running", timeout: .seconds(60))
                return child
            }
            let a = try await evaluator("a", node: 0)
            try await PartitionedTier.waitForLines(a, containing: "held=0,1")
            let b = try await evaluator("b", node: 1)
            // Two members: partition 0 is a's, 1 is b's (a gives it up).
            try await PartitionedTier.waitForLines(b, containing: "acquired=1")

            let publisher = try MQTTClient(NATSClusterTests.client("agents", port: cluster.nodes[2].mqttPort))
            cleanup.add { await publisher.disconnect() }
            try await publisher.connect(timeout: .seconds(20))
            let sent = PartitionedTier.Counter()
            let traffic = PartitionedTier.traffic(
                publisher, subjects: subjects, every: .milliseconds(25), t0: Int(Date().timeIntervalSince1970),
                sent: sent)
            cleanup.add { traffic.cancel() }
            // Both serving: transitions of both partitions, each under one token.
            let first = try await inbox.waitFor("transitions of both partitions", timeout: .seconds(60)) { messages in
                Set(PartitionedTier.stamped(messages).filter { $0.event != nil }.map(\.partition)) == [0, 1]
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
}
