import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNet
import PerimeterNotifier
import PerimeterTestSupport
import Synchronization
import Testing

private let secret = "test-webhook-secret-0123456789"
private let t0 = Date(timeIntervalSince1970: 1_764_603_660)

/// The most requests a receiver was answering at once, from each request's arrival and answer.
func mostAtOnce(_ records: [JSONObject]) -> Int {
    var edges: [(time: Double, change: Int)] = []
    for record in records {
        guard let start = record["received"]?.doubleValue, let end = record["t"]?.doubleValue else { continue }
        edges.append((start, 1))
        edges.append((end, -1))
    }
    // At equal times an answer comes before the next arrival: a slot reused is not two at once.
    edges.sort { $0.time != $1.time ? $0.time < $1.time : $0.change < $1.change }
    var current = 0
    var most = 0
    for edge in edges {
        current += edge.change
        most = max(most, current)
    }
    return most
}

/// Rows the notifier has recorded as delivered (read-only; 0 while the file is not there yet).
func notifierStoreDelivered(_ harness: NotifierHarness) -> Int {
    (try? NotifierStore(path: harness.databasePath, readOnly: true).count(.delivered)) ?? 0
}

/// How the deliverer keeps many deliveries under way: webhooks on a bounded set of threads
/// (`notifier.concurrency`), MQTT publishes pipelined (`notifier.mqttInFlight`).
@Suite("Notifier delivery concurrency", .serialized)
struct NotifierThroughputTests {
    @Test("webhook deliveries in flight reach notifier.concurrency and never exceed it, over as many kept connections")
    func webhookConcurrencyBound() async throws {
        let harness = try await NotifierHarness()
        do {
            // Each answer takes 1 s: deliveries overlap only as far as the notifier lets them
            // (and three started together overlap even when the machine is slow to start them).
            let (receiver, port) = try await harness.startPeer(
                "webhook_receiver.py", ["--secret", secret, "--plan", "slow:1"])
            let metricsPort = try freeHTTPPort()
            try harness.configure(
                rules: #"[{"id":"w","on":"enter","regions":"*","channels":["hook"],"body":"{subject} {region}"}]"#,
                channels: [
                    "hook": ["type": "webhook", "url": .string("http://127.0.0.1:\(port)/"), "secret": .string(secret)]
                ], notifier: ["concurrency": 3, "http": .string("127.0.0.1:\(metricsPort)")])
            try await harness.startNotifier()
            let count = 9
            for index in 0..<count {
                try await harness.publishEvent(
                    "enter", region: "r\(index)", subject: "s\(index)", t: t0, id: "e\(index)")
            }
            try await harness.waitFor("every webhook answered", timeout: .seconds(90)) {
                peerRecords(receiver).count >= count
            }
            let records = peerRecords(receiver)
            #expect(records.count == count, "one request each: \(records.count)")
            #expect(Set(records.compactMap { $0["key"]?.stringValue }).count == count)
            #expect(mostAtOnce(records) == 3, "at most 3 at once, and 3 reached: \(mostAtOnce(records))")
            let connections = Set(records.compactMap { $0["port"]?.intValue })
            #expect(connections.count == 3, "nine requests over three kept connections: \(connections)")
            // The operator's view of the same: /metrics counts the connections opened (each
            // counted when its request ends, before the delivery's outcome is recorded).
            try await waitUntil("every delivery recorded") { notifierStoreDelivered(harness) == count }
            let opened = #"perimeter_webhook_connections_opened_total{channel="hook"} "#
            let line =
                try httpGet(port: metricsPort, path: "/metrics").body.split(separator: "\n")
                .first { $0.hasPrefix(opened) }.map(String.init) ?? ""
            #expect(line == opened + "3", "\(line)")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    /// With `mqttInFlight` 1 every publish waits for the one before it to be acknowledged (and
    /// recorded); with many in flight they go out in batches. Either way every notification is
    /// published once, in the order it was queued (one connection keeps the order).
    @Test(
        "MQTT notifications are published in queue order, once each, whatever notifier.mqttInFlight is",
        arguments: [1, 7, 1000])
    func mqttPipelined(inFlight: Int) async throws {
        let harness = try await NotifierHarness()
        do {
            try harness.configure(
                rules: #"[{"id":"m","on":"enter","regions":"*","channels":["app"],"body":"{region}"}]"#,
                channels: ["app": ["type": "mqtt"]], notifier: ["mqttInFlight": .number(Double(inFlight))])
            try await harness.startNotifier()
            let count = 150
            for index in 0..<count {
                try await harness.publishEvent("enter", region: "r\(index)", subject: "ann", t: t0, id: "e\(index)")
            }
            try await harness.waitFor("every notification") { harness.payloads("notifications/app/").count >= count }
            let store = try NotifierStore(path: harness.databasePath, readOnly: true)
            try await waitUntil("every row recorded as delivered") { try store.count(.delivered) == count }
            let regions = harness.payloads("notifications/app/").compactMap { $0["region"]?.stringValue }
            #expect(regions == (0..<count).map { "r\($0)" })
            #expect(
                try store.database.scalar("SELECT count(*) FROM outbox WHERE attempts != 1 OR in_flight != 0")?.int
                    == 0, "one attempt each, none left in flight")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
}

/// The arrivals journal in its own file: what a crash leaves there, and what an earlier
/// release left in the notifier's file.
@Suite("Notifier arrivals file", .serialized)
struct NotifierArrivalsTests {
    /// A batch is removed from the arrivals after its processing committed: killed in between,
    /// the notifier processes it again at start. That must fire nothing twice; and messages an
    /// earlier release journalled in the main file and never processed are moved over and
    /// processed.
    @Test(
        "an arrival processed again after a crash fires nothing twice; an earlier release's unprocessed inbox is processed"
    )
    func reprocessedAndMoved() async throws {
        let harness = try await NotifierHarness()
        do {
            try harness.configure(
                rules: #"[{"id":"m","on":"enter","regions":"*","channels":["app"],"body":"{region}"}]"#,
                channels: ["app": ["type": "mqtt"]])
            let first = try await harness.startNotifier()
            try await harness.publishEvent("enter", region: "lobby", subject: "ann", t: t0, id: "once")
            try await harness.waitFor("the first notification") {
                harness.payloads("notifications/app/").count == 1
            }
            // Delivery is at least once: killed between the broker's acknowledgement and the
            // commit that marks the row sent, the notifier sends it again (same id). This test is
            // about the arrivals, so the kill comes after that commit.
            let recorded = try NotifierStore(path: harness.databasePath, readOnly: true)
            try await waitUntil("the first notification recorded as delivered") {
                try recorded.count(.delivered) == 1
            }
            first.kill(SIGKILL)
            _ = await first.finish()

            // What a crash after the commit and before the removal leaves: the message again.
            let topic = "\(harness.root)/enter/lobby/ann"
            let again: JSONValue = [
                "id": "once", "event": "enter", "venue": .string(NotifierHarness.venue), "region": "lobby",
                "subject": "ann", "t": .string(Timestamp.format(t0)), "seq": 1, "source": "gps",
            ]
            // Written, and the connection closed, before the notifier starts: it holds the file
            // exclusively while it runs.
            try NotifierArrivals(path: NotifierArrivals.path(for: harness.databasePath)).journal(
                topic: topic, payload: Array(again.serialized().utf8), received: Date())
            // What an earlier release journalled in the main file and did not process.
            let earlier: JSONValue = [
                "id": "earlier", "event": "enter", "venue": .string(NotifierHarness.venue), "region": "cafe",
                "subject": "bob", "t": .string(Timestamp.format(t0)), "seq": 1, "source": "gps",
            ]
            let store = try NotifierStore(path: harness.databasePath)
            _ = try store.database.run(
                "INSERT INTO inbox(topic, payload, received) VALUES (?, ?, ?)", "\(harness.root)/enter/cafe/bob",
                Array(earlier.serialized().utf8), Date().timeIntervalSince1970)

            let second = try await harness.startNotifier()
            try await harness.waitFor("the earlier release's message notified") {
                harness.payloads("notifications/app/").contains { $0["region"]?.stringValue == "cafe" }
            }
            try await harness.waitUntilProcessed()
            let regions = harness.payloads("notifications/app/").compactMap { $0["region"]?.stringValue }
            #expect(regions.sorted() == ["cafe", "lobby"], "once each: \(regions)")
            #expect(try harness.outboxCount(rule: "m") == 2)
            #expect(try store.inbox(limit: 10).isEmpty, "nothing left in the main file's inbox")
            #expect(harness.notifierOutput.contains("moved unprocessed messages to the arrivals file"))
            // The running notifier holds the arrivals file: read once it has stopped.
            second.kill(SIGTERM)
            _ = await second.finish()
            let arrivals = try NotifierArrivals(path: NotifierArrivals.path(for: harness.databasePath))
            #expect(try arrivals.count() == 0, "nothing left in the arrivals")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
}

@Suite("Notifier: a channel removed from the configuration", .serialized)
struct NotifierRemovedChannelTests {
    @Test("pending notifications of a channel no longer configured are failed at start, with a dead letter")
    func removedChannel() async throws {
        let harness = try await NotifierHarness()
        do {
            let (_, port) = try await harness.startPeer("webhook_receiver.py", ["--secret", secret, "--plan", "503"])
            try harness.configure(
                rules: #"[{"id":"h","on":"enter","regions":"*","channels":["hook"],"body":"{region}"}]"#,
                channels: [
                    "hook": ["type": "webhook", "url": .string("http://127.0.0.1:\(port)/"), "secret": .string(secret)]
                ], notifier: ["maxAttempts": 100])
            let first = try await harness.startNotifier()
            try await harness.publishEvent("enter", region: "lobby", subject: "ann", t: t0, id: "ev")
            try await waitUntil("an attempt failed and is to be retried", context: { harness.notifierOutput }) {
                let row = try harness.outboxRow("ev:h")
                return row?.state == "pending" && (row?.attempts ?? 0) >= 1
            }
            first.kill(SIGKILL)
            _ = await first.finish()
            // The operator removes the channel (and its rule).
            try harness.configure(
                rules: #"[{"id":"m","on":"enter","regions":"*","channels":["app"],"body":"{region}"}]"#,
                channels: ["app": ["type": "mqtt"]])
            try await harness.startNotifier()
            try await harness.waitFor("the dead letter") {
                harness.payloads("deadletter/notifier").contains { $0["key"]?.stringValue == "ev:h" }
            }
            let deadletter = harness.payloads("deadletter/notifier").first { $0["key"]?.stringValue == "ev:h" }
            #expect(deadletter?["state"]?.stringValue == "failed")
            #expect(deadletter?["reason"]?.stringValue == "channel 'hook' is no longer configured")
            #expect(try harness.outboxRow("ev:h")?.state == "failed")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
}

@Suite("Blocking pool")
struct BlockingPoolTests {
    @Test("at most size jobs run at once, on at most size threads; finish waits for every job queued")
    func bounded() async throws {
        let pool = BlockingPool(size: 3, name: "test-pool")
        let running = Mutex((now: 0, most: 0, done: 0))
        for _ in 0..<12 {
            pool.execute {
                running.withLock {
                    $0.now += 1
                    $0.most = max($0.most, $0.now)
                }
                usleep(20_000)  // the work itself: blocking, as a POST is
                running.withLock {
                    $0.now -= 1
                    $0.done += 1
                }
            }
        }
        await pool.finish()
        let seen = running.withLock { $0 }
        #expect(seen.done == 12, "finish returned after every job")
        #expect(seen.most == 3, "3 at once at most, and reached: \(seen.most)")
        #expect(pool.threadCount <= 3)
        let value = try await pool.run { 6 * 7 }
        #expect(value == 42)
        pool.stop()
        try await waitUntil("the threads ended") { pool.threadCount == 0 }
        // Work after the stop still runs on a thread of the pool, which ends with it.
        let threadsDuringLateJob = try await pool.run { pool.threadCount }
        #expect(threadsDuringLateJob == 1)
        try await waitUntil("the late thread ended") { pool.threadCount == 0 }
    }
}
