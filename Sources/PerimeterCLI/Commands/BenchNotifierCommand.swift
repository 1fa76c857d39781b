import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNet
import PerimeterNotifier
import Synchronization

/// `perimeter bench notifier`: notifications per second through the whole notifier (journal,
/// rules, templates, outbox, delivery) for the MQTT and webhook channels, each beside its raw
/// transport in the same run: MQTT against relaying the same records through the broker at
/// QoS 1 and against a null notifier (``runNullNotifier(port:publisher:shape:inFlight:t0:)``);
/// webhooks against POSTing the same bodies straight to the same receiver (on kept
/// connections, as the notifier does; and one connection per POST, the earlier baseline).
struct BenchNotifierCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notifier", abstract: "Notifications/s for the MQTT and webhook channels, against raw transport.",
        discussion: """
            Starts a private mosquitto, an HTTP receiver of its own (it answers 200 and counts
            distinct Idempotency-Keys) and the notifier in-process with one MQTT and one webhook
            channel; publishes N enter events per channel and times until every notification
            arrived. Baselines in the same run: N QoS 1 messages of the notification's size relayed
            through the same broker; a null notifier (subscribes to the events and publishes a
            notification of the same size, QoS and properties for each, doing nothing else: the
            MQTT channel's ceiling, two hops through the broker where the relay is one); N POSTs
            of the same body with the same concurrency on kept connections, as the notifier's,
            and N more with a connection each; a null webhook notifier (subscribes to the
            events and POSTs the same body for each with the same concurrency, doing nothing
            else: the webhook channel's ceiling).
            """)

    @Option(help: "Events per channel (default 5000).", valueName: "n")
    var count: Int = 5000

    @Option(help: "Webhook deliveries in flight (notifier.concurrency, default 16).", valueName: "n")
    var concurrency: Int = 16

    mutating func validate() throws {
        if count < 1 { throw ValidationError("--count must be positive") }
        if concurrency < 1 { throw ValidationError("--concurrency must be positive") }
    }

    func run() async throws {
        let broker = try await MosquittoBroker.start()
        defer { broker.kill() }
        let receiver = try PostReceiver()
        defer { receiver.stop() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "perimeter-bench-notifier-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let rules = #"""
            {"rules":[
             {"id":"m","on":"enter","regions":"m-*","channels":["mq"],"audience":"subject","fields":{"price":12.5},
              "body":{"en":"Your order is ready at {time} — {price:currency}","de":"Ihre Bestellung ist um {time} fertig — {price:currency}"}},
             {"id":"w","on":"enter","regions":"w-*","channels":["hook"],"body":"{subject} entered {region} at {time}"}]}
            """#
        let rulesPath = directory.appendingPathComponent("rules.json").path
        try rules.write(toFile: rulesPath, atomically: true, encoding: .utf8)
        var delivery = NotifierConfiguration.Delivery()
        delivery.concurrency = concurrency
        var configuration = NotifierConfiguration(
            broker: BrokerSettings(host: "127.0.0.1", port: broker.port, clientID: "bench-notifier"),
            databasePath: directory.appendingPathComponent("notifier.sqlite").path,
            venues: [
                .init(
                    id: "bench",
                    conventions: VenueConventions(
                        timeZone: TimeZone(identifier: "America/Chicago")!, locale: "en_US", currency: "USD"),
                    rulesPath: rulesPath)
            ],
            channels: [
                "mq": .mqtt(topic: nil),
                "hook": .webhook(
                    url: "http://127.0.0.1:\(receiver.port)/hook", secret: try WebhookSecret("bench-secret-0123456789"),
                    options: HTTPClient.Options()),
            ], delivery: delivery, log: LogSettings())
        configuration.log.level = .warning
        let logger = configuration.log.makeLogger(label: "notifier")
        let service = Task { try await NotifierService(configuration: configuration, logger: logger).run() }
        defer { service.cancel() }

        var observerConfiguration = MQTTConfiguration(host: "127.0.0.1", port: broker.port, clientID: "bench-observer")
        observerConfiguration.inboundBufferSize = count + 64
        let observer = try MQTTClient(observerConfiguration)
        try await observer.connect()
        try await observer.subscribe("perimeter/v1/bench/notifications/#", qos: .atLeastOnce)
        let publisher = try MQTTClient(
            MQTTConfiguration(host: "127.0.0.1", port: broker.port, clientID: "bench-events"))
        try await publisher.connect()
        try await Task.sleep(for: .seconds(1))  // the notifier subscribes
        _ = try await publisher.publish(batch: [
            MQTTMessage(
                topic: "perimeter/v1/bench/subjects/s0/preferences", payload: Array(#"{"locale":"de_DE"}"#.utf8),
                qos: .atLeastOnce, retain: true)
        ])

        print(
            "perimeter bench notifier: \(count) events per channel, \(concurrency) webhook deliveries and \(delivery.mqttInFlight) MQTT publishes in flight, \(ProcessInfo.processInfo.activeProcessorCount) cores"
        )
        // MQTT channel.
        let wanted = count
        let messages = observer.messages
        let arrivals = Task {
            var seen = 0
            var shape = NotificationShape(bytes: 0, keyBytes: 0)
            for await message in messages {
                seen += 1
                shape.bytes = message.payload.count
                shape.keyBytes =
                    message.properties.userProperties.first { $0.name == "idempotency-key" }?.value.utf8.count ?? 0
                if seen == wanted { break }
            }
            return shape
        }
        let t0 = Date(timeIntervalSince1970: 1_764_603_660)
        let cpu = CPUMeter(broker: broker.pid)
        let mqttStart = ContinuousClock.now
        try await publishEvents(publisher, venue: "bench", prefix: "m", t0: t0)
        let shape = await arrivals.value
        let size = shape.bytes
        let mqttSeconds = BenchMQTTCommand.seconds(ContinuousClock.now - mqttStart)
        let mqttCPU = cpu.lap()
        let nullSeconds = try await runNullNotifier(
            port: broker.port, publisher: publisher, shape: shape, inFlight: delivery.mqttInFlight, t0: t0)
        let nullCPU = cpu.lap()
        let relaySeconds = try await BenchMQTTCommand.runOurs(
            endpoint: ("127.0.0.1", broker.port), qos: .atLeastOnce, count: count,
            payload: BenchMQTTCommand.payload(size: size), round: 1)
        let relayCPU = cpu.lap()
        let mqttRate = Double(count) / mqttSeconds
        let nullRate = Double(count) / nullSeconds
        let relayRate = Double(count) / relaySeconds
        print(
            "mqtt     notifier \(BenchMQTTCommand.rate(mqttRate)) notifications/s   raw QoS 1 relay of \(size)-byte records \(BenchMQTTCommand.rate(relayRate)) msg/s   ratio \(String(format: "%.2f", mqttRate / relayRate))"
        )
        print(
            "         null notifier \(BenchMQTTCommand.rate(nullRate)) notifications/s, ratio \(String(format: "%.2f", nullRate / relayRate)) of the relay; the notifier is \(String(format: "%.2f", mqttRate / nullRate))× the null notifier"
        )
        print(
            "         CPU per message: \(mqttCPU.per(count))   null notifier: \(nullCPU.per(count))   raw: \(relayCPU.per(count))"
        )

        // Webhook channel.
        _ = cpu.lap()
        let hookStart = ContinuousClock.now
        try await publishEvents(publisher, venue: "bench", prefix: "w", t0: t0)
        try await receiver.waitForKeys(count, what: "webhook notifications")
        let hookSeconds = BenchMQTTCommand.seconds(ContinuousClock.now - hookStart)
        let hookCPU = cpu.lap()
        let body = receiver.lastBody
        let url = "http://127.0.0.1:\(receiver.port)/raw"
        // Kept connections, as the notifier's webhook channel has; then one connection per
        // POST, the baseline of the figures before the notifier kept them.
        let rawSeconds = try await rawPosts(
            url: url, body: body, connections: HTTPClient.Connections(capacity: concurrency))
        let rawCPU = cpu.lap()
        let singleSeconds = try await rawPosts(url: url, body: body, connections: nil)
        let singleCPU = cpu.lap()
        let nullHookSeconds = try await runNullWebhook(
            port: broker.port, publisher: publisher, receiver: receiver,
            url: "http://127.0.0.1:\(receiver.port)/null", body: body, t0: t0)
        let nullHookCPU = cpu.lap()
        let hookRate = Double(count) / hookSeconds
        let rawRate = Double(count) / rawSeconds
        let nullHookRate = Double(count) / nullHookSeconds
        let singleRate = Double(count) / singleSeconds
        print(
            "webhook  notifier \(BenchMQTTCommand.rate(hookRate)) notifications/s   raw POSTs of \(body.count)-byte bodies on kept connections \(BenchMQTTCommand.rate(rawRate)) req/s   ratio \(String(format: "%.2f", hookRate / rawRate))"
        )
        print(
            "         raw POSTs, one connection each \(BenchMQTTCommand.rate(singleRate)) req/s: the notifier is \(String(format: "%.2f", hookRate / singleRate))× that (CPU per POST \(singleCPU.per(count)))"
        )
        print(
            "         null webhook notifier \(BenchMQTTCommand.rate(nullHookRate)) notifications/s, ratio \(String(format: "%.2f", nullHookRate / rawRate)) of raw POSTs; the notifier is \(String(format: "%.2f", hookRate / nullHookRate))× the null webhook notifier"
        )
        print(
            "         CPU per message: \(hookCPU.per(count))   null webhook notifier: \(nullHookCPU.per(count))   raw: \(rawCPU.per(count))"
        )
        print("duplicates seen by the receiver: \(receiver.duplicates)")
        await publisher.disconnect()
        await observer.disconnect()
    }

    /// Seconds to POST `body` to `url` `count` times, `concurrency` at a time, through
    /// `connections` (nil: a connection per POST).
    func rawPosts(url: String, body: [UInt8], connections: HTTPClient.Connections?) async throws -> Double {
        let start = ContinuousClock.now
        let next = Counter()
        let total = count
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<concurrency {
                group.addTask {
                    try await Blocking.run {
                        while next.take() <= total {
                            _ = try HTTPClient.post(
                                url, headers: [("Content-Type", "application/json")], body: body,
                                options: HTTPClient.Options(), connections: connections)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        return BenchMQTTCommand.seconds(ContinuousClock.now - start)
    }

    /// Publishes `count` enter events to `venue`, each of its own region (`{prefix}-{n}`), for a
    /// thousand subjects in turn.
    func publishEvents(_ publisher: MQTTClient, venue: String, prefix: String, t0: Date) async throws {
        var batch: [MQTTMessage] = []
        for index in 0..<count {
            let subject = "s\(index % 1000)"
            let region = "\(prefix)-\(index)"
            let payload: JSONValue = [
                "id": .string("\(prefix)\(index)"), "event": "enter", "venue": .string(venue),
                "region": .string(region),
                "subject": .string(subject), "t": .string(Timestamp.format(t0.addingTimeInterval(Double(index)))),
                "seq": 1, "source": "gps",
            ]
            batch.append(
                MQTTMessage(
                    topic: "perimeter/v1/\(venue)/enter/\(region)/\(subject)",
                    payload: Array(payload.serialized().utf8),
                    qos: .atLeastOnce))
            if batch.count == 500 {
                try await publisher.publish(batch: batch)
                batch.removeAll()
            }
        }
        if !batch.isEmpty { try await publisher.publish(batch: batch) }
    }
}

/// The benchmark's webhook receiver: HTTP/1.1 POSTs on loopback, a thread per connection
/// (kept open between requests), 200 to each, distinct Idempotency-Keys counted.
final class PostReceiver: Sendable {
    private let socket: Int32
    let port: Int
    private let state = Mutex<(keys: Set<String>, duplicates: Int, last: [UInt8])>(([], 0, []))
    private let stopped = Atomic<Bool>(false)
    /// Answers connections on threads kept for the next (one new thread per POST was part of
    /// what both the notifier's and the raw POSTs' figures measured).
    /// A connection holds its thread until the client closes it (keep-alive): room for the
    /// notifier's, the raw senders' and the null webhook notifier's at once.
    private let answering = BlockingPool(size: 256, name: "bench-receiver")

    init() throws {
        let server = try HTTPServer(port: 0) { _ in HTTPServer.Response(body: "") }
        // Only its port choice is wanted: the receiver below needs POST bodies.
        let chosen = server.port
        server.stop()
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(chosen).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 512) == 0 else { throw ExitCode(1, "the bench receiver cannot listen") }
        socket = fd
        port = chosen
        let thread = Thread { [self] in accept() }
        thread.start()
    }

    var distinctKeys: Int { state.withLock { $0.keys.count } }

    /// Waits (polling every 5 ms, at most 600 s) until `total` distinct keys have arrived.
    /// - Throws: `ExitCode(1, …)` naming `what` when they have not.
    func waitForKeys(_ total: Int, what: String) async throws {
        guard try await waitForCondition(timeout: .seconds(600), every: .milliseconds(5), { distinctKeys >= total })
        else { throw ExitCode(1, "\(what) did not all arrive") }
    }
    var duplicates: Int { state.withLock { $0.duplicates } }
    var lastBody: [UInt8] { state.withLock { $0.last } }

    func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        shutdown(socket, Int32(SHUT_RDWR))
        close(socket)
        answering.stop()
    }

    private func accept() {
        while !stopped.load(ordering: .relaxed) {
            let client = Glibc.accept(socket, nil, nil)
            if client < 0 { continue }
            answering.execute { [self] in answer(client) }
        }
    }

    /// Answers each request on a connection with 200 and keeps the connection for the next
    /// (HTTP/1.1 keep-alive, as receivers commonly do) until the client closes it. The head is
    /// scanned as bytes, as an HTTP server in C would: parsing it as a Swift `String`
    /// (lowercased, split into lines) cost the receiver in proportion to the head's size, about
    /// 28 µs more for the notifier's signed requests than for the null webhook notifier's, all
    /// of it counted against the notifier (`perf`, Dec 4).
    private func answer(_ client: Int32) {
        defer { close(client) }
        let reply = Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".utf8)
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16_384)
        var scanFrom = 0
        var head: (end: Int, length: Int, key: String?)?
        while true {
            if head == nil, let end = Self.headEnd(pending, from: scanFrom) { head = Self.fields(pending[..<end]) }
            if let complete = head, pending.count >= complete.end + complete.length {
                if let key = complete.key {
                    let body = Array(pending[complete.end..<(complete.end + complete.length)])
                    state.withLock {
                        if !$0.keys.insert(key).inserted { $0.duplicates += 1 }
                        $0.last = body
                    }
                }
                pending.removeFirst(complete.end + complete.length)
                head = nil
                scanFrom = 0
                let sent = reply.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if sent < 0 { return }
                continue
            }
            scanFrom = max(0, pending.count - 3)
            let count = recv(client, &buffer, buffer.count, 0)
            if count <= 0 { return }
            pending += buffer[0..<count]
        }
    }

    /// The index just past the blank line that ends the head, if `bytes` has it.
    static func headEnd(_ bytes: [UInt8], from start: Int) -> Int? {
        var index = start
        while index + 3 < bytes.count {
            if bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
                return index + 4
            }
            index += 1
        }
        return nil
    }

    /// Content-Length and Idempotency-Key from a request's head (names in any case).
    static func fields(_ head: ArraySlice<UInt8>) -> (end: Int, length: Int, key: String?) {
        var length = 0
        var key: String?
        var lineStart = head.startIndex
        while lineStart < head.endIndex {
            var lineEnd = lineStart
            while lineEnd < head.endIndex && head[lineEnd] != 13 { lineEnd += 1 }
            let line = head[lineStart..<lineEnd]
            if let value = value(of: "content-length:", in: line) {
                length = Int(String(decoding: value, as: UTF8.self)) ?? 0
            } else if let value = value(of: "idempotency-key:", in: line) {
                key = String(decoding: value, as: UTF8.self)
            }
            lineStart = lineEnd + 2
        }
        return (head.endIndex, length, key)
    }

    /// The value of a header line named `name` (lowercase, with its colon), spaces trimmed.
    private static func value(of name: StaticString, in line: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        let count = name.utf8CodeUnitCount
        guard line.count >= count else { return nil }
        let matches = name.withUTF8Buffer { name in
            zip(name, line.prefix(count)).allSatisfy { expected, byte in
                expected == (byte >= 65 && byte <= 90 ? byte | 0x20 : byte)
            }
        }
        guard matches else { return nil }
        var value = line.dropFirst(count)
        while value.first == 32 || value.first == 9 { value = value.dropFirst() }
        while value.last == 32 || value.last == 9 { value = value.dropLast() }
        return value
    }
}

/// CPU time used by this process (the notifier, the bench's clients and receiver) and by the
/// broker, phase by phase: unlike the rates, it does not depend on what else the machine runs.
final class CPUMeter: Sendable {
    struct Lap {
        var process: Double
        var broker: Double
        /// "412 µs (broker 95 µs)" per message.
        func per(_ count: Int) -> String {
            let total = (process + broker) / Double(count) * 1e6
            return String(format: "%.0f µs (broker %.0f µs)", total, broker / Double(count) * 1e6)
        }
    }

    let broker: Int32?
    private let last: Mutex<(process: Double, broker: Double)>

    init(broker: Int32?) {
        self.broker = broker
        last = Mutex((Self.seconds(nil), Self.seconds(broker)))
    }

    /// The CPU time used since the last lap (or the start).
    func lap() -> Lap {
        let now = (Self.seconds(nil), Self.seconds(broker))
        return last.withLock { last in
            defer { last = now }
            return Lap(process: now.0 - last.process, broker: now.1 - last.broker)
        }
    }

    /// User and system time of a process (nil: this one); 0 if unreadable.
    static func seconds(_ pid: Int32?) -> Double { (try? ProcessCPU.seconds(of: pid)) ?? 0 }
}

/// A shared ticket counter for the raw POST workers.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    func take() -> Int { value.add(1, ordering: .relaxed).newValue }
}
