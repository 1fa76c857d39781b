import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// The evaluator, unchanged, on a three-node NATS cluster speaking MQTT 3.1.1.
///
/// What is asserted: the evaluator starts on NATS with `broker.protocol = 3.1.1` and
/// `broker.hosts` listing the three nodes; it is connected to the first; after that node is
/// killed with SIGKILL it reconnects to another node (seen in that node's `/connz`) and
/// resumes its persistent session there (the session lives in JetStream, replicated to the
/// three nodes); every transition for observations published before and after the kill
/// reaches a QoS 1 subscriber on a surviving node, deduplicated by event id, exactly the set a
/// fault-free run gives (one enter and one exit per subject).
@Suite("Broker tier: a three-node NATS cluster with MQTT")
struct NATSClusterTests {
    static func client(_ name: String, port: Int, cleanStart: Bool = true) -> MQTTConfiguration {
        MQTTConfiguration(
            host: "127.0.0.1", port: port, clientID: "\(name)-\(UUID().uuidString.prefix(8))", keepAlive: 5,
            protocolVersion: .v311, cleanStart: cleanStart,
            backoff: .init(initial: .milliseconds(100), maximum: .seconds(1)))
    }

    /// A client on `port` whose messages an inbox collects, connected and subscribed to `filters`,
    /// stopped and disconnected by `cleanup`.
    static func connectedInbox(
        _ name: String, port: Int, cleanStart: Bool = true, filters: [String], cleanup: Cleanup
    ) async throws -> Inbox {
        let client = try MQTTClient(Self.client(name, port: port, cleanStart: cleanStart))
        let inbox = Inbox(client)
        cleanup.add {
            inbox.stop()
            await client.disconnect()
        }
        try await client.connect(timeout: .seconds(20))
        for filter in filters { try await client.subscribe(filter, qos: .atLeastOnce) }
        return inbox
    }

    /// What the holder of partition 0 relies on to mend a part's missed last value
    /// (`EvaluatorRuntime.partsRereadInterval`): subscribing again to a filter it already has
    /// makes the broker send the retained messages anew (MQTT 3.1.1 §3.8.4).
    @Test("subscribing again to the same filter sends its retained messages again, on NATS and on mosquitto")
    func resubscribeResendsRetained() async throws {
        try await Cleanup.around { cleanup in
            let cluster = try await NATSCluster.start()
            cleanup.add { await cluster.stop() }
            let mosquitto = try await TestBroker.start()
            cleanup.add { await mosquitto.stop() }
            for (broker, port) in [("NATS", cluster.nodes[1].mqttPort), ("mosquitto", mosquitto.port)] {
                let topic = "\(Tier.root)/occupancy/hall/p/3"
                let publisher = try MQTTClient(Self.client("parts", port: port))
                cleanup.add { await publisher.disconnect() }
                try await publisher.connect(timeout: .seconds(20))
                _ = try await publisher.publish(topic, #"{"partition":3,"count":4}"#, qos: .atLeastOnce, retain: true)
                let reader = try MQTTClient(Self.client("reader", port: port))
                let inbox = Inbox(reader)
                cleanup.add {
                    inbox.stop()
                    await reader.disconnect()
                }
                try await reader.connect(timeout: .seconds(20))
                let filter = "\(Tier.root)/occupancy/+/p/+"
                try await reader.subscribe(filter, qos: .atLeastOnce)
                try await inbox.waitFor("the retained part (\(broker))", timeout: .seconds(30)) {
                    $0.filter { $0.topic == topic }.count == 1
                }
                try await reader.subscribe(filter, qos: .atLeastOnce)
                try await inbox.waitFor("the retained part again (\(broker))", timeout: .seconds(30)) {
                    $0.filter { $0.topic == topic }.count == 2
                }
                // The copy the second subscription brought is the retained one. The first may have
                // come live (retain off): under load a NATS node can acknowledge a retained publish
                // before its retained store holds it, and a subscription made meanwhile gets the
                // message as it passes (a hog run saw [false, true]).
                let retained = inbox.messages.filter { $0.topic == topic }.map(\.retain)
                #expect(retained.last == true, "\(broker): sent again as retained: \(retained)")
                if broker == "mosquitto" { #expect(retained == [true, true], "mosquitto: sent as retained") }
            }
        }
    }

    @Test("kill -9 the node the evaluator is connected to: it reconnects to another and loses nothing at QoS 1")
    func nodeLoss() async throws {
        try await Cleanup.around { cleanup in try await nodeLoss(cleanup) }
    }

    func nodeLoss(_ cleanup: Cleanup) async throws {
        let cluster = try await NATSCluster.start()
        cleanup.add { await cluster.stop() }
        let directory = try Tier.directory("nats-evaluator")
        cleanup.add { try? FileManager.default.removeItem(at: directory) }
        let hosts = cluster.nodes.map { "127.0.0.1:\($0.mqttPort)" }.joined(separator: ",")
        let clientID = "perimeter-evaluator-tier"
        let configPath = try Tier.evaluatorConfiguration(
            in: directory, broker: ["hosts": .string(hosts), "protocol": "3.1.1", "clientId": .string(clientID)],
            extra: ["topics": ["natsSafe": true]])
        // JetStream creates the MQTT streams on the first connection; subscribing makes a
        // durable consumer per filter, which takes a while on a busy machine.
        let evaluator = try await Tier.startEvaluator(configPath, timeout: .seconds(60), cleanup: cleanup)

        // The consumer and the agent sit on the nodes that stay up.
        let inbox = try await Self.connectedInbox(
            "consumer", port: cluster.nodes[2].mqttPort, cleanStart: false,
            filters: Tier.transitionFilters + ["\(Tier.root)/deadletter/evaluator"], cleanup: cleanup)
        let publisher = try MQTTClient(Self.client("agent", port: cluster.nodes[1].mqttPort))
        cleanup.add { await publisher.disconnect() }
        try await publisher.connect(timeout: .seconds(20))

        #expect(cluster.node(of: clientID) == 0, "the evaluator should be on the first node of broker.hosts")

        let t0 = Int(Date().timeIntervalSince1970)
        // An id NATS refuses in topics ('.'): with topics.natsSafe it is dead-lettered, and the
        // evaluator goes on (without it, NATS would close its connection on every publish).
        try await Tier.visit(publisher, subject: "s.dot", t: t0 - 5)
        try await inbox.waitFor("the dead letter for s.dot", timeout: .seconds(30)) { messages in
            messages.contains { $0.topic.hasSuffix("/deadletter/evaluator") && $0.payloadString.contains("s.dot") }
        }
        let before = (1...5).map { "before-\($0)" }
        for (index, subject) in before.enumerated() { try await Tier.visit(publisher, subject: subject, t: t0 + index) }
        try await inbox.waitFor("the events before the kill", timeout: .seconds(30)) {
            Set($0.compactMap(Transition.init).map(\.description)) == enterAndExit(before)
        }

        try await cluster.waitUntilReplicated()
        let killedAt = ContinuousClock.now
        cluster.kill(0)
        let after = (1...5).map { "after-\($0)" }
        for (index, subject) in after.enumerated() {
            try await Tier.visit(publisher, subject: subject, t: t0 + 10 + index)
        }
        let node = try await waitForValue(timeout: .seconds(20), every: .milliseconds(100)) {
            cluster.node(of: clientID)
        }
        #expect(node == 1 || node == 2, "the evaluator did not reconnect to a surviving node")
        let reconnectedAfter = ContinuousClock.now - killedAt

        let expected = enterAndExit(before + after)
        do {
            try await inbox.waitFor("every event after the node loss", timeout: .seconds(40)) {
                Set($0.compactMap(Transition.init).map(\.description)) == expected
            }
        } catch {
            let problems = cluster.logs.split(separator: "\n").filter { $0.contains("[ERR]") || $0.contains("[WRN]") }
            Issue.record(
                "\(error); evaluator said: \(evaluator.output.suffix(3000)); NATS said: \(problems.suffix(30).joined(separator: "\n"))"
            )
        }
        // A measurement, not an assertion (timings belong to benchmarks): shown in the test log.
        print(
            "NATS node loss: evaluator on node \(node.map { "n\($0 + 1)" } ?? "-") after \(reconnectedAfter), "
                + "every event after \(ContinuousClock.now - killedAt)")
        let transitions = inbox.transitions
        #expect(Set(transitions.map(\.description)) == expected)
        // Deduplicated by id, one event per (subject, transition): ids are deterministic.
        #expect(Set(transitions.map(\.id)).count == expected.count)
        #expect(evaluator.subprocess.isRunning)
    }
}
