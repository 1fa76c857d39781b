import CCurl
import Foundation
import Synchronization

/// Webhook POSTs over libcurl's easy interface, with the limits a notifier needs against any
/// receiver: certificate and host verification always on, connect, whole-transfer and stall
/// timeouts, caps on the answer's headers and body, no redirects, no proxy unless configured,
/// and the URL sent exactly as configured (never percent-decoded or normalised).
///
/// Blocking: call it on a thread of its own (``Blocking/run(_:)``).
public enum HTTPClient {
    /// Which proxy, if any: none (the default — `http_proxy` and friends are ignored), one
    /// given explicitly, or the standard environment variables.
    public enum Proxy: Sendable, Hashable {
        case none
        case url(String)
        case environment
    }

    public struct Options: Sendable, Hashable {
        /// CA certificates to trust instead of the system's (a private CA's receiver).
        public var caFile: String?
        public var proxy: Proxy
        /// Seconds to set up the connection (TCP and TLS).
        public var connectTimeout: Double
        /// Seconds for the whole exchange, connection to the end of the answer.
        public var timeout: Double
        /// Seconds below 1 byte/s after which a stalled exchange is given up.
        public var stallTimeout: Double
        /// The most body bytes read from an answer; past it the exchange stops.
        public var maxResponseBytes: Int
        /// The most header bytes read from an answer; past it the exchange stops.
        public var maxHeaderBytes: Int

        public init(
            caFile: String? = nil, proxy: Proxy = .none, connectTimeout: Double = 10, timeout: Double = 30,
            stallTimeout: Double = 10, maxResponseBytes: Int = 65_536, maxHeaderBytes: Int = 32_768
        ) {
            self.caFile = caFile
            self.proxy = proxy
            self.connectTimeout = connectTimeout
            self.timeout = timeout
            self.stallTimeout = stallTimeout
            self.maxResponseBytes = maxResponseBytes
            self.maxHeaderBytes = maxHeaderBytes
        }
    }

    public struct Response: Sendable {
        public var status: Int
        /// The answer's header lines as they came (the last response's block, status line first).
        public var headerLines: [[UInt8]]
        public var body: [UInt8]
    }

    /// Connections kept open between requests, for one receiver (a webhook channel): at most
    /// `capacity` idle ones, each in an easy handle of its own that a request takes and gives
    /// back. A request to the same receiver then skips the TCP connect and the TLS handshake,
    /// which cost a webhook more than the rest of its delivery on loopback and far more over
    /// a network.
    ///
    /// What curl decides per request stays with curl: a kept connection is reused only for
    /// the same scheme, host, port, TLS settings and proxy; one older than ``maximumAge`` is
    /// closed; an answer cut short, too large or timed out closes its connection. One more
    /// check is ours: a kept connection with bytes or an end waiting on it (the receiver
    /// closed it, or sent an answer nobody asked for) is closed, not reused: libcurl 7.88
    /// would read those bytes as the next request's answer. A handle given back when
    /// `capacity` are already idle is dropped with its connection, so the idle sockets stay
    /// bounded whatever the receiver does.
    public final class Connections: Sendable {
        /// Seconds an idle connection may wait for its next request (curl's default is 118 s;
        /// shorter meets receivers that close idle connections sooner less often).
        public static let maximumAge = 30
        public let capacity: Int
        private let idle: Mutex<[Kept]>
        private let openedCount = Atomic<Int>(0)

        public init(capacity: Int) {
            self.capacity = max(1, capacity)
            idle = Mutex([])
        }

        /// Idle handles (and so at most that many idle connections) kept now.
        public var idleCount: Int { idle.withLock { $0.count } }

        /// Connections opened by requests through these so far, answered or not: as many as
        /// the requests when the receiver keeps none open.
        public var opened: Int { openedCount.load(ordering: .relaxed) }

        /// An idle handle whose kept connection is quiet; one with bytes or an end waiting on
        /// its connection is dropped (closing it), so they are never read as an answer.
        func take() -> CurlTransfer? {
            while let kept = idle.withLock({ $0.popLast() }) {
                if kept.transfer.keptConnectionIsQuiet { return kept.transfer }
            }
            return nil
        }

        func giveBack(_ transfer: CurlTransfer) {
            openedCount.add(transfer.connectionsOpened, ordering: .relaxed)
            let kept = Kept(transfer: transfer)
            let dropped: Kept? = idle.withLock { idle in
                guard idle.count < capacity else { return kept }
                idle.append(kept)
                return nil
            }
            _ = dropped  // released outside the lock: curl closes its connection
        }

        /// An idle easy handle. `@unchecked Sendable`: it holds a C handle (`CURL *`), which
        /// libcurl allows on any thread but on one at a time; it is in the list only while no
        /// request has it, and a request takes it out under the lock, so one thread has it at
        /// a time.
        private struct Kept: @unchecked Sendable {
            let transfer: CurlTransfer
        }
    }

    /// POSTs `body` to `url`.
    /// - Parameters:
    ///   - url: an `http://` or `https://` URL, used byte for byte as given.
    ///   - headers: request headers; a name that is not a token, or a value holding CR, LF or
    ///     NUL, is refused before anything is sent.
    ///   - connections: where to take a kept connection to this receiver from and give it
    ///     back to; nil: a connection for this request alone.
    /// - Throws: ``CurlError`` when there is no complete answer (the request, curl's reason).
    public static func post(
        _ url: String, headers: [(String, String)], body: [UInt8], options: Options,
        connections: Connections? = nil
    ) throws(CurlError) -> Response {
        func context() -> String { "POST \(redacted(url))" }
        for (name, value) in headers {
            guard !name.isEmpty, name.utf8.allSatisfy({ $0 > 32 && $0 < 127 && $0 != UInt8(ascii: ":") }) else {
                throw CurlError(
                    .invalidRequest, code: 0, function: "", context: context(),
                    detail: "header name '\(name)' is not an HTTP token")
            }
            guard !value.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) else {
                throw CurlError(
                    .invalidRequest, code: 0, function: "", context: context(),
                    detail: "the value of header \(name) holds a line break or NUL; refused")
            }
        }
        let transfer: CurlTransfer
        if let kept = connections?.take() {
            try kept.reuse(
                context: context(), maxBodyBytes: options.maxResponseBytes, maxHeaderBytes: options.maxHeaderBytes)
            transfer = kept
        } else {
            transfer = try CurlTransfer(
                context: context(), maxBodyBytes: options.maxResponseBytes, maxHeaderBytes: options.maxHeaderBytes)
        }
        // Given back whatever the answer: curl has closed a connection it cannot reuse.
        defer { connections?.giveBack(transfer) }
        if connections != nil {
            try transfer.set(CURLOPT_MAXCONNECTS, 1)  // one receiver per handle
            try transfer.set(CURLOPT_MAXAGE_CONN, Connections.maximumAge)
        }
        try transfer.set(CURLOPT_URL, url)
        try transfer.set(CURLOPT_PROTOCOLS_STR, "http,https")
        try transfer.set(CURLOPT_PATH_AS_IS, 1)  // `/../` and the like go out as configured
        try transfer.set(CURLOPT_FOLLOWLOCATION, 0)
        try transfer.set(CURLOPT_HTTP09_ALLOWED, 0)
        try setCommon(transfer, caFile: options.caFile, proxy: options.proxy, options: options)
        try transfer.set(CURLOPT_POST, 1)
        try transfer.set(CURLOPT_POSTFIELDSIZE_LARGE, offset: body.count)
        try body.withUnsafeBufferPointer { buffer throws(CurlError) in
            // COPYPOSTFIELDS copies the bytes (POSTFIELDSIZE first, so a NUL does not end them).
            try transfer.set(CURLOPT_COPYPOSTFIELDS, pointer: buffer.baseAddress.map(UnsafeRawPointer.init))
        }
        // "Expect:" off: curl would wait up to a second for a 100 Continue on larger bodies.
        try transfer.set(CURLOPT_HTTPHEADER, list: headers.map { "\($0.0): \($0.1)" } + ["Expect:"])
        try transfer.perform()
        return Response(
            status: transfer.responseCode, headerLines: transfer.collected.headerLines, body: transfer.collected.body)
    }

    /// Options both clients share: verification, timeouts, the stall limit, the proxy.
    /// `GET url` (plain HTTP or HTTPS), following no redirect: the status and the body, within
    /// the options' limits. For monitoring endpoints (a NATS node's `/jsz`, say).
    public static func get(_ url: String, options: Options) throws(CurlError) -> Response {
        let transfer = try CurlTransfer(
            context: "GET \(redacted(url))", maxBodyBytes: options.maxResponseBytes,
            maxHeaderBytes: options.maxHeaderBytes)
        try transfer.set(CURLOPT_URL, url)
        try transfer.set(CURLOPT_PROTOCOLS_STR, "http,https")
        try transfer.set(CURLOPT_FOLLOWLOCATION, 0)
        try transfer.set(CURLOPT_HTTP09_ALLOWED, 0)
        try setCommon(transfer, caFile: options.caFile, proxy: options.proxy, options: options)
        try transfer.perform()
        return Response(
            status: transfer.responseCode, headerLines: transfer.collected.headerLines, body: transfer.collected.body)
    }

    static func setCommon(
        _ transfer: CurlTransfer, caFile: String?, proxy: Proxy, options: Options
    ) throws(CurlError) {
        try transfer.set(CURLOPT_SSL_VERIFYPEER, 1)
        try transfer.set(CURLOPT_SSL_VERIFYHOST, 2)
        if let caFile { try transfer.set(CURLOPT_CAINFO, caFile) }
        try transfer.set(CURLOPT_CONNECTTIMEOUT_MS, seconds: options.connectTimeout)
        try transfer.set(CURLOPT_TIMEOUT_MS, seconds: options.timeout)
        try transfer.set(CURLOPT_LOW_SPEED_LIMIT, 1)
        try transfer.set(CURLOPT_LOW_SPEED_TIME, max(1, Int(options.stallTimeout.rounded(.up))))
        switch proxy {
        case .none: try transfer.set(CURLOPT_PROXY, "")  // empty: no proxy, the variables ignored
        case .url(let url): try transfer.set(CURLOPT_PROXY, url)
        case .environment: break
        }
    }

    /// The URL for logs and errors: scheme, host, port and path; no credentials, no query.
    public static func redacted(_ url: String) -> String {
        var text = Substring(url)
        if let query = text.firstIndex(where: { $0 == "?" || $0 == "#" }) { text = text[..<query] }
        if let scheme = text.range(of: "://") {
            let rest = text[scheme.upperBound...]
            let authorityEnd = rest.firstIndex(of: "/") ?? rest.endIndex
            if let at = rest[..<authorityEnd].lastIndex(of: "@") {
                text = text[..<scheme.upperBound] + "…@" + rest[rest.index(after: at)...]
            }
        }
        return String(text)
    }
}
