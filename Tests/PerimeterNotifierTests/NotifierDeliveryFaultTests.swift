import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNotifier
import PerimeterTestSupport
import Testing

private let t0 = Date(timeIntervalSince1970: 1_764_603_660)
private let secret = "test-webhook-secret-0123456789"

private func rule(_ id: String, channel: String, regions: String) -> String {
    #"{"id":""# + id + #"","on":["enter"],"regions":""# + regions + #"","channels":[""# + channel
        + #""],"body":"{subject} {event} {region}"}"#
}

/// Deliveries that go wrong on the far side: hostile receivers, a delivery that takes the
/// process down, signatures checked by an independent verifier — all against a real
/// `perimeter notifier`, a real broker and real peers.
@Suite("Notifier delivery faults", .serialized)
struct NotifierDeliveryFaultTests {
    /// Each hostile answer (Peers/hostile_receiver.py) and words its dead row's reason holds.
    static let hostile: [(mode: String, says: String)] = [
        ("negative-length", "Content-Length"), ("chunk-negative", "chunk"), ("chunk-huge", "chunk"),
        ("endless", "larger than 4096 bytes"), ("stall", "Timeout"), ("garbage", "HTTP/0.9"),
        ("huge-header", "headers are too large"), ("many-headers", "headers are larger than"),
    ]

    /// The bug: `Content-Length: -1`, a chunk size of -1 or 7fffffffffffffff trapped in the
    /// hand-written client, and the notifier crashed again on the same row after every restart.
    @Test(
        "hostile receivers: each bad answer ends dead with a clear reason; the notifier runs on and a good webhook keeps delivering"
    )
    func hostileReceivers() async throws {
        let harness = try await NotifierHarness()
        do {
            let (bad, badPort) = try await harness.startPeer("hostile_receiver.py", [])
            let (good, goodPort) = try await harness.startPeer("webhook_receiver.py", ["--secret", secret])
            var channels: JSONObject = [
                "good": ["type": "webhook", "url": .string("http://127.0.0.1:\(goodPort)/"), "secret": .string(secret)]
            ]
            var rules = [rule("g", channel: "good", regions: "good-*")]
            for (mode, _) in Self.hostile {
                channels["bad-\(mode)"] = [
                    "type": "webhook", "url": .string("http://127.0.0.1:\(badPort)/\(mode)"), "secret": .string(secret),
                ]
                rules.append(rule("r-\(mode)", channel: "bad-\(mode)", regions: mode))
            }
            try harness.configure(
                rules: "[" + rules.joined(separator: ",") + "]", channels: channels,
                notifier: [
                    "maxAttempts": 2, "timeout": 3, "connectTimeout": 2, "stallTimeout": 1, "maxResponseBytes": 4096,
                    "concurrency": 4,
                ])
            let notifier = try await harness.startNotifier()
            for (mode, _) in Self.hostile {
                try await harness.publishEvent("enter", region: mode, subject: "ann", t: t0, id: "bad-\(mode)")
            }
            let goodCount = 6
            for index in 0..<goodCount {
                try await harness.publishEvent(
                    "enter", region: "good-\(index)", subject: "bea", t: t0, id: "ok\(index)")
            }
            try await harness.waitFor("every good notification accepted", timeout: .seconds(90)) {
                Set(peerRecords(good).filter { $0["new"] == .bool(true) }.compactMap { $0["key"]?.stringValue }).count
                    == goodCount
            }
            try await harness.waitFor("every hostile notification dead", timeout: .seconds(90)) {
                harness.payloads("deadletter/notifier").filter { $0["state"]?.stringValue == "dead" }.count
                    == Self.hostile.count
            }
            #expect(
                notifier.subprocess.isRunning, "the notifier is still running: \(harness.notifierOutput.suffix(2000))")
            for (mode, says) in Self.hostile {
                let row = try #require(try harness.outboxRow("bad-\(mode):r-\(mode)"))
                #expect(row.state == "dead" && row.attempts == 2, "\(mode): \(row)")
                let reason = row.lastError ?? ""
                #expect(reason.contains("POST http://127.0.0.1:\(badPort)/\(mode)"), "\(mode): \(reason)")
                #expect(reason.localizedCaseInsensitiveContains(says), "\(mode): \(reason)")
            }
            #expect(peerRecords(bad).count == 2 * Self.hostile.count, "two attempts each")
            // After all that, the notifier still delivers.
            try await harness.publishEvent("enter", region: "good-late", subject: "bea", t: t0, id: "late")
            try await harness.waitFor("a later notification") {
                peerRecords(good).contains { $0["key"]?.stringValue == "late:g" && $0["status"]?.intValue == 200 }
            }
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    /// A delivery that kills the process (fault injection: SIGKILL once the attempt is
    /// recorded) is attempted at most `maxCrashes` times, then set aside: the notifier stops
    /// crashing and the other channel delivers.
    @Test("a delivery that kills the notifier is set aside as dead after maxCrashes crashes in a row")
    func poisonDeliverySetAside() async throws {
        let harness = try await NotifierHarness()
        do {
            let (receiver, port) = try await harness.startPeer("webhook_receiver.py", ["--secret", secret])
            func hook(_ path: String) -> JSONValue {
                ["type": "webhook", "url": .string("http://127.0.0.1:\(port)/\(path)"), "secret": .string(secret)]
            }
            try harness.configure(
                rules: "[" + rule("p", channel: "poison", regions: "p") + "," + rule("s", channel: "safe", regions: "s")
                    + "]",
                channels: ["poison": hook("poison"), "safe": hook("safe")], notifier: ["maxCrashes": 3])
            let fault = ["PERIMETER_FAULT_KILL_IN_DELIVERY": "poison"]
            var notifier = try await harness.startNotifier(environment: fault)
            try await harness.publishEvent("enter", region: "p", subject: "ann", t: t0, id: "poison")
            for crash in 1...3 {
                let ended = await notifier.finish()
                #expect(ended.termination == .signalled(SIGKILL), "crash \(crash): \(ended.termination)")
                let row = try #require(try harness.outboxRow("poison:p"))
                #expect(row.attempts == crash && row.inFlight, "recorded before it was sent: \(row)")
                notifier = try await harness.startNotifier(environment: fault)
            }
            // The fourth start found three unfinished attempts in a row: set aside, not sent.
            try await harness.waitFor("the deadletter") {
                harness.payloads("deadletter/notifier").contains { $0["key"]?.stringValue == "poison:p" }
            }
            let dead = try #require(try harness.outboxRow("poison:p"))
            #expect(dead.state == "dead" && !dead.inFlight && dead.attempts == 3, "\(dead)")
            #expect(dead.lastError?.hasPrefix("crashedDuringDelivery") == true, "\(dead.lastError ?? "")")
            let deadletter = harness.payloads("deadletter/notifier").first { $0["key"]?.stringValue == "poison:p" }
            #expect(deadletter?["reason"]?.stringValue?.contains("3 attempts in a row") == true)
            #expect(harness.notifierOutput.contains("notification set aside"))
            try await harness.publishEvent("enter", region: "s", subject: "ann", t: t0, id: "safe")
            try await harness.waitFor("the other channel delivers") {
                peerRecords(receiver).contains { $0["key"]?.stringValue == "safe:s" && $0["status"]?.intValue == 200 }
            }
            #expect(notifier.subprocess.isRunning)
            #expect(peerRecords(receiver).allSatisfy { $0["key"]?.stringValue != "poison:p" }, "never sent")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    /// Standard Webhooks, checked by Peers/webhook_receiver.py's verifier (a few lines of
    /// Python stdlib written from the spec); the attempt number survives a crash.
    @Test("Standard Webhooks signature (whsec_ secret) verified independently; the attempt number survives a crash")
    func standardWebhooksAcrossCrash() async throws {
        let harness = try await NotifierHarness()
        do {
            let key = (0..<32).map { UInt8(($0 * 37 + 11) % 256) }
            let whsec = "whsec_" + Data(key).base64EncodedString()
            let (receiver, port) = try await harness.startPeer("webhook_receiver.py", ["--secret", whsec])
            try harness.configure(
                rules: "[" + rule("r.v2", channel: "hook", regions: "*") + "]",
                channels: [
                    "hook": ["type": "webhook", "url": .string("http://127.0.0.1:\(port)/"), "secret": .string(whsec)]
                ])
            let crashed = try await harness.startNotifier(environment: ["PERIMETER_FAULT_KILL_IN_DELIVERY": "hook"])
            try await harness.publishEvent("enter", region: "lobby", subject: "ann", t: t0, id: "ev1")
            #expect(await crashed.finish().termination == .signalled(SIGKILL))
            try await harness.startNotifier()
            try await harness.waitFor("the delivery") { !peerRecords(receiver).isEmpty }
            let record = try #require(peerRecords(receiver).first)
            #expect(record["standard"]?.stringValue == "ok", "the spec's verifier accepts it: \(record)")
            #expect(record["signature"]?.stringValue == "ok", "the legacy header too")
            #expect(record["status"]?.intValue == 200)
            #expect(record["attempt"]?.stringValue == "2", "the first attempt died with the process")
            // The key holds a '.', which separates the signed parts: escaped in webhook-id.
            #expect(record["key"]?.stringValue == "ev1:r.v2")
            #expect(record["webhook_id"]?.stringValue == "ev1:r%2Ev2")
            let skew = abs((record["t"]?.doubleValue ?? 0) - Double(record["timestamp"]?.intValue ?? 0))
            #expect(skew < 30, "webhook-timestamp is the notifier's now: \(skew) s off")
            #expect(peerRecords(receiver).count == 1)
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
}
