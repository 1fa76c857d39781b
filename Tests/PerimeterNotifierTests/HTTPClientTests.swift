import Foundation
import PerimeterCore
import PerimeterNet
import PerimeterTestSupport
import Testing

/// One hostile answer (Peers/hostile_receiver.py) and how the client must end the exchange.
struct HostileCase: Sendable, CustomTestStringConvertible {
    var mode: String
    var kind: CurlError.Kind
    /// Words the error must hold (curl's or ours), so that a deadletter says what went wrong.
    var says: String
    var testDescription: String { mode }
}

/// The webhook client (libcurl underneath) against a real socket server that answers as a
/// broken or malicious receiver would: every exchange ends with an error naming the request and
/// the problem, within the configured limits, and nothing traps.
@Suite("HTTP client over libcurl against hostile receivers", .serialized)
struct HTTPClientTests {
    static let options = HTTPClient.Options(
        connectTimeout: 2, timeout: 4, stallTimeout: 1, maxResponseBytes: 4096, maxHeaderBytes: 16_384)

    static let cases = [
        HostileCase(mode: "negative-length", kind: .transfer, says: "Content-Length"),
        HostileCase(mode: "chunk-negative", kind: .transfer, says: "chunk"),
        HostileCase(mode: "chunk-huge", kind: .transfer, says: "chunk"),
        HostileCase(mode: "endless", kind: .tooLarge, says: "larger than 4096 bytes"),
        HostileCase(mode: "stall", kind: .timeout, says: "Timeout"),
        HostileCase(mode: "garbage", kind: .transfer, says: "HTTP/0.9"),
        HostileCase(mode: "huge-header", kind: .tooLarge, says: "headers are too large"),
        HostileCase(mode: "many-headers", kind: .tooLarge, says: "headers are larger than 16384 bytes"),
    ]

    @Test("a hostile answer ends the exchange with an error naming the request and the problem", arguments: cases)
    func hostile(_ row: HostileCase) async throws {
        let (peer, port) = try await startTestPeer("hostile_receiver.py")
        defer { peer.kill(SIGTERM) }
        let url = "http://127.0.0.1:\(port)/\(row.mode)"
        let started = ContinuousClock.now
        let error: CurlError
        do {
            let response = try await Blocking.run {
                try HTTPClient.post(url, headers: [], body: Array("{}".utf8), options: Self.options)
            }
            Issue.record("\(row.mode): answered \(response.status), expected a failure")
            return
        } catch let failure as CurlError {
            error = failure
        }
        let elapsed = ContinuousClock.now - started
        #expect(error.kind == row.kind, "\(error)")
        #expect(error.description.contains("POST http://127.0.0.1:\(port)/\(row.mode)"), "\(error)")
        #expect(error.description.localizedCaseInsensitiveContains(row.says), "\(error)")
        // The exchange ends, whatever the peer does (an endless body or a stall would hang it
        // without the whole-transfer timeout of 4 s). Not a timing figure: under a loaded
        // machine the blocking pool may start it late, so the bound only tells an end from a hang.
        #expect(elapsed < .seconds(60), "\(row.mode) took \(elapsed)")
    }

    @Test("a redirect is not followed: the 302 is the answer")
    func redirectNotFollowed() async throws {
        let (peer, port) = try await startTestPeer("hostile_receiver.py")
        defer { peer.kill(SIGTERM) }
        let response = try await Blocking.run {
            try HTTPClient.post("http://127.0.0.1:\(port)/redirect", headers: [], body: [], options: Self.options)
        }
        #expect(response.status == 302)
        #expect(peerRecords(peer).map { $0["mode"]?.stringValue } == ["redirect"], "no request to /ok")
        #expect(
            WebhookReply.classify(status: 302, retryAfter: nil, now: Date())
                == .failed("HTTP 302 (redirects are not followed: configure the final URL)"))
    }

    /// The bug: the old client percent-decoded the path, so a configured
    /// `%0D%0AX-Injected:%20yes` became a header line of the request.
    @Test("percent-decoded URL header injection: the URL goes out byte for byte, no header is added")
    func percentDecodedURLHeaderInjection() async throws {
        let (peer, port) = try await startTestPeer("hostile_receiver.py")
        defer { peer.kill(SIGTERM) }
        let url = "http://127.0.0.1:\(port)/ok/hook%0D%0AX-Injected:%20yes?a=%0a"
        let response = try await Blocking.run {
            try HTTPClient.post(url, headers: [("X-Test", "1")], body: Array("{}".utf8), options: Self.options)
        }
        #expect(response.status == 200)
        let request = try #require(peerRecords(peer).first)
        #expect(request["request_line"]?.stringValue == "POST /ok/hook%0D%0AX-Injected:%20yes?a=%0a HTTP/1.1")
        let names = (request["headers"]?.arrayValue ?? []).compactMap {
            $0.arrayValue?.first?.stringValue?.lowercased()
        }
        #expect(names.contains("x-test"))
        #expect(!names.contains("x-injected"), "\(names)")
    }

    @Test(
        "a header value with a line break is refused before anything is sent",
        arguments: ["a\r\nX-Injected: yes", "a\nb", "a\rb", "a\u{0}b"])
    func headerLineBreakRefused(_ value: String) async throws {
        let (peer, port) = try await startTestPeer("hostile_receiver.py")
        defer { peer.kill(SIGTERM) }
        #expect {
            try HTTPClient.post(
                "http://127.0.0.1:\(port)/ok", headers: [("X-Test", value)], body: [], options: Self.options)
        } throws: { error in
            (error as? CurlError)?.kind == .invalidRequest && "\(error)".contains("X-Test")
        }
        // A request that was sent would be recorded before a well-formed one sent next.
        _ = try await Blocking.run {
            try HTTPClient.post("http://127.0.0.1:\(port)/ok", headers: [], body: [], options: Self.options)
        }
        #expect(peerRecords(peer).count == 1)
    }

    @Test("no proxy unless configured: http_proxy in the environment is ignored")
    func proxyFromEnvironmentIgnored() async throws {
        let (peer, port) = try await startTestPeer("hostile_receiver.py")
        defer { peer.kill(SIGTERM) }
        // A proxy that does not exist: used, the request would fail to connect.
        setenv("http_proxy", "http://127.0.0.1:9", 1)
        defer { unsetenv("http_proxy") }
        let response = try await Blocking.run {
            try HTTPClient.post("http://127.0.0.1:\(port)/ok", headers: [], body: [], options: Self.options)
        }
        #expect(response.status == 200)
        var options = Self.options
        options.proxy = .environment
        let viaEnvironment = options
        #expect(throws: CurlError.self) {
            try HTTPClient.post("http://127.0.0.1:\(port)/ok", headers: [], body: [], options: viaEnvironment)
        }
    }

    @Test("https: verified against the configured CA; an unknown CA or a name not in the certificate is refused")
    func certificateVerified() async throws {
        let certs = TestScratch.root.appendingPathComponent(
            "perimeter-certs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: certs) }
        try await makeTestCertificates(in: certs)
        let tls = [
            "--cert", certs.appendingPathComponent("server.crt").path, "--key",
            certs.appendingPathComponent("server.key").path,
        ]
        let (peer, port) = try await startTestPeer("hostile_receiver.py", tls)
        defer { peer.kill(SIGTERM) }
        // The certificate names localhost and 127.0.0.1, not 127.0.0.2 (also this machine).
        let (other, otherPort) = try await startTestPeer("hostile_receiver.py", tls + ["--bind", "127.0.0.2"])
        defer { other.kill(SIGTERM) }
        var options = Self.options
        options.caFile = certs.appendingPathComponent("ca.crt").path
        let trusted = options
        let response = try await Blocking.run {
            try HTTPClient.post("https://127.0.0.1:\(port)/ok", headers: [], body: [], options: trusted)
        }
        #expect(response.status == 200)
        #expect {
            try HTTPClient.post("https://127.0.0.1:\(port)/ok", headers: [], body: [], options: Self.options)
        } throws: { error in
            (error as? CurlError)?.kind == .tls && "\(error)".contains("certificate")
        }
        #expect {
            try HTTPClient.post("https://127.0.0.2:\(otherPort)/ok", headers: [], body: [], options: trusted)
        } throws: { error in
            (error as? CurlError)?.kind == .tls && "\(error)".contains("127.0.0.2")
        }
        #expect(peerRecords(other).isEmpty, "nothing sent to a peer whose name did not verify")
    }
}
