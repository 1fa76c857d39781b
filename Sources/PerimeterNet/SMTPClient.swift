import Foundation

/// Sends one message to an SMTP relay (RFC 5321): EHLO, STARTTLS when the relay offers it
/// (or required), AUTH PLAIN when credentials are given (only over TLS), MAIL, RCPT, DATA.
public enum SMTPClient {
    public enum StartTLS: String, Sendable, Hashable, CaseIterable {
        /// Upgrade when the relay offers STARTTLS (the default).
        case opportunistic
        /// Refuse to send unless the session is upgraded.
        case required
        case never
    }

    public struct Relay: Sendable, Hashable {
        public var host: String
        public var port: Int
        public var startTLS: StartTLS
        public var tls: TCPConnection.TLS
        public var username: String?
        public var password: String?
        public var heloName: String
        public var timeout: Double

        public init(
            host: String, port: Int = 25, startTLS: StartTLS = .opportunistic, tls: TCPConnection.TLS = .init(),
            username: String? = nil, password: String? = nil, heloName: String = "perimeter.localhost",
            timeout: Double = 30
        ) {
            self.host = host
            self.port = port
            self.startTLS = startTLS
            self.tls = tls
            self.username = username
            self.password = password
            self.heloName = heloName
            self.timeout = timeout
        }
    }

    public struct Message: Sendable, Hashable {
        public var from: String
        public var to: [String]
        public var subject: String
        public var body: String
        /// Without angle brackets: `key@perimeter`.
        public var messageID: String
        public var date: Date

        public init(from: String, to: [String], subject: String, body: String, messageID: String, date: Date) {
            self.from = from
            self.to = to
            self.subject = subject
            self.body = body
            self.messageID = messageID
            self.date = date
        }
    }

    /// A reply the relay gave instead of accepting: `permanent` for 5xx (do not retry).
    public struct Refused: Error, Sendable, CustomStringConvertible {
        public var code: Int
        public var reply: String
        public var step: String
        public var permanent: Bool { code >= 500 }
        public var description: String { "\(step): the relay answered \(code) \(reply)" }
    }

    /// Sends `message`; returns whether the session used TLS.
    /// - Throws: ``Refused`` for a refusing reply, ``NetError`` for transport failures.
    @discardableResult
    public static func send(_ message: Message, via relay: Relay) throws -> Bool {
        let connection = try TCPConnection(host: relay.host, port: relay.port, timeout: relay.timeout)
        defer { connection.close() }
        var session = Session(connection: connection)
        try session.expect(220, step: "greeting")
        var features = try session.command("EHLO \(relay.heloName)", expect: 250, step: "EHLO")
        let offered = features.contains { $0.uppercased().hasPrefix("STARTTLS") }
        if relay.startTLS == .required && !offered {
            throw NetError(.tls, "the relay \(relay.host):\(relay.port) does not offer STARTTLS, which is required")
        }
        if relay.startTLS != .never && offered {
            _ = try session.command("STARTTLS", expect: 220, step: "STARTTLS")
            try connection.startTLS(relay.tls)
            session.buffer.removeAll()
            features = try session.command("EHLO \(relay.heloName)", expect: 250, step: "EHLO after STARTTLS")
        }
        if let username = relay.username {
            guard connection.isTLS else {
                throw NetError(.tls, "credentials for \(relay.host) are not sent over a connection without TLS")
            }
            let token = Data(([0] + Array(username.utf8) + [0] + Array((relay.password ?? "").utf8)))
                .base64EncodedString()
            _ = try session.command("AUTH PLAIN \(token)", expect: 235, step: "AUTH")
        }
        _ = try session.command("MAIL FROM:<\(try address(message.from))>", expect: 250, step: "MAIL FROM")
        for recipient in message.to {
            _ = try session.command("RCPT TO:<\(try address(recipient))>", expect: 250, step: "RCPT TO \(recipient)")
        }
        _ = try session.command("DATA", expect: 354, step: "DATA")
        try connection.write(Array(render(message).utf8))
        _ = try session.command(".", expect: 250, step: "end of DATA")
        _ = try? session.command("QUIT", expect: 221, step: "QUIT")
        return connection.isTLS
    }

    /// An address without brackets or line breaks.
    static func address(_ text: String) throws -> String {
        guard !text.isEmpty, text.contains("@"), !text.contains(where: { "<>\r\n ".contains($0) }) else {
            throw NetError(.protocolError, "not a plain mail address: '\(text)'")
        }
        return text
    }

    /// The message as DATA: headers, a UTF-8 body in base64 (safe for any line length and
    /// 7-bit relays), dot-stuffing moot because base64 lines never start with '.'.
    static func render(_ message: Message) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss '+0000'"
        let subject =
            message.subject.allSatisfy { $0.isASCII && !$0.isNewline }
            ? message.subject : "=?UTF-8?B?\(Data(message.subject.utf8).base64EncodedString())?="
        var text = "From: <\(message.from)>\r\nTo: \(message.to.map { "<\($0)>" }.joined(separator: ", "))\r\n"
        text += "Subject: \(subject)\r\nDate: \(formatter.string(from: message.date))\r\n"
        text += "Message-ID: <\(message.messageID)>\r\nMIME-Version: 1.0\r\n"
        text += "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n"
        let encoded = Data(message.body.utf8).base64EncodedString(options: [
            .lineLength76Characters, .endLineWithCarriageReturn, .endLineWithLineFeed,
        ])
        text += encoded + "\r\n"
        return text
    }

    struct Session {
        let connection: TCPConnection
        var buffer: [UInt8] = []

        /// One reply (all its lines); throws ``Refused`` unless its code is `code`.
        mutating func expect(_ code: Int, step: String) throws {
            _ = try reply(expect: code, step: step)
        }

        mutating func command(_ line: String, expect code: Int, step: String) throws -> [String] {
            try connection.write(line + "\r\n")
            return try reply(expect: code, step: step)
        }

        private mutating func reply(expect code: Int, step: String) throws -> [String] {
            var lines: [String] = []
            while true {
                let line = try readLine()
                guard line.count >= 3, let found = Int(line.prefix(3)) else {
                    throw NetError(.protocolError, "\(step): not an SMTP reply: '\(line)'")
                }
                lines.append(String(line.dropFirst(4)))
                if line.count == 3 || line[line.index(line.startIndex, offsetBy: 3)] != "-" {
                    if found != code { throw Refused(code: found, reply: lines.joined(separator: " "), step: step) }
                    return lines
                }
            }
        }

        private mutating func readLine() throws -> String {
            while true {
                if let end = buffer.firstRange(of: [13, 10]) {
                    let line = String(decoding: buffer[..<end.lowerBound], as: UTF8.self)
                    buffer.removeSubrange(..<end.upperBound)
                    return line
                }
                let chunk = try connection.read()
                if chunk.isEmpty { throw NetError(.io, "the relay closed the connection") }
                buffer += chunk
                if buffer.count > 65_536 { throw NetError(.protocolError, "reply line too long") }
            }
        }
    }
}
