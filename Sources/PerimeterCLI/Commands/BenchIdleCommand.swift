import Foundation
import PerimeterAgent
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

/// `perimeter bench idle`: what the services cost when nothing happens, after a burst.
struct BenchIdleCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "idle", abstract: "CPU of idle services after a burst, per process, vs 0.5 CPU-s per 60 s.",
        discussion: """
            Starts a private mosquitto, `perimeter up --no-simulator` on it (the evaluator, the
            notifier and the dashboard in one process; --venue DIR, default config/museum) and an
            edge agent reading a gpsd that has no receiver (Debian's gpsd, started here). Then a
            burst: --visitors phones consent, arrive in the venue's arrival circle and leave it
            (their enters, exits and notifications); a marker phone arrives last, and its enter
            event and notification say everything before it went through. After --settle seconds
            (the venue's exit delays fire meanwhile) each process's CPU time (user + system,
            /proc) is measured over --seconds of nothing to do. The target (issue 16): under
            0.5 CPU-seconds per 60 s for every Perimeter process; the broker and gpsd are shown
            for comparison. Exits 1 when a Perimeter process is over the target.
            """)

    @Option(help: "Seconds of idling measured (default 60).", valueName: "s")
    var seconds: Double = 60

    @Option(help: "Seconds between the burst's end and the measurement (default 25).", valueName: "s")
    var settle: Double = 25

    @Option(help: "Phones in the burst (default 300).", valueName: "n")
    var visitors: Int = 300

    @Option(help: "Venue directory (default config/museum).", valueName: "dir")
    var venue: String = "config/museum"

    @Option(help: "The circle region the burst enters and leaves (default museum-area).", valueName: "id")
    var region: String = "museum-area"

    mutating func validate() throws {
        guard seconds >= 1, seconds <= 3_600 else { throw ValidationError("--seconds: between 1 and 3600") }
        guard settle >= 0, settle <= 3_600 else { throw ValidationError("--settle: between 0 and 3600") }
        guard visitors >= 1, visitors <= 100_000 else { throw ValidationError("--visitors: between 1 and 100000") }
    }

    /// A child of this bench: its process and where its output goes.
    private struct Child {
        let name: String
        let process: Subprocess
        let logPath: String
        var cpu: Double { CPUMeter.seconds(process.pid) }
        func stop() {
            guard process.isRunning else { return }
            process.signal(SIGTERM)
            _ = process.waitBlocking()
        }
    }

    func run() async throws {
        let venueDirectory = URL(fileURLWithPath: venue)
        let venueFile = try SimulatorSource.loadVenue(venueDirectory.appendingPathComponent("venue.json").path)
        let regionsPath =
            venueFile.regions.hasPrefix("/")
            ? venueFile.regions : venueDirectory.appendingPathComponent(venueFile.regions).path
        let center = try Self.circle(region, in: regionsPath)
        let broker = try await MosquittoBroker.start()
        defer { broker.kill() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "perimeter-bench-idle-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("PERIMETER_") }
        func spawn(_ name: String, _ path: String, _ arguments: [String]) throws -> Child {
            let log = directory.appendingPathComponent("\(name).log").path
            let process = try Subprocess.spawn(
                path, arguments, environment: environment, stdout: .file(log, append: false),
                stderr: .file(log, append: true), newProcessGroup: true)
            return Child(name: name, process: process, logPath: log)
        }
        var children: [Child] = []
        defer { for child in children.reversed() { child.stop() } }

        let up = try spawn(
            "up", executable,
            [
                "up", "--venue", venue, "--no-simulator", "--set", "broker.host=127.0.0.1", "--set",
                "broker.port=\(broker.port)", "--set", "log.level=warning",
            ])
        children.append(up)
        guard let gpsdPath = Subprocess.find("gpsd") else {
            throw ExitCode(1, "gpsd is not installed: run scripts/setup.sh (Debian's gpsd)")
        }
        let gpsdPort = try MosquittoBroker.freeLoopbackPort()
        children.append(
            try spawn(
                "gpsd", gpsdPath,
                ["-N", "-S", "\(gpsdPort)", "-F", directory.appendingPathComponent("gpsd.sock").path]))
        let agentConfig: JSONValue = [
            "broker": ["host": "127.0.0.1", "port": .number(Double(broker.port))],
            "agent": [
                "id": "idle-gateway", "venue": .string(venueFile.name), "source": "gpsd",
                "database": .string(directory.appendingPathComponent("agent.sqlite").path),
            ],
            "gpsd": ["host": "127.0.0.1", "port": .number(Double(gpsdPort))],
            "log": ["level": "warning"],
        ]
        let agentConfigPath = directory.appendingPathComponent("agent.json").path
        try agentConfig.serialized().write(toFile: agentConfigPath, atomically: true, encoding: .utf8)

        let topics = Topics(venue: venueFile.name)
        var observerConfiguration = MQTTConfiguration(
            host: "127.0.0.1", port: broker.port, clientID: "bench-idle-observer")
        observerConfiguration.inboundBufferSize = visitors * 8 + 1_024
        let observer = try MQTTClient(observerConfiguration)
        let seen = MessageInbox(observer)
        try await observer.connect()
        try await observer.subscribe("\(topics.root)/enter/#", qos: .atLeastOnce)
        try await observer.subscribe("\(topics.root)/exit/#", qos: .atLeastOnce)
        try await observer.subscribe("\(topics.root)/notifications/#", qos: .atLeastOnce)
        let publisher = try MQTTClient(
            MQTTConfiguration(host: "127.0.0.1", port: broker.port, clientID: "bench-idle-phones"))
        try await publisher.connect()
        defer { seen.stop() }

        print(
            "perimeter bench idle: venue \(venueFile.name), \(visitors) phones through '\(region)', settle \(Self.format(settle)) s, idle \(Self.format(seconds)) s, \(ProcessInfo.processInfo.activeProcessorCount) cores"
        )
        // Ready: a first marker is evaluated (the evaluator runs and has subscribed).
        try await arrive("ready-marker", center: center, topics: topics, publisher: publisher, seen: seen, up: up)
        children.append(try spawn("agent", executable, ["agent", "--config", agentConfigPath]))

        // The burst.
        let started = ContinuousClock.now
        var messages: [MQTTMessage] = []
        let now = Date().timeIntervalSince1970.rounded(.down)
        for index in 0..<visitors {
            let subject = "idle-\(index)"
            messages += consent(subject, topics: topics)
            messages.append(fix(subject, at: center, t: now, topics: topics))
            messages.append(fix(subject, at: (center.lat + 0.05, center.lon), t: now + 1, topics: topics))
            if messages.count >= 1_000 {
                _ = try await publisher.publish(batch: messages)
                messages.removeAll(keepingCapacity: true)
            }
        }
        _ = try await publisher.publish(batch: messages)
        try await arrive("last-marker", center: center, topics: topics, publisher: publisher, seen: seen, up: up)
        let burst = ContinuousClock.now - started
        let enters = seen.all.count { $0.topic.hasPrefix("\(topics.root)/enter/") }
        let notifications = seen.all.count { $0.topic.hasPrefix("\(topics.root)/notifications/") }
        print(
            "burst: \(visitors * 2) fixes in \(Self.format(BenchMQTTCommand.seconds(burst))) s; \(enters) enters, \(notifications) notifications so far"
        )

        try await Task.sleep(for: .seconds(settle))
        for child in children where !child.process.isRunning {
            let log = (try? String(contentsOfFile: child.logPath, encoding: .utf8)) ?? ""
            throw ExitCode(1, "\(child.name) ended before the measurement; its log ends:\n\(log.suffix(2_000))")
        }
        guard let brokerPID = broker.pid else { throw ExitCode(1, "the broker ended before the measurement") }
        let measured: [(name: String, pid: Int32, ours: Bool)] =
            children.map { child in
                (
                    child.name == "up" ? "up (evaluator, notifier, dashboard)" : child.name, child.process.pid,
                    child.name != "gpsd"
                )
            } + [("mosquitto", brokerPID, false)]
        let before = measured.map { CPUMeter.seconds($0.pid) }
        try await Task.sleep(for: .seconds(seconds))
        let after = measured.map { CPUMeter.seconds($0.pid) }
        var over: [String] = []
        for (index, process) in measured.enumerated() {
            let used = after[index] - before[index]
            let perMinute = used * 60 / seconds
            let verdict = process.ours ? (perMinute < 0.5 ? "  under 0.5: met" : "  over 0.5: NOT met") : ""
            if process.ours && perMinute >= 0.5 { over.append(process.name) }
            print(
                "  \(process.name.padding(toLength: 38, withPad: " ", startingAt: 0)) \(String(format: "%.3f", used)) CPU-s in \(Self.format(seconds)) s = \(String(format: "%.3f", perMinute)) per 60 s\(verdict)"
            )
        }
        await publisher.disconnect()
        await observer.disconnect()
        if !over.isEmpty { throw ExitCode(1, "over 0.5 CPU-s per 60 s idle: \(over.joined(separator: ", "))") }
    }

    /// A phone that consents and arrives in the circle; returns when its enter event and its
    /// notifications are seen (everything published before it has been processed).
    private func arrive(
        _ subject: String, center: (lat: Double, lon: Double), topics: Topics, publisher: MQTTClient,
        seen: MessageInbox, up: Child
    ) async throws {
        _ = try await publisher.publish(batch: consent(subject, topics: topics))
        let deadline = ContinuousClock.now + .seconds(120)
        var sent = ContinuousClock.now - .seconds(10)
        while !seen.all.contains(where: { $0.topic.hasSuffix("/enter/\(region)/\(subject)") }) {
            if !up.process.isRunning || ContinuousClock.now > deadline {
                let log = (try? String(contentsOfFile: up.logPath, encoding: .utf8)) ?? ""
                throw ExitCode(1, "no enter event for \(subject) within 120 s; up's log ends:\n\(log.suffix(2_000))")
            }
            // Again every few seconds until the evaluator has subscribed (its first may be lost).
            if ContinuousClock.now - sent > .seconds(3) {
                _ = try await publisher.publish(
                    batch: [fix(subject, at: center, t: Date().timeIntervalSince1970.rounded(.down), topics: topics)])
                sent = ContinuousClock.now
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    private func consent(_ subject: String, topics: Topics) -> [MQTTMessage] {
        [
            MQTTMessage(
                topic: topics.authorization(subject: subject),
                payload: Array(#"{"status":"always","accuracy":"full"}"#.utf8), qos: .atLeastOnce, retain: true),
            MQTTMessage(
                topic: topics.usage(subject: subject), payload: Array(#"{"inUse":true}"#.utf8), qos: .atLeastOnce,
                retain: true),
        ]
    }

    private func fix(_ subject: String, at point: (lat: Double, lon: Double), t: Double, topics: Topics) -> MQTTMessage
    {
        let payload: JSONValue = ["t": .number(t), "lat": .number(point.lat), "lon": .number(point.lon), "acc": 5]
        return MQTTMessage(
            topic: topics.gps(agent: subject), payload: Array(payload.serialized().utf8), qos: .atLeastOnce)
    }

    /// The center of the circle region `id` in a GeoJSON file.
    static func circle(_ id: String, in path: String) throws -> (lat: Double, lon: Double) {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let json = try JSONParser.parse(Array(text.utf8))
        guard
            let feature = json["features"]?.arrayValue?.first(where: { $0["id"]?.stringValue == id }),
            feature["geometry"]?["type"]?.stringValue == "Point",
            let coordinates = feature["geometry"]?["coordinates"]?.arrayValue, coordinates.count >= 2,
            let lon = coordinates[0].doubleValue, let lat = coordinates[1].doubleValue
        else { throw ExitCode(1, "\(path): no circle region '\(id)' (a Point feature with that id)") }
        return (lat, lon)
    }

    static func format(_ value: Double) -> String { String(format: "%.0f", value) }
}
