import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// `deploy/mosquitto/bridge.conf` on a real venue mosquitto bridged to a real central one, with
/// a real evaluator on the venue broker and a TCP proxy (a Python test peer) as the uplink.
@Suite("Broker tier: a venue broker bridged to a central broker")
struct MosquittoBridgeTests {
    /// The repository's bridge configuration with the central address replaced; the reconnect
    /// backoff is shortened (1 s to 2 s instead of 2 s to 30 s) so that the test does not wait
    /// up to 30 s after the uplink returns.
    static func bridgeConfiguration(centralPort: Int) throws -> [String] {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("deploy/mosquitto/bridge.conf").path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var replaced = 0
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            if line.hasPrefix("address ") {
                replaced += 1
                return "address 127.0.0.1:\(centralPort)"
            }
            if line.hasPrefix("restart_timeout ") {
                replaced += 1
                return "restart_timeout 1 2"
            }
            return String(line)
        }
        guard replaced == 2 else {
            throw ChildFailure(message: "\(path): expected one 'address' and one 'restart_timeout' line")
        }
        return lines
    }

    /// How often the venue broker has started connecting its bridge (mosquitto logs each
    /// attempt at notice level, refused or not).
    static func bridgeAttempts(_ log: String) -> Int {
        log.split(separator: "\n").count { $0.contains("Connecting bridge") }
    }

    @Test(
        "uplink cut across reconnect attempts: the venue keeps working and no event is lost centrally after it returns"
    )
    func uplinkCut() async throws {
        try await Cleanup.around { cleanup in try await uplinkCut(cleanup) }
    }

    func uplinkCut(_ cleanup: Cleanup) async throws {
        let central = try await TestBroker.start()
        cleanup.add { await central.stop() }
        let proxy = try ChildProcess(try Tier.python(), ["-u", try Tier.peer("uplink_proxy.py"), "\(central.port)"])
        cleanup.add { proxy.kill(SIGTERM) }
        let ready = try await proxy.waitForLine(containing: "ready", timeout: .seconds(30))
        let proxyPort = try #require(Int(ready.split(separator: " ").last ?? ""))
        let venue = try await TestBroker.start(
            extraConfiguration: try Self.bridgeConfiguration(centralPort: proxyPort))
        cleanup.add { await venue.stop() }
        let directory = try Tier.directory("bridge")
        cleanup.add { try? FileManager.default.removeItem(at: directory) }

        // The central consumer keeps a persistent session, as a real one would.
        var centralConfiguration = central.clientConfiguration("central-consumer", cleanStart: false)
        centralConfiguration.sessionExpiry = 3600
        let consumer = try MQTTClient(centralConfiguration)
        let centralInbox = Inbox(consumer)
        cleanup.add {
            centralInbox.stop()
            await consumer.disconnect()
        }
        try await consumer.connect(timeout: .seconds(5))
        for filter in Tier.transitionFilters { try await consumer.subscribe(filter, qos: .atLeastOnce) }
        try await consumer.subscribe("perimeter/v1/_bridges/+/state", qos: .atLeastOnce)
        do {
            try await centralInbox.waitFor("the bridge's state 1 on the central broker") {
                $0.last { $0.topic == "perimeter/v1/_bridges/museum/state" }?.payloadString == "1"
            }
        } catch {
            throw ChildFailure(
                message:
                    "\(error); venue broker: \(venue.log.suffix(1500)); central: \(central.log.suffix(1500)); proxy: \(proxy.output)"
            )
        }

        let observer = try await venue.connectedClient("venue-observer")
        let venueInbox = Inbox(observer)
        cleanup.add {
            venueInbox.stop()
            await observer.disconnect()
        }
        for filter in Tier.transitionFilters { try await observer.subscribe(filter, qos: .atLeastOnce) }
        let publisher = try await venue.connectedClient("agent")
        cleanup.add { await publisher.disconnect() }
        let evaluator = try await Tier.startEvaluator(
            try Tier.evaluatorConfiguration(
                in: directory, broker: ["host": "127.0.0.1", "port": .number(Double(venue.port))]), cleanup: cleanup)

        // Uplink up: events reach the central broker.
        let t0 = Int(Date().timeIntervalSince1970)
        let before = (1...3).map { "before-\($0)" }
        for (index, subject) in before.enumerated() { try await Tier.visit(publisher, subject: subject, t: t0 + index) }
        try await centralInbox.waitFor("the first events centrally") {
            Set($0.compactMap(Transition.init).map(\.description)) == enterAndExit(before)
        }

        // Uplink down. The venue keeps producing events; none can reach the centre. The cut
        // lasts until the venue broker has failed to reconnect its bridge twice (the queue must
        // outlive reconnect attempts, not only one dropped connection) and each round's events are
        // on the venue broker: conditions, not a fixed time. A long cut is a campaign of its own:
        // `scripts/campaign.sh bridge-cut 60` runs this test with the uplink down for 60 s.
        let attemptsBefore = Self.bridgeAttempts(venue.log)
        proxy.subprocess.signal(SIGUSR1)
        try await proxy.waitForLine(containing: "down")
        let cutAt = ContinuousClock.now
        let campaign = ProcessInfo.processInfo.environment["PERIMETER_BRIDGE_CUT_SECONDS"].flatMap(Int.init)
        try await centralInbox.waitFor("the bridge's last will (state 0) on the central broker") {
            $0.last { $0.topic == "perimeter/v1/_bridges/museum/state" }?.payloadString == "0"
        }
        var during: [String] = []
        var round = 0
        var lastT = t0 + 8
        var attemptsSeen = Self.bridgeAttempts(venue.log)
        repeat {
            // Event times follow the wall clock, never far ahead of it (the evaluator refuses
            // observations from the future), two seconds apart at least.
            let t = max(Int(Date().timeIntervalSince1970), lastT + 2)
            lastT = t + 1
            let subjects = ["during-\(round)-a", "during-\(round)-b"]
            for (index, subject) in subjects.enumerated() {
                try await Tier.visit(publisher, subject: subject, t: t + index)
            }
            during += subjects
            round += 1
            let expected = enterAndExit(before + during)
            try await venueInbox.waitFor("round \(round)'s events on the venue broker while the uplink is down") {
                Set($0.compactMap(Transition.init).map(\.description)) == expected
            }
            if let campaign {
                if ContinuousClock.now >= cutAt + .seconds(campaign) { break }
                // Campaign pace: a round every two seconds of the cut.
                try await Task.sleep(for: .seconds(2))
            } else {
                // One round per reconnect attempt of the bridge.
                let seen = attemptsSeen
                try await waitUntil("the bridge's next reconnect attempt", timeout: .seconds(30)) {
                    Self.bridgeAttempts(venue.log) > seen
                }
                attemptsSeen = Self.bridgeAttempts(venue.log)
                if attemptsSeen >= attemptsBefore + 3 { break }
            }
        } while true
        let expected = enterAndExit(before + during)
        let centralDuringCut = Set(centralInbox.transitions.map(\.subject)).filter { $0.hasPrefix("during") }
        #expect(centralDuringCut.isEmpty, "events crossed a cut uplink: \(centralDuringCut)")
        let attempts = Self.bridgeAttempts(venue.log) - attemptsBefore
        #expect(attempts >= 2, "the bridge tried to reconnect \(attempts) times during the cut")
        print("bridge: uplink down \(ContinuousClock.now - cutAt), \(attempts) reconnect attempts, \(round) rounds")

        // Uplink back: the bridge's queue drains; the centre sees everything the venue saw.
        proxy.subprocess.signal(SIGUSR2)
        try await proxy.waitForLine(containing: "up")
        let restoredAt = ContinuousClock.now
        let venueIDs = Set(venueInbox.transitions.map(\.id))
        try await centralInbox.waitFor("every venue event on the central broker", timeout: .seconds(30)) {
            Set($0.compactMap(Transition.init).map(\.id)).isSuperset(of: venueIDs)
        }
        // A measurement, not an assertion: shown in the test log.
        print(
            "bridge: \(venueIDs.count) events, \(during.count * 2) made during the cut, all central "
                + "\(ContinuousClock.now - restoredAt) after the uplink returned")
        let centralTransitions = centralInbox.transitions
        #expect(Set(centralTransitions.map(\.id)).isSuperset(of: venueIDs))
        #expect(Set(centralTransitions.map(\.description)) == expected)
        #expect(venueIDs.count == expected.count)
        // MQTT 5 bridging keeps the event-id user property and the content type on the central copies.
        let withProperty = centralInbox.messages.filter { message in
            guard let transition = Transition(message) else { return false }
            return message.properties.userProperties.contains { $0.name == "event-id" && $0.value == transition.id }
                && message.properties.contentType == "application/json"
        }
        #expect(withProperty.count == centralInbox.messages.compactMap(Transition.init).count)
        #expect(evaluator.subprocess.isRunning)
        try await centralInbox.waitFor("the bridge's state 1 again") {
            $0.last { $0.topic == "perimeter/v1/_bridges/museum/state" }?.payloadString == "1"
        }
    }
}
