import CCurl
import Foundation

/// Sends one message to an SMTP relay over libcurl: EHLO, STARTTLS (required unless the relay
/// is on loopback and the configuration says `never`), AUTH when credentials are given (only
/// ever after TLS), MAIL, RCPT, DATA — curl speaks the protocol, dot-stuffs and checks replies.
///
/// Blocking: call it on a thread of its own (``Blocking/run(_:)``).
public enum SMTPClient {
    public enum StartTLS: String, Sendable, Hashable, CaseIterable {
        /// Refuse to send unless the session is upgraded with STARTTLS (the default).
        case required
        /// Plain SMTP: allowed only for a relay on a loopback address (a local MTA).
        case never
    }

    public struct Relay: Sendable, Hashable {
        public var host: String
        public var port: Int
        public var startTLS: StartTLS
        /// CA certificates to trust instead of the system's.
        public var caFile: String?
        public var username: String?
        public var password: String?
        /// The name given in EHLO.
        public var heloName: String
        /// Seconds for the whole session.
        public var timeout: Double
        public var connectTimeout: Double
        /// Seconds below 1 byte/s after which a stalled session is given up.
        public var stallTimeout: Double
        public var proxy: HTTPClient.Proxy

        public init(
            host: String, port: Int = 25, startTLS: StartTLS = .required, caFile: String? = nil,
            username: String? = nil, password: String? = nil, heloName: String = "perimeter.localhost",
            timeout: Double = 30, connectTimeout: Double = 10, stallTimeout: Double = 10,
            proxy: HTTPClient.Proxy = .none
        ) {
            self.host = host
            self.port = port
            self.startTLS = startTLS
            self.caFile = caFile
            self.username = username
            self.password = password
            self.heloName = heloName
            self.timeout = timeout
            self.connectTimeout = connectTimeout
            self.stallTimeout = stallTimeout
            self.proxy = proxy
        }

        /// `smtp://host:port/helo` (curl takes the EHLO name from the path).
        var url: String {
            let bracketed = host.contains(":") ? "[\(host)]" : host
            return "smtp://\(bracketed):\(port)/\(heloName)"
        }
    }

    /// Whether `host` names this machine: `localhost`, 127.0.0.0/8 or ::1 — the only relays
    /// `startTLS: never` may be used with.
    public static func isLoopback(_ host: String) -> Bool {
        if host.lowercased() == "localhost" || host == "::1" || host == "[::1]" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// Sends `message` (its header block and body, CRLF lines, as after DATA) from `from` to
    /// each of `to`.
    /// - Throws: ``CurlError``; its `responseCode` is the relay's last reply code (5xx: permanent).
    public static func send(_ message: [UInt8], from: String, to: [String], via relay: Relay) throws(CurlError) {
        let context = "SMTP \(relay.host):\(relay.port)"
        for address in [from] + to {
            guard !address.isEmpty, address.contains("@"),
                !address.contains(where: { "<>\r\n\0 ".contains($0) })
            else {
                throw CurlError(
                    .invalidRequest, code: 0, function: "", context: context,
                    detail: "'\(address)' is not a plain mail address")
            }
        }
        let transfer = try Self.session(relay, context: context)
        try transfer.set(CURLOPT_MAIL_FROM, "<\(from)>")
        try transfer.set(CURLOPT_MAIL_RCPT, list: to.map { "<\($0)>" })
        try transfer.upload(message)
        try transfer.perform()
    }

    /// A transfer set up for `relay`: its URL, STARTTLS as its setting says, the TLS, proxy and
    /// timeout settings, and its credentials. The caller adds what the session is for.
    static func session(_ relay: Relay, context: String) throws(CurlError) -> CurlTransfer {
        let transfer = try CurlTransfer(context: context, maxBodyBytes: 65_536, maxHeaderBytes: 65_536)
        try transfer.set(CURLOPT_URL, relay.url)
        try transfer.set(CURLOPT_PROTOCOLS_STR, "smtp")
        try transfer.set(
            CURLOPT_USE_SSL, Int(relay.startTLS == .never ? CURLUSESSL_NONE.rawValue : CURLUSESSL_ALL.rawValue))
        try HTTPClient.setCommon(
            transfer, caFile: relay.caFile, proxy: relay.proxy,
            options: HTTPClient.Options(
                connectTimeout: relay.connectTimeout, timeout: relay.timeout, stallTimeout: relay.stallTimeout))
        if let username = relay.username {
            try transfer.set(CURLOPT_USERNAME, username)
            try transfer.set(CURLOPT_PASSWORD, relay.password ?? "")
        }
        return transfer
    }
}
