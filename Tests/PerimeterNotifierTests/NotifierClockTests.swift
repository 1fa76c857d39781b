import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNotifier
import PerimeterTestSupport
import Testing

private let secret = "test-webhook-secret-0123456789"

/// One webhook delivery, attempt by attempt, on a clock only the test moves.
struct RetryCase: Sendable, CustomTestStringConvertible {
    var name: String
    /// The receiver's plan (webhook_receiver.py): its answer to each attempt, the last repeating.
    var plan: String
    var maxAttempts: Int
    /// What the receiver answers, attempt by attempt, until the notifier stops trying.
    var statuses: [Int]
    /// The receiver's Retry-After, which wins over the backoff.
    var retryAfter: Double?
    var final: String
    var testDescription: String { name }
}

/// Two enters of one subject into a region whose rule has a 600 s cooldown.
struct CooldownCase: Sendable, CustomTestStringConvertible {
    var name: String
    /// Between the two events' own times (`t`, set by the evaluator).
    var eventGap: Double
    /// How far the notifier's clock moves between them.
    var clockGap: Double
    var notifications: Int
    var testDescription: String { name }
}

@Suite("Notifier timing on a manual clock: retries, backoff, Retry-After, dead letters, cooldown", .serialized)
struct NotifierClockTests {
    // Backoff of attempt n: between half and all of min(20, 8 × 2^(n-1)) seconds.
    static let initialBackoff = 8.0
    static let maxBackoff = 20.0

    static let retryCases = [
        RetryCase(
            name: "500 twice, then delivered", plan: "500,500,200", maxAttempts: 5, statuses: [500, 500, 200],
            final: "delivered"),
        RetryCase(
            name: "429 with Retry-After: 30 (the backoff would be 4–8 s), then delivered", plan: "429:30,200",
            maxAttempts: 5, statuses: [429, 200], retryAfter: 30, final: "delivered"),
        RetryCase(
            name: "503 every time: dead after maxAttempts 3", plan: "503", maxAttempts: 3, statuses: [503, 503, 503],
            final: "dead"),
        RetryCase(
            name: "404: failed for good, never retried", plan: "404", maxAttempts: 3, statuses: [404], final: "failed"),
    ]

    /// Each retry comes exactly when its delay has passed on the clock: 1 ms before, the
    /// deliverer (woken by another notification) looks at the outbox, leaves the row alone and
    /// goes back to sleep on the clock; 1 ms after, the receiver gets the next attempt.
    @Test("a failing webhook is retried when its backoff or Retry-After has passed, not before", arguments: retryCases)
    func webhookRetry(_ row: RetryCase) async throws {
        let clock = ManualClock()
        let start = clock.now
        let harness = try await NotifierHarness()
        do {
            let (peer, port) = try await harness.startPeer(
                "webhook_receiver.py", ["--secret", secret, "--plan", row.plan])
            try harness.configure(
                rules: """
                    [{"id":"r","on":"enter","regions":"a","channels":["hook"],"body":"{subject} {region}"},
                     {"id":"nudge","on":"enter","regions":"nudge-*","channels":["app"],"body":"{region}"}]
                    """,
                channels: [
                    "hook": [
                        "type": "webhook", "url": .string("http://127.0.0.1:\(port)/"), "secret": .string(secret),
                    ],
                    "app": ["type": "mqtt"],
                ],
                notifier: [
                    "maxAttempts": .number(Double(row.maxAttempts)), "initialBackoff": .number(Self.initialBackoff),
                    "maxBackoff": .number(Self.maxBackoff),
                ])
            try await harness.startInProcess(clock: clock)
            try await harness.publishEvent("enter", region: "a", subject: "ann", t: start, id: "ev")
            var nudges = 0
            for attempt in 1...row.statuses.count {
                // Counted when it starts (before it is sent); recorded when it has ended.
                try await waitUntil("attempt \(attempt) recorded", context: { harness.notifierOutput }) {
                    let row = try harness.outboxRow("ev:r")
                    return row?.attempts == attempt && row?.inFlight == false
                }
                #expect(
                    peerRecords(peer).map { $0["status"]?.intValue } == row.statuses.prefix(attempt).map { $0 as Int? })
                let recorded = try #require(try harness.outboxRow("ev:r"))
                #expect(recorded.created == start, "queued at the clock's time")
                guard attempt < row.statuses.count else { break }
                #expect(recorded.state == "pending", "attempt \(attempt) is retried")
                let delay = recorded.nextAttempt.timeIntervalSince(clock.now)
                if let retryAfter = row.retryAfter {
                    #expect(abs(delay - retryAfter) < 0.001, "Retry-After wins: \(delay) s")
                } else {
                    let ceiling = min(Self.maxBackoff, Self.initialBackoff * pow(2, Double(attempt - 1)))
                    #expect(
                        delay >= ceiling / 2 - 0.001 && delay <= ceiling + 0.001,
                        "backoff of attempt \(attempt): \(delay) s, expected \(ceiling / 2)…\(ceiling)")
                }

                clock.advance(by: delay - 0.001)
                nudges += 1
                let nudged = nudges
                try await harness.publishEvent("enter", region: "nudge-\(nudged)", subject: "bob", t: clock.now)
                try await harness.waitFor("nudge \(nudged) delivered") {
                    harness.payloads("notifications/app/").count == nudged
                }
                try await clock.waitForSleepers(1)
                #expect(peerRecords(peer).count == attempt, "no attempt \(attempt + 1) 1 ms before its time")
                #expect(try harness.outboxRow("ev:r")?.attempts == attempt)
                clock.advance(by: 0.002)
            }
            let last = try #require(try harness.outboxRow("ev:r"))
            #expect(last.state == row.final)
            #expect(last.attempts == row.statuses.count)
            if row.final != "delivered" {
                try await harness.waitFor("the deadletter") { !harness.payloads("deadletter/notifier").isEmpty }
                let deadletter = harness.payloads("deadletter/notifier")
                #expect(deadletter.count == 1)
                #expect(deadletter.first?["state"]?.stringValue == row.final)
                #expect(deadletter.first?["attempts"]?.intValue == row.statuses.count)
                #expect(deadletter.first?["t"]?.stringValue == Timestamp.format(clock.now), "the clock's time")
            }
            // Nothing later: whatever the notifier would still do, it does now.
            try await harness.waitUntilProcessed()
            #expect(peerRecords(peer).count == row.statuses.count)
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    static let cooldownCases = [
        CooldownCase(
            name: "300 s apart by the events' time, 1000 s by the clock: still cooling down", eventGap: 300,
            clockGap: 1000, notifications: 1),
        CooldownCase(
            name: "700 s apart by the events' time, no time by the clock: fires again", eventGap: 700, clockGap: 0,
            notifications: 2),
        CooldownCase(name: "599 s apart: still cooling down", eventGap: 599, clockGap: 599, notifications: 1),
        CooldownCase(name: "600 s apart: the cooldown has ended", eventGap: 600, clockGap: 600, notifications: 2),
    ]

    /// The cooldown is measured between the events' own times (DESIGN §7: event time is the
    /// observation's `t`), so a notifier that is behind, or restarted, decides as one that kept
    /// up; the clock only says when a notification was queued.
    @Test("cooldown between two firings of a rule follows the events' time", arguments: cooldownCases)
    func cooldown(_ row: CooldownCase) async throws {
        let clock = ManualClock()
        let harness = try await NotifierHarness()
        do {
            try harness.configure(
                rules:
                    #"[{"id":"coffee","on":"enter","regions":"bar","channels":["app"],"cooldown":600,"body":"{subject} {region}"}]"#,
                channels: ["app": ["type": "mqtt"]])
            try await harness.startInProcess(clock: clock)
            let t = clock.now
            try await harness.publishEvent("enter", region: "bar", subject: "ann", t: t, id: "first")
            try await harness.waitFor("the first notification") { harness.payloads("notifications/app/").count == 1 }
            clock.advance(by: row.clockGap)
            try await harness.publishEvent("enter", region: "bar", subject: "ann", t: t + row.eventGap, id: "second")
            try await harness.waitUntilProcessed()
            #expect(try harness.outboxCount(rule: "coffee") == row.notifications)
            try await harness.waitFor("\(row.notifications) notifications") {
                harness.payloads("notifications/app/").count == row.notifications
            }
            if row.notifications == 2 {
                let second = try #require(try harness.outboxRow("second:coffee"))
                #expect(second.created == clock.now, "queued at the clock's time, not the event's")
            }
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
}
