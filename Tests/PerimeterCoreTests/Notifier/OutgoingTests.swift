import Foundation
import PerimeterCore
import Testing

/// The pure glue around libcurl: what an answer means, what a mail looks like, the pieces of a
/// Standard Webhooks signature.
@Suite("Outgoing: webhook replies, mail messages, Standard Webhooks")
struct OutgoingTests {
    static let now = Date(timeIntervalSince1970: 1_764_603_660)

    @Test(
        "status and Retry-After decide the outcome",
        arguments: [
            (200, nil, DeliveryOutcome.delivered),
            (204, "5", .delivered),
            (302, nil, .failed("HTTP 302 (redirects are not followed: configure the final URL)")),
            (404, nil, .failed("HTTP 404")),
            (410, nil, .failed("HTTP 410")),
            (408, nil, .retry("HTTP 408", after: nil)),
            (429, "30", .retry("HTTP 429", after: 30)),
            (503, "Mon, 01 Dec 2025 15:42:00 GMT", .retry("HTTP 503", after: 60)),
            (503, "soon", .retry("HTTP 503", after: nil)),
            (503, "Mon, 01 Dec 2025 15:40:00 GMT", .retry("HTTP 503", after: 0)),
            (503, "Sun, 01 Mar 2026 00:00:00 GMT", .retry("HTTP 503", after: 7_719_540)),
            (503, "Mon, 29 Feb 2025 15:42:00 GMT", .retry("HTTP 503", after: nil)),
            (503, "Mon, 01 Dec 2025 15:42:00 UTC", .retry("HTTP 503", after: nil)),
            (503, "Mon, 01 Dec 2025 24:00:00 GMT", .retry("HTTP 503", after: nil)),
            (503, "Monday, 01-Dec-25 15:42:00 GMT", .retry("HTTP 503", after: nil)),
            (503, "Mon, +1 Dec 2025 15:42:00 GMT", .retry("HTTP 503", after: nil)),
            (503, "-5", .retry("HTTP 503", after: nil)),
            (503, "1e999", .retry("HTTP 503", after: nil)),
            (0, nil, .failed("HTTP 0")),
        ] as [(Int, String?, DeliveryOutcome)])
    func classify(status: Int, retryAfter: String?, outcome: DeliveryOutcome) {
        #expect(WebhookReply.classify(status: status, retryAfter: retryAfter, now: Self.now) == outcome)
    }

    @Test(
        "header lines as curl hands them over",
        arguments: [
            ("Retry-After: 30\r\n", "retry-after", "30"),
            ("retry-after:\t 7 \t\r\n", "retry-after", "7"),
            ("X-Empty:\r\n", "x-empty", ""),
            ("Weird: a: b\r\n", "weird", "a: b"),
        ])
    func field(line: String, name: String, value: String) throws {
        let field = try #require(WebhookReply.field(Array(line.utf8)))
        #expect(field.name == name && field.value == value)
    }

    @Test(
        "status lines, blank lines and nameless lines are not fields",
        arguments: ["HTTP/1.1 200 OK\r\n", "\r\n", ": x\r\n", "Bad Name: x\r\n", "no colon\r\n"])
    func notAField(line: String) {
        #expect(WebhookReply.field(Array(line.utf8)) == nil)
    }

    @Test("the first of a repeated header wins")
    func repeated() {
        let lines = ["HTTP/1.1 429 Too Many\r\n", "Retry-After: 3\r\n", "retry-after: 99\r\n", "\r\n"].map {
            Array($0.utf8)
        }
        #expect(WebhookReply.headers(lines) == ["retry-after": "3"])
    }

    @Test(
        "a 5xx mail reply fails for good; 4xx, none or a timeout are retried",
        arguments: [
            (550, false), (554, false), (421, true), (451, true), (0, true), (250, true),
        ])
    func mailReply(code: Int, retried: Bool) {
        let outcome = MailReply.classify(responseCode: code, reason: "r")
        #expect(outcome == (retried ? .retry("r", after: nil) : .failed("r")))
    }

    /// The bug: a long encoded subject was one 221-character encoded-word (RFC 2047 allows 75).
    @Test(
        "long encoded subject: encoded-words of at most 75 characters on lines of at most 76, decoding to the text",
        arguments: [
            "Grüße: Ankunft in der Ausstellung „Impressionisten und ihre Zeit“ — Saal 14, zweites Obergeschoss, Ostflügel",
            String(repeating: "日本語", count: 40), String(repeating: "👩‍👩‍👧", count: 12), "é", "=?not an encoded word?=",
            String(repeating: "plain ascii words ", count: 8), "tab\there",
        ])
    func longEncodedSubject(_ subject: String) throws {
        let header = MailMessage.header("Subject", subject)
        // "\r\n" is one Character: drop the line end as bytes.
        let lines = String(decoding: header.utf8.dropLast(2), as: UTF8.self).components(separatedBy: "\r\n")
        #expect(lines.count > 1 || subject.utf8.count < 60, "\(header)")
        var decoded = ""
        for (index, line) in lines.enumerated() {
            #expect(line.utf8.count <= 76, "line \(index): \(line.utf8.count) characters")
            let word = index == 0 ? String(line.dropFirst("Subject: ".count)) : String(line.dropFirst())
            #expect(index == 0 || line.hasPrefix(" "), "folded with a blank")
            #expect(word.utf8.count <= 75 && word.hasPrefix("=?UTF-8?B?") && word.hasSuffix("?="), "\(word)")
            let data = try #require(Data(base64Encoded: String(word.dropFirst(10).dropLast(2))))
            let piece = try #require(String(data: data, encoding: .utf8), "a word splits a character")
            decoded += piece
        }
        #expect(decoded == subject)
    }

    @Test("a short printable ASCII subject stays as it is")
    func plainSubject() {
        #expect(MailMessage.header("Subject", "Arrival in foyer") == "Subject: Arrival in foyer\r\n")
    }

    @Test("Message-ID on the sender's domain; Date in the venue's time zone")
    func messageIDAndDate() throws {
        #expect(MailMessage.messageID(key: "ev:r", from: "perimeter@Museum.Example") == "65763a72@museum.example")
        let chicago = try #require(TimeZone(identifier: "America/Chicago"))
        let tokyo = try #require(TimeZone(identifier: "Asia/Tokyo"))
        #expect(MailMessage.date(Self.now, in: chicago) == "Mon, 01 Dec 2025 09:41:00 -0600")
        #expect(MailMessage.date(Self.now, in: tokyo) == "Tue, 02 Dec 2025 00:41:00 +0900")
        let message = MailMessage(
            from: "perimeter@museum.example", to: ["a@b.example", "c@d.example"], subject: "Hi", body: "body\n",
            messageID: "65763a72@museum.example", date: Self.now, timeZone: chicago)
        let text = message.rendered()
        #expect(text.contains("\r\nDate: Mon, 01 Dec 2025 09:41:00 -0600\r\n"))
        #expect(text.contains("\r\nMessage-ID: <65763a72@museum.example>\r\n"))
        #expect(text.contains("\r\nTo: <a@b.example>, <c@d.example>\r\n"))
        #expect(text.hasSuffix("\r\n\r\n" + Data("body\n".utf8).base64EncodedString() + "\r\n"))
    }

    @Test(
        "signing secrets: whsec_ and base64, or plain text of 16 characters",
        arguments: [
            (
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                Array(Data(base64Encoded: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")!), nil
            ),
            ("test-webhook-secret-0123456789", Array("test-webhook-secret-0123456789".utf8), nil),
            ("whsec_not base64!", nil, "base64"),
            ("whsec_AAAA", nil, "24 to 64 bytes, not 3"),
            ("short", nil, "at least 16 characters"),
        ] as [(String, [UInt8]?, String?)])
    func secrets(text: String, key: [UInt8]?, problem: String?) {
        do {
            let secret = try WebhookSecret(text)
            #expect(secret.key == key)
        } catch {
            #expect(problem.map { "\(error)".contains($0) } == true, "\(error)")
            #expect(!"\(error)".contains(text), "the secret is not echoed")
        }
    }

    @Test("webhook-id: the key, with '.' and '%' escaped (the spec separates the signed parts with '.')")
    func webhookID() {
        #expect(StandardWebhooks.webhookID(key: "a1b2:welcome") == "a1b2:welcome")
        #expect(StandardWebhooks.webhookID(key: "ev:rule.v2") == "ev:rule%2Ev2")
        #expect(StandardWebhooks.webhookID(key: "ev:50%.x") == "ev:50%25%2Ex")
        #expect(
            StandardWebhooks.signedContent(id: "msg_1", timestamp: 1_674_087_231, body: Array("{}".utf8))
                == Array("msg_1.1674087231.{}".utf8))
    }
}
