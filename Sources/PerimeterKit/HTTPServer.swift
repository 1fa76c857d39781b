import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A very small HTTP/1.0 server for a service's `/metrics` and `/healthz` on a loopback port:
/// GET only, one request per connection, requests over 8 KiB or slower than 2 s refused.
/// Enough for Prometheus, `curl` and the dashboard's page; not a web server.
///
/// A ``Response/stream`` response (Server-Sent Events) gets a thread of its own and keeps its
/// connection until the stream's closure returns, the client goes away, or ``stop()``.
public final class HTTPServer: Sendable {
    public struct Response: Sendable {
        public var status: Int
        public var contentType: String
        public var body: String
        /// For a streaming response: run on a thread of its own after the head is sent (no
        /// Content-Length); the connection closes when it returns. `body` is not sent.
        public var stream: (@Sendable (StreamWriter) -> Void)?

        public init(status: Int = 200, contentType: String = "text/plain; charset=utf-8", body: String) {
            self.status = status
            self.contentType = contentType
            self.body = body
        }

        /// A streaming response, e.g. `text/event-stream` for Server-Sent Events.
        public static func stream(
            contentType: String = "text/event-stream; charset=utf-8", _ body: @escaping @Sendable (StreamWriter) -> Void
        ) -> Response {
            var response = Response(contentType: contentType, body: "")
            response.stream = body
            return response
        }
    }

    /// The open connection of a streaming response.
    public final class StreamWriter: Sendable {
        let socket: Int32
        private let server: HTTPServer
        private let failed = Atomic<Bool>(false)

        init(socket: Int32, server: HTTPServer) {
            self.socket = socket
            self.server = server
        }

        /// False once the client has gone or the server is stopping: the stream should return.
        public var isOpen: Bool { !failed.load(ordering: .relaxed) && !server.isStopped }

        /// Sends `text` whole; false (and closed for good) when it could not.
        @discardableResult
        public func write(_ text: String) -> Bool {
            guard isOpen else { return false }
            if HTTPServer.sendAll(socket, Array(text.utf8)) { return true }
            failed.store(true, ordering: .relaxed)
            return false
        }
    }

    public typealias Handler = @Sendable (_ path: String) -> Response

    public let host: String
    /// The port bound (the one asked for, or the one the kernel chose for 0).
    public let port: Int
    private let socket: Int32
    private let handler: Handler
    private let stopped = Atomic<Bool>(false)
    /// Sockets of open streaming responses, shut down by ``stop()``.
    private let streams = Mutex<Set<Int32>>([])
    /// At most this many streaming responses are open at once; more get 503.
    public let maxStreams: Int

    var isStopped: Bool { stopped.load(ordering: .relaxed) }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Binds and listens; ``start()`` begins answering.
    public init(host: String = "127.0.0.1", port: Int, maxStreams: Int = 64, handler: @escaping Handler) throws {
        // Close-on-exec: a child started meanwhile (mosquitto, a test's process) must not inherit
        // the listener or a page's connection, or a closed stream would stay open in the child.
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            close(fd)
            throw Failure(description: "'\(host)' is not an IPv4 address")
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw Failure(description: "cannot listen on \(host):\(port): \(reason)")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.host = host
        self.port = Int(UInt16(bigEndian: actual.sin_port))
        socket = fd
        self.handler = handler
        self.maxStreams = maxStreams
    }

    /// Answers requests on a thread of its own until ``stop()``.
    public func start() {
        let thread = Thread { [self] in serve() }
        thread.name = "http-\(port)"
        thread.start()
    }

    public func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        shutdown(socket, Int32(SHUT_RDWR))
        close(socket)
        // Wake every stream blocked in send; its thread closes the socket.
        streams.withLock { open in
            for client in open { shutdown(client, Int32(SHUT_RDWR)) }
        }
    }

    private func serve() {
        while !stopped.load(ordering: .relaxed) {
            let client = accept(socket, nil, nil)
            if client < 0 {
                if stopped.load(ordering: .relaxed) { return }
                continue
            }
            // Close-on-exec as for the listener (Glibc's module has no accept4).
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            if !answer(client) { close(client) }
        }
    }

    /// Answers one request; true when a streaming response took the connection over.
    private func answer(_ client: Int32) -> Bool {
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while request.count < 8192 {
            let count = recv(client, &buffer, buffer.count, 0)
            if count <= 0 { break }
            request += buffer[0..<count]
            if request.count >= 4, request.suffix(4) == [13, 10, 13, 10] { break }
            if let text = String(bytes: request, encoding: .utf8), text.contains("\r\n\r\n") || text.contains("\n\n") {
                break
            }
        }
        let line = String(decoding: request.prefix { $0 != 10 && $0 != 13 }, as: UTF8.self)
        let parts = line.split(separator: " ", omittingEmptySubsequences: false)
        var response: Response
        if parts.count != 3 || !parts[1].hasPrefix("/") || !parts[2].hasPrefix("HTTP/") || request.count >= 8192 {
            response = Response(status: 400, body: "bad request\n")
        } else if parts[0] != "GET" && parts[0] != "HEAD" {
            response = Response(status: 405, body: "only GET\n")
        } else {
            let path = String(parts[1].split(separator: "?", maxSplits: 1).first ?? "")
            response = handler(path)
        }
        // Each stream holds a thread: past the limit, new ones are turned away rather than queued.
        if response.stream != nil && streams.withLock({ $0.count }) >= maxStreams {
            response = Response(status: 503, body: "too many open streams (\(maxStreams))\n")
        }
        if let stream = response.stream, response.status == 200 {
            startStream(client, response: response, stream: stream, head: parts.first == "HEAD")
            return true
        }
        let reason =
            [200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"][
                response.status] ?? "Status"
        let body = Array(response.body.utf8)
        let head =
            "HTTP/1.0 \(response.status) \(reason)\r\nContent-Type: \(response.contentType)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        let bytes = Array(head.utf8) + (parts.first == "HEAD" ? [] : body)
        _ = Self.sendAll(client, bytes)
        return false
    }

    private func startStream(
        _ client: Int32, response: Response, stream: @escaping @Sendable (StreamWriter) -> Void, head: Bool
    ) {
        // A client that stops reading must not block its thread for ever.
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        streams.withLock { _ = $0.insert(client) }
        let writer = StreamWriter(socket: client, server: self)
        let thread = Thread { [self] in
            let headers =
                "HTTP/1.0 200 OK\r\nContent-Type: \(response.contentType)\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
            if writer.write(headers), !head { stream(writer) }
            streams.withLock { _ = $0.remove(client) }
            close(client)
        }
        thread.name = "http-\(port)-stream"
        thread.start()
    }

    /// Sends every byte; false when the peer has gone (or a send timed out).
    static func sendAll(_ client: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count <= 0 { return false }
            sent += count
        }
        return true
    }
}
