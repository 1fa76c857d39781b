import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Testing

@testable import PerimeterDashboard

/// The sign-in rules on a manual clock: nothing here waits.
@Suite("Dashboard sign-in rules (manual clock)")
struct DashboardAuthTests {
    static func auth(_ clock: ManualClock, secure: Bool = false) -> DashboardAuth {
        var settings = DashboardAuth.Settings(password: "s3cret", secureCookie: secure)
        settings.sessionLifetime = 3600
        settings.loginTokenLifetime = 600
        settings.maxFailures = 3
        settings.failureWindow = 60
        return DashboardAuth(settings: settings, clock: clock)
    }

    @Test(
        "Password comparison",
        arguments: [
            ("s3cret", "s3cret", true), ("s3cre", "s3cret", false), ("s3crets", "s3cret", false),
            ("S3cret", "s3cret", false), ("", "s3cret", false), ("s3cret", "", false),
            // A guess that repeats the secret is not the secret.
            ("s3crets3cret", "s3cret", false), ("é", "é", true),
        ])
    func comparison(guess: String, secret: String, equal: Bool) {
        #expect(DashboardAuth.constantTimeEquals(guess, secret) == equal)
    }

    @Test(
        "A session lasts its lifetime and not a second more",
        arguments: [(0.0, true), (3599.0, true), (3600.0, false), (7200.0, false)])
    func sessionExpiry(after seconds: Double, valid: Bool) throws {
        let clock = ManualClock()
        let auth = Self.auth(clock)
        guard case .session(let token) = auth.login(password: "s3cret", client: "10.0.0.1") else {
            Issue.record("the right password was refused")
            return
        }
        clock.advance(by: seconds)
        #expect(auth.isValid(session: token) == valid)
        #expect(!auth.isValid(session: token + "0") && !auth.isValid(session: "") && !auth.isValid(session: nil))
    }

    @Test(
        "A sign-in link works once, within its lifetime",
        arguments: [(0.0, true), (599.0, true), (600.0, false)])
    func loginLink(after seconds: Double, valid: Bool) {
        let clock = ManualClock()
        let auth = Self.auth(clock)
        let token = auth.issueLoginToken()
        clock.advance(by: seconds)
        let session = auth.redeem(loginToken: token)
        #expect((session != nil) == valid)
        if let session { #expect(auth.isValid(session: session)) }
        #expect(auth.redeem(loginToken: token) == nil, "a link is used up by its first use")
    }

    @Test("Guessing is braked per address: after 3 failures in 60 s even the right password waits")
    func throttle() {
        let clock = ManualClock()
        let auth = Self.auth(clock)
        for _ in 0..<3 { #expect(auth.login(password: "guess", client: "10.0.0.9") == .wrongPassword) }
        clock.advance(by: 20)
        #expect(auth.login(password: "s3cret", client: "10.0.0.9") == .throttled(retryAfter: 40))
        // Another address is not affected.
        if case .session = auth.login(password: "s3cret", client: "10.0.0.10") {
        } else {
            Issue.record("another address was refused")
        }
        clock.advance(by: 40)
        if case .session = auth.login(password: "s3cret", client: "10.0.0.9") {
        } else {
            Issue.record("the window passed but the address is still refused")
        }
    }

    @Test("Memory stays bounded: sessions and tracked addresses have a ceiling")
    func bounded() {
        let clock = ManualClock()
        var settings = DashboardAuth.Settings(password: "s3cret")
        settings.maxSessions = 5
        settings.maxTrackedClients = 5
        let auth = DashboardAuth(settings: settings, clock: clock)
        for index in 0..<50 {
            _ = auth.login(password: "s3cret", client: "a\(index)")
            _ = auth.login(password: "wrong", client: "b\(index)")
            clock.advance(by: 1)
        }
        #expect(auth.sessionCount == 5)
    }

    @Test("Cookie flags", arguments: [false, true])
    func cookie(secure: Bool) {
        let auth = Self.auth(ManualClock(), secure: secure)
        let cookie = auth.cookie(for: "abc")
        #expect(cookie.hasPrefix("perimeter_session=abc; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict"))
        #expect(cookie.hasSuffix("; Secure") == secure)
        #expect(auth.clearingCookie.contains("Max-Age=0"))
    }

    @Test(
        "Only paths on this dashboard are followed after sign-in",
        arguments: [
            ("/snapshot/15", "/snapshot/15"), ("/", "/"), ("//evil.example/", "/"), ("/\\evil.example", "/"),
            ("https://evil.example/", "/"), ("", "/"), ("/a\r\nSet-Cookie: x=y", "/"),
        ])
    func safeNext(next: String, expected: String) {
        #expect(DashboardRoutes.safeNext(next) == expected)
    }

    @Test(
        "Host names from Host headers and origins",
        arguments: [
            ("127.0.0.1:8080", "127.0.0.1"), ("LOCALHOST", "localhost"), ("[::1]:80", "[::1]"),
            ("attacker.example:8080", "attacker.example"),
        ])
    func hostName(header: String, expected: String) {
        #expect(HTTPRequest.hostName(header) == expected)
    }
}

@Suite("Dashboard configuration: where the password may come from")
struct DashboardPasswordConfigurationTests {
    static func write(_ text: String, mode: Int) throws -> String {
        let path = TestScratch.root.appendingPathComponent("perimeter-pw-\(UUID().uuidString)")
            .path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
        return path
    }

    static func read(_ overrides: [String], environment: [String: String] = [:]) throws -> DashboardConfiguration {
        let reader = try ConfigReader(
            environment: environment,
            overrides: ["dashboard.venue=test", "dashboard.regions=/nonexistent.geojson"] + overrides)
        return try DashboardConfiguration.read(reader)
    }

    @Test("A password file of mode 0600, or the environment")
    func accepted() throws {
        let file = try Self.write("from-file\n", mode: 0o600)
        defer { try? FileManager.default.removeItem(atPath: file) }
        #expect(try Self.read(["dashboard.passwordFile=\(file)"]).password == "from-file")
        let environment = ["PERIMETER_DASHBOARD_PASSWORD": "from-env"]
        #expect(try Self.read([], environment: environment).password == "from-env")
        let configuration = try Self.read(
            ["dashboard.allowedHosts=dashboard.museum.example", "dashboard.behindTLS=true"], environment: environment)
        #expect(configuration.allowedHosts == ["localhost", "127.0.0.1", "[::1]", "dashboard.museum.example"])
        #expect(configuration.behindTLS)
    }

    @Test(
        "Refused, with the key and the reason",
        arguments: [
            ([String](), [String: String](), "dashboard.passwordFile", "the dashboard needs a password"),
            (["dashboard.password=in-the-json"], [:], "dashboard.password", "never read from the configuration file"),
            (["dashboard.passwordFile=/nonexistent/pw"], [:], "dashboard.passwordFile", "cannot read /nonexistent/pw"),
            (
                ["dashboard.allowedHosts=https://x.example/"], ["PERIMETER_DASHBOARD_PASSWORD": "p"],
                "dashboard.allowedHosts", "is not a host name"
            ),
            ([], ["PERIMETER_DASHBOARD_PASSWORD": ""], "dashboard.password", "is empty"),
        ])
    func refused(overrides: [String], environment: [String: String], key: String, reason: String) {
        do {
            _ = try Self.read(overrides, environment: environment)
            Issue.record("accepted \(overrides) \(environment)")
        } catch {
            let text = "\(error)"
            #expect(text.contains(key) && text.contains(reason), "\(text)")
        }
    }

    @Test(
        "The page's time zone: dashboard.timeZone, else the venue's, else UTC; an unknown zone is refused",
        arguments: [
            ([String](), "UTC"), (["venues.test.timeZone=Europe/Paris"], "Europe/Paris"),
            (["venues.test.timeZone=Europe/Paris", "dashboard.timeZone=America/Chicago"], "America/Chicago"),
        ])
    func timeZone(overrides: [String], expected: String) throws {
        let environment = ["PERIMETER_DASHBOARD_PASSWORD": "p"]
        #expect(try Self.read(overrides, environment: environment).timeZone == TimeZone(identifier: expected))
        #expect(throws: ConfigError.self) {
            try Self.read(["dashboard.timeZone=Mars/Olympus"], environment: environment)
        }
    }

    @Test(
        "A password file every user can read is refused; an empty one too",
        arguments: [(0o644, "password\n"), (0o600, "\n")])
    func badFile(mode: Int, content: String) throws {
        let file = try Self.write(content, mode: mode)
        defer { try? FileManager.default.removeItem(atPath: file) }
        #expect(throws: ConfigError.self) { try Self.read(["dashboard.passwordFile=\(file)"]) }
        do {
            _ = try Self.read(["dashboard.passwordFile=\(file)"])
        } catch {
            #expect("\(error)".contains(mode == 0o644 ? "readable by every user (mode 644): chmod 600" : "is empty"))
        }
    }
}
