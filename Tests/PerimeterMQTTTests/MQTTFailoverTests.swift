import Foundation
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Synchronization
import Testing

/// Failover across a list of brokers, against two real, independent mosquittos.
///
/// Two separate mosquittos share nothing: a persistent session lives on the broker that made
/// it. So what the tests assert after a failover is that the client reaches the next broker,
/// finds no session there (`sessionPresent` false), restores its subscriptions by itself and
/// receives everything published there from then on at QoS 1; a publishing client fails over
/// the same way. Messages published on the dead broker while nobody was connected stay on that
/// broker (a cluster that shares sessions, such as NATS, does better: see BrokerTierTests).
@Suite("MQTT client failover between brokers")
struct MQTTFailoverTests {
    func configuration(
        _ name: String, _ first: MosquittoBroker, then others: [MosquittoBroker], firstPort: Int? = nil
    ) -> MQTTConfiguration {
        MQTTConfiguration(
            host: "127.0.0.1", port: firstPort ?? first.port, clientID: "\(name)-\(UUID().uuidString.prefix(8))",
            keepAlive: 5, cleanStart: false,
            backoff: .init(initial: .milliseconds(50), maximum: .milliseconds(500)),
            alternates: others.map { MQTTConfiguration.Endpoint(host: "127.0.0.1", port: $0.port) })
    }

    /// Waits until `client` is connected to `port`.
    func waitUntilConnected(_ client: MQTTClient, to port: Int) async throws {
        try await withTimeout(.seconds(10), "a connection to port \(port) (now \(client.endpoint): \(client.state))") {
            for await state in client.connectionStates() where state.isConnected && client.endpoint.port == port {
                return
            }
        }
    }

    /// Publishes on `topic` until `inbox` has it: the restored subscription is in place.
    func publishUntilReceived(_ publisher: MQTTClient, _ inbox: Inbox, _ topic: String) async throws {
        try await waitUntil(
            "a message on \(topic) through the restored subscription", timeout: .seconds(10), every: .milliseconds(100)
        ) {
            if inbox.messages.contains(where: { $0.topic == topic }) { return true }
            try await publisher.publish(topic, "probe", qos: .atLeastOnce)
            return false
        }
    }

    @Test("kill the first broker: the client moves to the second and its QoS 1 subscription continues, and back")
    func failoverAndBack() async throws {
        let first = try await TestBroker.start()
        let second = try await TestBroker.start()
        let subscriber = try MQTTClient(configuration("sub", first, then: [second]))
        let sender = try MQTTClient(configuration("send", first, then: [second]))
        let inbox = Inbox(subscriber)
        try await subscriber.connect(timeout: .seconds(5))
        try await sender.connect(timeout: .seconds(5))
        try await subscriber.subscribe("t/failover/#", qos: .atLeastOnce)
        #expect(subscriber.endpoint.port == first.port)
        #expect(subscriber.configuration.endpoint == "127.0.0.1:\(first.port),127.0.0.1:\(second.port)")

        try await sender.publish("t/failover/x", "before", qos: .atLeastOnce)
        try await inbox.waitFor("'before'") { $0.contains { $0.payloadString == "before" } }

        // Watch the sender's states from before the kill: it may lose the connection and reach
        // the second broker before this task runs again.
        let states = sender.connectionStates()
        first.kill()
        // A QoS 1 publish made while the connection is down waits in the client and goes to
        // whichever broker it reaches next; the call returns on that broker's PUBACK. Retained,
        // so that a later subscriber on the second broker can see that it arrived there.
        try await withTimeout(.seconds(20), "the sender noticing the lost connection") {
            for await state in states where !state.isConnected { return }
        }
        let inFlight = Task { try await sender.publish("t/during", "during", qos: .atLeastOnce, retain: true) }
        try await waitUntilConnected(subscriber, to: second.port)
        // The second broker never saw this client: no session there, so the client resubscribed.
        #expect(subscriber.state == .connected(sessionPresent: false))
        try await waitUntilConnected(sender, to: second.port)
        try await withTimeout(.seconds(10), "the PUBACK of the publish made while disconnected") {
            try await inFlight.value
        }
        let checker = try await second.connectedClient("check")
        let checked = Inbox(checker)
        try await checker.subscribe("t/during", qos: .atLeastOnce)
        try await checked.waitFor("the retained message sent during the failover, on the second broker") {
            $0.map(\.payloadString) == ["during"]
        }
        checked.stop()
        await checker.disconnect()

        let publisher = try await second.connectedClient("pub")
        try await publishUntilReceived(publisher, inbox, "t/failover/probe")
        let count = 100
        for index in 0..<count { try await publisher.publish("t/failover/y", "after \(index)", qos: .atLeastOnce) }
        // The sender, failed over too, publishes through the second broker.
        try await sender.publish("t/failover/x", "from the sender", qos: .atLeastOnce)
        let received = try await inbox.waitFor("\(count + 1) messages after the failover") {
            $0.filter { $0.topic != "t/failover/probe" && $0.payloadString != "before" }.count >= count + 1
        }.filter { $0.topic != "t/failover/probe" && $0.payloadString != "before" }
        #expect(received.map(\.payloadString) == (0..<count).map { "after \($0)" } + ["from the sender"])
        await publisher.disconnect()

        // Round robin wraps: with the first broker back and the second gone, back to the first.
        try await first.restart()
        second.kill()
        try await waitUntilConnected(subscriber, to: first.port)
        let again = try await first.connectedClient("pub-again")
        try await publishUntilReceived(again, inbox, "t/failover/wrapped")
        #expect(subscriber.droppedMessages == 0)
        await again.disconnect()
        await sender.disconnect()
        await subscriber.disconnect()
        inbox.stop()
        await first.stop()
        await second.stop()
    }

    /// Addresses tried in order: `nil` is a port nothing listens on, a number the index of a
    /// live broker. The client must end up on `expected` (an index into the list).
    @Test(
        "refused addresses are skipped in order",
        arguments: [
            ([nil, 0], 1),
            ([nil, nil, 0], 2),
            ([0, nil], 0),
            ([nil, 0, nil], 1),
        ] as [([Int?], Int)])
    func skipsRefusedAddresses(_ layout: [Int?], expected: Int) async throws {
        let broker = try await TestBroker.start()
        var endpoints: [MQTTConfiguration.Endpoint] = []
        for slot in layout {
            let port = slot == nil ? try MosquittoBroker.freeLoopbackPort() : broker.port
            endpoints.append(.init(host: "127.0.0.1", port: port))
        }
        let client = try MQTTClient(
            MQTTConfiguration(
                host: endpoints[0].host, port: endpoints[0].port, clientID: "skip-\(UUID().uuidString.prefix(8))",
                backoff: .init(initial: .milliseconds(20), maximum: .milliseconds(100)),
                alternates: Array(endpoints.dropFirst())))
        try await client.connect(timeout: .seconds(5))
        #expect(client.endpoint == endpoints[expected])
        #expect(client.configuration.endpoints == endpoints)
        await client.disconnect()
        await broker.stop()
    }
}
