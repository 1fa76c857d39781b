import Foundation
import PerimeterAgent
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterStore
import PerimeterTestSupport
import Synchronization
import Testing

/// A source the test feeds by hand.
struct ManualSource: AgentSource {
    let stream: AsyncStream<[AgentMessage]>
    let continuation: AsyncStream<[AgentMessage]>.Continuation
    var name: String { "manual" }

    init() {
        (stream, continuation) = AsyncStream.makeStream(of: [AgentMessage].self)
    }

    func run(emit: @Sendable ([AgentMessage]) async throws -> Void) async throws {
        for await batch in stream { try await emit(batch) }
    }
}

@Suite("Agent service")
struct AgentServiceTests {
    static let logger = Logger(label: "test", handler: DiscardingLogHandler())
    static let t0 = Date(timeIntervalSince1970: 1_796_083_200)

    static func reading(_ index: Int) -> AgentMessage {
        .gps(
            agent: nil,
            GPSReading(
                t: t0.addingTimeInterval(Double(index)),
                position: GeoPoint(lon: 2.3354 + Double(index) * 0.0001, lat: 48.8606), accuracy: 5))
    }

    static func configuration(port: Int, database: String) -> AgentConfiguration {
        var configuration = AgentConfiguration(
            broker: BrokerSettings(port: port, clientID: "agent-under-test-\(UUID().uuidString.prefix(6))"),
            agent: "phone-7", venue: "test", source: .replay, databasePath: database)
        configuration.subject = "visitor-42"
        return configuration
    }

    /// The `t` of each observation payload, in arrival order.
    static func times(_ messages: [MQTTMessage]) -> [String] {
        messages.compactMap { (try? JSONValue(parsing: $0.payload))?["t"]?.stringValue }
    }

    /// The agent's numbers (`n`) of the messages.
    static func numbers(_ messages: [MQTTMessage]) -> [Int] {
        messages.compactMap { (try? JSONValue(parsing: $0.payload))?["n"]?.intValue }
    }

    @Test(
        "store and forward: observations made while the broker is down arrive after its restart, all, in order, with their times"
    )
    func storeAndForward() async throws {
        let directory = try temporaryDirectory()
        let brokerDirectory = directory.appendingPathComponent("broker")
        var broker = try await MosquittoBroker.start(
            MosquittoBroker.Options(persistence: true, directory: brokerDirectory))
        let port = broker.port
        // A subscriber with a persistent session: the restarted broker (persistence on) queues
        // for it what arrives before it is back.
        var observerConfiguration = broker.clientConfiguration("observer", cleanStart: false)
        observerConfiguration.clientID = "observer-store-and-forward"
        let observer = try MQTTClient(observerConfiguration)
        try await observer.connect(timeout: .seconds(60))
        try await observer.subscribe("perimeter/v1/test/obs/#", qos: .atLeastOnce)

        let source = ManualSource()
        let logs = InMemoryLogHandler()
        let service = AgentService(
            configuration: Self.configuration(
                port: port, database: directory.appendingPathComponent("agent.sqlite").path),
            source: source, logger: logs.logger(label: "agent", level: .info))
        let running = Task { try await service.run() }

        let before = 5
        let during = 40
        source.continuation.yield((0..<before).map(Self.reading))
        let first = try await nextMessages(observer, count: before, timeout: .seconds(60))
        #expect(Self.times(first).count == before)

        await broker.stop()
        // While the broker is down: one message per observation, as a phone would.
        for index in before..<(before + during) { source.continuation.yield([Self.reading(index)]) }
        // They wait in the agent's SQLite outbox (another connection may read it: WAL).
        let outbox = try Database(path: directory.appendingPathComponent("agent.sqlite").path)
        try await waitUntil("\(during) messages in the outbox", timeout: .seconds(60)) {
            (try? outbox.scalar("SELECT count(*) FROM outbox")?.int) == during
        }
        broker = try await MosquittoBroker.start(
            MosquittoBroker.Options(port: port, persistence: true, directory: brokerDirectory))

        // QoS 1 is at least once: the restarted broker may deliver again what the observer got
        // before (its acknowledgement was not saved). Consumers drop what they have seen.
        // One inbox reads throughout: a read given up on a timeout would end the client's
        // message stream for good.
        let inbox = Inbox(observer)
        defer { inbox.stop() }
        var received: [String] = []
        try await waitUntil(
            "\(during) new observations after the restart", timeout: .seconds(90), every: .milliseconds(100)
        ) {
            var seen = Set(Self.times(first))
            received = Self.times(inbox.messages).filter { seen.insert($0).inserted }
            return received.count >= during
        }
        let expected = (before..<(before + during)).map { Timestamp.format(Self.t0.addingTimeInterval(Double($0))) }
        #expect(received == expected)
        // The agent said so while the broker was away, and when it came back.
        #expect(!logs.records(containing: "broker connection lost; observations wait in the outbox").isEmpty)
        #expect(!logs.records(containing: "broker connection back; sending the outbox").isEmpty)

        running.cancel()
        try await running.value
        await observer.disconnect()
        await broker.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    @Test(
        "an outbox left by a previous run is sent first, in order, when the agent starts; numbering (n) goes on across the restart"
    )
    func outboxSurvivesRestart() async throws {
        let directory = try temporaryDirectory()
        let database = directory.appendingPathComponent("agent.sqlite").path
        // First run: no broker at all (a port nothing listens on).
        let deadPort = try MosquittoBroker.freeLoopbackPort()
        let source = ManualSource()
        var service = AgentService(
            configuration: Self.configuration(port: deadPort, database: database), source: source, logger: Self.logger)
        service.drainTimeout = .milliseconds(100)
        service.connectTimeout = .milliseconds(200)
        source.continuation.yield((0..<10).map(Self.reading))
        source.continuation.finish()
        try await service.run()

        // Second run, with a broker: the ten come out before anything new.
        let broker = try await TestBroker.start()
        let observer = try await broker.connectedClient("observer")
        try await observer.subscribe("perimeter/v1/test/obs/#", qos: .atLeastOnce)
        let next = ManualSource()
        let second = AgentService(
            configuration: Self.configuration(port: broker.port, database: database), source: next,
            logger: Self.logger)
        let running = Task { try await second.run() }
        next.continuation.yield([Self.reading(10)])
        let messages = try await nextMessages(observer, count: 11, timeout: .seconds(60))
        #expect(Self.times(messages) == (0...10).map { Timestamp.format(Self.t0.addingTimeInterval(Double($0))) })
        #expect(Self.numbers(messages) == Array(1...11), "the evaluator would take a restart's 1 as a renumbering")
        running.cancel()
        try await running.value
        await observer.disconnect()
        await broker.stop()
    }

    @Test("retained status online with capabilities while running, offline after a clean stop")
    func status() async throws {
        let broker = try await TestBroker.start()
        let directory = try temporaryDirectory()
        let source = ManualSource()
        var configuration = Self.configuration(
            port: broker.port, database: directory.appendingPathComponent("agent.sqlite").path)
        configuration.caps = ["gps", "ble-scan", "ranging"]
        let service = AgentService(configuration: configuration, source: source, logger: Self.logger)
        let running = Task { try await service.run() }
        let topic = "perimeter/v1/test/agents/phone-7/status"
        let observer = try await broker.connectedClient("observer")
        try await observer.subscribe(topic, qos: .atLeastOnce)
        let online = try await nextMessages(observer, count: 1, timeout: .seconds(60))
        let status = try JSONValue(parsing: online[0].payload)
        #expect(status["online"] == .bool(true))
        #expect(status["caps"] == ["gps", "ble-scan", "ranging"])
        #expect(status["mode"] == "scanner")
        running.cancel()
        try await running.value
        let offline = try await nextMessages(observer, count: 1, timeout: .seconds(60))
        #expect((try JSONValue(parsing: offline[0].payload))["online"] == .bool(false))
        #expect(offline[0].topic == topic)
        await observer.disconnect()
        await broker.stop()
    }

    @Test("distance filter and desired accuracy apply before publishing")
    func filtering() async throws {
        let broker = try await TestBroker.start()
        let directory = try temporaryDirectory()
        let source = ManualSource()
        var configuration = Self.configuration(
            port: broker.port, database: directory.appendingPathComponent("agent.sqlite").path)
        configuration.distanceFilter = 20
        configuration.desiredAccuracy = 10
        let observer = try await broker.connectedClient("observer")
        try await observer.subscribe("perimeter/v1/test/obs/#", qos: .atLeastOnce)
        let running = Task {
            try await AgentService(configuration: configuration, source: source, logger: Self.logger).run()
        }
        let origin = GeoPoint(lon: 2.3354, lat: 48.8606)
        func at(_ seconds: Int, east: Double, acc: Double) -> AgentMessage {
            .gps(
                agent: nil,
                GPSReading(
                    t: Self.t0.addingTimeInterval(Double(seconds)),
                    position: Geodesy.destination(origin, bearing: 90, distance: east), accuracy: acc))
        }
        source.continuation.yield([
            at(0, east: 0, acc: 5), at(1, east: 5, acc: 5), at(2, east: 30, acc: 50), at(3, east: 25, acc: 8),
            at(4, east: 30, acc: 5), at(5, east: 50, acc: 5),
        ])
        let messages = try await nextMessages(observer, count: 3, timeout: .seconds(60))
        #expect(Self.times(messages) == [0, 3, 5].map { Timestamp.format(Self.t0.addingTimeInterval(Double($0))) })
        #expect(messages.allSatisfy { $0.topic == "perimeter/v1/test/obs/phone-7/gps" })
        #expect((try JSONValue(parsing: messages[0].payload))["subject"] == "visitor-42")
        running.cancel()
        try await running.value
        await observer.disconnect()
        await broker.stop()
    }

    @Test(
        "perimeter agent --venue config/campus (no agent.venue) publishes on campus's topics; killed with SIGKILL, the broker publishes its last will, online false, retained"
    )
    func lastWill() async throws {
        let broker = try await TestBroker.start()
        let directory = try temporaryDirectory()
        let venue = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/campus").path
        let agent = try ChildProcess(
            Products.executable("perimeter"),
            [
                "agent", "--venue", venue, "--broker-port", "\(broker.port)", "--set", "agent.id=sim-1",
                "--set", "agent.database=\(directory.path)/agent.sqlite",
            ])
        try await agent.waitForLine(containing: "status online", timeout: .seconds(60))
        agent.kill(SIGKILL)
        let observer = try await broker.connectedClient("observer")
        try await observer.subscribe("perimeter/v1/campus/agents/sim-1/status", qos: .atLeastOnce)
        // The will is published when the broker notices the dead connection (at once: the socket closed).
        let inbox = Inbox(observer)
        defer { inbox.stop() }
        var last: JSONValue?
        try await waitUntil("the last will", timeout: .seconds(60), every: .milliseconds(100)) {
            last = inbox.messages.last.flatMap { try? JSONValue(parsing: $0.payload) }
            return last?["online"] == .bool(false)
        }
        #expect(last == ["online": false])
        await observer.disconnect()
        await broker.stop()
    }
}

@Suite("HCI source")
struct HCISourceTests {
    @Test("no such controller: the agent stops with an error naming the device and the reason, status offline")
    func noController() async throws {
        // hci250 exists nowhere: without a Bluetooth stack socket() fails, with one bind() does.
        let broker = try await TestBroker.start()
        let directory = try temporaryDirectory()
        var configuration = AgentServiceTests.configuration(
            port: broker.port, database: directory.appendingPathComponent("agent.sqlite").path)
        configuration.hciDevice = 250
        let logger = Logger(label: "test", handler: DiscardingLogHandler())
        let service = AgentService(
            configuration: configuration, source: HCISource(device: 250, logger: logger), logger: logger)
        await #expect {
            try await service.run()
        } throws: { error in
            "\(error)".hasPrefix("hci250: cannot ")
        }
        let observer = try await broker.connectedClient("observer")
        try await observer.subscribe("perimeter/v1/test/agents/phone-7/status", qos: .atLeastOnce)
        let retained = try await nextMessages(observer, count: 1, timeout: .seconds(60))
        #expect((try JSONValue(parsing: retained[0].payload))["online"] == .bool(false))
        await observer.disconnect()
        await broker.stop()
    }
}

@Suite("Simulator source")
struct SimulatorSourceTests {
    @Test("the sample venues load and their simulations are deterministic", arguments: ["museum", "campus"])
    func sampleVenues(_ name: String) throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/\(name)/venue.json").path
        let venue = try SimulatorSource.loadVenue(path)
        #expect(venue.name == name)
        #expect(!venue.beacons.isEmpty)
        let start = Date(timeIntervalSince1970: 1_796_083_200)
        let a = VenueSimulation(venue: venue, start: start)
        let b = VenueSimulation(venue: venue, start: start)
        #expect((0..<30).map { a.messages(tick: $0) } == (0..<30).map { b.messages(tick: $0) })
        // Every visitor publishes a GPS reading and a scan each tick (scanner topology).
        #expect(a.messages(tick: 3).count >= 2 * venue.simulator.visitors)
    }
}
