import Foundation
import PerimeterKit
import PerimeterMQTT

/// `perimeter bench mqtt`: our client's relay rate next to mosquitto_pub/mosquitto_sub's,
/// through the same broker, in the same run.
struct BenchMQTTCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mqtt", abstract: "Relay rate of Perimeter's MQTT client vs mosquitto_pub/mosquitto_sub.",
        discussion: """
            Publishes --count messages of --size bytes at --qos through one broker and times
            them until the last one reaches a subscriber: first with mosquitto_pub -l and
            mosquitto_sub -C, then with two Perimeter clients. Rounds alternate; the median of
            each is reported with the ratio. Without --host a private mosquitto is started.
            At QoS 1 and 2 mosquitto_pub -l stops after 65,535 messages (its packet ids wrap),
            so the baseline is fed in chunks of 50,000 by consecutive mosquitto_pub processes.
            """)

    @Option(help: "Messages per run.", valueName: "n")
    var count: Int = 200_000

    @Option(help: "Payload size in bytes.", valueName: "bytes")
    var size: Int = 94

    @Option(help: "Quality of service: 0, 1 or 2.", valueName: "qos")
    var qos: Int = 0

    @Option(help: "Rounds of baseline and ours, alternating.", valueName: "n")
    var rounds: Int = 3

    @Option(help: "An existing broker's host (default: a private mosquitto).", valueName: "host")
    var host: String?

    @Option(help: "The existing broker's port.", valueName: "port")
    var port: Int = 1883

    mutating func validate() throws {
        guard (1...10_000_000).contains(count) else { throw ValidationError("--count must be 1…10,000,000") }
        guard (1...1_000_000).contains(size) else { throw ValidationError("--size must be 1…1,000,000 bytes") }
        guard (0...2).contains(qos) else { throw ValidationError("--qos must be 0, 1 or 2") }
        guard (1...20).contains(rounds) else { throw ValidationError("--rounds must be 1…20") }
    }

    func run() async throws {
        let qosLevel = QoS(rawValue: Int32(qos))!
        var broker: MosquittoBroker?
        if host == nil { broker = try await MosquittoBroker.start() }
        defer { broker?.kill() }
        let endpoint = (host: host ?? "127.0.0.1", port: broker?.port ?? port)
        let tools = try ["mosquitto_pub", "mosquitto_sub"].map(Self.locate)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "perimeter-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let payload = Self.payload(size: size)
        let chunks = try Self.writeChunks(payload: payload, count: count, qos: qos, directory: directory)

        print(
            "perimeter bench mqtt: \(count) messages of \(size) bytes at QoS \(qos), broker \(endpoint.host):\(endpoint.port)"
        )
        print("libmosquitto \(MQTTClient.libraryVersion); baseline mosquitto_pub -l | mosquitto_sub -C")
        print("round  mosquitto_pub/sub msg/s  perimeter msg/s  ratio")
        var baseline: [Double] = []
        var ours: [Double] = []
        for round in 1...rounds {
            let base = try await Self.runBaseline(
                tools: tools, endpoint: endpoint, qos: qos, count: count, chunks: chunks, round: round)
            let own = try await Self.runOurs(
                endpoint: endpoint, qos: qosLevel, count: count, payload: payload, round: round)
            baseline.append(Double(count) / base)
            ours.append(Double(count) / own)
            print(
                "\(round)".padding(toLength: 7, withPad: " ", startingAt: 0)
                    + Self.rate(baseline.last!).padding(toLength: 25, withPad: " ", startingAt: 0)
                    + Self.rate(ours.last!).padding(toLength: 17, withPad: " ", startingAt: 0)
                    + String(format: "%.2f", ours.last! / baseline.last!))
        }
        let medianBase = Self.median(baseline)
        let medianOurs = Self.median(ours)
        print(
            "median " + Self.rate(medianBase).padding(toLength: 25, withPad: " ", startingAt: 0)
                + Self.rate(medianOurs).padding(toLength: 17, withPad: " ", startingAt: 0)
                + String(format: "%.2f", medianOurs / medianBase))
        print("ratio (perimeter / mosquitto tools): \(String(format: "%.2f", medianOurs / medianBase))")
    }

    static func rate(_ value: Double) -> String { String(format: "%.0f", value) }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.count % 2 == 1
            ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }

    static func locate(_ tool: String) throws -> String {
        guard let path = Subprocess.find(tool) else {
            throw ExitCode(1, "\(tool) not found; install it with: apt-get install -y mosquitto-clients")
        }
        return path
    }

    /// Printable bytes (the baseline sends lines, so no newline inside).
    static func payload(size: Int) -> [UInt8] {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789".utf8)
        return (0..<size).map { alphabet[$0 % alphabet.count] }
    }

    /// Input files for mosquitto_pub -l: one line per message, in chunks it can finish.
    static func writeChunks(
        payload: [UInt8], count: Int, qos: Int, directory: URL
    ) throws -> [(path: String, lines: Int)] {
        let perChunk = qos == 0 ? count : 50_000
        var chunks: [(String, Int)] = []
        var remaining = count
        var number = 0
        while remaining > 0 {
            let lines = min(perChunk, remaining)
            var data = Data(capacity: lines * (payload.count + 1))
            for _ in 0..<lines {
                data.append(contentsOf: payload)
                data.append(0x0A)
            }
            let path = directory.appendingPathComponent("chunk-\(number).txt").path
            guard FileManager.default.createFile(atPath: path, contents: data) else {
                throw ExitCode(1, "cannot write \(path)")
            }
            chunks.append((path, lines))
            remaining -= lines
            number += 1
        }
        return chunks
    }

    /// Seconds from the first mosquitto_pub to mosquitto_sub having all messages.
    static func runBaseline(
        tools: [String], endpoint: (host: String, port: Int), qos: Int, count: Int,
        chunks: [(path: String, lines: Int)], round: Int
    ) async throws -> Double {
        let topic = "perimeter-bench/base/\(round)"
        let subscriber = try Subprocess.spawn(
            tools[1],
            [
                "-h", endpoint.host, "-p", "\(endpoint.port)", "-t", topic, "-q", "\(qos)", "-C", "\(count)", "-i",
                "bench-sub-\(round)-\(getpid())",
            ],
            stdout: .null, stderr: .inherit)
        // mosquitto_sub says nothing when subscribed; give it a moment.
        try await Task.sleep(for: .milliseconds(400))
        let started = ContinuousClock.now
        for chunk in chunks {
            let publisher = try Subprocess.spawn(
                tools[0], ["-h", endpoint.host, "-p", "\(endpoint.port)", "-t", topic, "-q", "\(qos)", "-l"],
                stdin: .input(chunk.path), stdout: .null, stderr: .inherit)
            let termination = await publisher.wait()
            guard termination == .exited(0) else { throw ExitCode(1, "mosquitto_pub \(termination)") }
        }
        if await subscriber.end(within: .seconds(120)).killed {
            throw ExitCode(1, "mosquitto_sub did not receive all \(count) messages within 120 s (messages lost?)")
        }
        return Self.seconds(ContinuousClock.now - started)
    }

    /// Seconds from our first publish to our subscriber having all messages.
    static func runOurs(
        endpoint: (host: String, port: Int), qos: QoS, count: Int, payload: [UInt8], round: Int
    ) async throws -> Double {
        let topic = "perimeter-bench/ours/\(round)"
        var subscriberConfiguration = MQTTConfiguration(
            host: endpoint.host, port: endpoint.port, clientID: "perimeter-bench-sub-\(round)-\(getpid())")
        subscriberConfiguration.inboundBufferSize = count + 16
        let subscriber = try MQTTClient(subscriberConfiguration)
        let publisher = try MQTTClient(
            MQTTConfiguration(
                host: endpoint.host, port: endpoint.port, clientID: "perimeter-bench-pub-\(round)-\(getpid())"))
        try await subscriber.connect()
        try await publisher.connect()
        try await subscriber.subscribe(topic, qos: qos)
        let received = Task {
            var seen = 0
            for await _ in subscriber.messages {
                seen += 1
                if seen == count { break }
            }
            return seen
        }
        let started = ContinuousClock.now
        if qos == .atMostOnce {
            for _ in 0..<count { try await publisher.publish(topic, payload: payload, qos: qos) }
        } else {
            // Keep many publishes in flight, as mosquitto_pub does, rather than one round trip each.
            try await withThrowingTaskGroup(of: Void.self) { group in
                var inFlight = 0
                for _ in 0..<count {
                    if inFlight >= 1000 {
                        try await group.next()
                        inFlight -= 1
                    }
                    group.addTask { try await publisher.publish(topic, payload: payload, qos: qos) }
                    inFlight += 1
                }
                try await group.waitForAll()
            }
        }
        let timeout = Task {
            try await Task.sleep(for: .seconds(120))
            received.cancel()
        }
        let seen = await received.value
        timeout.cancel()
        let elapsed = Self.seconds(ContinuousClock.now - started)
        await publisher.disconnect()
        await subscriber.disconnect()
        guard seen == count else {
            throw ExitCode(
                1, "perimeter subscriber received \(seen) of \(count) messages (dropped \(subscriber.droppedMessages))")
        }
        return elapsed
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
