import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Synchronization
import Testing

@testable import PerimeterDashboard

#if canImport(Glibc)
    import Glibc
#endif

/// The dashboard's HTTP edge against a real broker and libmicrohttpd: Host check, headers,
/// sign-in, cookies, and what a slow reader costs.
@Suite("Dashboard HTTP edge: Host check, headers, sign-in, slow readers")
struct DashboardSecurityTests {
    static func configuration(
        _ broker: MosquittoBroker, _ id: String, behindTLS: Bool = false
    ) throws
        -> DashboardConfiguration
    {
        DashboardConfiguration(
            broker: BrokerSettings(port: broker.port, clientID: id), venue: "test",
            regionsPath: try DashboardFixtures.regionsFile(), http: ("127.0.0.1", 0), password: testPassword,
            behindTLS: behindTLS)
    }

    @Test("A request naming another host gets 421, whatever the path; allowed names are answered")
    func hostCheck() async throws {
        let broker = try await TestBroker.start()
        let (running, port, _) = try await startDashboard(try Self.configuration(broker, "dashboard-host"))
        let cookie = try signIn(port: port)
        for path in ["/", "/healthz", "/events", "/login", "/dashboard.js"] {
            let foreign = try httpRequest(
                port: port, path: path, host: "attacker.example:\(port)", headers: ["Cookie: \(cookie)"])
            #expect(foreign.status == 421, "\(path): \(foreign.status)")
            #expect(foreign.body.contains("does not answer to host 'attacker.example:\(port)'"))
        }
        let rebound = try httpRequest(
            port: port, method: "POST", path: "/login", host: "attacker.example", body: "password=\(testPassword)")
        #expect(rebound.status == 421 && rebound.header("Set-Cookie") == nil)
        for host in ["127.0.0.1:\(port)", "localhost:\(port)", "LOCALHOST", "[::1]:\(port)"] {
            let response = try httpRequest(port: port, path: "/", host: host, headers: ["Cookie: \(cookie)"])
            #expect(response.status == 200, "\(host): \(response.status)")
        }
        running.cancel()
        _ = try? await running.value
        await broker.stop()
    }

    @Test("Every answer carries the CSP, nosniff, no framing, no referrer")
    func headers() async throws {
        let broker = try await TestBroker.start()
        let (running, port, _) = try await startDashboard(try Self.configuration(broker, "dashboard-headers"))
        let cookie = try signIn(port: port)
        let answers = [
            try authenticatedGet(port: port, path: "/", cookie: cookie),
            try httpRequest(port: port, path: "/login"),
            try httpRequest(port: port, path: "/"),
            try authenticatedGet(port: port, path: "/nope", cookie: cookie),
            try httpRequest(port: port, path: "/healthz"),
        ]
        for answer in answers {
            let csp = answer.header("Content-Security-Policy") ?? ""
            #expect(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"), "\(answer.status)")
            #expect(csp.contains("frame-ancestors 'none'") && !csp.contains("unsafe-inline"))
            #expect(answer.header("X-Content-Type-Options") == "nosniff")
            #expect(answer.header("X-Frame-Options") == "DENY")
            #expect(answer.header("Referrer-Policy") == "no-referrer")
        }
        #expect(answers[0].header("Cache-Control") == "no-store")
        running.cancel()
        _ = try? await running.value
        await broker.stop()
    }

    @Test("Without a session: pages go to the form, the rest is 401; a wrong password sets no cookie")
    func signInRequired() async throws {
        let broker = try await TestBroker.start()
        let (running, port, _) = try await startDashboard(try Self.configuration(broker, "dashboard-signin"))
        let page = try httpRequest(port: port, path: "/snapshot/3")
        #expect(page.status == 303 && page.header("Location") == "/login?next=%2Fsnapshot%2F3")
        for path in ["/events", "/map.svg"] {
            let refused = try httpRequest(port: port, path: path)
            #expect(refused.status == 401, "\(path)")
            #expect(!refused.body.contains("<svg"))
        }
        let forged = try httpRequest(
            port: port, path: "/events", headers: ["Cookie: perimeter_session=\(String(repeating: "0", count: 64))"])
        #expect(forged.status == 401)
        let form = try httpRequest(port: port, path: "/login?next=%2Fsnapshot%2F3")
        #expect(form.status == 200 && form.body.contains(#"<input name="next" type="hidden" value="/snapshot/3">"#))

        let wrong = try httpRequest(port: port, method: "POST", path: "/login", body: "password=guess&next=%2F")
        #expect(wrong.status == 401)
        #expect(wrong.header("Set-Cookie") == nil)
        #expect(wrong.body.contains("Wrong password."))
        let crossSite = try httpRequest(
            port: port, method: "POST", path: "/login", headers: ["Origin: http://attacker.example"],
            body: "password=\(testPassword.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)")
        #expect(crossSite.status == 403 && crossSite.header("Set-Cookie") == nil)
        running.cancel()
        _ = try? await running.value
        await broker.stop()
    }

    @Test(
        "The session cookie: HttpOnly, SameSite=Strict, Secure only behind TLS; sign-out ends it",
        arguments: [false, true])
    func cookieFlags(behindTLS: Bool) async throws {
        let broker = try await TestBroker.start()
        let (running, port, _) = try await startDashboard(
            try Self.configuration(broker, "dashboard-cookie-\(behindTLS)", behindTLS: behindTLS))
        let response = try httpRequest(
            port: port, method: "POST", path: "/login", headers: ["Origin: http://127.0.0.1:\(port)"],
            body:
                "password=\(testPassword.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)&next=%2Fsnapshot%2F2"
        )
        #expect(response.status == 303 && response.header("Location") == "/snapshot/2")
        let cookie = try #require(response.header("Set-Cookie"))
        let flags = cookie.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(flags.contains("HttpOnly") && flags.contains("SameSite=Strict") && flags.contains("Path=/"))
        #expect(flags.contains("Secure") == behindTLS, "\(cookie)")
        let session = String(flags[0])
        #expect(session.hasPrefix("perimeter_session=") && session.count == "perimeter_session=".count + 64)
        #expect(try authenticatedGet(port: port, path: "/map.svg", cookie: session).status == 200)
        let out = try httpRequest(
            port: port, method: "POST", path: "/logout", headers: ["Cookie: \(session)"], body: "")
        #expect(out.status == 303 && out.header("Set-Cookie")?.contains("Max-Age=0") == true)
        #expect(try authenticatedGet(port: port, path: "/map.svg", cookie: session).status == 401)
        running.cancel()
        _ = try? await running.value
        await broker.stop()
    }

    @Test("A sign-in link signs in once and goes on to its page")
    func oneTimeLink() async throws {
        let broker = try await TestBroker.start()
        let (running, port, address) = try await startDashboard(try Self.configuration(broker, "dashboard-link"))
        let link = try #require(address?.oneTimeLoginURL(next: "/snapshot/1"))
        let path = String(link.dropFirst("http://127.0.0.1:\(port)".count))
        let first = try httpRequest(port: port, path: path)
        #expect(first.status == 303 && first.header("Location") == "/snapshot/1")
        let cookie = try #require(first.header("Set-Cookie")?.split(separator: ";").first.map(String.init))
        #expect(try authenticatedGet(port: port, path: "/map.svg", cookie: cookie).status == 200)
        let again = try httpRequest(port: port, path: path)
        #expect(again.status == 401 && again.header("Set-Cookie") == nil)
        #expect(again.body.contains("used already or has expired"))
        running.cancel()
        _ = try? await running.value
        await broker.stop()
    }

    @Test("Regression (issue 18): idle /events connections from one address no longer lock every viewer out")
    func idleStreamsDoNotLockOutViewers() async throws {
        let broker = try await TestBroker.start()
        var configuration = try Self.configuration(broker, "dashboard-idle")
        configuration.limits.connectionsPerIP = 8
        let (running, port, _) = try await startDashboard(configuration)
        // Signed in from another address: the sign-in's own connection, closing, must not take
        // one of 127.0.0.1's eight places.
        let cookie = try #require(
            try httpRequest(
                port: port, method: "POST", path: "/login",
                body: "password=\(testPassword.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)",
                from: "127.0.0.4"
            ).header("Set-Cookie")?.split(separator: ";").first.map(String.init))
        // Eight streams held open and never read from one address (main had 64 → 503 for all),
        // and connections that never send a request: the address is at its limit …
        let idle = try (0..<8).map { _ in try EventStreamReader(port: port, cookie: cookie) }
        for stream in idle { try await stream.waitFor("the first state") { $0.contains("event: state") } }
        let unauthenticated = try httpRequest(port: port, path: "/events", from: "127.0.0.3")
        #expect(unauthenticated.status == 401, "without a session no stream is held at all")
        #expect(try httpRequest(port: port, path: "/healthz", timeout: .seconds(10)).status == 0)
        // … while a viewer elsewhere signs in and streams.
        let viewer = try httpRequest(
            port: port, method: "POST", path: "/login",
            body: "password=\(testPassword.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)",
            from: "127.0.0.2")
        let viewerCookie = try #require(viewer.header("Set-Cookie")?.split(separator: ";").first.map(String.init))
        let fd = try connectLoopback(port: port, from: "127.0.0.2", readTimeout: .milliseconds(100))
        defer { close(fd) }
        sendAll(fd, Array("GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: \(viewerCookie)\r\n\r\n".utf8))
        var text = ""
        var buffer = [UInt8](repeating: 0, count: 65536)
        try await waitUntil("the other viewer's first state", timeout: .seconds(30)) {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count > 0 { text += String(decoding: buffer[0..<count], as: UTF8.self) }
            return text.contains("event: state")
        }
        #expect(text.hasPrefix("HTTP/1.1 200 OK"))
        for stream in idle { stream.close() }
        running.cancel()
        _ = try? await running.value
        await broker.stop()
    }

    @Test("Idle streams get a keep-alive when the service's clock says so")
    func keepAliveOnTheClock() async throws {
        let broker = try await TestBroker.start()
        let clock = ManualClock()
        let (running, port, _) = try await startDashboard(
            try Self.configuration(broker, "dashboard-keepalive"), clock: clock)
        let stream = try EventStreamReader(port: port, cookie: try signIn(port: port))
        try await stream.waitFor("the first state") { $0.contains("event: state") }
        #expect(try await clock.waitForSleepers(1))
        #expect(!stream.received.contains("keep-alive"))
        clock.advance(by: 10)
        try await stream.waitFor("a keep-alive") { $0.contains(": keep-alive\n\n") }
        stream.close()
        running.cancel()
        _ = try? await running.value
        await broker.stop()
    }
}

/// What a slow reader costs: the broadcaster behind a real libmicrohttpd server, a client
/// that reads nothing while thousands of frames are published, then reads.
@Suite("Event stream: a slow reader is coalesced, never buffered without limit")
struct SlowReaderTests {
    @Test("A reader that stops reading holds at most one picture; when it reads again it gets the latest state")
    func coalesced() async throws {
        let broadcaster = EventBroadcaster(maxPendingFeed: 8)
        broadcaster.publish(state: #"{"n":0}"#)
        let server = try HTTPServer(port: 0, limits: HTTPServer.Limits()) { _ in .stream(broadcaster.client()) }
        defer { server.stop() }
        // The kernel's socket buffers take a few MB before the server can write no more (a
        // smaller receive window would make the test read too slowly: the server drops a
        // connection that takes no bytes for its idle timeout).
        let fd = try connectLoopback(port: server.port)
        defer { close(fd) }
        sendAll(fd, Array("GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        try await waitUntil("the stream to be open", timeout: .seconds(30)) { broadcaster.clientCount == 1 }

        // 3,000 states of 10 kB and 3,000 feed lines: 30 MB had each been queued.
        let padding = String(repeating: "x", count: 10_000)
        var largest = 0
        for n in 1...3000 {
            broadcaster.publish(feed: #"{"kind":"enter","n":\#(n)}"#)
            broadcaster.publish(state: #"{"n":\#(n),"pad":"\#(padding)"}"#)
            if n % 100 == 0 { largest = max(largest, broadcaster.backlog.largest) }
        }
        // Held per stream: one state and at most 8 feed lines, whatever was published.
        #expect(largest <= 10_100 + 8 * 40, "a stream held \(largest) bytes")
        #expect(broadcaster.backlog.resyncs >= 1, "a reader that far behind is resynchronized")
        #expect(server.pendingStreamBytes < 1_000_000, "\(server.pendingStreamBytes) bytes taken and unwritten")

        // The reader wakes up: it drains to the latest state, with a feed-reset on the way.
        broadcaster.publish(state: #"{"n":"last"}"#)
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let deadline = ContinuousClock.now + .seconds(60)
        let last = Array(#"data: {"n":"last"}"#.utf8)
        // Only the newest bytes are searched: the kernel's buffers held megabytes of old frames.
        func arrived() -> Bool {
            let tail = received.suffix(70_000)
            return tail.count >= last.count
                && tail.indices.dropLast(last.count - 1).contains { index in
                    tail[index..<index + last.count].elementsEqual(last)
                }
        }
        while !arrived() && ContinuousClock.now < deadline {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count > 0 { received += buffer[0..<count] }
        }
        let text = String(decoding: received, as: UTF8.self)
        #expect(arrived(), "the latest state arrives")
        #expect(text.contains("event: feed-reset"), "the feed arrives whole after the resync")
        let states = text.components(separatedBy: "event: state").count - 1
        #expect(states < 3000, "states coalesced: \(states) of 3,001 sent")
    }
}
