import CCurl
import Foundation

/// Reachability probes for the notifier's channels (`perimeter doctor`): the same libcurl
/// settings as a delivery — certificate and host verification, the configured CA and proxy,
/// timeouts — and nothing delivered.
///
/// Blocking: call them on a thread of their own (``Blocking/run(_:)``).
public enum ChannelProbe {
    /// A `HEAD` request to a webhook's URL: the connection, TLS and an HTTP answer, no body sent.
    /// - Returns: the answer's status (a receiver that only takes POST says 405 or 501: reachable).
    /// - Throws: ``CurlError`` when there is no answer (kind `.tls` for a certificate that does not verify).
    public static func head(_ url: String, options: HTTPClient.Options) throws(CurlError) -> Int {
        let transfer = try CurlTransfer(
            context: "HEAD \(HTTPClient.redacted(url))", maxBodyBytes: 0, maxHeaderBytes: options.maxHeaderBytes)
        try transfer.set(CURLOPT_URL, url)
        try transfer.set(CURLOPT_PROTOCOLS_STR, "http,https")
        try transfer.set(CURLOPT_PATH_AS_IS, 1)
        try transfer.set(CURLOPT_FOLLOWLOCATION, 0)
        try transfer.set(CURLOPT_NOBODY, 1)
        try HTTPClient.setCommon(transfer, caFile: options.caFile, proxy: options.proxy, options: options)
        try transfer.perform()
        return transfer.responseCode
    }

    /// An SMTP session that sends no message: EHLO, STARTTLS (unless the relay's setting is
    /// `never`), AUTH with the credentials when the relay offers it, `NOOP`, QUIT.
    /// - Returns: the relay's reply to NOOP (250).
    /// - Throws: ``CurlError``: kind `.tls` when STARTTLS is missing or the certificate does not
    ///   verify; code 67 (`CURLE_LOGIN_DENIED`) when the credentials are refused.
    public static func smtp(_ relay: SMTPClient.Relay) throws(CurlError) -> Int {
        let transfer = try SMTPClient.session(relay, context: "SMTP \(relay.host):\(relay.port)")
        // Without MAIL_FROM, recipients or an upload, curl sends this command instead of a message.
        try transfer.set(CURLOPT_CUSTOMREQUEST, "NOOP")
        try transfer.perform()
        return transfer.responseCode
    }
}
