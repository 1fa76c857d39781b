import Foundation
import PerimeterCore
import PerimeterNet
import PerimeterTestSupport
import Testing

/// Kept connections (``HTTPClient/Connections``) against the hostile receiver: requests to one
/// receiver share a connection, and a connection a receiver left in a bad state is never
/// reused for the next request's answer.
@Suite("HTTP client: kept connections")
struct HTTPClientConnectionTests {
    static let options = HTTPClientTests.options

    /// POSTs an empty body to `url` on a blocking thread, through `kept` (nil: a connection of
    /// its own).
    static func post(
        _ url: String, options: HTTPClient.Options = options, kept: HTTPClient.Connections?
    ) async throws -> HTTPClient.Response {
        try await Blocking.run { try HTTPClient.post(url, headers: [], body: [], options: options, connections: kept) }
    }

    /// The connection numbers (in the peer's accept order) of the first `count` requests.
    static func connections(of peer: ChildProcess, count: Int) async throws -> [Int] {
        func requests() -> [JSONObject] { peerRecords(peer).filter { $0["mode"] != nil } }
        try await waitUntil("\(count) requests recorded", context: { peer.output }) { requests().count >= count }
        return requests().prefix(count).compactMap { $0["connection"]?.intValue }
    }

    @Test("requests to one receiver share a kept connection; without kept connections each has its own")
    func shared() async throws {
        let (peer, port) = try await startTestPeer("hostile_receiver.py")
        defer { peer.kill(SIGTERM) }
        let kept = HTTPClient.Connections(capacity: 2)
        let url = "http://127.0.0.1:\(port)/keep"
        for _ in 0..<3 {
            let response = try await Self.post(url, kept: kept)
            #expect(response.status == 200)
            #expect(response.body == Array("ok".utf8))
        }
        #expect(kept.idleCount == 1, "one handle, given back after each request")
        #expect(kept.opened == 1, "one connection opened for three requests")
        for _ in 0..<2 {
            _ = try await Self.post(url, kept: nil)
        }
        let numbers = try await Self.connections(of: peer, count: 5)
        #expect(numbers == [1, 1, 1, 2, 3], "\(peer.output)")
    }

    @Test("at most `capacity` handles are kept idle, whatever was in flight at once")
    func bounded() async throws {
        let (peer, port) = try await startTestPeer("hostile_receiver.py")
        defer { peer.kill(SIGTERM) }
        let kept = HTTPClient.Connections(capacity: 2)
        let url = "http://127.0.0.1:\(port)/keep"
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<6 {
                group.addTask {
                    try await Self.post(url, kept: kept).status
                }
            }
            for try await status in group { #expect(status == 200) }
        }
        #expect(kept.idleCount <= 2)
        #expect(kept.idleCount >= 1)
    }

    /// After each of these answers the connection must not serve the next request: bytes past
    /// the answer (a second, forged answer) with it or while the connection is idle, an answer
    /// cut off for its size, one that is not HTTP, `Connection: close` (`ok`), a close while
    /// the connection was idle (a receiver's idle timeout).
    @Test(
        "a connection the receiver closed or left in a bad state is not reused: the next request gets its own answer",
        arguments: ["keep-junk", "keep-late-junk", "endless", "garbage", "negative-length", "ok", "keep-then-close"])
    func poisoned(_ mode: String) async throws {
        let (peer, port) = try await startTestPeer("hostile_receiver.py")
        defer { peer.kill(SIGTERM) }
        let kept = HTTPClient.Connections(capacity: 1)
        _ = try? await Self.post("http://127.0.0.1:\(port)/\(mode)", kept: kept)
        if mode == "keep-late-junk" || mode == "keep-then-close" {
            try await waitUntil("what the peer does after its answer", context: { peer.output }) {
                peerRecords(peer).contains { $0["after_answer"] != nil }
            }
        }
        let response = try await Self.post("http://127.0.0.1:\(port)/keep", kept: kept)
        #expect(response.status == 200)
        #expect(response.body == Array("ok".utf8), "\(String(decoding: response.body, as: UTF8.self))")
        let numbers = try await Self.connections(of: peer, count: 2)
        #expect(numbers.count == 2 && numbers[0] != numbers[1], "\(mode): \(numbers)")
    }

    @Test(
        "https: a kept connection skips the handshake for the next request, still verifies the first, and is dropped after a forged record"
    )
    func tls() async throws {
        let certs = TestScratch.root.appendingPathComponent("perimeter-certs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: certs) }
        try await makeTestCertificates(in: certs)
        let (peer, port) = try await startTestPeer(
            "hostile_receiver.py",
            [
                "--cert", certs.appendingPathComponent("server.crt").path, "--key",
                certs.appendingPathComponent("server.key").path,
            ])
        defer { peer.kill(SIGTERM) }
        var options = Self.options
        options.caFile = certs.appendingPathComponent("ca.crt").path
        let trusted = options
        let kept = HTTPClient.Connections(capacity: 1)
        let url = "https://127.0.0.1:\(port)/keep"
        #expect {
            try HTTPClient.post(url, headers: [], body: [], options: Self.options, connections: kept)
        } throws: { error in
            (error as? CurlError)?.kind == .tls
        }
        for _ in 0..<3 {
            let response = try await Self.post(url, options: trusted, kept: kept)
            #expect(response.status == 200)
        }
        let numbers = try await Self.connections(of: peer, count: 3)
        #expect(Set(numbers).count == 1, "\(numbers)")
        // A forged answer in a TLS record of its own, sent while the connection is idle.
        _ = try await Self.post("https://127.0.0.1:\(port)/keep-late-junk", options: trusted, kept: kept)
        try await waitUntil("the late junk sent", context: { peer.output }) {
            peerRecords(peer).contains { $0["after_answer"] != nil }
        }
        let after = try await Self.post(url, options: trusted, kept: kept)
        #expect(after.body == Array("ok".utf8), "\(String(decoding: after.body, as: UTF8.self))")
        let all = try await Self.connections(of: peer, count: 5)
        #expect(all.count == 5 && all[4] != all[3], "a new connection after the junk: \(all)")
    }
}
