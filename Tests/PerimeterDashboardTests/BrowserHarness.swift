import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// A broker, a real `perimeter evaluator` and `perimeter dashboard` (one configuration file,
/// the venue in Europe/Paris), a signed-in Chromium profile and a publisher: what a browser
/// test of the dashboard needs.
struct BrowserHarness {
    let broker: MosquittoBroker
    let directory: URL
    let evaluator: ChildProcess
    let dashboard: ChildProcess
    let publisher: MQTTClient
    /// The page's address (`http://127.0.0.1:PORT/`) and port.
    let url: String
    let port: Int
    /// A Chromium profile holding a session cookie once ``signIn(next:)`` ran.
    let profile: String
    let signInLink: String

    /// Starts everything. `dashboard` adds settings to the dashboard's section.
    static func start(dashboard extra: [(String, JSONValue)] = []) async throws -> BrowserHarness {
        let broker = try await TestBroker.start()
        let directory = TestScratch.root.appendingPathComponent(
            "perimeter-browser-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let passwordPath = directory.appendingPathComponent("dashboard.password").path
        _ = FileManager.default.createFile(
            atPath: passwordPath, contents: Data("browser-test-password\n".utf8), attributes: [.posixPermissions: 0o600]
        )
        var dashboardSection: JSONObject = [
            "http": "127.0.0.1:0", "title": "Perimeter — test venue", "passwordFile": .string(passwordPath),
        ]
        for (key, value) in extra { dashboardSection[key] = value }
        let config: JSONValue = [
            "broker": ["host": "127.0.0.1", "port": .number(Double(broker.port))],
            "evaluator": [
                "database": .string(directory.appendingPathComponent("evaluator.sqlite").path), "tickInterval": 0.2,
            ],
            "venues": [
                "test": [
                    "regions": .string(try DashboardFixtures.regionsFile()), "privacy": ["open": true],
                    "reporters": ["phone-*": ["visitor-*"]], "timeZone": "Europe/Paris",
                ]
            ],
            "dashboard": .object(dashboardSection),
            "log": ["level": "info"],
        ]
        let configPath = directory.appendingPathComponent("perimeter.json").path
        try config.serialized().write(toFile: configPath, atomically: true, encoding: .utf8)
        let evaluator = try ChildProcess(Products.executable("perimeter"), ["evaluator", "--config", configPath])
        let dashboard = try ChildProcess(
            Products.executable("perimeter"), ["dashboard", "--config", configPath, "--login-link"])
        do {
            try await evaluator.waitForLine(containing: "evaluator running", timeout: .seconds(30))
            let line = try await dashboard.waitForLine(
                containing: "perimeter dashboard: http://", timeout: .seconds(30))
            let url = try #require(
                line.split(separator: "\n").first { $0.contains("perimeter dashboard: http://") }?.split(separator: " ")
                    .last.map(String.init))
            let port = try #require(Int(url.split(separator: ":").last!.dropLast()))
            let signInLine = try await dashboard.waitForLine(containing: "sign in once at http://")
            let signIn = try #require(signInLine.split(separator: " ").last.map(String.init))
            let publisher = try await broker.connectedClient("publisher-\(UUID().uuidString.prefix(6))")
            return BrowserHarness(
                broker: broker, directory: directory, evaluator: evaluator, dashboard: dashboard, publisher: publisher,
                url: url, port: port, profile: directory.appendingPathComponent("chromium-profile").path,
                signInLink: signIn)
        } catch {
            Issue.record("\(error); dashboard said: \(dashboard.output.suffix(2000))")
            dashboard.kill(SIGTERM)
            evaluator.kill(SIGTERM)
            _ = await dashboard.subprocess.wait()
            _ = await evaluator.subprocess.wait()
            await broker.stop()
            throw error
        }
    }

    /// What the services said, for a failure's message.
    var logs: String {
        "dashboard said: \(dashboard.output.suffix(2000)); evaluator said: \(evaluator.output.suffix(2000))"
    }

    /// Publishes a fix for `subject` (its phone `phone-N` as agent) now.
    func fix(_ subject: String, lat: Double, lon: Double, acc: Double = 3) async throws {
        let phone = "phone-" + subject.split(separator: "-").last!
        try await publisher.publish(
            "perimeter/v1/test/obs/\(phone)/gps",
            #"{"subject":"\#(subject)","t":"\#(Timestamp.format(Date()))","lat":\#(lat),"lon":\#(lon),"acc":\#(acc)}"#,
            qos: .atLeastOnce)
    }

    func stop() async {
        dashboard.kill(SIGTERM)
        evaluator.kill(SIGTERM)
        _ = await dashboard.subprocess.wait()
        _ = await evaluator.subprocess.wait()
        await publisher.disconnect()
        await broker.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}
