import Foundation
import PerimeterCore
import PerimeterMQTT
import PerimeterNet

/// How one delivery attempt ended.
public enum DeliveryOutcome: Sendable, Equatable {
    case delivered
    /// Worth trying again (5xx, 408, 429, a timeout, a connection failure); `after`: the
    /// peer's Retry-After, when it gave one.
    case retry(String, after: Double?)
    /// Trying again would not help (4xx other than 408 and 429, a 5xx mail reply, an ACL refusal).
    case failed(String)
}

/// Sends one outbox row over its channel. Blocking I/O runs on threads of its own.
struct ChannelSender: Sendable {
    let client: MQTTClient
    let prefix: String
    let timeout: Double
    /// "Now" for an HTTP-date Retry-After and a mail's Date header.
    let clock: any TimeSource

    func send(_ row: NotifierStore.OutboxRow, over channel: NotifierConfiguration.Channel) async -> DeliveryOutcome {
        switch channel {
        case .mqtt(let template):
            return await publish(row, template: template)
        case .webhook(let url, let secret, let tls):
            return await post(row, url: url, secret: secret, tls: tls)
        case .mail(let relay, let from, let to):
            return await mail(row, relay: relay, from: from, to: to)
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

    private func publish(_ row: NotifierStore.OutboxRow, template: String?) async -> DeliveryOutcome {
        let properties = MQTTProperties(
            contentType: "application/json", userProperties: [UserProperty("idempotency-key", row.key)])
        do {
            try await client.publish(
                topic(row, template: template), payload: row.record, qos: .atLeastOnce, properties: properties)
            return .delivered
        } catch let error as MQTTError {
            if case .publishRefused = error.kind { return .failed("the broker refused it: \(error)") }
            return .retry("\(error)", after: nil)
        } catch {
            return .retry("\(error)", after: nil)
        }
    }

    private func post(
        _ row: NotifierStore.OutboxRow, url: URL, secret: String, tls: TCPConnection.TLS
    ) async
        -> DeliveryOutcome
    {
        let signature = Hex.encode(HMACSHA256.mac(key: Array(secret.utf8), message: row.record))
        let headers = [
            ("Content-Type", "application/json"), ("User-Agent", "perimeter-notifier"),
            ("X-Perimeter-Signature", "sha256=\(signature)"), ("Idempotency-Key", row.key),
            ("X-Perimeter-Attempt", "\(row.attempts + 1)"),
        ]
        let timeout = timeout
        let body = row.record
        do {
            let response = try await Blocking.run {
                try HTTPClient.post(url, headers: headers, body: body, timeout: timeout, tls: tls)
            }
            return Self.classify(status: response.status, retryAfter: response.headers["retry-after"], now: clock.now)
        } catch {
            return .retry("\(error)", after: nil)
        }
    }

    /// 2xx delivered; 408, 429 and 5xx again (429 and 503 after their Retry-After); any other
    /// status fails for good.
    static func classify(status: Int, retryAfter: String?, now: Date) -> DeliveryOutcome {
        switch status {
        case 200..<300: return .delivered
        case 408, 429, 500..<600:
            return .retry("HTTP \(status)", after: retryAfter.flatMap { retryDelay($0, now: now) })
        default: return .failed("HTTP \(status)")
        }
    }

    /// `Retry-After`: seconds, or an HTTP date.
    static func retryDelay(_ text: String, now: Date) -> Double? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if let seconds = Double(trimmed), seconds.isFinite, seconds >= 0 { return seconds }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: trimmed).map { max(0, $0.timeIntervalSince(now)) }
    }

    private func mail(
        _ row: NotifierStore.OutboxRow, relay: SMTPClient.Relay, from: String, to: [String]
    ) async
        -> DeliveryOutcome
    {
        let record = (try? JSONParser.parse(row.record)) ?? .null
        let message = SMTPClient.Message(
            from: from, to: to,
            subject: record["title"]?.stringValue ?? "Perimeter: \(record["event"]?.stringValue ?? "event")",
            body: (record["body"]?.stringValue ?? "") + "\n", messageID: "\(Hex.encode(Array(row.key.utf8)))@perimeter",
            date: clock.now)
        do {
            _ = try await Blocking.run { try SMTPClient.send(message, via: relay) }
            return .delivered
        } catch let refused as SMTPClient.Refused {
            return refused.permanent ? .failed("\(refused)") : .retry("\(refused)", after: nil)
        } catch {
            return .retry("\(error)", after: nil)
        }
    }
}

/// Capped exponential backoff with jitter: attempt n waits between half and all of
/// `initial × 2^(n-1)`, at most `maximum`.
public func retryBackoff(attempt: Int, initial: Double, maximum: Double, unit: Double) -> Double {
    let ceiling = min(maximum, initial * pow(2, Double(max(0, attempt - 1))))
    return ceiling * (0.5 + 0.5 * unit)
}
