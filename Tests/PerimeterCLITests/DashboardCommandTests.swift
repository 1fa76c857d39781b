import Foundation
import PerimeterKit
import PerimeterTestSupport
import Testing

@Suite("perimeter dashboard and up --dashboard")
struct DashboardCommandTests {
    @Test("up --dashboard starts the dashboard in the group, prints its URL and serves the page")
    func upWithDashboard() async throws {
        let child = try ChildProcess(
            Products.executable("perimeter"),
            ["up", "--duration", "120", "--dashboard", "127.0.0.1:0", "--set", "venue.regions=\(CLIFixtures.museum)"])
        let output = try await child.waitForLine(containing: "dashboard at http://", timeout: .seconds(90))
        let line = try #require(output.split(separator: "\n").first { $0.contains("dashboard at http://") })
        let port = try #require(Int(line.split(separator: ":").last!.dropLast()))
        let page = try httpGet(port: port, path: "/")
        #expect(page.status == 200)
        #expect(page.body.contains("id=\"region-gallery-1\""))
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
                ["dashboard", "--set", "dashboard.venue=t", "--set", "dashboard.regions=/nonexistent.geojson"],
                "cannot read /nonexistent.geojson"
            ),
            (["up", "--dashboard", "localhost"], "--dashboard: expected host:port"),
        ])
    func refusals(arguments: [String], message: String) async throws {
        let result = try await perimeter(arguments, timeout: .seconds(30))
        #expect(result.status != .exited(0))
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }
}
