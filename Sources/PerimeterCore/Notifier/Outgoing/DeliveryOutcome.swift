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
        return httpDate(trimmed).map { max(0, $0.timeIntervalSince(now)) }
    }

    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    private static let weekdays: Set<Substring> = ["Mon,", "Tue,", "Wed,", "Thu,", "Fri,", "Sat,", "Sun,"]

    /// An IMF-fixdate (RFC 9110 §5.6.7: `Sun, 06 Nov 1994 08:49:37 GMT`), read by hand: a
    /// DateFormatter per answer cost 30 ms of the fuzzer's time per input and leaked in
    /// Foundation (LeakSanitizer), and the format is fixed. Nil for anything else.
    static func httpDate(_ text: String) -> Date? {
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 6, weekdays.contains(parts[0]), parts[5] == "GMT", parts[1].count == 2,
            parts[3].count == 4, let day = Int(parts[1]), let year = Int(parts[3]),
            let month = months.firstIndex(where: { $0 == parts[2] }).map({ $0 + 1 })
        else { return nil }
        let clock = parts[4].split(separator: ":", omittingEmptySubsequences: false)
        let digits: (Substring) -> Bool = { $0.allSatisfy { $0.isASCII && $0.isNumber } }
        guard clock.count == 3, clock.allSatisfy({ $0.count == 2 && digits($0) }),
            let hour = Int(clock[0]), let minute = Int(clock[1]), let second = Int(clock[2]),
            (0..<24).contains(hour), (0..<60).contains(minute), (0...60).contains(second),
            digits(parts[1]), digits(parts[3])
        else { return nil }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let lengths = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard day >= 1, day <= lengths[month - 1] else { return nil }
        // Days from 1970-01-01 to the date (Howard Hinnant's days_from_civil).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Date(timeIntervalSince1970: Double(days * 86_400 + hour * 3600 + minute * 60 + second))
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
