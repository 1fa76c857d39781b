/// A failure of an outgoing transfer through libcurl: which call failed, for which request,
/// and why — curl's own words (its error buffer), or ours when a callback stopped the transfer
/// (a response past its size cap) or the request was refused before reaching curl.
public struct CurlError: Error, Sendable, CustomStringConvertible, Equatable {
    /// What kind of failure this is, for a caller deciding whether to try again.
    public enum Kind: Sendable, Equatable {
        /// No answer in time: connect, whole-transfer or stall timeout (`CURLE_OPERATION_TIMEDOUT`).
        case timeout
        /// The peer's answer was larger than the configured cap; the transfer was stopped.
        case tooLarge
        /// TLS could not be set up or the peer's certificate or name did not verify.
        case tls
        /// The request was refused before it reached curl (a header with a line break).
        case invalidRequest
        /// Any other curl failure (resolve, connect, a malformed answer, a refusing SMTP reply).
        case transfer
    }

    public var kind: Kind
    /// The `CURLcode` (0 when the request never reached curl).
    public var code: Int
    /// The C function that failed (`curl_easy_perform`, `curl_easy_setopt`).
    public var function: String
    /// The request: `POST http://host:port/path`, `SMTP smtp://host:port` (no query, no credentials).
    public var context: String
    /// curl's words for the failure, or ours.
    public var detail: String
    /// The last status the peer sent before the failure (an HTTP status, an SMTP reply code), 0 if none.
    public var responseCode: Int

    public init(
        _ kind: Kind, code: Int, function: String, context: String, detail: String, responseCode: Int = 0
    ) {
        self.kind = kind
        self.code = code
        self.function = function
        self.context = context
        self.detail = detail
        self.responseCode = responseCode
    }

    public var description: String {
        var text = "\(context): \(detail)"
        if code != 0 { text += " (\(function), curl code \(code))" }
        return text
    }
}
