import Foundation
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// The client against a real Debian mosquitto, one broker per test on its own port.
@Suite("MQTT client against a real broker")
struct MQTTClientTests {
    @Test(
        "round trip at every QoS and protocol version", arguments: QoS.allCases,
        [MQTTConfiguration.ProtocolVersion.v5, .v311])
    func roundTrip(qos: QoS, version: MQTTConfiguration.ProtocolVersion) async throws {
        let broker = try await TestBroker.start()
        defer { broker.kill() }
        let subscriber = try await broker.connectedClient("sub", protocolVersion: version)
        let publisher = try await broker.connectedClient("pub", protocolVersion: version)
        let granted = try await subscriber.subscribe("t/roundtrip/#", qos: qos)
        #expect(granted == qos)

        let count = 50
        for index in 0..<count {
            try await publisher.publish("t/roundtrip/\(index % 3)", "message \(index)", qos: qos)
        }
        let received = try await nextMessages(subscriber, count: count)
        #expect(received.map(\.payloadString) == (0..<count).map { "message \($0)" })
        #expect(received.allSatisfy { $0.qos == qos && !$0.retain })
        #expect(received.map(\.topic) == (0..<count).map { "t/roundtrip/\($0 % 3)" })
        await publisher.disconnect()
        await subscriber.disconnect()
        #expect(subscriber.state == .closed)
    }

    @Test("regression: a pipelined QoS 2 burst arrives whole without the subscriber being disconnected")
    func qos2BurstKeepsTheConnection() async throws {
        // With libmosquitto's default receive maximum (20), mosquitto 2.0 overran it with
        // inbound QoS 2 flows and libmosquitto dropped the connection, losing messages.
        let broker = try await TestBroker.start()
        defer { broker.kill() }
        let subscriber = try await broker.connectedClient("sub")
        let publisher = try await broker.connectedClient("pub")
        try await subscriber.subscribe("t/burst", qos: .exactlyOnce)
        let states = subscriber.connectionStates()
        let count = 2000
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<count {
                group.addTask { try await publisher.publish("t/burst", "\(index)", qos: .exactlyOnce) }
            }
            try await group.waitForAll()
        }
        let received = try await nextMessages(subscriber, count: count, timeout: .seconds(30))
        #expect(received.count == count)
        #expect(Set(received.map(\.payloadString)).count == count)
        var iterator = states.makeAsyncIterator()
        #expect(await iterator.next()?.isConnected == true, "still on its first connection")
        #expect(broker.log.components(separatedBy: "as sub-").count == 2, "connected exactly once")
    }

    @Test("retained messages reach later subscribers; an empty retained payload deletes")
    func retained() async throws {
        let broker = try await TestBroker.start()
        defer { broker.kill() }
        let publisher = try await broker.connectedClient("pub")
        try await publisher.publish("t/state/a", "inside", qos: .atLeastOnce, retain: true)
        try await publisher.publish("t/state/b", "outside", qos: .atLeastOnce, retain: true)
        try await publisher.publish("t/state/b", payload: [], qos: .atLeastOnce, retain: true)

        let late = try await broker.connectedClient("late")
        try await late.subscribe("t/state/+")
        let first = try await nextMessages(late, count: 1)
        #expect(first[0].topic == "t/state/a")
        #expect(first[0].payloadString == "inside")
        #expect(first[0].retain)
        // b was deleted: a live publish is the next thing to arrive, not a retained b.
        try await publisher.publish("t/state/c", "live", qos: .atLeastOnce)
        let next = try await nextMessages(late, count: 1)
        #expect(next[0].topic == "t/state/c")
        #expect(!next[0].retain)
    }

    @Test("MQTT 5 properties travel: content type, user properties, correlation data, response topic")
    func properties() async throws {
        let broker = try await TestBroker.start()
        defer { broker.kill() }
        let subscriber = try await broker.connectedClient("sub")
        let publisher = try await broker.connectedClient("pub")
        try await subscriber.subscribe("t/props")
        let sent = MQTTProperties(
            messageExpiry: 60, contentType: "application/json", responseTopic: "t/reply",
            correlationData: [1, 2, 3], userProperties: [UserProperty("venue", "museum"), UserProperty("a", "b")])
        try await publisher.publish("t/props", "{}", qos: .atLeastOnce, properties: sent)
        let message = try await nextMessages(subscriber, count: 1)[0]
        #expect(message.properties.contentType == "application/json")
        #expect(message.properties.userProperties == sent.userProperties)
        #expect(message.properties.correlationData == [1, 2, 3])
        #expect(message.properties.responseTopic == "t/reply")
        // The broker forwards the remaining lifetime, which can only have shrunk.
        #expect((message.properties.messageExpiry ?? 0) <= 60 && (message.properties.messageExpiry ?? 0) > 50)
    }

    @Test("MQTT 5 message expiry: an expired retained message is not delivered")
    func messageExpiry() async throws {
        let broker = try await TestBroker.start()
        defer { broker.kill() }
        let publisher = try await broker.connectedClient("pub")
        try await publisher.publish(
            "t/expiry/short", "soon gone", qos: .atLeastOnce, retain: true, properties: MQTTProperties(messageExpiry: 2)
        )
        let published = ContinuousClock.now
        try await publisher.publish(
            "t/expiry/long", "still here", qos: .atLeastOnce, retain: true,
            properties: MQTTProperties(messageExpiry: 600))
        // The broker's clock decides (whole seconds): a late subscriber looks until the short one
        // has gone, each look ended by a marker, never by a fixed wait.
        var received: [String] = []
        var look = 0
        var firstLook: (at: Duration, sawShort: Bool)?
        try await waitUntil("the 2 s message expired", timeout: .seconds(30), every: .milliseconds(250)) {
            look += 1
            let at = ContinuousClock.now - published
            let late = try await broker.connectedClient("late-\(look)")
            defer { Task { await late.disconnect() } }
            try await late.subscribe("t/expiry/#")
            try await publisher.publish("t/expiry/marker", "end", qos: .atLeastOnce)
            received = []
            while received.last != "t/expiry/marker" {
                received += try await nextMessages(late, count: 1).map(\.topic)
            }
            if firstLook == nil { firstLook = (at, received.contains("t/expiry/short")) }
            return !received.contains("t/expiry/short")
        }
        #expect(received == ["t/expiry/long", "t/expiry/marker"])
        // A first look well within the 2 s saw it: expiry, not a lost retain, removed it.
        if let firstLook, firstLook.at < .milliseconds(1500) { #expect(firstLook.sawShort) }
    }

    @Test("the last will fires when the connection is killed, not on a clean disconnect", arguments: ["5", "3.1.1"])
    func lastWill(version: String) async throws {
        let broker = try await TestBroker.start()
        defer { broker.kill() }
        let watcher = try await broker.connectedClient("watcher")
        try await watcher.subscribe("t/will/#")

        // A clean disconnect: the peer says goodbye; no will.
        let polite = try ChildProcess(
            Products.executable("perimeter-testpeer"),
            [
                "mqtt-will", "--port", "\(broker.port)", "--topic", "t/will/polite", "--protocol", version, "--then",
                "disconnect",
            ])
        _ = try await polite.waitForLine(containing: "disconnected")
        #expect(await polite.finish().termination == .exited(0))

        // Killed: the broker notices the dead connection and publishes the will.
        let doomed = try ChildProcess(
            Products.executable("perimeter-testpeer"),
            [
                "mqtt-will", "--port", "\(broker.port)", "--topic", "t/will/killed", "--payload", "offline",
                "--protocol", version,
            ])
        _ = try await doomed.waitForLine(containing: "ready")
        doomed.kill(SIGKILL)

        let received = try await nextMessages(watcher, count: 1)
        #expect(received[0].topic == "t/will/killed")
        #expect(received[0].payloadString == "offline")
    }

    @Test("a graceful disconnect of our own client sends no will")
    func ownDisconnectSendsNoWill() async throws {
        let broker = try await TestBroker.start()
        defer { broker.kill() }
        let watcher = try await broker.connectedClient("watcher")
        try await watcher.subscribe("t/own/#")
        let will = MQTTConfiguration.Will(
            topic: "t/own/will", payload: Array("gone".utf8), qos: .atLeastOnce, retain: false)
        let client = try MQTTClient(broker.clientConfiguration("willing", will: will))
        try await client.connect()
        await client.disconnect()
        try await watcher.publish("t/own/marker", "after", qos: .atLeastOnce)
        let received = try await nextMessages(watcher, count: 1)
        #expect(received[0].topic == "t/own/marker")
    }

    @Test("persistent session: after a broker restart nothing published at QoS 1 is lost")
    func persistentSessionSurvivesRestart() async throws {
        let broker = try await TestBroker.start(persistence: true)
        defer { broker.kill() }
        var configuration = broker.clientConfiguration("durable", cleanStart: false)
        // Long enough that the publisher below sends while this client is still away.
        configuration.backoff = .init(initial: .seconds(2), maximum: .seconds(2), jitter: 0)
        let subscriber = try MQTTClient(configuration)
        try await subscriber.connect()
        try await subscriber.subscribe("t/durable/#", qos: .atLeastOnce)

        let states = subscriber.connectionStates()
        try await broker.restart()

        let publisher = try await broker.connectedClient("pub")
        let count = 200
        for index in 0..<count {
            try await publisher.publish("t/durable/x", "m\(index)", qos: .atLeastOnce)
        }
        let received = try await nextMessages(subscriber, count: count, timeout: .seconds(15))
        #expect(received.map(\.payloadString) == (0..<count).map { "m\($0)" })

        // The client went through reconnecting and came back to the resumed session. The
        // stream's first value is the state when it was asked for, before the restart: under
        // load that can already be a resumed session (a connection lost and resumed between
        // connect and subscribe; the one failure of this test took 3.5 s longer than usual),
        // so only what came after it counts.
        var seen: [ConnectionState] = []
        for await state in states.dropFirst() {
            seen.append(state)
            if case .connected(true) = state { break }
        }
        #expect(seen.contains { if case .reconnecting = $0 { true } else { false } }, "states seen: \(seen)")
        #expect(subscriber.state == .connected(sessionPresent: true))
        #expect(subscriber.droppedMessages == 0)
    }

    @Test("clean session: subscriptions are restored after the broker restarts")
    func subscriptionsRestored() async throws {
        let broker = try await TestBroker.start()
        defer { broker.kill() }
        let subscriber = try await broker.connectedClient("sub")
        try await subscriber.subscribe("t/a/#", qos: .atLeastOnce)
        try await subscriber.subscribe("t/b/+", qos: .atMostOnce)
        try await subscriber.unsubscribe("t/b/+")
        try await broker.restart()
        try await withTimeout(.seconds(10), "reconnection") {
            for await state in subscriber.connectionStates() where state.isConnected { return }
        }
        let publisher = try await broker.connectedClient("pub")
        // The SUBACK of the restored subscription may still be on its way: publish until it lands.
        // One inbox reads throughout (a read given up on a timeout would end the client's
        // message stream for good, and the loop would never see the message it waits for).
        let inbox = Inbox(subscriber)
        defer { inbox.stop() }
        try await waitUntil("a message on the restored subscription", timeout: .seconds(60), every: .milliseconds(300))
        {
            try await publisher.publish("t/b/x", "unsubscribed", qos: .atLeastOnce)
            try await publisher.publish("t/a/1", "restored", qos: .atLeastOnce)
            return !inbox.messages.isEmpty
        }
        #expect(inbox.messages.first?.topic == "t/a/1")
        #expect(!inbox.messages.contains { $0.topic == "t/b/x" }, "the unsubscribed filter stays gone")
    }

    @Test("a slow consumer: messages beyond the buffer are dropped and counted")
    func droppedMessagesAreCounted() async throws {
        let broker = try await TestBroker.start()
        defer { broker.kill() }
        var configuration = broker.clientConfiguration("slow")
        configuration.inboundBufferSize = 10
        let slow = try MQTTClient(configuration)
        try await slow.connect()
        try await slow.subscribe("t/flood", qos: .atLeastOnce)
        let publisher = try await broker.connectedClient("pub")
        for index in 0..<100 {
            try await publisher.publish("t/flood", "\(index)", qos: .atLeastOnce)
        }
        try await waitUntil("all 100 messages counted", timeout: .seconds(5), every: .milliseconds(10)) {
            slow.receivedMessages + slow.droppedMessages >= 100
        }
        #expect(slow.receivedMessages == 10)
        #expect(slow.droppedMessages == 90)
        // The oldest are kept, in order.
        let kept = try await nextMessages(slow, count: 10)
        #expect(kept.map(\.payloadString) == (0..<10).map { "\($0)" })
    }

    @Test("no broker: connect fails with a typed timeout naming the endpoint and the reason")
    func connectFailureIsTyped() async throws {
        let port = try MosquittoBroker.freeLoopbackPort()
        let client = try MQTTClient(MQTTConfiguration(port: port, clientID: "lonely"))
        do {
            try await client.connect(timeout: .milliseconds(600))
            Issue.record("connect succeeded without a broker")
        } catch let error as MQTTError {
            #expect(error.kind == .timeout)
            #expect(error.description.contains("127.0.0.1:\(port)"))
            #expect(error.description.contains("Connection refused"))
        }
        if case .reconnecting(let attempt, _) = client.state {
            #expect(attempt >= 1)
        } else {
            Issue.record("expected reconnecting, got \(client.state)")
        }
        await client.disconnect()
        #expect(client.state == .closed)
    }

    @Test("invalid topics and filters are rejected with the offending text")
    func invalidTopics() async throws {
        let broker = try await TestBroker.start()
        defer { broker.kill() }
        let client = try await broker.connectedClient()
        await #expect(throws: MQTTError.self) { try await client.publish("t/+/wild", "x") }
        do {
            try await client.subscribe("t/#/bad")
            Issue.record("an invalid filter was accepted")
        } catch let error as MQTTError {
            #expect(error.description.contains("t/#/bad"))
        }
        // The connection is still usable.
        try await client.subscribe("t/ok")
        try await client.publish("t/ok", "fine", qos: .atLeastOnce)
        #expect(try await nextMessages(client, count: 1)[0].payloadString == "fine")
    }

    @Test("operations after disconnect fail with .closed; the message sequence ends")
    func closedClient() async throws {
        let broker = try await TestBroker.start()
        defer { broker.kill() }
        let client = try await broker.connectedClient()
        await client.disconnect()
        await client.disconnect()
        do {
            try await client.publish("t/x", "late", qos: .atLeastOnce)
            Issue.record("publish after close succeeded")
        } catch let error as MQTTError {
            #expect(error.kind == .closed)
        }
        var iterator = client.messages.makeAsyncIterator()
        #expect(await iterator.next() == nil)
    }

    @Test(
        "topic matching is libmosquitto's",
        arguments: [
            ("a/+/c", "a/b/c", true), ("a/#", "a", true), ("a/#", "a/b/c", true), ("+/b", "a/b", true),
            ("a/+", "a/b/c", false), ("a/b", "a/b/", false), ("#", "$SYS/x", false), ("a/+/c", "a//c", true),
        ])
    func topicMatching(filter: String, topic: String, matches: Bool) {
        #expect(MQTTTopic.matches(filter: filter, topic: topic) == matches)
    }
}

/// TLS against a real mosquitto listener, with certificates made by `openssl` for the test.
@Suite("MQTT over TLS")
struct MQTTTLSTests {
    /// A CA, a server certificate for 127.0.0.1 and a client certificate, in a fresh directory.
    static func makeCertificates() async throws -> URL {
        let directory = TestScratch.root.appendingPathComponent(
            "perimeter-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try "subjectAltName=IP:127.0.0.1\n".write(
            to: directory.appendingPathComponent("san.ext"), atomically: true, encoding: .utf8)
        let script = """
            set -e
            openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -subj /CN=perimeter-test-ca -days 2
            openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1
            openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile san.ext
            openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=perimeter-test-client
            openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2
            """
        let child = try Subprocess.spawn(
            "/bin/sh", ["-c", "cd '\(directory.path)' && \(script)"], stdout: .null, stderr: .null)
        let termination = await child.wait()
        guard termination == .exited(0) else {
            throw ChildFailure(message: "openssl failed (\(termination)); install it with: apt-get install -y openssl")
        }
        return directory
    }

    @Test("a client with a CA file and a client certificate talks to a TLS listener that requires one")
    func mutualTLS() async throws {
        let certificates = try await Self.makeCertificates()
        let tlsPort = try MosquittoBroker.freeLoopbackPort()
        let broker = try await TestBroker.start(extraConfiguration: [
            "listener \(tlsPort) 127.0.0.1",
            "cafile \(certificates.path)/ca.crt",
            "certfile \(certificates.path)/server.crt",
            "keyfile \(certificates.path)/server.key",
            "require_certificate true",
        ])
        defer { broker.kill() }
        var configuration = broker.clientConfiguration("tls")
        configuration.port = tlsPort
        configuration.tls = MQTTConfiguration.TLS(
            caFile: "\(certificates.path)/ca.crt", certificateFile: "\(certificates.path)/client.crt",
            keyFile: "\(certificates.path)/client.key")
        let client = try MQTTClient(configuration)
        try await client.connect(timeout: .seconds(10))
        try await client.subscribe("t/tls")
        try await client.publish("t/tls", "secret", qos: .atLeastOnce)
        #expect(try await nextMessages(client, count: 1)[0].payloadString == "secret")
        await client.disconnect()

        // Without a client certificate the listener refuses the handshake.
        var anonymous = configuration
        anonymous.clientID += "-anon"
        anonymous.tls = MQTTConfiguration.TLS(caFile: "\(certificates.path)/ca.crt")
        let refused = try MQTTClient(anonymous)
        await #expect(throws: MQTTError.self) { try await refused.connect(timeout: .seconds(2)) }
        await refused.disconnect()
    }

    @Test("an unreadable CA file is refused up front, naming it")
    func missingCAFile() throws {
        var configuration = MQTTConfiguration(clientID: "x")
        configuration.tls = MQTTConfiguration.TLS(caFile: "/nonexistent/ca.crt")
        do {
            _ = try MQTTClient(configuration)
            Issue.record("a missing CA file was accepted")
        } catch {
            #expect(error.description.contains("mosquitto_tls_set"))
            #expect(error.description.contains("/nonexistent/ca.crt"))
        }
    }
}
