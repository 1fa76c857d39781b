import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// Headless Chromium (Debian's `chromium`), run as a real browser against the dashboard.
enum Chromium {
    static var executable: String? { Subprocess.find("chromium") ?? Subprocess.find("chromium-browser") }

    /// Runs chromium with `arguments` plus the flags a headless root run needs; returns its
    /// standard output. `profile`: a profile directory to keep (its cookies) between runs.
    static func run(
        _ arguments: [String], profile: String? = nil, timeout: Duration = .seconds(60)
    ) async throws
        -> String
    {
        guard let executable else {
            throw ChildFailure(message: "chromium is missing: apt-get install chromium (scripts/setup.sh installs it)")
        }
        let directory = TestScratch.root.appendingPathComponent(
            "perimeter-chromium-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let out = directory.appendingPathComponent("out").path
        let child = try Subprocess.spawn(
            executable,
            [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                "--user-data-dir=\(profile ?? directory.appendingPathComponent("profile").path)",
            ] + arguments, stdout: .file(out, append: false), stderr: .null)
        let status = try await withTimeout(timeout, "chromium \(arguments.joined(separator: " "))") {
            await child.wait()
        }
        guard status == .exited(0) else { throw ChildFailure(message: "chromium \(status)") }
        return (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
    }
}

@Suite("Dashboard in a real browser (headless Chromium)")
struct BrowserTests {
    /// A sign-in link pointed at another page of the dashboard (`next`), keeping its fragment.
    static func link(_ signIn: String, next: String, fragment: String) -> String {
        let target = next.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        return signIn.replacingOccurrences(of: "next=%2F", with: "next=\(target)") + "#\(fragment)"
    }

    @Test("Signed in: regions drawn, events arrive, occupancy changes; a screenshot of it; refused without credentials")
    func liveDashboard() async throws {
        #expect(Chromium.executable != nil, "chromium is missing: apt-get install chromium")
        let broker = try await TestBroker.start()
        let directory = TestScratch.root.appendingPathComponent(
            "perimeter-browser-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let config: JSONValue = [
            // One file for both services, its client id the evaluator's: the dashboard must use its own.
            "broker": ["host": "127.0.0.1", "port": .number(Double(broker.port)), "clientId": "perimeter-evaluator-1"],
            "evaluator": [
                "database": .string(directory.appendingPathComponent("evaluator.sqlite").path), "tickInterval": 0.2,
            ],
            "venues": [
                "test": [
                    "regions": .string(try DashboardFixtures.regionsFile()), "privacy": ["open": true],
                    "reporters": ["phone-*": ["visitor-*"]],
                ]
            ],
            "dashboard": [
                "http": "127.0.0.1:0", "title": "Perimeter — test venue",
                "passwordFile": .string(directory.appendingPathComponent("dashboard.password").path),
            ],
            "log": ["level": "info"],
        ]
        let configPath = directory.appendingPathComponent("perimeter.json").path
        try config.serialized().write(toFile: configPath, atomically: true, encoding: .utf8)
        let passwordPath = directory.appendingPathComponent("dashboard.password").path
        #expect(
            FileManager.default.createFile(
                atPath: passwordPath, contents: Data("browser-test-password\n".utf8),
                attributes: [.posixPermissions: 0o600]
            ))
        let evaluator = try ChildProcess(
            Products.executable("perimeter"), ["evaluator", "--config", configPath])
        let dashboard = try ChildProcess(
            Products.executable("perimeter"), ["dashboard", "--config", configPath, "--login-link"])
        let profile = directory.appendingPathComponent("chromium-profile").path
        let publisher = try await broker.connectedClient("publisher")
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
            try await waitForHealth("answering", port: port) { $0.hasPrefix("ok") }

            // Without credentials the browser gets the sign-in form, not the venue.
            let refused = try await Chromium.run(["--dump-dom", "\(url)snapshot/1"])
            #expect(refused.contains(#"<form id="login" method="post" action="/login">"#), "\(refused.prefix(500))")
            #expect(!refused.contains("<svg") && !refused.contains("region-gallery-1"))
            #expect(try httpGet(port: port, path: "/events").status == 401)

            // The browser signs in through the printed link and goes on to the page, whose end
            // is held 15 s (everything arrives within a few seconds on a quiet machine, later
            // under load); meanwhile a visitor walks in.
            let page = Self.link(signIn, next: "/snapshot/15", fragment: "visitor-1")
            let browser = Task { try await Chromium.run(["--dump-dom", page], profile: profile) }
            try await waitForHealth("the page streaming", port: port) { $0.contains("1 page(s) streaming") }
            let t = Timestamp.format(Date())
            try await publisher.publish(
                "perimeter/v1/test/obs/phone-1/gps",
                #"{"subject":"visitor-1","t":"\#(t)","lat":48.8606,"lon":2.3354,"acc":3}"#, qos: .atLeastOnce)
            // … and her phone hears a gallery beacon: the evaluator ranges it about once a second.
            try await publisher.publish(
                "perimeter/v1/test/obs/phone-1/ble",
                #"{"subject":"visitor-1","t":"\#(t)","adverts":[{"uuid":"F7826DA6-4FA2-4E98-8024-BC5B71E0893E","major":1,"minor":7,"rssi":-52,"tx":-59}]}"#,
                qos: .atLeastOnce)
            // … and the operator adds a kiosk: the open page redraws its map.
            try await publisher.publish(
                "perimeter/v1/test/regions/kiosk",
                #"{"type":"Feature","properties":{"name":"Kiosk","radius":5},"geometry":{"type":"Point","coordinates":[2.3362,48.8607]}}"#,
                qos: .atLeastOnce, retain: true)
            // … and visitor-2's diagnostics say a temporary full-accuracy grant is in force.
            try await publisher.publish(
                "perimeter/v1/test/diagnostics/visitor-2", #"{"heldEvents":0,"temporaryFullAccuracy":true}"#,
                qos: .atLeastOnce, retain: true)
            let dom = try await browser.value

            let regions = dom.components(separatedBy: "class=\"region ").count - 1
            #expect(regions == 5, "regions drawn: \(regions)")
            #expect(dom.contains("id=\"region-kiosk\""), "a region published while the page is open is drawn")
            #expect(dom.contains("id=\"region-gallery-1-beacons\" class=\"region beacon\""))
            #expect(dom.contains("id=\"region-gallery-1\"") && dom.contains("id=\"region-cafe\""))
            #expect(dom.contains("id=\"connection\" class=\"on\""), "the event stream connected")
            #expect(dom.contains("visitor-1 enter Gallery 1"), "the enter event arrived in the feed")
            #expect(dom.contains("id=\"occ-gallery-1\">1<"), "gallery-1 shows one visitor")
            #expect(dom.contains("gallery-1 0 → 1"), "the occupancy changed while the page was open")
            #expect(dom.contains("data-subject=\"visitor-1\""), "the visitor is drawn on the map")
            #expect(dom.contains("data-occupancy=\"1\""))
            #expect(
                dom.contains("gallery-1-beacons: f7826da6-4fa2-4e98-8024-bc5b71e0893e 1/7 — "),
                "the chosen subject's ranging is listed")
            #expect(dom.contains("visitor-2 has temporary full accuracy"), "the grant is listed")
            #expect(dom.contains("id=\"count-grants\">1<"), "and counted")

            // A screenshot of the live page, in the same profile: its session cookie is kept.
            let shot = directory.appendingPathComponent("dashboard.png").path
            _ = try await Chromium.run(
                [
                    "--hide-scrollbars", "--window-size=1400,760", "--screenshot=\(shot)",
                    "\(url)snapshot/1#visitor-1",
                ], profile: profile)
            let png = try Data(contentsOf: URL(fileURLWithPath: shot))
            #expect(Array(png.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
            #expect(png.count > 10_000, "a real picture, not an empty page: \(png.count) bytes")
            if let images = ProcessInfo.processInfo.environment["PERIMETER_DOCS_IMAGES"] {
                let target = URL(fileURLWithPath: images).appendingPathComponent("dashboard.png")
                try? FileManager.default.removeItem(at: target)
                try FileManager.default.copyItem(at: URL(fileURLWithPath: shot), to: target)
            }
        } catch {
            Issue.record(
                "\(error); dashboard said: \(dashboard.output.suffix(2000)); evaluator said: \(evaluator.output.suffix(2000))"
            )
        }
        dashboard.kill(SIGTERM)
        evaluator.kill(SIGTERM)
        _ = await dashboard.subprocess.wait()
        _ = await evaluator.subprocess.wait()
        await publisher.disconnect()
        await broker.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    @Test("perimeter up serves the dashboard: regions drawn, events arrive, occupancy changes in Chromium")
    func upDashboard() async throws {
        #expect(Chromium.executable != nil, "chromium is missing: apt-get install chromium")
        let port = try MosquittoBroker.freeLoopbackPort()
        let venue = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/museum").path
        let up = try ChildProcess(
            Products.executable("perimeter"),
            ["up", "--venue", venue, "--no-simulator", "--broker-port", "\(port)", "--duration", "90"])
        do {
            let line = try await up.waitForLine(containing: "perimeter up: dashboard at http://", timeout: .seconds(60))
            let signIn = try #require(line.split(separator: " ").last.map(String.init))
            let dashboardPort = try #require(URLComponents(string: signIn)?.port)
            let password = try await up.waitForLine(containing: "perimeter up: dashboard password for this run: ")
            #expect((password.split(separator: " ").last?.count ?? 0) == 20)
            try await waitForHealth("answering", port: dashboardPort) { $0.hasPrefix("ok") }
            // The evaluator's first session exists once it has subscribed: an observation sent
            // before that reaches nobody (the dashboard can be up a second earlier).
            try await up.waitForLine(containing: "evaluator running", timeout: .seconds(60))
            let publisher = try MQTTClient(MQTTConfiguration(port: port, clientID: "browser-up-publisher"))
            try await publisher.connect(timeout: .seconds(10))
            // Held 15 s: gallery-1 confirms an enter after 3 s (enterDelay), and under load the
            // publish below can come seconds after the page opened.
            let browser = Task {
                try await Chromium.run(["--dump-dom", Self.link(signIn, next: "/snapshot/15", fragment: "visitor-9")])
            }
            try await waitForHealth("the page streaming", port: dashboardPort) { $0.contains("1 page(s) streaming") }
            try await publisher.publish(
                "perimeter/v1/museum/obs/phone-9/gps",
                #"{"subject":"visitor-9","t":"\#(Timestamp.format(Date()))","lat":48.8606,"lon":2.3354,"acc":3}"#,
                qos: .atLeastOnce)
            let dom = try await browser.value
            await publisher.disconnect()
            let regions = dom.components(separatedBy: "class=\"region ").count - 1
            #expect(regions == 10, "the museum's ten regions drawn: \(regions)")
            #expect(dom.contains("visitor-9 enter Gallery 1"), "the enter event arrived in the feed")
            #expect(dom.contains("gallery-1 0 → 1"), "the occupancy changed while the page was open")
            #expect(dom.contains("data-subject=\"visitor-9\""), "the visitor is drawn on the map")
        } catch {
            Issue.record("\(error); up said: \(up.output.suffix(3000))")
        }
        up.kill(SIGINT)
        let end = await up.finish()
        #expect(end.termination == .exited(0), "\(end.output.suffix(2000))")
        #expect(!MosquittoBroker.accepts(port: port), "up's broker is gone")
    }

    /// Waits for the dashboard's /healthz to satisfy `condition`; 60 s, as long as Chromium may
    /// take to start and open the page's stream on a loaded machine.
    func waitForHealth(_ what: String, port: Int, _ condition: (String) -> Bool) async throws {
        var last = ""
        try await waitUntil(
            "dashboard health: \(what)", timeout: .seconds(60), every: .milliseconds(50),
            context: { "last: \(last)" }
        ) {
            do {
                let answer = try httpGet(port: port, path: "/healthz")
                last = "\(answer.status) \(answer.body)"
                return condition(answer.body)
            } catch {
                last = "\(error)"
                return false
            }
        }
    }
}
