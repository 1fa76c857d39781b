import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A very small HTTP/1.0 server for a service's `/metrics` and `/healthz` on a loopback port:
/// GET only, one request per connection, requests over 8 KiB or slower than 2 s refused.
/// Enough for Prometheus and `curl`; not a web server.
public final class HTTPServer: Sendable {
    public struct Response: Sendable {
        public var status: Int
        public var contentType: String
        public var body: String

        public init(status: Int = 200, contentType: String = "text/plain; charset=utf-8", body: String) {
            self.status = status
            self.contentType = contentType
            self.body = body
        }
    }

    public typealias Handler = @Sendable (_ path: String) -> Response

    public let host: String
    /// The port bound (the one asked for, or the one the kernel chose for 0).
    public let port: Int
    private let socket: Int32
    private let handler: Handler
    private let stopped = Atomic<Bool>(false)

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Binds and listens; ``start()`` begins answering.
    public init(host: String = "127.0.0.1", port: Int, handler: @escaping Handler) throws {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
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
    }

    private func serve() {
        while !stopped.load(ordering: .relaxed) {
            let client = accept(socket, nil, nil)
            if client < 0 {
                if stopped.load(ordering: .relaxed) { return }
                continue
            }
            answer(client)
            close(client)
        }
    }

    private func answer(_ client: Int32) {
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
        let response: Response
        if parts.count != 3 || !parts[1].hasPrefix("/") || !parts[2].hasPrefix("HTTP/") || request.count >= 8192 {
            response = Response(status: 400, body: "bad request\n")
        } else if parts[0] != "GET" && parts[0] != "HEAD" {
            response = Response(status: 405, body: "only GET\n")
        } else {
            let path = String(parts[1].split(separator: "?", maxSplits: 1).first ?? "")
            response = handler(path)
        }
        let reason =
            [200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"][
                response.status] ?? "Status"
        let body = Array(response.body.utf8)
        let head =
            "HTTP/1.0 \(response.status) \(reason)\r\nContent-Type: \(response.contentType)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        let bytes = Array(head.utf8) + (parts.first == "HEAD" ? [] : body)
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count <= 0 { break }
            sent += count
        }
    }
}
