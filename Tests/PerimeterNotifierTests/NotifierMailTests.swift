import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterNotifier
import PerimeterTestSupport
import Testing

/// Mail through a real SMTP server (Peers/smtp_receiver.py, on python3-aiosmtpd) with the
/// notifier service in this process on a manual clock, so the Date header is known exactly.
@Suite("Notifier mail over libcurl", .serialized)
struct NotifierMailTests {
    static func certificates(_ harness: NotifierHarness) async throws -> String {
        let certs = harness.directory.appendingPathComponent("certs")
        try await makeTestCertificates(in: certs)
        return certs.path
    }

    /// The header block of a message as the relay got it, unfolded field by field.
    static func headers(_ data: String) -> [String: String] {
        let head = data.replacingOccurrences(of: "\r\n", with: "\n").components(separatedBy: "\n\n")[0]
        var fields: [String: String] = [:]
        var last: String?
        for line in head.split(separator: "\n") {
            if line.hasPrefix(" "), let name = last {
                fields[name, default: ""] += "\n" + line
            } else if let colon = line.firstIndex(of: ":") {
                last = String(line[..<colon])
                fields[last!] = String(line[line.index(after: colon)...].dropFirst())
            }
        }
        return fields
    }

    @Test("a long subject folded in encoded-words, Message-ID on the sender's domain, Date in the venue's time zone")
    func mailHeaders() async throws {
        let clock = ManualClock()  // 2026-05-28T20:26:40Z: 15:26:40 CDT at the Chicago venue
        let harness = try await NotifierHarness()
        do {
            let certs = try await Self.certificates(harness)
            let (smtp, port) = try await harness.startPeer(
                "smtp_receiver.py", ["--cert", "\(certs)/server.crt", "--key", "\(certs)/server.key"])
            let title =
                "Grüße: Ankunft in der Ausstellung „Impressionisten und ihre Zeit“ — {region}, zweites Obergeschoss"
            try harness.configure(
                rules: "[" + #"{"id":"ops","on":"enter","regions":"*","channels":["mail"],"title":""# + title
                    + #"","body":"{subject} ist da"}"# + "]",
                channels: [
                    "mail": [
                        "type": "mail", "host": "127.0.0.1", "port": .number(Double(port)),
                        "from": "perimeter@Museum.Example", "to": ["ops@museum.example"],
                        "caFile": .string("\(certs)/ca.crt"),
                    ]
                ])
            try await harness.startInProcess(clock: clock)
            try await harness.publishEvent("enter", region: "saal-14", subject: "ann", t: clock.now, id: "m1")
            try await harness.waitFor("a mail") { !peerRecords(smtp).isEmpty }
            let mail = peerRecords(smtp)[0]
            #expect(mail["tls"] == .bool(true), "STARTTLS is required by default")
            let data = mail["data"]?.stringValue ?? ""
            let fields = Self.headers(data)
            #expect(fields["Date"] == "Thu, 28 May 2026 15:26:40 -0500", "\(data)")
            #expect(fields["Message-ID"] == "<\(Hex.encode(Array("m1:ops".utf8)))@museum.example>")
            let subjectLines = (fields["Subject"] ?? "").split(separator: "\n")
            #expect(subjectLines.count >= 3, "folded: \(data)")
            var decoded = ""
            for (index, line) in subjectLines.enumerated() {
                #expect(line.utf8.count + (index == 0 ? "Subject: ".count : 0) <= 76, "\(line)")
                let word = line.trimmingCharacters(in: .whitespaces)
                #expect(word.utf8.count <= 75 && word.hasPrefix("=?UTF-8?B?") && word.hasSuffix("?="), "\(word)")
                decoded += String(
                    decoding: Data(base64Encoded: String(word.dropFirst(10).dropLast(2))) ?? Data(), as: UTF8.self)
            }
            #expect(decoded == title.replacingOccurrences(of: "{region}", with: "saal-14"))
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    @Test(
        "plain SMTP only to a loopback relay, with a warning; a 550 fails for good; STARTTLS required and not offered is refused"
    )
    func relays() async throws {
        let clock = ManualClock()
        let harness = try await NotifierHarness()
        do {
            let (smtp, port) = try await harness.startPeer("smtp_receiver.py", [])  // no STARTTLS offered
            func mail(_ to: String, startTLS: String) -> JSONValue {
                [
                    "type": "mail", "host": "127.0.0.1", "port": .number(Double(port)), "from": "perimeter@venue.test",
                    "to": .string(to), "startTLS": .string(startTLS),
                ]
            }
            try harness.configure(
                rules: """
                    [{"id":"p","on":"enter","regions":"p","channels":["plain"],"body":"{subject}"},
                     {"id":"r","on":"enter","regions":"r","channels":["rejected"],"body":"{subject}"},
                     {"id":"t","on":"enter","regions":"t","channels":["tls"],"body":"{subject}"}]
                    """,
                channels: [
                    "plain": mail("ops@venue.test", startTLS: "never"),
                    "rejected": mail("reject-me@venue.test", startTLS: "never"),
                    "tls": mail("ops@venue.test", startTLS: "required"),
                ], notifier: ["maxAttempts": 1])
            try await harness.startInProcess(clock: clock)
            #expect(harness.notifierOutput.contains("mail channel sends without TLS"))
            for region in ["p", "r", "t"] {
                try await harness.publishEvent("enter", region: region, subject: "ann", t: clock.now, id: "e\(region)")
            }
            try await waitUntil("all three finished", context: { harness.notifierOutput }) {
                try ["ep:p", "er:r", "et:t"].allSatisfy { key in
                    let state = try harness.outboxRow(key)?.state
                    return state != nil && state != "pending"
                }
            }
            #expect(try harness.outboxRow("ep:p")?.state == "delivered")
            #expect(peerRecords(smtp).count == 1 && peerRecords(smtp).first?["tls"] == .bool(false))
            let rejected = try #require(try harness.outboxRow("er:r"))
            #expect(rejected.state == "failed", "a 5xx reply is permanent: \(rejected)")
            #expect(rejected.lastError?.contains("SMTP 127.0.0.1:\(port)") == true, "\(rejected.lastError ?? "")")
            #expect(rejected.lastError?.contains("550") == true, "\(rejected.lastError ?? "")")
            let refused = try #require(try harness.outboxRow("et:t"))
            #expect(refused.state == "dead", "no STARTTLS, no mail: retried, here dead after maxAttempts 1")
            #expect(refused.lastError?.contains("SSL") == true, "\(refused.lastError ?? "")")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
}
