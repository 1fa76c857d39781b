import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNotifier
import PerimeterTestSupport
import Synchronization

/// A real mosquitto on a free port, a real `perimeter notifier` process (or the notifier service
/// in this process, on a clock the test moves), test peers (a webhook receiver, an SMTP server)
/// and an observer of the venue's topics. The tests play the evaluator: they publish
/// transitions as it does.
final class NotifierHarness: Sendable {
    static let venue = "test"
    let broker: MosquittoBroker
    let directory: URL
    let observer: MQTTClient
    let publisher: MQTTClient
    private let process = Mutex<ChildProcess?>(nil)
    private let peers = Mutex<[ChildProcess]>([])
    private let received: Inbox
    let configPath: String

    var root: String { "perimeter/v1/\(Self.venue)" }

    init() async throws {
        broker = try await TestBroker.start()
        directory = TestScratch.root.appendingPathComponent(
            "perimeter-notify-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        configPath = directory.appendingPathComponent("notifier.json").path
        observer = try await broker.connectedClient("observer")
        try await observer.subscribe("perimeter/v1/\(Self.venue)/#", qos: .atLeastOnce)
        publisher = try await broker.connectedClient("publisher")
        received = Inbox(observer)
    }

    /// Writes the configuration: the venue (US café conventions), the rules file, channels.
    func configure(rules: String, channels: JSONObject, notifier extra: JSONObject = [:]) throws {
        let rulesPath = directory.appendingPathComponent("rules.json").path
        try rules.write(toFile: rulesPath, atomically: true, encoding: .utf8)
        var notifier: JSONObject = [
            "database": .string(directory.appendingPathComponent("notifier.sqlite").path), "initialBackoff": 0.2,
            "maxBackoff": 1, "timeout": 30,
        ]
        for (key, value) in extra { notifier[key] = value }
        let config: JSONObject = [
            "broker": ["host": "127.0.0.1", "port": .number(Double(broker.port)), "clientId": "notifier-under-test"],
            "notifier": .object(notifier),
            "venues": .object(
                JSONObject([
                    (
                        Self.venue,
                        JSONValue.object([
                            "timeZone": "America/Chicago", "locale": "en_US", "currency": "USD",
                            "rules": .string(rulesPath),
                        ])
                    )
                ])),
            "channels": .object(channels), "log": ["level": "info"],
        ]
        try JSONValue.object(config).serialized().write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    var databasePath: String { directory.appendingPathComponent("notifier.sqlite").path }

    /// Starts (or restarts) the notifier process and waits until it is subscribed.
    /// - Parameter environment: extra variables (fault injection).
    @discardableResult
    func startNotifier(environment: [String: String]? = nil) async throws -> ChildProcess {
        let child = try ChildProcess(
            Products.executable("perimeter"), ["notifier", "--config", configPath], environment: environment)
        process.withLock { $0 = child }
        try await child.waitForLine(containing: "notifier running", timeout: .seconds(30))
        return child
    }

    func killNotifier() { process.withLock { $0?.kill(SIGKILL) } }

    private let inProcess = Mutex<Task<Void, any Error>?>(nil)
    private let logs = InMemoryLogHandler()

    /// Runs the notifier service in this process on `clock`, with the configuration written by
    /// ``configure(rules:channels:notifier:)``; returns once it is subscribed.
    func startInProcess(clock: any TimeSource) async throws {
        let configuration = try NotifierConfiguration.read(ConfigReader(filePath: configPath))
        let service = NotifierService(
            configuration: configuration, logger: logs.logger(label: "notifier", level: .info), clock: clock)
        inProcess.withLock { $0 = Task { try await service.run() } }
        try await waitUntil("the notifier subscribed", context: { self.notifierOutput }) {
            if let task = inProcess.withLock({ $0 }), task.isCancelled { return false }
            return !logs.records(containing: "notifier running").isEmpty
        }
    }

    /// The running notifier process's id.
    var notifierPID: pid_t? { process.withLock { $0?.subprocess.pid } }

    private let evaluator = Mutex<ChildProcess?>(nil)

    /// Starts a real `perimeter evaluator` on the same broker and venue (privacy gate with its
    /// defaults: nothing flows until subjects authorize and consumers declare sessions).
    func startEvaluator(regions: String) async throws {
        let regionsPath = directory.appendingPathComponent("regions.geojson").path
        try regions.write(toFile: regionsPath, atomically: true, encoding: .utf8)
        let config: JSONValue = [
            "broker": ["host": "127.0.0.1", "port": .number(Double(broker.port)), "clientId": "evaluator-under-test"],
            "evaluator": [
                "database": .string(directory.appendingPathComponent("evaluator.sqlite").path), "tickInterval": 0.2,
            ],
            "venues": .object(JSONObject([(Self.venue, JSONValue.object(["regions": .string(regionsPath)]))])),
        ]
        let path = directory.appendingPathComponent("evaluator.json").path
        try config.serialized().write(toFile: path, atomically: true, encoding: .utf8)
        let child = try ChildProcess(Products.executable("perimeter"), ["evaluator", "--config", path])
        evaluator.withLock { $0 = child }
        try await child.waitForLine(containing: "evaluator running", timeout: .seconds(30))
    }

    /// What the notifier wrote: the process's output, or the in-process service's log.
    var notifierOutput: String {
        process.withLock { $0?.output }
            ?? logs.records.map { "\($0.level) \($0.message) \($0.metadata)" }.joined(separator: "\n")
    }

    /// Starts a test peer script from Peers/ with `python`; returns it and the port it printed.
    func startPeer(
        _ script: String, _ arguments: [String], python: String = "/usr/bin/python3"
    ) async throws -> (
        ChildProcess, Int
    ) {
        let (child, port) = try await startTestPeer(script, arguments, python: python)
        peers.withLock { $0.append(child) }
        return (child, port)
    }

    /// Publishes a transition as the evaluator would.
    func publishEvent(
        _ kind: String, region: String, subject: String, t: Date, id: String? = nil, selfOnly: Bool = false
    ) async throws {
        let eventID = id ?? "\(kind)-\(region)-\(subject)-\(Int(t.timeIntervalSince1970))"
        let payload: JSONValue = [
            "id": .string(eventID), "event": .string(kind), "venue": .string(Self.venue), "region": .string(region),
            "subject": .string(subject), "t": .string(Timestamp.format(t)), "seq": 1, "source": "gps",
        ]
        let topic = selfOnly ? "\(root)/self/\(kind)/\(region)/\(subject)" : "\(root)/\(kind)/\(region)/\(subject)"
        try await publisher.publish(topic, payload.serialized(), qos: .atLeastOnce)
    }

    func publish(_ topic: String, _ text: String, retain: Bool = false) async throws {
        try await publisher.publish("\(root)/\(topic)", text, qos: .atLeastOnce, retain: retain)
    }

    var messages: [MQTTMessage] { received.messages }

    /// Payloads of messages under the venue whose topic starts with `prefix` (after the venue),
    /// leaving out the deadletters of ``waitUntilProcessed()``'s markers.
    func payloads(_ prefix: String) -> [JSONObject] {
        messages.filter { $0.topic.hasPrefix("\(root)/\(prefix)") }.compactMap {
            try? JSONParser.parse($0.payload).objectValue
        }.filter { $0["topic"]?.stringValue?.hasPrefix(markerPrefix) != true }
    }

    private var markerPrefix: String { "\(root)/enter/_processed/" }
    private let markers = Mutex(0)

    /// Waits until the notifier has handled everything published so far (rules fired, outbox
    /// rows committed): it handles its inbox in arrival order, and a malformed event published
    /// now comes back on `deadletter/notifier` only after everything before it.
    func waitUntilProcessed() async throws {
        let topic = markerPrefix + "\(markers.withLock { $0 += 1; return $0 })"
        try await publisher.publish(topic, "not an event", qos: .atLeastOnce)
        try await waitFor("the notifier to reach \(topic)") {
            self.messages.contains {
                $0.topic == "\(self.root)/deadletter/notifier"
                    && (try? JSONParser.parse($0.payload))?["topic"]?.stringValue == topic
            }
        }
    }

    /// The outbox row of a notification (by its key, event id + ":" + rule id), read as the
    /// notifier left it.
    func outboxRow(
        _ key: String
    ) throws -> (
        state: String, attempts: Int, nextAttempt: Date, created: Date, inFlight: Bool, lastError: String?
    )? {
        let store = try NotifierStore(path: databasePath, readOnly: true)
        return try store.database.row(
            "SELECT state, attempts, next_attempt, created, in_flight, last_error FROM outbox WHERE key = ?", key
        ).map {
            (
                $0[0].string ?? "", $0[1].int ?? 0, Date(timeIntervalSince1970: $0[2].double ?? 0),
                Date(timeIntervalSince1970: $0[3].double ?? 0), $0[4].int == 1, $0[5].string
            )
        }
    }

    /// How many outbox rows a rule made.
    func outboxCount(rule: String) throws -> Int {
        let store = try NotifierStore(path: databasePath, readOnly: true)
        return try store.database.scalar("SELECT count(*) FROM outbox WHERE rule = ?", rule)?.int ?? 0
    }

    /// Waits until `condition` holds, or fails after `timeout` saying what the notifier wrote.
    func waitFor(
        _ what: String, timeout: Duration = .seconds(60), _ condition: @escaping @Sendable () -> Bool
    ) async throws {
        try await received.waitFor(
            what, timeout: timeout, context: { "notifier said: \(self.notifierOutput.suffix(3000))" }
        ) { _ in condition() }
    }

    func stop() async {
        if let task = inProcess.withLock({ $0 }) {
            task.cancel()
            _ = await task.result
        }
        evaluator.withLock { child in
            if let child, child.subprocess.isRunning { child.kill(SIGTERM) }
        }
        process.withLock { child in
            if let child, child.subprocess.isRunning { child.kill(SIGTERM) }
        }
        peers.withLock { list in
            for peer in list where peer.subprocess.isRunning { peer.kill(SIGTERM) }
        }
        received.stop()
        await observer.disconnect()
        await publisher.disconnect()
        await broker.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// Starts a test peer script from Peers/ with `python`; returns it and the port it printed
/// (the caller stops it).
func startTestPeer(
    _ script: String, _ arguments: [String] = [], python: String = "/usr/bin/python3"
) async throws -> (ChildProcess, Int) {
    guard let path = Bundle.module.path(forResource: script, ofType: nil, inDirectory: "Peers") else {
        throw ChildFailure(message: "test peer \(script) is missing from the test bundle")
    }
    guard FileManager.default.isExecutableFile(atPath: python) else {
        throw ChildFailure(message: "\(python) is missing: run scripts/setup.sh (Debian's python3)")
    }
    let child = try ChildProcess(python, ["-u", path] + arguments)
    let line = try await child.waitForLine(containing: "listening", timeout: .seconds(20))
    guard let port = Int(line.split(separator: " ").last ?? "") else {
        throw ChildFailure(message: "peer \(script) printed '\(line)'")
    }
    return (child, port)
}

/// The JSON lines a peer printed (after its "listening" line).
/// A test CA, and a server certificate for localhost and 127.0.0.1 signed by it, made in
/// `directory` by `deploy/mosquitto/make-certs.sh` (`ca.crt`, `server.crt`, `server.key`).
func makeTestCertificates(in directory: URL) async throws {
    let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("deploy/mosquitto/make-certs.sh").path
    let made = await (try ChildProcess("/bin/sh", [script, directory.path, "localhost"])).finish()
    guard made.termination == .exited(0) else {
        throw ChildFailure(message: "make-certs.sh failed: \(made.output)")
    }
}

func peerRecords(_ peer: ChildProcess) -> [JSONObject] {
    peer.output.split(separator: "\n").compactMap { line in
        line.hasPrefix("{") ? (try? JSONParser.parse(String(line)))?.objectValue : nil
    }
}
