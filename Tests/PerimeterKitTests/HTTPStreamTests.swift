import Foundation
import PerimeterKit
import PerimeterTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("HTTPServer streaming responses")
struct HTTPStreamTests {
    /// Opens a connection, sends a GET and returns the socket (reads time out after 50 ms).
    static func open(port: Int, path: String) throws -> Int32 {
        try sendHTTPGet(port: port, path: path, readTimeout: .milliseconds(50))
    }

    /// Reads until `condition` holds for everything read, or the peer closes, or 5 s pass.
    static func read(_ fd: Int32, until condition: (String) -> Bool) -> (text: String, closed: Bool) {
        var text = ""
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            if condition(text) { return (text, false) }
            let count = recv(fd, &buffer, buffer.count, 0)
            if count == 0 { return (text, true) }
            if count > 0 { text += String(decoding: buffer[0..<count], as: UTF8.self) }
        }
        return (text, false)
    }

    @Test("A stream is written as it goes, other requests are answered meanwhile, and stop() ends it")
    func streamAlongsidePlainRequests() throws {
        let release = Atomic<Bool>(false)
        let server = try HTTPServer(port: 0) { path in
            switch path {
            case "/events":
                return .stream { writer in
                    writer.write("event: one\ndata: 1\n\n")
                    while writer.isOpen && !release.load(ordering: .relaxed) { Thread.sleep(forTimeInterval: 0.01) }
                    writer.write("event: two\ndata: 2\n\n")
                    // Then hold the connection until the server stops.
                    while writer.isOpen { Thread.sleep(forTimeInterval: 0.01) }
                }
            case "/healthz": return HTTPServer.Response(body: "ok\n")
            default: return HTTPServer.Response(status: 404, body: "no\n")
            }
        }
        server.start()
        let stream = try Self.open(port: server.port, path: "/events")
        defer { close(stream) }
        let first = Self.read(stream) { $0.contains("data: 1") }
        #expect(first.text.hasPrefix("HTTP/1.0 200 OK\r\nContent-Type: text/event-stream"))
        #expect(!first.text.contains("Content-Length"))
        #expect(!first.text.contains("data: 2"))
        // The open stream does not hold up other requests.
        #expect(try httpGet(port: server.port, path: "/healthz").body == "ok\n")
        release.store(true, ordering: .relaxed)
        #expect(Self.read(stream) { $0.contains("data: 2") }.text.contains("event: two"))
        server.stop()
        let end = Self.read(stream) { _ in false }
        #expect(end.closed, "stop() must close open streams")
    }

    @Test("Streams past maxStreams are refused with 503; plain requests still answered")
    func streamLimit() throws {
        let server = try HTTPServer(port: 0, maxStreams: 2) { path in
            path == "/events"
                ? .stream { writer in while writer.isOpen { Thread.sleep(forTimeInterval: 0.01) } }
                : HTTPServer.Response(body: "ok\n")
        }
        server.start()
        let open = try (0..<2).map { _ in try Self.open(port: server.port, path: "/events") }
        for fd in open { _ = Self.read(fd) { $0.contains("\r\n\r\n") } }
        let third = try httpGet(port: server.port, path: "/events")
        #expect(third.status == 503)
        #expect(try httpGet(port: server.port, path: "/healthz").body == "ok\n")
        server.stop()
        for fd in open { close(fd) }
    }

    @Test("A client that goes away makes write() fail, so the stream's closure returns")
    func clientGoesAway() throws {
        let ended = Atomic<Bool>(false)
        let server = try HTTPServer(port: 0) { _ in
            .stream { writer in
                while writer.write(": keep-alive\n\n") { Thread.sleep(forTimeInterval: 0.01) }
                ended.store(true, ordering: .relaxed)
            }
        }
        server.start()
        defer { server.stop() }
        let stream = try Self.open(port: server.port, path: "/events")
        _ = Self.read(stream) { $0.contains("keep-alive") }
        close(stream)
        let deadline = Date().addingTimeInterval(5)
        while !ended.load(ordering: .relaxed) && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        let returned = ended.load(ordering: .relaxed)
        #expect(returned)
    }
}
