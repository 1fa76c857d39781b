import Foundation

/// How one delivery attempt ended.
public enum DeliveryOutcome: Sendable, Equatable {
    case delivered
    /// Worth trying again (5xx, 408, 429, a timeout, a connection failure, a malformed or
    /// oversized answer); `after`: the peer's Retry-After, when it gave one.
    case retry(String, after: Double?)
    /// Trying again would not help (4xx other than 408 and 429, a 3xx — redirects are not
    /// followed — a 5xx mail reply, an ACL refusal).
    case failed(String)
}

/// What a webhook receiver's answer means for the delivery: the glue between libcurl's view
/// of an HTTP exchange (header lines as they came, a status) and the outbox. Pure, so that the
/// fuzz target `outgoing` drives it with any bytes a hostile receiver could send.
public enum WebhookReply {
    /// One header line as the transfer handed it over (`Name: value\r\n`): the lowercased name
    /// and the value without surrounding blanks; nil for a status line, the blank line ending
    /// the block, or a line without a name.
    public static func field(_ line: some Collection<UInt8>) -> (name: String, value: String)? {
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        let name = line[line.startIndex..<colon]
        // A field name is a token (RFC 9110 §5.1): no blanks, no controls, not empty.
        guard !name.isEmpty, name.allSatisfy({ $0 > 32 && $0 < 127 }) else { return nil }
        var value = line[line.index(after: colon)...]
        while let first = value.first, first == 32 || first == 9 { value = value.dropFirst() }
        var end = value.endIndex
        while end > value.startIndex {
            let previous = value.index(end, offsetBy: -1)
            guard [9, 10, 13, 32].contains(value[previous]) else { break }
            end = previous
        }
        return (String(decoding: name, as: UTF8.self).lowercased(), String(decoding: value[..<end], as: UTF8.self))
    }

    /// The fields of one response's header block; the first of a repeated name wins.
    public static func headers(_ lines: [[UInt8]]) -> [String: String] {
        var fields: [String: String] = [:]
        for line in lines {
            if let (name, value) = field(line), fields[name] == nil { fields[name] = value }
        }
        return fields
    }

    /// 2xx delivered; 408, 429 and 5xx again (429 and 503 after their Retry-After); any other
    /// status — 3xx included, as redirects are not followed — fails for good.
    public static func classify(status: Int, retryAfter: String?, now: Date) -> DeliveryOutcome {
        switch status {
        case 200..<300: return .delivered
        case 408, 429, 500..<600:
            return .retry("HTTP \(status)", after: retryAfter.flatMap { retryDelay($0, now: now) })
        case 300..<400: return .failed("HTTP \(status) (redirects are not followed: configure the final URL)")
        default: return .failed("HTTP \(status)")
        }
    }

    /// `Retry-After`: seconds, or an HTTP date; nil when it is neither.
    public static func retryDelay(_ text: String, now: Date) -> Double? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if let seconds = Double(trimmed), seconds.isFinite, seconds >= 0 { return seconds }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: trimmed).map { max(0, $0.timeIntervalSince(now)) }
    }
}

/// What a mail relay's refusal means: a 5xx reply is permanent (trying again gives the same
/// answer), anything else — a 4xx, no reply at all, a timeout — is worth another attempt.
public enum MailReply {
    /// - Parameters:
    ///   - responseCode: the relay's last reply code (0 when it never answered).
    ///   - reason: the failure as the transfer described it.
    public static func classify(responseCode: Int, reason: String) -> DeliveryOutcome {
        (500..<600).contains(responseCode) ? .failed(reason) : .retry(reason, after: nil)
    }
}
