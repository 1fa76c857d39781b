// libFuzzer target: the notifier's glue around libcurl — what a webhook receiver's answer and
// a mail relay's reply mean (WebhookReply, MailReply), and what goes out (MailMessage's RFC
// 2047 subject, StandardWebhooks' id, WebhookSecret).
// Input: the first byte picks a status (with the second), the rest is header lines (CRLF or
// LF) as curl hands them over, and the whole input as UTF-8 text for the mail subject.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let now = Date(timeIntervalSince1970: 1_764_603_660)

    // An answer: header lines as they came, a status from the first two bytes (0–999).
    var lines: [[UInt8]] = []
    var line: [UInt8] = []
    for byte in bytes.dropFirst(2) {
        line.append(byte)
        if byte == 10 {
            lines.append(line)
            line.removeAll()
        }
    }
    if !line.isEmpty { lines.append(line) }
    for raw in lines {
        if let (name, value) = WebhookReply.field(raw) {
            check(!name.isEmpty && name == name.lowercased(), "field name empty or not lowercased", bytes)
            check(!value.hasPrefix(" ") && !value.hasSuffix(" ") && !value.hasSuffix("\r"), "value not trimmed", bytes)
        }
    }
    let fields = WebhookReply.headers(lines)
    let status = size >= 2 ? (Int(bytes[0]) << 8 | Int(bytes[1])) % 1000 : 200
    let outcome = WebhookReply.classify(status: status, retryAfter: fields["retry-after"], now: now)
    switch outcome {
    case .delivered: check((200..<300).contains(status), "delivered on \(status)", bytes)
    case .retry(_, let after):
        check([408, 429].contains(status) || (500..<600).contains(status), "retry on \(status)", bytes)
        if let after { check(after.isFinite && after >= 0, "Retry-After delay \(after)", bytes) }
    case .failed: check(!(200..<300).contains(status), "failed on \(status)", bytes)
    }
    let text = String(decoding: bytes, as: UTF8.self)
    if let delay = WebhookReply.retryDelay(text, now: now) {
        check(delay.isFinite && delay >= 0, "retryDelay \(delay)", bytes)
    }
    if case .failed = MailReply.classify(responseCode: status, reason: text) {
        check((500..<600).contains(status), "mail failed for good on \(status)", bytes)
    }

    // A subject: folded lines of at most 76 characters (78 when not encoded), encoded-words of
    // at most 75, and decoding gives the text back.
    let header = MailMessage.header("Subject", text)
    check(header.hasPrefix("Subject: ") && header.hasSuffix("\r\n"), "header shape", bytes)
    // "\r\n" is one Character: drop the line end as bytes.
    let folded = String(decoding: header.utf8.dropLast(2), as: UTF8.self).components(separatedBy: "\r\n")
    var decoded = ""
    for (index, physical) in folded.enumerated() {
        check(index == 0 || physical.hasPrefix(" "), "a continuation line without a leading blank", bytes)
        check(!physical.contains("\r") && !physical.contains("\n"), "a bare CR or LF in the header", bytes)
        let value = index == 0 ? String(physical.dropFirst(9)) : String(physical.dropFirst())
        if value.hasPrefix("=?UTF-8?B?") {
            check(physical.utf8.count <= 76, "an encoded line of \(physical.utf8.count) characters", bytes)
            check(value.utf8.count <= 75, "an encoded-word of \(value.utf8.count) characters", bytes)
            check(value.hasSuffix("?="), "an encoded-word without its end", bytes)
            let payload = value.dropFirst(10).dropLast(2)
            guard let data = Data(base64Encoded: String(payload)) else {
                check(false, "encoded-word not base64", bytes)
                return 0
            }
            check(String(data: data, encoding: .utf8) != nil, "an encoded-word splits a character", bytes)
            decoded += String(decoding: data, as: UTF8.self)
        } else {
            check(folded.count == 1 && physical.utf8.count <= 78, "a plain header longer than 78", bytes)
            decoded += value
        }
    }
    check(decoded == text, "the subject does not decode to the text", bytes)

    // Ids and secrets.
    let id = StandardWebhooks.webhookID(key: text)
    check(!id.contains("."), "webhook-id holds a '.'", bytes)
    _ = try? WebhookSecret(text)
    return 0
}

/// A property check that crashes with its message kept in -O builds.
private func check(_ condition: Bool, _ what: String, _ input: [UInt8]) {
    if !condition { fatalError("\(what): input = \(input.prefix(200))") }
}
