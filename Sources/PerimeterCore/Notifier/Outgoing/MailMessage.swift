import Foundation

/// A notification as an Internet message (RFC 5322) the way mail clients expect it: a subject
/// in RFC 2047 encoded-words of at most 75 characters on folded lines of at most 76, a
/// Message-ID on the sender's domain, a `Date` in the venue's time zone, and a UTF-8 body in
/// base64 (safe for any line length and 7-bit relays; base64 lines never start with `.`).
public struct MailMessage: Sendable, Hashable {
    public var from: String
    public var to: [String]
    public var subject: String
    public var body: String
    /// Without angle brackets: `6576…@venue.example` (``messageID(key:from:)``).
    public var messageID: String
    public var date: Date
    /// The venue's time zone, for the `Date` header.
    public var timeZone: TimeZone

    public init(
        from: String, to: [String], subject: String, body: String, messageID: String, date: Date, timeZone: TimeZone
    ) {
        self.from = from
        self.to = to
        self.subject = subject
        self.body = body
        self.messageID = messageID
        self.date = date
        self.timeZone = timeZone
    }

    /// A Message-ID stable across retries of one notification (receivers drop the repeat): the
    /// idempotency key in hex, on the domain of the `from` address.
    public static func messageID(key: String, from: String) -> String {
        let domain = from.split(separator: "@").last.map { $0.lowercased() } ?? "localhost"
        return "\(Hex.encode(Array(key.utf8)))@\(domain)"
    }

    /// The message as the relay gets it after DATA, lines ending in CRLF.
    public func rendered() -> String {
        var text = "From: <\(from)>\r\nTo: \(to.map { "<\($0)>" }.joined(separator: ", "))\r\n"
        text += Self.header("Subject", subject)
        text += "Date: \(Self.date(date, in: timeZone))\r\n"
        text += "Message-ID: <\(messageID)>\r\nMIME-Version: 1.0\r\n"
        text += "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n"
        text += Data(body.utf8).base64EncodedString(options: [
            .lineLength76Characters, .endLineWithCarriageReturn, .endLineWithLineFeed,
        ])
        return text + "\r\n"
    }

    /// RFC 5322 date-time in `timeZone`: `Mon, 01 Dec 2025 09:41:00 -0600`.
    public static func date(_ date: Date, in timeZone: TimeZone) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = timeZone
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss xx"
        return formatter.string(from: date)
    }

    /// Longest line holding an encoded-word (RFC 2047 §2), and longest encoded-word.
    static let lineLimit = 76
    static let wordLimit = 75
    private static let wordPrefix = "=?UTF-8?B?"

    /// `Name: value\r\n`, the value as-is when it is printable ASCII that fits on one line and
    /// could not be mistaken for an encoded-word, else as UTF-8 encoded-words, one per line.
    public static func header(_ name: String, _ value: String) -> String {
        let plain =
            value.utf8.allSatisfy { $0 >= 32 && $0 < 127 } && !value.contains("=?")
            && name.count + 2 + value.utf8.count <= 78 && !value.hasPrefix(" ") && !value.hasSuffix(" ")
        if plain { return "\(name): \(value)\r\n" }
        let words = encodedWords(value, firstLineUsed: name.count + 2)
        return "\(name): " + words.joined(separator: "\r\n ") + "\r\n"
    }

    /// `value` as encoded-words (`=?UTF-8?B?…?=`), split between Unicode scalars (RFC 2047 §5:
    /// a word holds whole characters), each at most 75 characters and each fitting its line —
    /// the first shares its line with `firstLineUsed` characters, the others follow one blank.
    public static func encodedWords(_ value: String, firstLineUsed: Int) -> [String] {
        var words: [String] = []
        var pending: [UInt8] = []
        var budget = maxBytes(room: lineLimit - firstLineUsed)
        for scalar in value.unicodeScalars {
            let bytes = Array(String(scalar).utf8)
            if pending.count + bytes.count > budget, !pending.isEmpty {
                words.append(wordPrefix + Data(pending).base64EncodedString() + "?=")
                pending.removeAll()
                budget = maxBytes(room: lineLimit - 1)
            }
            pending += bytes
        }
        if !pending.isEmpty || words.isEmpty { words.append(wordPrefix + Data(pending).base64EncodedString() + "?=") }
        return words
    }

    /// How many bytes fit in one word with `room` characters left on its line: base64 turns
    /// 3 bytes into 4 characters, after the 12 characters of `=?UTF-8?B?` and `?=`. At least 4
    /// (one scalar of any length), so a cramped first line still makes progress.
    private static func maxBytes(room: Int) -> Int {
        let characters = min(room, wordLimit) - wordPrefix.count - 2
        return max(4, characters / 4 * 3)
    }
}
