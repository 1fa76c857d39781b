import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNotifier
import PerimeterTestSupport
import Testing

private let secret = "test-webhook-secret-0123456789"

/// The outbox over time, on a clock only the test moves: old rows pruned by their retention,
/// failed and dead rows put back by `perimeter notifier retry`.
@Suite("Notifier outbox: retention and retry on a manual clock", .serialized)
struct NotifierOutboxTests {
    /// Counts the rows of each state, straight from the file.
    static func states(_ harness: NotifierHarness) throws -> [String: Int] {
        let store = try NotifierStore(path: harness.databasePath, readOnly: true)
        var counts: [String: Int] = [:]
        for state in NotifierStore.State.allCases { counts[state.rawValue] = try store.count(state) }
        return counts.filter { $0.value > 0 }
    }

    /// Advances the clock and waits until the deliverer has done what that time asks and sleeps
    /// again (it is the only task sleeping on the clock).
    static func advance(_ clock: ManualClock, by seconds: Double) async throws {
        try await clock.waitForSleepers(1)
        clock.advance(by: seconds)
        try await clock.waitForSleepers(1)
    }

    @Test(
        "retention: delivered rows go after retention.delivered, dead and failed after retention.undeliverable; erasure at once"
    )
    func retention() async throws {
        let clock = ManualClock()
        let harness = try await NotifierHarness()
        do {
            let (_, port) = try await harness.startPeer("webhook_receiver.py", ["--secret", secret, "--plan", "404"])
            let (_, deadPort) = try await harness.startPeer(
                "webhook_receiver.py", ["--secret", secret, "--plan", "503"])
            func hook(_ port: Int) -> JSONValue {
                ["type": "webhook", "url": .string("http://127.0.0.1:\(port)/"), "secret": .string(secret)]
            }
            try harness.configure(
                rules: """
                    [{"id":"m","on":"enter","regions":"m","channels":["app"],"body":"{subject}"},
                     {"id":"f","on":"enter","regions":"f","channels":["gone"],"body":"{subject}"},
                     {"id":"d","on":"enter","regions":"d","channels":["down"],"body":"{subject}"}]
                    """,
                channels: ["app": ["type": "mqtt"], "gone": hook(port), "down": hook(deadPort)],
                notifier: [
                    "maxAttempts": 1, "sessionExpiry": 50,
                    "retention": ["delivered": 100, "undeliverable": 300, "pruneInterval": 10],
                ])
            try await harness.startInProcess(clock: clock)
            for (region, subject) in [("m", "ann"), ("f", "ann"), ("d", "ann"), ("m", "bob")] {
                try await harness.publishEvent("enter", region: region, subject: subject, t: clock.now)
            }
            try await waitUntil("every row finished", context: { harness.notifierOutput }) {
                try Self.states(harness) == ["delivered": 2, "failed": 1, "dead": 1]
            }
            // Erasure removes a subject's rows at once, whatever their age.
            try await harness.publish("admin/erased/bob", "{}")
            try await harness.waitUntilProcessed()
            #expect(try Self.states(harness) == ["delivered": 1, "failed": 1, "dead": 1])

            // Finished at t; pruned on the first pass after t + 100 (delivered), t + 300 (others).
            try await Self.advance(clock, by: 95)
            #expect(try Self.states(harness) == ["delivered": 1, "failed": 1, "dead": 1], "95 s: all kept")
            try await Self.advance(clock, by: 10)
            #expect(try Self.states(harness) == ["failed": 1, "dead": 1], "105 s: the delivered row is gone")
            try await Self.advance(clock, by: 190)
            #expect(try Self.states(harness) == ["failed": 1, "dead": 1], "295 s: failed and dead kept")
            try await Self.advance(clock, by: 10)
            #expect(try Self.states(harness).isEmpty, "305 s: all gone")
            #expect(harness.notifierOutput.contains("outbox pruned"))
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    @Test(
        "notifier retry re-queues failed and dead rows by state or key; a running notifier sends them within a minute")
    func retry() async throws {
        let clock = ManualClock()
        let harness = try await NotifierHarness()
        do {
            let (refusing, refusingPort) = try await harness.startPeer(
                "webhook_receiver.py", ["--secret", secret, "--plan", "404,200"])
            let (down, downPort) = try await harness.startPeer(
                "webhook_receiver.py", ["--secret", secret, "--plan", "503,200"])
            func hook(_ port: Int) -> JSONValue {
                ["type": "webhook", "url": .string("http://127.0.0.1:\(port)/"), "secret": .string(secret)]
            }
            try harness.configure(
                rules: """
                    [{"id":"ra","on":"enter","regions":"a","channels":["refusing"],"body":"{subject}"},
                     {"id":"rb","on":"enter","regions":"b","channels":["down"],"body":"{subject}"}]
                    """,
                channels: ["refusing": hook(refusingPort), "down": hook(downPort)], notifier: ["maxAttempts": 1])
            try await harness.startInProcess(clock: clock)
            try await harness.publishEvent("enter", region: "a", subject: "ann", t: clock.now, id: "evA")
            try await harness.publishEvent("enter", region: "b", subject: "ann", t: clock.now, id: "evB")
            try await waitUntil("a failed and a dead row", context: { harness.notifierOutput }) {
                try harness.outboxRow("evA:ra")?.state == "failed" && harness.outboxRow("evB:rb")?.state == "dead"
            }
            let database = harness.databasePath
            let usage = try await runProduct(["notifier", "retry", "--database", database])
            #expect(usage.status == .exited(64) && usage.stderr.contains("--key, --rule, --channel, --state, or --all"))
            let badState = try await runProduct(["notifier", "retry", "--database", database, "--state", "pending"])
            #expect(badState.status == .exited(64) && badState.stderr.contains("--state 'pending'"), "\(badState)")
            let none = try await runProduct(["notifier", "retry", "--database", database, "--channel", "nothing"])
            #expect(none.status == .exited(1) && none.stderr.contains("no failed or dead notification matches"))

            let failed = try await runProduct(["notifier", "retry", "--database", database, "--state", "failed"])
            #expect(failed.status == .exited(0), "\(failed)")
            #expect(
                failed.stdout.contains("re-queued evA:ra channel=refusing was=failed attempts=1"), "\(failed.stdout)")
            #expect(failed.stdout.contains("1 notification(s) re-queued"))
            #expect(try harness.outboxRow("evB:rb")?.state == "dead", "--state failed leaves dead rows alone")
            // Nothing rings the running notifier: it looks again within a minute of its clock.
            try await Self.advance(clock, by: 60)
            try await waitUntil("the re-queued row delivered", context: { harness.notifierOutput }) {
                try harness.outboxRow("evA:ra")?.state == "delivered"
            }
            #expect(peerRecords(refusing).map { $0["attempt"]?.stringValue } == ["1", "2"])
            #expect(peerRecords(down).count == 1)

            let byKey = try await runProduct(["notifier", "retry", "--database", database, "--key", "evB:rb"])
            #expect(byKey.stdout.contains("re-queued evB:rb channel=down was=dead attempts=1"), "\(byKey.stdout)")
            try await Self.advance(clock, by: 60)
            try await waitUntil("the dead row delivered", context: { harness.notifierOutput }) {
                try harness.outboxRow("evB:rb")?.state == "delivered"
            }
            let records = peerRecords(down)
            #expect(records.map { $0["attempt"]?.stringValue } == ["1", "2"], "the attempt number keeps counting")
            #expect(records.allSatisfy { $0["standard"]?.stringValue == "ok" })
            #expect(
                records.last?["timestamp"]?.intValue == Int(clock.now.timeIntervalSince1970),
                "webhook-timestamp comes from the notifier's clock")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
}
