import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNotifier
import PerimeterTestSupport
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

/// How the deliverer keeps many deliveries under way: webhooks on a bounded set of threads
/// (`notifier.concurrency`), MQTT publishes pipelined (`notifier.mqttInFlight`).
@Suite("Notifier delivery concurrency", .serialized)
struct NotifierThroughputTests {
    @Test("webhook deliveries in flight reach notifier.concurrency and never exceed it")
    func webhookConcurrencyBound() async throws {
        let harness = try await NotifierHarness()
        do {
            // Each answer takes 0.4 s: deliveries overlap only as far as the notifier lets them.
            let (receiver, port) = try await harness.startPeer(
                "webhook_receiver.py", ["--secret", secret, "--plan", "slow:0.4"])
            try harness.configure(
                rules: #"[{"id":"w","on":"enter","regions":"*","channels":["hook"],"body":"{subject} {region}"}]"#,
                channels: [
                    "hook": ["type": "webhook", "url": .string("http://127.0.0.1:\(port)/"), "secret": .string(secret)]
                ], notifier: ["concurrency": 3])
            try await harness.startNotifier()
            let count = 12
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
