import Foundation
import PerimeterKit
import PerimeterTestSupport
import Testing

@Suite("perimeter dashboard and up --dashboard")
struct DashboardCommandTests {
    @Test("up --dashboard starts the dashboard in the group, prints a sign-in link and serves the page to it alone")
    func upWithDashboard() async throws {
        let child = try ChildProcess(
            Products.executable("perimeter"),
            ["up", "--duration", "120", "--dashboard", "127.0.0.1:0", "--set", "venue.regions=\(CLIFixtures.museum)"])
        let line = try await child.waitForLine(containing: "dashboard at http://", timeout: .seconds(90))
        let link = try #require(URLComponents(string: String(line.split(separator: " ").last ?? "")))
        let port = try #require(link.port)
        #expect(link.path == "/login" && link.queryItems?.first { $0.name == "token" }?.value?.count == 64)
        #expect(try httpGet(port: port, path: "/").status == 303, "no page without signing in")
        let signedIn = try httpRequest(port: port, path: "/login?\(link.percentEncodedQuery ?? "")")
        #expect(signedIn.status == 303 && signedIn.header("Location") == "/")
        let cookie = try #require(signedIn.header("Set-Cookie")?.split(separator: ";").first.map(String.init))
        let page = try httpRequest(port: port, path: "/", headers: ["Cookie: \(cookie)"])
        #expect(page.status == 200)
        #expect(page.body.contains("id=\"region-gallery-1\""))
        // The link works once; the password printed beside it keeps working.
        #expect(try httpRequest(port: port, path: "/login?\(link.percentEncodedQuery ?? "")").status == 401)
        let password = try await child.waitForLine(containing: "dashboard password for this run: ")
        let again = try httpRequest(
            port: port, method: "POST", path: "/login",
            body: "password=\(password.split(separator: " ").last ?? "")&next=%2F")
        #expect(again.status == 303 && again.header("Set-Cookie") != nil)
        child.kill(SIGTERM)
        let status = await child.subprocess.wait()
        #expect(status == .exited(0), "\(child.output.suffix(1000))")
    }

    @Test(
        "bad settings are refused before anything starts",
        arguments: [
            (["dashboard", "--set", "dashboard.venue=test"], "dashboard.regions"),
            (["dashboard", "--set", "dashboard.venue=a/b", "--set", "dashboard.regions=x"], "dashboard.venue"),
            (
                [
                    "dashboard", "--set", "dashboard.venue=t", "--set", "dashboard.regions=x", "--set",
                    "dashboard.http=80",
                ],
                "dashboard.http"
            ),
            (
                [
                    "dashboard", "--set", "dashboard.venue=t", "--set", "dashboard.regions=/nonexistent.geojson",
                    "--set", "dashboard.passwordFile=PASSWORD_FILE",
                ],
                "cannot read /nonexistent.geojson"
            ),
            (
                ["dashboard", "--set", "dashboard.venue=t", "--set", "dashboard.regions=x"],
                "dashboard.passwordFile: the dashboard needs a password"
            ),
            (
                [
                    "dashboard", "--set", "dashboard.venue=t", "--set", "dashboard.regions=x", "--set",
                    "dashboard.password=on-the-command-line",
                ],
                "dashboard.password: a secret is never read from the configuration file or --set"
            ),
            (["up", "--dashboard", "localhost"], "--dashboard: expected host:port"),
        ])
    func refusals(arguments: [String], message: String) async throws {
        // A password file of mode 0600, where a case needs one to get further.
        let passwordFile = TestScratch.root.appendingPathComponent(
            "perimeter-pw-\(UUID().uuidString)"
        ).path
        #expect(
            FileManager.default.createFile(
                atPath: passwordFile, contents: Data("pw\n".utf8), attributes: [.posixPermissions: 0o600]))
        defer { try? FileManager.default.removeItem(atPath: passwordFile) }
        let arguments = arguments.map { $0.replacingOccurrences(of: "PASSWORD_FILE", with: passwordFile) }
        let result = try await perimeter(arguments, timeout: .seconds(30))
        #expect(result.status != .exited(0))
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }
}
