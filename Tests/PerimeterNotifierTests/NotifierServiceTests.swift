import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNotifier
import PerimeterTestSupport
import Testing

/// 2025-12-01T15:41:00Z, a Monday: 09:41 at the (Chicago) test venue.
private let t0 = Date(timeIntervalSince1970: 1_764_603_660)
private let secret = "test-webhook-secret-0123456789"

private func rule(_ id: String, channel: String, regions: String = "*", _ extra: String = "") -> String {
    #"{"id":""# + id + #"","on":["enter"],"regions":""# + regions + #"","channels":[""# + channel + #""]"#
        + (extra.contains(#""body""#) ? "" : #","body":"{subject} {event} {region}""#) + extra + "}"
}

/// A loopback port free a moment ago, for the notifier's `/metrics`.
func freeHTTPPort() throws -> Int {
    let probe = try HTTPServer(port: 0) { _ in HTTPServer.Response(body: "") }
    defer { probe.stop() }
    return probe.port
}

@Suite("Notifier service", .serialized)
struct NotifierServiceTests {
    @Test("MQTT channel: three recipient locales, repeats false, cooldown, quiet hours, a live rule change")
    func mqttRules() async throws {
        let harness = try await NotifierHarness()
        do {
            let pickup = #"""
                {"id":"pickup","on":"enter","regions":"cafe-*","audience":"subject","channels":["app"],
                 "fields":{"price":12.5,"ready":300},
                 "body":{"en":"Your order is ready at {ready:time} — {price:currency}",
                         "de":"Ihre Bestellung ist um {ready:time} fertig — {price:currency}",
                         "ja":"{ready:time}にご注文の準備ができました — {price:currency}"}}
                """#
            let rules =
                "{\"rules\":[" + pickup + ","
                + rule("welcome", channel: "app", regions: "lobby", #","repeats":false"#) + ","
                + rule("coffee", channel: "app", regions: "bar", #","cooldown":600"#) + ","
                + rule("night", channel: "app", regions: "hall", #","quietHours":{"from":"22:00","to":"07:00"}"#)
                + "]}"
            try harness.configure(rules: rules, channels: ["app": ["type": "mqtt"]])
            try await harness.startNotifier()
            for (subject, locale) in [("ann", "en_US"), ("bea", "de_DE"), ("kei", "ja_JP")] {
                try await harness.publish("subjects/\(subject)/preferences", #"{"locale":"\#(locale)"}"#, retain: true)
            }
            try await harness.waitUntilProcessed()
            for subject in ["ann", "bea", "kei"] {
                try await harness.publishEvent("enter", region: "cafe-1", subject: subject, t: t0)
            }
            // repeats: false fires once; cooldown 600 s; quiet hours 22:00–07:00 venue time.
            try await harness.publishEvent("enter", region: "lobby", subject: "ann", t: t0)
            try await harness.publishEvent("enter", region: "lobby", subject: "ann", t: t0 + 3600)
            try await harness.publishEvent("enter", region: "bar", subject: "ann", t: t0)
            try await harness.publishEvent("enter", region: "bar", subject: "ann", t: t0 + 300)
            try await harness.publishEvent("enter", region: "bar", subject: "ann", t: t0 + 700)
            try await harness.publishEvent("enter", region: "hall", subject: "ann", t: t0 + 13 * 3600)  // 22:41
            try await harness.publishEvent("enter", region: "hall", subject: "ann", t: t0 + 3600)  // 10:41
            // Everything is decided once the events are processed: no more than these will come.
            try await harness.waitUntilProcessed()
            for (rule, count) in [("pickup", 3), ("welcome", 1), ("coffee", 2), ("night", 1)] {
                #expect(try harness.outboxCount(rule: rule) == count, "\(rule)")
            }
            try await harness.waitFor("seven notifications") { harness.payloads("notifications/app/").count >= 7 }
            let notes = harness.payloads("notifications/app/")
            func bodies(_ rule: String) -> [String] {
                notes.filter { $0["rule"]?.stringValue == rule }.compactMap { $0["body"]?.stringValue }
            }
            #expect(
                Set(bodies("pickup")) == [
                    "Your order is ready at 9:46\u{202F}AM — $12.50",
                    "Ihre Bestellung ist um 09:46 fertig — 12,50\u{A0}$",
                    "9:46にご注文の準備ができました — $12.50",
                ])
            #expect(bodies("welcome").count == 1, "repeats: false fires once")
            #expect(bodies("coffee").count == 2, "cooldown drops the enter 300 s later, not the one 700 s later")
            #expect(bodies("night") == ["ann enter hall"], "quiet hours drop 22:41; 10:41 goes")
            let first = notes.first { $0["rule"]?.stringValue == "pickup" }
            #expect(first?["id"]?.stringValue?.hasSuffix(":pickup") == true)
            #expect(
                harness.messages.contains { $0.topic == "perimeter/v1/test/notifications/app/kei" },
                "notifications/{channel}/{subject}")

            // A live rule: retained rules/{rule}, then changed, then deleted.
            try await harness.publish("rules/live", rule("live", channel: "app", regions: "gallery"), retain: true)
            try await harness.waitUntilProcessed()
            try await harness.publishEvent("enter", region: "gallery", subject: "ann", t: t0 + 10)
            try await harness.waitFor("live rule fires") { !bodies2(harness, "live").isEmpty }
            try await harness.publish(
                "rules/live",
                #"{"id":"live","on":"enter","regions":"gallery","channels":["app"],"body":"changed {subject}"}"#,
                retain: true)
            try await harness.waitUntilProcessed()
            try await harness.publishEvent("enter", region: "gallery", subject: "bea", t: t0 + 20)
            try await harness.waitFor("changed rule fires") { bodies2(harness, "live").contains("changed bea") }
            try await harness.publish("rules/live", "", retain: true)
            try await harness.waitUntilProcessed()
            try await harness.publishEvent("enter", region: "gallery", subject: "kei", t: t0 + 30)
            try await harness.waitUntilProcessed()
            #expect(try harness.outboxCount(rule: "live") == 2, "a deleted rule fires no more")
            #expect(bodies2(harness, "live").count == 2)

            // A broken live rule and a broken event are dead-lettered with the reason.
            try await harness.publish("rules/bad", rule("bad", channel: "pager"), retain: false)
            try await harness.publish("enter/x/ann", #"{"event":"enter"}"#)
            try await harness.publish("enter/x/bea", String(repeating: " ", count: 70_000) + "{}")
            try await harness.waitFor("deadletters") { harness.payloads("deadletter/notifier").count >= 3 }
            let reasons = harness.payloads("deadletter/notifier").compactMap { $0["reason"]?.stringValue }
            #expect(reasons.contains { $0.contains("rule 'bad'") && $0.contains("unknown channel 'pager'") })
            #expect(reasons.contains { $0.contains("id") && $0.contains("missing") })
            #expect(reasons.contains { $0.contains("70002 bytes exceeds notifier.maxPayloadBytes") })
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    @Test(
        "3,000 events at once past maxJournalBacklog 1,000: reading stops and resumes, every notification goes out, the holds are counted"
    )
    func intakeHeld() async throws {
        let harness = try await NotifierHarness()
        do {
            let metricsPort = try freeHTTPPort()
            try harness.configure(
                rules: "[" + rule("hello", channel: "app", regions: "hall") + "]", channels: ["app": ["type": "mqtt"]],
                notifier: ["maxJournalBacklog": 1000, "http": .string("127.0.0.1:\(metricsPort)")])
            try await harness.startNotifier()
            let count = 3000
            try await harness.publisher.publish(
                batch: (0..<count).map { n in
                    let payload: JSONValue = [
                        "id": .string("burst-\(n)"), "event": "enter", "venue": .string(NotifierHarness.venue),
                        "region": "hall", "subject": .string("s\(n)"), "t": .string(Timestamp.format(t0)), "seq": 1,
                        "source": "gps",
                    ]
                    return MQTTMessage(
                        topic: "\(harness.root)/enter/hall/s\(n)", payload: Array(payload.serialized().utf8),
                        qos: .atLeastOnce)
                })
            try await harness.waitUntilProcessed()
            #expect(try harness.outboxCount(rule: "hello") == count)
            try await harness.waitFor("every notification", timeout: .seconds(120)) {
                harness.payloads("notifications/app/").count >= count
            }
            let metrics = try httpGet(port: metricsPort, path: "/metrics").body
            let holds = metrics.split(separator: "\n").first { $0.hasPrefix("perimeter_intake_holds_total ") }
                .flatMap { $0.split(separator: " ").last.flatMap { Double($0) } }
            #expect((holds ?? 0) >= 1, "a backlog of 3,000 never reached 1,000? \(holds ?? -1)")
            #expect(metrics.contains("perimeter_notifier_arrivals_pending 0"))
            #expect(metrics.contains("perimeter_journal_lost_total 0"))
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    @Test("webhook: signed; 500 then success; 429 honours Retry-After; dead after N attempts with a deadletter")
    func webhookRetries() async throws {
        let harness = try await NotifierHarness()
        do {
            let metricsPort = try freeHTTPPort()
            let (retrying, retryPort) = try await harness.startPeer(
                "webhook_receiver.py", ["--secret", secret, "--plan", "500,200"])
            let (limited, limitedPort) = try await harness.startPeer(
                "webhook_receiver.py", ["--secret", secret, "--plan", "429:2,200"])
            let (broken, brokenPort) = try await harness.startPeer(
                "webhook_receiver.py", ["--secret", secret, "--plan", "503"])
            let (gone, gonePort) = try await harness.startPeer(
                "webhook_receiver.py", ["--secret", secret, "--plan", "404"])
            func hook(_ port: Int) -> JSONValue {
                ["type": "webhook", "url": .string("http://127.0.0.1:\(port)/hook"), "secret": .string(secret)]
            }
            let rules =
                "[" + rule("r1", channel: "retrying", regions: "a") + ","
                + rule("r2", channel: "limited", regions: "b") + "," + rule("r3", channel: "broken", regions: "c")
                + "," + rule("r4", channel: "gone", regions: "d") + "]"
            try harness.configure(
                rules: rules,
                channels: [
                    "retrying": hook(retryPort), "limited": hook(limitedPort), "broken": hook(brokenPort),
                    "gone": hook(gonePort),
                ], notifier: ["maxAttempts": 3, "http": .string("127.0.0.1:\(metricsPort)")])
            try await harness.startNotifier()
            for region in ["a", "b", "c", "d"] {
                try await harness.publishEvent("enter", region: region, subject: "ann", t: t0, id: "ev-\(region)")
            }
            try await harness.waitFor("retried delivery") { peerRecords(retrying).count >= 2 }
            try await harness.waitFor("429 then success") { peerRecords(limited).count >= 2 }
            try await harness.waitFor("dead after 3 attempts") {
                harness.payloads("deadletter/notifier").contains { $0["state"]?.stringValue == "dead" }
            }
            try await harness.waitFor("404 fails for good") {
                harness.payloads("deadletter/notifier").contains { $0["state"]?.stringValue == "failed" }
            }
            let retried = peerRecords(retrying)
            #expect(retried.map { $0["status"]?.intValue } == [500, 200])
            #expect(retried.allSatisfy { $0["signature"]?.stringValue == "ok" }, "the receiver verifies the HMAC")
            #expect(retried.allSatisfy { $0["key"]?.stringValue == "ev-a:r1" }, "Idempotency-Key = event id + rule id")
            #expect(retried.map { $0["attempt"]?.stringValue } == ["1", "2"])
            let body = retried.last?["body"]?.objectValue
            #expect(body?["body"]?.stringValue == "ann enter a" && body?["eventId"]?.stringValue == "ev-a")
            let limitedRecords = peerRecords(limited)
            let gap = (limitedRecords[1]["t"]?.doubleValue ?? 0) - (limitedRecords[0]["t"]?.doubleValue ?? 0)
            #expect(gap >= 1.9, "Retry-After: 2 is honoured (the backoff alone is under 1 s): \(gap)")
            #expect(peerRecords(broken).count == 3, "maxAttempts 3")
            #expect(peerRecords(gone).count == 1, "a 404 is not retried")
            let dead = harness.payloads("deadletter/notifier").first { $0["state"]?.stringValue == "dead" }
            #expect(dead?["key"]?.stringValue == "ev-c:r3" && dead?["attempts"]?.intValue == 3)
            #expect(dead?["reason"]?.stringValue == "HTTP 503")

            // The receiver records a request before the notifier has read its answer and counted it.
            try await harness.waitFor("both successful deliveries counted") {
                let metrics = (try? httpGet(port: metricsPort, path: "/metrics").body) ?? ""
                return metrics.contains(#"perimeter_notification_latency_seconds_count{channel="limited"} 1"#)
                    && metrics.contains(#"perimeter_notifications_total{channel="retrying",result="sent"} 1"#)
            }
            let metrics = try httpGet(port: metricsPort, path: "/metrics").body
            for line in [
                #"perimeter_notifications_total{channel="retrying",result="retried"} 1"#,
                #"perimeter_notifications_total{channel="retrying",result="sent"} 1"#,
                #"perimeter_notifications_total{channel="broken",result="dead"} 1"#,
                #"perimeter_notifications_total{channel="gone",result="failed"} 1"#,
                #"perimeter_notifier_outbox{state="dead"} 1"#,
                // The four events processed; none lost on the way into the journal.
                "perimeter_notifier_arrivals_pending 0", "perimeter_journal_lost_total 0",
            ] {
                #expect(metrics.contains(line), "\(line) in \(metrics)")
            }
            #expect(metrics.contains(#"perimeter_notification_latency_seconds_count{channel="limited"} 1"#))
            let status = try await runProduct(["notifier", "status", "--database", harness.databasePath])
            #expect(status.stdout.contains("broken"), "\(status.stdout) \(status.stderr)")
            #expect(status.stdout.contains("dead ") && status.stdout.contains("ev-c:r3"), "\(status.stdout)")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    @Test("exactly-once effect across kill -9 in the middle of delivery")
    func killNine() async throws {
        let harness = try await NotifierHarness()
        do {
            let (receiver, port) = try await harness.startPeer(
                "webhook_receiver.py", ["--secret", secret, "--plan", "slow:0.25"])
            try harness.configure(
                rules: "[" + rule("r", channel: "hook") + "]",
                channels: [
                    "hook": ["type": "webhook", "url": .string("http://127.0.0.1:\(port)/"), "secret": .string(secret)]
                ], notifier: ["concurrency": 4])
            try await harness.startNotifier()
            let count = 40
            for index in 0..<count {
                try await harness.publishEvent(
                    "enter", region: "r\(index)", subject: "s\(index)", t: t0, id: "e\(index)")
            }
            try await harness.waitFor("deliveries under way") { peerRecords(receiver).count >= 8 }
            harness.killNotifier()
            let before = peerRecords(receiver).count
            try await harness.startNotifier()
            try await harness.waitFor("every notification accepted", timeout: .seconds(60)) {
                Set(peerRecords(receiver).filter { $0["new"] == .bool(true) }.compactMap { $0["key"]?.stringValue })
                    .count == count
            }
            // Every row delivered (recorded after the receiver answered): no request is left to come.
            let store = try NotifierStore(path: harness.databasePath, readOnly: true)
            try await waitUntil("every row delivered") { try store.count(.delivered) == count }
            let records = peerRecords(receiver)
            var newCounts: [String: Int] = [:]
            for record in records where record["new"] == .bool(true) {
                newCounts[record["key"]?.stringValue ?? "", default: 0] += 1
            }
            #expect(newCounts.count == count)
            #expect(newCounts.values.allSatisfy { $0 == 1 }, "no idempotency key accepted as new twice")
            #expect(Set(newCounts.keys) == Set((0..<count).map { "e\($0):r" }))
            #expect(before < count, "the kill came before everything was delivered (\(before) requests)")
            let status = try await runProduct(["notifier", "status", "--database", harness.databasePath])
            #expect(status.stdout.contains("hook        0           \(count)"), "\(status.stdout)")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    @Test("mail: delivered to a local SMTP server over STARTTLS, subject and body in UTF-8")
    func mail() async throws {
        let harness = try await NotifierHarness()
        do {
            let certs = try await NotifierMailTests.certificates(harness)
            let (smtp, port) = try await harness.startPeer(
                "smtp_receiver.py", ["--cert", "\(certs)/server.crt", "--key", "\(certs)/server.key"])
            try harness.configure(
                rules: "["
                    + #"{"id":"ops","on":"enter","regions":"*","channels":["mail"],"title":"Grüße: Ankunft in {region}","body":"{subject} ist in {region} — {time}"}"#
                    + "]",
                channels: [
                    "mail": [
                        "type": "mail", "host": "127.0.0.1", "port": .number(Double(port)),
                        "from": "perimeter@venue.test",
                        "to": ["ops@venue.test"], "startTLS": "required", "caFile": .string("\(certs)/ca.crt"),
                    ]
                ])
            try await harness.startNotifier()
            try await harness.publishEvent("enter", region: "foyer", subject: "ann", t: t0, id: "m1")
            try await harness.waitFor("a mail") { !peerRecords(smtp).isEmpty }
            let mail = peerRecords(smtp)[0]
            #expect(mail["tls"] == .bool(true), "STARTTLS was used")
            #expect(mail["to"]?.arrayValue?.first?.stringValue == "ops@venue.test")
            let data = mail["data"]?.stringValue ?? ""
            let normalized = data.replacingOccurrences(of: "\r\n", with: "\n")
            let bodyPart = normalized.components(separatedBy: "\n\n").dropFirst().joined().replacingOccurrences(
                of: "\n", with: "")
            let subject = "=?UTF-8?B?\(Data("Grüße: Ankunft in foyer".utf8).base64EncodedString())?="
            #expect(normalized.contains("Subject: \(subject)\n"), "\(data)")
            let decoded = Data(base64Encoded: bodyPart).map { String(decoding: $0, as: UTF8.self) } ?? ""
            #expect(decoded == "ann ist in foyer — 9:41\u{202F}AM\n")
            #expect(data.contains("Message-ID: <"))
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    @Test("privacy rule 10 end to end: a whenInUse subject not in use gets its own notification; consumers get nothing")
    func ruleTen() async throws {
        let harness = try await NotifierHarness()
        do {
            try harness.configure(
                rules: "["
                    + rule(
                        "own", channel: "app", regions: "cafe", #","audience":"subject","body":"Welcome, {subject}""#)
                    + "," + rule("staff", channel: "app", regions: "cafe") + "]",
                channels: ["app": ["type": "mqtt"]])
            try await harness.startEvaluator(
                regions:
                    #"{"type":"FeatureCollection","features":[{"type":"Feature","id":"cafe","properties":{"radius":50},"geometry":{"type":"Point","coordinates":[2.3362,48.8604]}}]}"#
            )
            try await harness.startNotifier()
            try await harness.publish("sessions/dashboard/1", #"{"subjects":"*","level":"always"}"#, retain: true)
            try await harness.publish("subjects/ann/authorization", #"{"status":"whenInUse"}"#, retain: true)
            try await harness.publish("subjects/bob/authorization", #"{"status":"denied"}"#, retain: true)
            // Dora (always) walks in last: her staff notification comes through evaluator and
            // notifier after everything about ann and bob, so what they did not get is known.
            try await harness.publish("subjects/dora/authorization", #"{"status":"always"}"#, retain: true)
            let t = Int(Date().timeIntervalSince1970)
            for subject in ["ann", "bob", "dora"] {
                try await harness.publish("obs/\(subject)/gps", #"{"t":\#(t),"lat":48.8604,"lon":2.3362,"acc":3}"#)
            }
            try await harness.waitFor("ann's own notification, then dora's staff one") {
                harness.payloads("notifications/app/ann").contains { $0["rule"]?.stringValue == "own" }
                    && harness.payloads("notifications/app/dora").contains { $0["rule"]?.stringValue == "staff" }
            }
            let notes = harness.payloads("notifications/app/ann") + harness.payloads("notifications/app/bob")
            #expect(notes.map { $0["rule"]?.stringValue } == ["own"], "the consumers' rule does not fire: \(notes)")
            #expect(notes.first?["body"]?.stringValue == "Welcome, ann")
            #expect(harness.payloads("enter/cafe/ann").isEmpty, "consumers get no enter for a subject not in use")
            #expect(harness.payloads("enter/cafe/bob").isEmpty)
            #expect(harness.payloads("self/enter/cafe/ann").count == 1, "the evaluator's rule-10 topic")
            let aboutBob = harness.messages.map(\.topic).filter { $0.hasSuffix("/bob") }
            #expect(aboutBob == ["perimeter/v1/test/diagnostics/bob"], "a denied subject: only its diagnostics")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    @Test("a rules file that cannot work stops the notifier at start, naming the rule and the problem")
    func badRules() async throws {
        let harness = try await NotifierHarness()
        do {
            try harness.configure(
                rules: "[" + rule("typo", channel: "app", #","fields":{"price":1},"body":"{prize:currency}""#) + "]",
                channels: ["app": ["type": "mqtt"]])
            let result = try await runProduct(["notifier", "--config", harness.configPath])
            #expect(result.status == .exited(1))
            #expect(
                result.stderr.contains("rule 'typo'") && result.stderr.contains("unknown placeholder {prize}"),
                "\(result.stderr)")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
}

private func bodies2(_ harness: NotifierHarness, _ rule: String) -> [String] {
    harness.payloads("notifications/app/").filter { $0["rule"]?.stringValue == rule }.compactMap {
        $0["body"]?.stringValue
    }
}
