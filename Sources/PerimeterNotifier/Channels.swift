import Foundation
import PerimeterCore
import PerimeterMQTT
import PerimeterNet

/// Sends outbox rows over their channels: MQTT rows in batches, webhook and mail rows one by
/// one on the pool's threads (`notifier.concurrency` of them).
struct ChannelSender: Sendable {
    let client: MQTTClient
    let pool: BlockingPool
    let prefix: String
    /// "Now" for webhook-timestamp, an HTTP-date Retry-After and a mail's Date header.
    let clock: any TimeSource
    /// Each webhook channel's kept connections (at most one idle per delivery thread).
    let connections: [String: HTTPClient.Connections]
    /// Each venue's time zone, for a mail's Date header.
    let timeZones: [String: TimeZone]

    /// Delivers a webhook or mail row, blocking: call it on one of the pool's threads
    /// (``BlockingPool/execute(_:)``). MQTT rows go out in batches instead (``queue(_:)``).
    func deliver(_ row: NotifierStore.OutboxRow, over channel: NotifierConfiguration.Channel) -> DeliveryOutcome {
        switch channel {
        case .mqtt:
            return .retry("an MQTT notification is published with its batch, not on its own", after: nil)
        case .webhook(let url, let secret, let options):
            return post(row, url: url, secret: secret, options: options)
        case .mail(let relay, let from, let to):
            return mail(row, relay: relay, from: from, to: to)
        }
    }

    /// `notifications/{channel}/{subject}` under the venue, or the channel's topic template.
    func topic(_ row: NotifierStore.OutboxRow, template: String?) -> String {
        guard let template else {
            return "\(prefix)/\(row.venue)/notifications/\(Topics.level(row.channel))/\(Topics.level(row.subject))"
        }
        let region = (try? JSONParser.parse(row.record))?["region"]?.stringValue ?? ""
        return template.replacingOccurrences(of: "{venue}", with: Topics.level(row.venue))
            .replacingOccurrences(of: "{channel}", with: Topics.level(row.channel))
            .replacingOccurrences(of: "{subject}", with: Topics.level(row.subject))
            .replacingOccurrences(of: "{region}", with: Topics.level(region))
            .replacingOccurrences(of: "{rule}", with: Topics.level(row.rule))
    }

    /// Hands MQTT rows (each with its channel's topic template) to the client in order without
    /// waiting for anything: what goes out on the one connection keeps this order, and one
    /// round trip serves the lot instead of one each. Returns each row's receipt, or why it was refused.
    func queue(_ rows: [(row: NotifierStore.OutboxRow, template: String?)]) -> [Result<MQTTClient.Receipt, any Error>] {
        rows.map { row, template in
            let message = MQTTMessage(
                topic: topic(row, template: template), payload: row.record, qos: .atLeastOnce,
                properties: MQTTProperties(
                    contentType: "application/json", userProperties: [UserProperty("idempotency-key", row.key)]))
            return Result { try client.send(batch: [message]) }
        }
    }

    /// Waits for the acknowledgements of ``queue(_:)``'s receipts: delivered on PUBACK; failed
    /// for good when the broker refused it (its ACL; MQTT 5 reason ≥ 0x80); retried otherwise.
    /// Returns the outcomes in the receipts' order.
    ///
    /// Waits for the last receipt first: the broker acknowledges a connection's publishes in the
    /// order they were sent, so by then the others are in and taking them costs no wait. In
    /// send order, the task slept and was woken once per acknowledgement (a hundred times a
    /// batch, each a thread hand-over).
    func outcomes(of receipts: [Result<MQTTClient.Receipt, any Error>]) async -> [DeliveryOutcome] {
        var outcomes = [DeliveryOutcome](repeating: .retry("not acknowledged", after: nil), count: receipts.count)
        for (index, receipt) in receipts.enumerated().reversed() {
            do {
                if let refusal = try await client.acknowledgements(receipt.get()).first ?? nil {
                    outcomes[index] = .failed("the broker refused it: \(refusal)")
                } else {
                    outcomes[index] = .delivered
                }
            } catch {
                outcomes[index] = .retry("\(error)", after: nil)
            }
        }
        return outcomes
    }

    /// The request headers of one webhook attempt: Standard Webhooks' three (id, timestamp
    /// from the service's clock, `v1,` signature over `id.timestamp.body`), the idempotency key
    /// and the attempt number (both persisted: unchanged across restarts), and the body-only
    /// signature of earlier releases (`X-Perimeter-Signature`, kept for one release).
    static func webhookHeaders(
        _ row: NotifierStore.OutboxRow, secret: WebhookSecret, now: Date
    ) -> [(String, String)] {
        let id = StandardWebhooks.webhookID(key: row.key)
        let timestamp = Int64(now.timeIntervalSince1970.rounded(.down))
        let signed = StandardWebhooks.signedContent(id: id, timestamp: timestamp, body: row.record)
        let legacy = Hex.encode(HMACSHA256.mac(key: secret.key, message: row.record))
        return [
            ("Content-Type", "application/json"), ("User-Agent", "perimeter-notifier"),
            ("webhook-id", id), ("webhook-timestamp", "\(timestamp)"),
            (
                "webhook-signature",
                StandardWebhooks.signatureHeader(mac: HMACSHA256.mac(key: secret.key, message: signed))
            ),
            ("Idempotency-Key", row.key), ("X-Perimeter-Attempt", "\(row.attempts)"),
            ("X-Perimeter-Signature", "sha256=\(legacy)"),
        ]
    }

    private func post(
        _ row: NotifierStore.OutboxRow, url: String, secret: WebhookSecret, options: HTTPClient.Options
    ) -> DeliveryOutcome {
        let headers = Self.webhookHeaders(row, secret: secret, now: clock.now)
        do {
            let response = try HTTPClient.post(
                url, headers: headers, body: row.record, options: options, connections: connections[row.channel])
            let fields = WebhookReply.headers(response.headerLines)
            return WebhookReply.classify(status: response.status, retryAfter: fields["retry-after"], now: clock.now)
        } catch {
            return .retry("\(error)", after: nil)
        }
    }

    private func mail(
        _ row: NotifierStore.OutboxRow, relay: SMTPClient.Relay, from: String, to: [String]
    ) -> DeliveryOutcome {
        let record = (try? JSONParser.parse(row.record)) ?? .null
        let message = MailMessage(
            from: from, to: to,
            subject: record["title"]?.stringValue ?? "Perimeter: \(record["event"]?.stringValue ?? "event")",
            body: (record["body"]?.stringValue ?? "") + "\n",
            messageID: MailMessage.messageID(key: row.key, from: from),
            date: clock.now, timeZone: timeZones[row.venue] ?? TimeZone(identifier: "UTC")!)
        let data = Array(message.rendered().utf8)
        do {
            try SMTPClient.send(data, from: from, to: to, via: relay)
            return .delivered
        } catch {
            return MailReply.classify(responseCode: error.responseCode, reason: "\(error)")
        }
    }
}

/// Capped exponential backoff with jitter: attempt n waits between half and all of
/// `initial × 2^(n-1)`, at most `maximum`.
public func retryBackoff(attempt: Int, initial: Double, maximum: Double, unit: Double) -> Double {
    let ceiling = min(maximum, initial * pow(2, Double(max(0, attempt - 1))))
    return ceiling * (0.5 + 0.5 * unit)
}
