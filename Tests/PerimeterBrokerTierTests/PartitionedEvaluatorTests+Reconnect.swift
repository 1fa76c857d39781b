import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

extension PartitionedEvaluatorTests {
    /// topics.md ("Occupancy of a partitioned venue"): the holder of partition 0 sends every
    /// total again after it reconnects to the broker (a total in flight when the connection went
    /// is not an outbox row, so nothing else would send it again). One evaluator holds both
    /// partitions through MQTT on node 1 and its leases on nodes 2 and 3 (so the restart cannot
    /// move a lease, which would send the totals for another reason); four subjects enter
    /// `hall`; node 1 is restarted. Asserted: the subscriber on node 2 receives `occupancy/hall`
    /// again, with the same count, after the restart, and the evaluator's leases did not change.
    @Test("the holder of partition 0 sends every occupancy total again after its broker connection comes back")
    func totalsAfterReconnect() async throws {
        try await Cleanup.around { cleanup in
            let cluster = try await PartitionedTier.cluster(partitions: 2, cleanup: cleanup)
            let totalTopic = "\(Tier.root)/occupancy/hall"
            let inbox = try await NATSClusterTests.connectedInbox(
                "consumer", port: cluster.nodes[1].mqttPort, filters: ["\(Tier.root)/occupancy/#"], cleanup: cleanup)
            try await cluster.waitUntilReplicated()
            // A TTL long enough that the lease store's elections while node 1 is away cost nothing.
            let path = try PartitionedTier.configuration(
                "a", cluster: cluster, node: 0, ttl: 15, leaseNodes: [1, 2], cleanup: cleanup)
            let a = try await PartitionedTier.evaluator("a", node: 0, cluster: cluster, path: path, cleanup: cleanup)
            try await PartitionedTier.waitForLines(a, containing: "held=0,1")

            let publisher = try MQTTClient(NATSClusterTests.client("agents", port: cluster.nodes[2].mqttPort))
            cleanup.add { await publisher.disconnect() }
            try await publisher.connect(timeout: .seconds(20))
            let subjects = (0..<4).map { "r\($0)" }
            let t0 = (Date().timeIntervalSince1970 - 20).rounded()
            try await PartitionedTier.publish(
                publisher, PartitionedTier.fixes(subjects: subjects, rounds: 0..<1, t0: t0, step: 1))
            let totals = { @Sendable (messages: [MQTTMessage]) -> [Int] in
                messages.filter { $0.topic == totalTopic }.compactMap {
                    try? JSONParser.parse($0.payload)["count"]?.intValue
                }
            }
            try await inbox.waitFor("occupancy/hall at 4", timeout: .seconds(30)) { totals($0).last == 4 }
            let before = totals(inbox.messages).count
            let offset = a.output.count

            try await cluster.restart(0)
            do {
                try await inbox.waitFor("occupancy/hall again after the restart", timeout: .seconds(60)) { messages in
                    totals(messages).count > before
                }
            } catch {
                throw ChildFailure(message: "\(error); the evaluator said: \(a.output.dropFirst(offset).suffix(4000))")
            }
            #expect(totals(inbox.messages).dropFirst(before).allSatisfy { $0 == 4 }, "\(totals(inbox.messages))")
            let changes = a.output.dropFirst(offset).split(separator: "\n").filter {
                $0.contains("partition leases changed")
            }
            #expect(changes.isEmpty, "the total came again for a lease change, not the reconnection: \(changes)")
        }
    }
}
