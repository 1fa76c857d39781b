import CMicroHTTPD
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A service's HTTP endpoint (the dashboard, `/metrics`, `/healthz`) on libmicrohttpd.
///
/// libmicrohttpd does the HTTP: a pool of ``Limits/threads`` threads, each with its own epoll
/// set, serves every connection concurrently; a connection, per-IP and per-connection memory
/// limit and an idle timeout bound what a hostile or slow client can hold. Our code only routes
/// a parsed ``HTTPRequest`` to the handler and turns its ``Response`` into libmicrohttpd's.
///
/// A streaming response (Server-Sent Events) is pulled from its ``HTTPStreamSource`` when the
/// client can take more and suspended (no thread) while the source has nothing, so a slow
/// reader never makes the server buffer for it: the source keeps what it chooses.
///
/// ``init(host:port:limits:onError:handler:)`` binds the socket (so ``port`` is known at once)
/// and starts answering; ``stop()`` ends every open stream and the daemon.
public final class HTTPServer: Sendable {
    /// What one server lets its clients hold. The defaults suit a dashboard with a few hundred
    /// viewers and a metrics endpoint: 1,000 × 32 KiB connections is 32 MiB at worst, and 1,000
    /// stays below the usual soft limit of 1,024 open files (the units raise it anyway).
    public struct Limits: Sendable {
        /// Threads of the pool, each polling its share of the connections (epoll).
        public var threads: Int = 4
        /// Open connections in all; past it a new connection is closed at once.
        public var connections: Int = 1000
        /// Open connections from one client address; past it a new one is closed at once. Every
        /// viewer behind one proxy shares this: raise it there.
        public var connectionsPerIP: Int = 64
        /// A connection that neither sends nor can be written to for this long is closed (a
        /// stream waiting for news is not idle: it is suspended and sends keep-alives).
        public var idleTimeoutSeconds: Int = 30
        /// libmicrohttpd's memory pool per connection: request line, headers, write buffer. A
        /// request whose headers do not fit gets 431.
        public var memoryPerConnection: Int = 32 * 1024
        /// Open streaming responses in all (fewer than ``connections``, so that `/healthz` and
        /// the page still get through when every stream is taken); past it a stream gets 503.
        public var streams: Int = 900
        /// The largest request body accepted (413 past it).
        public var requestBodyBytes: Int = 8 * 1024

        public init() {}
    }

    public struct Response: Sendable {
        public var status: Int
        public var contentType: String
        public var body: String
        /// More headers (e.g. `Set-Cookie`, `Location`, `Content-Security-Policy`).
        public var headers: [(name: String, value: String)]
        /// For a streaming response: pulled from when the client can take more (no
        /// Content-Length; chunked on HTTP/1.1). `body` is not sent.
        public var stream: (any HTTPStreamSource)?
        /// A binary body (an image), sent instead of `body` when set.
        public var bytes: [UInt8]?

        public init(
            status: Int = 200, contentType: String = "text/plain; charset=utf-8", body: String,
            headers: [(name: String, value: String)] = []
        ) {
            self.status = status
            self.contentType = contentType
            self.body = body
            self.headers = headers
            self.stream = nil
            self.bytes = nil
        }

        /// A streaming response, e.g. `text/event-stream` for Server-Sent Events.
        public static func stream(
            contentType: String = "text/event-stream; charset=utf-8", headers: [(name: String, value: String)] = [],
            _ source: any HTTPStreamSource
        ) -> Response {
            var response = Response(contentType: contentType, body: "", headers: headers)
            response.stream = source
            return response
        }
    }

    public typealias Handler = @Sendable (HTTPRequest) -> Response

    public let host: String
    /// The port bound (the one asked for, or the one the kernel chose for 0).
    public let port: Int
    public let limits: Limits
    let handler: Handler
    /// Called with libmicrohttpd's own error messages (refused connections, …).
    let onError: (@Sendable (String) -> Void)?

    private struct State {
        var listener: Int32
        var daemon: OpaquePointer?
        var stopped = false
        var streams: [ObjectIdentifier: HTTPStream] = [:]
    }
    private let state: Mutex<State>
    /// Entered for each admitted stream and left when it is forgotten: `stop()` waits on it.
    private let openStreamGroup = DispatchGroup()

    /// Binds and listens on `host` (IPv4) and `port` (0: the kernel chooses), and answers.
    /// - Throws: ``HTTPServerError`` naming the address when it is not IPv4 or cannot be bound,
    ///   or when libmicrohttpd cannot start.
    public init(
        host: String = "127.0.0.1", port: Int, limits: Limits = Limits(),
        onError: (@Sendable (String) -> Void)? = nil, handler: @escaping Handler
    ) throws {
        // Close-on-exec: a child started meanwhile (mosquitto, a test's process) must not
        // inherit the listener, or the port would stay taken after we stop.
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HTTPServerError.system("socket", address: "\(host):\(port)") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
        guard (0...65535).contains(port), inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            close(fd)
            throw HTTPServerError(
                function: "inet_pton", address: "\(host):\(port)", reason: "not an IPv4 address and port")
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 128) == 0 else {
            let error = HTTPServerError.system(bound == 0 ? "listen" : "bind", address: "\(host):\(port)")
            close(fd)
            throw error
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.host = host
        self.port = Int(UInt16(bigEndian: actual.sin_port))
        self.limits = limits
        self.handler = handler
        self.onError = onError
        state = Mutex(State(listener: fd))
        try startDaemon()
    }

    /// A server whose handler sees only the path, answering GET and HEAD (405 otherwise): what
    /// `/metrics` and `/healthz` need.
    public convenience init(
        host: String = "127.0.0.1", port: Int, maxStreams: Int = 900, handler: @escaping @Sendable (String) -> Response
    ) throws {
        var limits = Limits()
        limits.streams = maxStreams
        try self.init(host: host, port: port, limits: limits) { request in
            guard request.method == "GET" || request.method == "HEAD" else {
                return Response(status: 405, body: "only GET\n", headers: [("Allow", "GET, HEAD")])
            }
            return handler(request.path)
        }
    }

    deinit {
        let state = state.withLock { $0 }
        if state.daemon == nil && !state.stopped { close(state.listener) }
    }

    /// Kept for callers written for the previous server, which answered only after `start()`:
    /// this one answers from ``init(host:port:limits:onError:handler:)`` on (its handler is
    /// complete by then), so a start that fails throws there rather than going unnoticed here.
    public func start() {}

    /// Starts libmicrohttpd's threads on the bound socket.
    /// - Throws: ``HTTPServerError`` when libmicrohttpd cannot start (e.g. no threads left).
    private func startDaemon() throws {
        try state.withLock { state in
            guard state.daemon == nil, !state.stopped else { return }
            // The daemon holds the server until stop() (the callbacks' `cls`).
            let server = Unmanaged.passRetained(self).toOpaque()
            let flags =
                MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue
                | MHD_ALLOW_SUSPEND_RESUME.rawValue | (onError == nil ? 0 : MHD_USE_ERROR_LOG.rawValue)
            let daemon = perimeter_mhd_start(
                flags, state.listener, UInt32(limits.threads), UInt32(limits.connections),
                UInt32(limits.connectionsPerIP), UInt32(limits.idleTimeoutSeconds), limits.memoryPerConnection,
                HTTPServer.accessCallback, server, HTTPServer.completedCallback,
                // Inline, not a stored property: a stored C function type holding `va_list`
                // crashes the Swift 6.3 compiler when another module deserializes this class.
                { cls, format, arguments in
                    guard let cls, let format, let arguments else { return }
                    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
                    var buffer = [CChar](repeating: 0, count: 512)
                    _ = vsnprintf(&buffer, buffer.count, format, arguments)
                    let message = String(
                        decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                    server.onError?(message.trimmingCharacters(in: .whitespacesAndNewlines))
                }, server)
            guard let daemon else {
                Unmanaged<HTTPServer>.fromOpaque(server).release()
                throw HTTPServerError(
                    function: "MHD_start_daemon", address: "\(host):\(port)",
                    reason: "libmicrohttpd could not start (threads, epoll or limits refused)")
            }
            state.daemon = daemon
        }
    }

    /// Ends every open stream, stops answering and closes the socket. Idempotent.
    public func stop() {
        let (daemon, streams, listener) = state.withLock { state -> (OpaquePointer?, [HTTPStream], Int32) in
            defer { state.stopped = true }
            if state.stopped { return (nil, [], -1) }
            return (state.daemon, Array(state.streams.values), state.listener)
        }
        guard let daemon else {
            if listener >= 0 { close(listener) }
            return
        }
        // No new connections; libmicrohttpd hands the listening socket back to us.
        let quiesced = MHD_quiesce_daemon(daemon)
        if quiesced >= 0 { close(quiesced) }
        // A suspended connection must be resumed before the daemon stops (microhttpd.h): each
        // stream's next turn ends it. Give them a moment to say goodbye, then stop regardless.
        for stream in streams { stream.finish() }
        _ = openStreamGroup.wait(timeout: .now() + 1)
        MHD_stop_daemon(daemon)
        Unmanaged.passUnretained(self).release()
    }

    /// Streaming responses open now.
    public var openStreams: Int { state.withLock { $0.streams.count } }

    /// Bytes taken from stream sources and not yet written, over every open stream.
    public var pendingStreamBytes: Int {
        state.withLock { Array($0.streams.values) }.reduce(0) { $0 + $1.pendingBytes }
    }

    // MARK: - libmicrohttpd's callbacks

    /// libmicrohttpd's `MHD_CONTENT_READER_END_OF_STREAM` (a cast macro Swift does not import).
    static let endOfStream = -1

    /// One request's state across the access handler's calls: created on the first, released
    /// by the completed callback.
    final class Exchange {
        var body: [UInt8] = []
    }

    private var tooLarge: Response {
        Response(
            status: 413, body: "request body over \(limits.requestBodyBytes) bytes\n",
            headers: [("Connection", "close")])
    }

    private static let accessCallback: MHD_AccessHandlerCallback = {
        cls, connection, url, method, version, uploadData, uploadSize, context in
        guard let cls, let connection, let context, let uploadSize else { return .NO }
        let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        let method = method.map { String(cString: $0) } ?? ""
        guard let existing = context.pointee else {
            // The first call: headers are in. A request with a body is answered once it is in.
            let exchange = Exchange()
            context.pointee = Unmanaged.passRetained(exchange).toOpaque()
            if method == "POST" || method == "PUT" || method == "PATCH" {
                let length = MHD_lookup_connection_value(connection, MHD_ValueKind.HEADER_KIND, "Content-Length")
                    .flatMap { Int(String(cString: $0)) }
                if let length, length > server.limits.requestBodyBytes {
                    return server.queue(server.tooLarge, on: connection)
                }
                return .YES
            }
            return server.answer(connection, url: url, method: method, version: version, body: [])
        }
        let exchange = Unmanaged<Exchange>.fromOpaque(existing).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            let count = uploadSize.pointee
            uploadSize.pointee = 0
            guard exchange.body.count + count <= server.limits.requestBodyBytes else {
                // Answered at once: the rest of the body is never read, the connection closes.
                return server.queue(server.tooLarge, on: connection)
            }
            if let uploadData {
                exchange.body += UnsafeRawBufferPointer(start: UnsafeRawPointer(uploadData), count: count)
            }
            return .YES
        }
        return server.answer(connection, url: url, method: method, version: version, body: exchange.body)
    }

    private static let completedCallback: MHD_RequestCompletedCallback = { _, _, context, _ in
        guard let context, let exchange = context.pointee else { return }
        Unmanaged<Exchange>.fromOpaque(exchange).release()
        context.pointee = nil
    }

    private static let readerCallback: MHD_ContentReaderCallback = { cls, _, buffer, max in
        guard let cls, let buffer else { return HTTPServer.endOfStream }
        return Unmanaged<HTTPStream>.fromOpaque(cls).takeUnretainedValue().read(into: buffer, max: max)
    }

    private static let streamFreeCallback: MHD_ContentReaderFreeCallback = { cls in
        guard let cls else { return }
        let stream = Unmanaged<HTTPStream>.fromOpaque(cls).takeRetainedValue()
        stream.closed()
        stream.server.forget(stream)
    }

    private func forget(_ stream: HTTPStream) {
        if state.withLock({ $0.streams.removeValue(forKey: ObjectIdentifier(stream)) }) != nil {
            openStreamGroup.leave()
        }
    }

    /// Builds the request, runs the handler and queues its response.
    private func answer(
        _ connection: OpaquePointer, url: UnsafePointer<CChar>?, method: String, version: UnsafePointer<CChar>?,
        body: [UInt8]
    ) -> MHD_Result {
        var request = HTTPRequest(
            method: method, path: url.map { String(cString: $0) } ?? "/",
            version: version.map { String(cString: $0) } ?? "", body: body)
        request.headers = Self.values(connection, .HEADER_KIND, lowercased: true, join: ", ")
        request.cookies = Self.values(connection, .COOKIE_KIND, lowercased: false, join: nil)
        request.query = Self.values(connection, .GET_ARGUMENT_KIND, lowercased: false, join: nil)
        var address = [CChar](repeating: 0, count: 64)
        if perimeter_mhd_client_address(connection, &address, address.count) == 0 {
            request.client = String(decoding: address.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return queue(handler(request), on: connection)
    }

    /// Collects one kind of key-value pair libmicrohttpd parsed (headers, cookies, arguments).
    private static func values(
        _ connection: OpaquePointer, _ kind: MHD_ValueKind, lowercased: Bool, join: String?
    ) -> [String: String] {
        final class Collector {
            var values: [String: String] = [:]
            let lowercased: Bool
            let join: String?
            init(lowercased: Bool, join: String?) {
                self.lowercased = lowercased
                self.join = join
            }
        }
        let collector = Collector(lowercased: lowercased, join: join)
        withExtendedLifetime(collector) {
            _ = MHD_get_connection_values(
                connection, kind,
                { cls, _, key, value in
                    guard let cls, let key else { return .YES }
                    let collector = Unmanaged<Collector>.fromOpaque(cls).takeUnretainedValue()
                    var name = String(cString: key)
                    if collector.lowercased { name = name.lowercased() }
                    let text = value.map { String(cString: $0) } ?? ""
                    if let join = collector.join, let previous = collector.values[name] {
                        collector.values[name] = previous + join + text
                    } else {
                        collector.values[name] = text
                    }
                    return .YES
                }, Unmanaged.passUnretained(collector).toOpaque())
        }
        return collector.values
    }

    /// Turns `response` into libmicrohttpd's and queues it.
    private func queue(_ response: Response, on connection: OpaquePointer) -> MHD_Result {
        var response = response
        let made: OpaquePointer?
        if let source = response.stream, (200..<300).contains(response.status) {
            let stream = HTTPStream(connection: connection, source: source, server: self)
            let admitted = state.withLock { state -> Bool in
                guard !state.stopped, state.streams.count < limits.streams else { return false }
                state.streams[ObjectIdentifier(stream)] = stream
                openStreamGroup.enter()
                return true
            }
            guard admitted else {
                return queue(
                    Response(status: 503, body: "too many open streams (\(limits.streams))\n"), on: connection)
            }
            // The free callback releases this reference when the connection is done with it.
            made = MHD_create_response_from_callback(
                UInt64.max /* MHD_SIZE_UNKNOWN */, 16 * 1024, Self.readerCallback,
                Unmanaged.passRetained(stream).toOpaque(), Self.streamFreeCallback)
            if made == nil {
                Unmanaged.passUnretained(stream).release()
                forget(stream)
            } else {
                response.headers.append(("Cache-Control", "no-cache"))
                source.start(stream)
            }
        } else {
            var body = response.bytes ?? Array(response.body.utf8)
            made = body.withUnsafeMutableBytes {
                MHD_create_response_from_buffer($0.count, $0.baseAddress, .RESPMEM_MUST_COPY)
            }
        }
        guard let made else { return .NO }
        defer { MHD_destroy_response(made) }
        MHD_add_response_header(made, "Content-Type", response.contentType)
        // Everything we serve is typed correctly: browsers must not guess otherwise.
        MHD_add_response_header(made, "X-Content-Type-Options", "nosniff")
        for (name, value) in response.headers {
            // libmicrohttpd refuses a header holding CR or LF (.NO): nothing is injected.
            MHD_add_response_header(made, name, value)
        }
        return MHD_queue_response(connection, UInt32(response.status), made)
    }
}
