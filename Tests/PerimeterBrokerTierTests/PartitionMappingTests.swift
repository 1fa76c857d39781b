import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// The routing of a partitioned venue is NATS's subject mapping, applied to what agents publish
/// over MQTT (docs/scale.md, "One venue on several evaluators").
///
/// What is asserted, on the three-node cluster with the mapping line `Partitioning` writes:
/// an observation published over MQTT on one node to `…/obs/{agent}/gps` (QoS 0 and QoS 1)
/// reaches an MQTT subscriber on another node as `…/p/{n}/obs/{agent}/gps` and never under its
/// original topic, and `n` is, for every one of 60 agent ids (a `/` among them, percent-encoded
/// in its level), the partition ``Partitioning`` computes: our FNV-1a is the server's.
@Suite("Broker tier: partitions routed by NATS subject mapping")
struct PartitionMappingTests {
    @Test("MQTT publishes are mapped to their agent's partition, the same number Partitioning computes")
    func mapping() async throws {
        try await Cleanup.around { cleanup in
            let topics = Topics(venue: "museum")
            let partitioning = try Partitioning(count: 8)
            let cluster = try await NATSCluster.start(mappings: [partitioning.natsMapping(topics: topics)])
            cleanup.add { await cluster.stop() }

            let inbox = try await NATSClusterTests.connectedInbox(
                "mapped", port: cluster.nodes[2].mqttPort,
                filters: ["\(topics.root)/p/+/obs/+/+", topics.allObservations], cleanup: cleanup)
            let agent = try MQTTClient(NATSClusterTests.client("agent", port: cluster.nodes[1].mqttPort))
            cleanup.add { await agent.disconnect() }
            try await agent.connect(timeout: .seconds(20))

            let agents = (1...59).map { "phone-\($0)" } + ["gw/7"]
            for (index, id) in agents.enumerated() {
                try await agent.publish(
                    topics.gps(agent: id), "{\"n\":\(index)}", qos: index % 2 == 0 ? .atLeastOnce : .atMostOnce)
            }
            let received = try await inbox.waitFor("every observation, mapped", timeout: .seconds(30)) {
                $0.count >= agents.count
            }
            var seen: [String: Int] = [:]
            for message in received {
                let levels = message.topic.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
                // perimeter / v1 / museum / p / {n} / obs / {agent} / gps
                #expect(levels.count == 8 && levels[3] == "p" && levels[5] == "obs", "unmapped: \(message.topic)")
                guard levels.count == 8, let partition = Int(levels[4]) else { continue }
                seen[Topics.decodeLevel(levels[6])] = partition
            }
            #expect(seen.count == agents.count)
            for id in agents {
                #expect(seen[id] == partitioning.partition(of: id), "agent \(id)")
            }
            // All eight partitions are used by 60 agents (else the check above proves little).
            #expect(Set(seen.values).count == 8)
        }
    }
}
