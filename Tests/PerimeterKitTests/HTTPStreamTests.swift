import Foundation
import PerimeterHTTP
import PerimeterTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A stream source fed by the test: chunks pushed are handed out one per turn.
final class QueueSource: HTTPStreamSource {
    private let chunks = Mutex<[HTTPStreamChunk]>([])
    private let stream = Mutex<HTTPStream?>(nil)
    let stopped = Atomic<Bool>(false)
    /// Turns taken (how often the server asked).
    let turns = Atomic<Int>(0)

    func push(_ chunk: HTTPStreamChunk) {
        chunks.withLock { $0.append(chunk) }
        stream.withLock { $0 }?.wake()
    }

    func push(_ text: String) { push(.bytes(Array(text.utf8))) }

    func start(_ stream: HTTPStream) { self.stream.withLock { $0 = stream } }

    func next() -> HTTPStreamChunk {
        turns.add(1, ordering: .relaxed)
        return chunks.withLock { $0.isEmpty ? .later : $0.removeFirst() }
    }

    func stop() { stopped.store(true, ordering: .relaxed) }
}

/// A source that always has more: 64 KiB per turn, counting what it gave.
final class EndlessSource: HTTPStreamSource {
    let given = Atomic<Int>(0)
    let stopped = Atomic<Bool>(false)
    func start(_ stream: HTTPStream) {}
    func next() -> HTTPStreamChunk {
        given.add(65536, ordering: .relaxed)
        return .bytes([UInt8](repeating: UInt8(ascii: "x"), count: 65536))
    }
    func stop() { stopped.store(true, ordering: .relaxed) }
}

@Suite("HTTPServer on libmicrohttpd: streams, limits, hostile clients")
struct HTTPStreamTests {
    /// Opens a connection, sends a GET and returns the socket (reads time out after 50 ms).
    static func open(port: Int, path: String, from source: String? = nil) throws -> Int32 {
        let fd = try connectLoopback(port: port, from: source, readTimeout: .milliseconds(50))
        sendAll(fd, Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        return fd
    }

    /// Reads until `condition` holds for everything read, or the peer closes, or 10 s pass.
    static func read(_ fd: Int32, until condition: (String) -> Bool) -> (text: String, closed: Bool) {
        var text = ""
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if condition(text) { return (text, false) }
            let count = recv(fd, &buffer, buffer.count, 0)
            if count == 0 { return (text, true) }
            if count > 0 { text += String(decoding: buffer[0..<count], as: UTF8.self) }
        }
        return (text, false)
    }

    static func waitFor(_ what: String, _ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(30)
        while !condition() {
            guard Date() < deadline else { throw ChildFailure(message: "timed out waiting for \(what)") }
            // Sleep, not a clock: polls a condition set by libmicrohttpd's threads, for a synchronous caller; it ends on the condition.
            Thread.sleep(forTimeInterval: 0.01)
        }
    }

    @Test("A stream is written as it goes, other requests are answered meanwhile, and stop() ends it")
    func streamAlongsidePlainRequests() throws {
        let source = QueueSource()
        let server = try HTTPServer(port: 0) { path in
            switch path {
            case "/events": return .stream(source)
            case "/healthz": return HTTPServer.Response(body: "ok\n")
            default: return HTTPServer.Response(status: 404, body: "no\n")
            }
        }
        source.push("event: one\ndata: 1\n\n")
        let stream = try Self.open(port: server.port, path: "/events")
        defer { close(stream) }
        let first = Self.read(stream) { $0.contains("data: 1") }
        #expect(first.text.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(first.text.contains("Content-Type: text/event-stream"))
        #expect(first.text.contains("Transfer-Encoding: chunked") && !first.text.contains("Content-Length"))
        #expect(!first.text.contains("data: 2"))
        // The waiting stream (suspended, no thread) does not hold up other requests.
        #expect(try httpGet(port: server.port, path: "/healthz").body == "ok\n")
        #expect(server.openStreams == 1)
        source.push("event: two\ndata: 2\n\n")
        #expect(Self.read(stream) { $0.contains("data: 2") }.text.contains("event: two"))
        server.stop()
        let end = Self.read(stream) { _ in false }
        #expect(end.closed, "stop() must close open streams")
        let stopped = source.stopped.load(ordering: .relaxed)
        #expect(stopped, "the source is told its connection ended")
    }

    @Test("A source's end ends the response: the chunked body is terminated")
    func streamEnds() throws {
        let source = QueueSource()
        let server = try HTTPServer(port: 0) { _ in .stream(contentType: "text/html", source) }
        defer { server.stop() }
        source.push("<p>head")
        source.push("tail</p>")
        source.push(.end)
        let response = try httpRequest(port: server.port, path: "/")
        #expect(response.status == 200)
        #expect(response.body.contains("<p>head") && response.body.contains("tail</p>"))
        #expect(response.body.hasSuffix("0\r\n\r\n"), "the last chunk: \(response.body.suffix(20))")
        try Self.waitFor("the source to be stopped") { source.stopped.load(ordering: .relaxed) }
    }

    @Test("Streams past the limit are refused with 503; plain requests still answered")
    func streamLimit() throws {
        let server = try HTTPServer(port: 0, maxStreams: 2) { path in
            path == "/events" ? .stream(QueueSource()) : HTTPServer.Response(body: "ok\n")
        }
        defer { server.stop() }
        let open = try (0..<2).map { _ in try Self.open(port: server.port, path: "/events") }
        defer { for fd in open { close(fd) } }
        for fd in open { _ = Self.read(fd) { $0.contains("\r\n\r\n") } }
        let third = try httpRequest(port: server.port, path: "/events")
        #expect(third.status == 503)
        #expect(third.body.contains("too many open streams (2)"))
        #expect(try httpGet(port: server.port, path: "/healthz").body == "ok\n")
    }

    @Test("A client that goes away: the next write fails and the source is stopped")
    func clientGoesAway() throws {
        let source = QueueSource()
        let server = try HTTPServer(port: 0) { _ in .stream(source) }
        defer { server.stop() }
        source.push(": hello\n\n")
        let stream = try Self.open(port: server.port, path: "/events")
        _ = Self.read(stream) { $0.contains("hello") }
        close(stream)
        // A suspended connection's hang-up is noticed on its next write (a keep-alive in the
        // dashboard), as libmicrohttpd documents.
        try Self.waitFor("the source to be stopped") {
            source.push(": keep-alive\n\n")
            return source.stopped.load(ordering: .relaxed)
        }
        try Self.waitFor("the stream to be forgotten") { server.openStreams == 0 }
    }

    @Test("A reader that stops reading: the source is asked only while the socket takes more, then dropped")
    func stalledReaderDropped() throws {
        let source = EndlessSource()
        var limits = HTTPServer.Limits()
        limits.idleTimeoutSeconds = 1
        let server = try HTTPServer(port: 0, limits: limits) { _ in .stream(source) }
        defer { server.stop() }
        let stream = try Self.open(port: server.port, path: "/events")
        defer { close(stream) }
        // Never read: the kernel's buffers fill, libmicrohttpd stops asking, the idle timeout
        // closes the connection, the source is stopped.
        try Self.waitFor("the stalled stream to be dropped") { source.stopped.load(ordering: .relaxed) }
        let given = source.given.load(ordering: .relaxed)
        // What left the source is what the socket buffers took (a few MiB on loopback), not
        // an unbounded queue in the server.
        #expect(given < 64 << 20, "\(given) bytes taken from the source")
        #expect(server.pendingStreamBytes == 0)
    }

    @Test("Idle connections from one address cannot lock out another (per-IP limit)")
    func perAddressLimit() throws {
        var limits = HTTPServer.Limits()
        limits.connectionsPerIP = 3
        let server = try HTTPServer(port: 0, limits: limits) { request in
            HTTPServer.Response(body: "ok \(request.path)\n")
        }
        defer { server.stop() }
        // Three idle connections (nothing sent, like idle /events or slowloris) from 127.0.0.1 …
        let idle = try (0..<3).map { _ in try connectLoopback(port: server.port, readTimeout: .milliseconds(50)) }
        defer { for fd in idle { close(fd) } }
        // … one sending a request a byte at a time and never finishing …
        sendAll(idle[0], Array("GET /he".utf8))
        // … a fourth from the same address is closed without an answer …
        let fourth = try httpRequest(port: server.port, path: "/healthz", timeout: .seconds(10))
        #expect(fourth.status == 0, "a fourth connection from one address: \(fourth.status)")
        // … while another address is answered at once.
        let other = try httpRequest(port: server.port, path: "/healthz", from: "127.0.0.2")
        #expect(other.status == 200 && other.body == "ok /healthz\n")
    }

    @Test(
        "Hostile requests get a clear status (0: closed unanswered) and leave the server answering",
        arguments: [
            // Not HTTP at all: libmicrohttpd closes the connection without a word.
            ("garbage request line", "NONSENSE\r\n\r\n", [0]),
            ("request line without a path", "GET  HTTP/1.0\r\n\r\n", [400]),
            (
                "header block over the per-connection memory",
                "GET / HTTP/1.1\r\nHost: a\r\nX-Big: "
                    + String(repeating: "a", count: 40_000) + "\r\n\r\n", [431]
            ),
            (
                "declared body over the limit", "POST /login HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n",
                [413]
            ),
            (
                "chunked body over the limit",
                "POST /login HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + String(repeating: "1000\r\n" + String(repeating: "b", count: 4096) + "\r\n", count: 4)
                    + "0\r\n\r\n",
                // Answered as soon as the limit is passed; the unread rest makes the close a
                // reset, which can discard the answer before the client reads it.
                [413, 0]
            ),
            ("negative Content-Length", "POST /login HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", [400]),
            (
                "huge Content-Length",
                "POST /login HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
                [413]
            ),
        ])
    func hostile(_ name: String, request: String, expected: [Int]) throws {
        let server = try HTTPServer(port: 0, limits: HTTPServer.Limits()) { request in
            HTTPServer.Response(body: "\(request.method) \(request.path) \(request.body.count)\n")
        }
        defer { server.stop() }
        let fd = try connectLoopback(port: server.port)
        sendAll(fd, Array(request.utf8))
        let answer = HTTPExchange(parsing: readToEnd(fd, timeout: .seconds(10)))
        close(fd)
        #expect(expected.contains(answer.status), "\(name): \(answer.status) \(answer.body.prefix(200))")
        #expect(try httpGet(port: server.port, path: "/healthz").status == 200, "\(name): the server still answers")
    }

    @Test("A POST form is parsed; the path-only server refuses other methods with 405")
    func postForm() throws {
        let server = try HTTPServer(port: 0, limits: HTTPServer.Limits()) { request in
            let form = request.form
            return HTTPServer.Response(
                body: "\(request.method) \(form["user"] ?? "-") \(form["password"] ?? "-") \(request.client)")
        }
        defer { server.stop() }
        let response = try httpRequest(
            port: server.port, method: "POST", path: "/login", body: "user=a+b&password=p%26%3D%C3%A9")
        #expect(response.body == "POST a b p&=é 127.0.0.1")
        let plain = try HTTPServer(port: 0) { _ in HTTPServer.Response(body: "ok\n") }
        defer { plain.stop() }
        let refused = try httpRequest(port: plain.port, method: "POST", path: "/metrics", body: "x=1")
        #expect(refused.status == 405 && refused.header("Allow") == "GET, HEAD")
    }

    @Test("Headers with CR or LF are refused by libmicrohttpd, never sent")
    func headerInjection() throws {
        let server = try HTTPServer(port: 0) { _ in
            HTTPServer.Response(body: "ok\n", headers: [("X-Test", "a\r\nX-Injected: yes"), ("X-Fine", "b")])
        }
        defer { server.stop() }
        let response = try httpRequest(port: server.port, path: "/")
        #expect(response.header("X-Injected") == nil)
        #expect(response.header("X-Fine") == "b")
        #expect(response.header("X-Content-Type-Options") == "nosniff")
    }
}
