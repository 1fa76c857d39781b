import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Testing

@testable import PerimeterCLI

/// `perimeter doctor` for every service (issue 20): which services a file is for, the broker's
/// queue limits, the dashboard's sign-in and hosts, the agent's gpsd and Bluetooth controller.
@Suite("perimeter doctor for every service")
struct DoctorServicesTests {
    static func example(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/\(name)").path
    }

    @Test(
        "a configuration's sections say which services it is for",
        arguments: [
            ("notifier.example.json", ["notifier"]), ("evaluator.example.json", ["evaluator", "dashboard"]),
            ("agent.example.json", ["agent"]),
        ])
    func recognizesExamples(_ file: String, _ services: [String]) throws {
        let reader = try ConfigReader(filePath: Self.example(file))
        #expect(DoctorCommand.recognize(reader).map(\.rawValue) == services)
    }

    @Test(
        "recognition from the sections present",
        arguments: [
            (#"{"venues":{"museum":{"timeZone":"Europe/Paris"}}}"#, ["evaluator"]),
            (#"{"venues":{"museum":{"rules":"r.json"}},"channels":{"app":{"type":"mqtt"}}}"#, ["notifier"]),
            (
                #"{"evaluator":{"instance":"1"},"notifier":{"instance":"1"},"channels":{"a":{"type":"mqtt"}}}"#,
                ["evaluator", "notifier"]
            ),
            (#"{"dashboard":{"venue":"museum"}}"#, ["dashboard"]),
            (#"{"gpsd":{"port":2947}}"#, ["agent"]),
            (#"{"broker":{"host":"127.0.0.1"}}"#, []),
        ])
    func recognizesSections(_ json: String, _ services: [String]) throws {
        let reader = try ConfigReader(contents: Array(json.utf8), origin: "test")
        #expect(DoctorCommand.recognize(reader).map(\.rawValue) == services)
    }

    @Test(
        "mosquitto's queue limits: what drops input and what grows without bound",
        arguments: [
            ("", ["max_queued_messages unset (stock 1000)"]),
            ("# max_queued_messages 1000000\n", ["max_queued_messages unset (stock 1000)"]),
            ("max_queued_messages 1000\n", ["max_queued_messages 1000:"]),
            ("max_queued_messages 200\nmax_queued_bytes 1000\n", ["max_queued_messages 200:"]),
            ("max_queued_messages 1000000\n", ["max_queued_bytes 0 (no byte bound) with max_queued_messages 1000000"]),
            ("max_queued_messages 0\n", ["max_queued_bytes 0 (no byte bound) with no message bound"]),
            ("max_queued_messages 1000000\nmax_queued_bytes 268435456\n", []),
            ("max_queued_messages 10\nmax_queued_messages 5000\nmax_queued_bytes 1048576\n", []),
        ])
    func limits(_ text: String, _ problems: [String]) throws {
        let found = try MosquittoLimits.parse(text).problems
        #expect(found.count == problems.count, "\(found)")
        for (problem, expected) in zip(found, problems) { #expect(problem.hasPrefix(expected), "\(problem)") }
    }

    @Test("an unknown --service is a usage error")
    func unknownService() async throws {
        let result = try await perimeter([
            "doctor", "--service", "gateway", "--config", Self.example("agent.example.json"),
        ])
        #expect(result.status == .exited(64))
        #expect(
            result.stderr.contains("'gateway' is not one of evaluator, notifier, dashboard, agent"), "\(result.stderr)")
    }

    struct Login: Sendable, CustomStringConvertible {
        var name: String
        var password: String?
        var mode: Int
        var environment: String?
        var extra: JSONObject = [:]
        /// Lines expected (prefixes).
        var expected: [String]
        var status: Int32
        var description: String { name }
    }

    static let logins: [Login] = [
        Login(
            name: "a root-only file with a long password", password: "correct-horse-battery", mode: 0o600,
            expected: ["ok   dashboard login: password from", "(mode 600)"], status: 0),
        Login(
            name: "no password at all", password: nil, mode: 0o600,
            expected: ["FAIL dashboard login: dashboard.passwordFile: cannot read"], status: 1),
        Login(
            name: "a file every user may read", password: "correct-horse-battery", mode: 0o644,
            expected: ["FAIL dashboard login: dashboard.passwordFile:", "is readable by every user"], status: 1),
        Login(
            name: "an empty file", password: "", mode: 0o600,
            expected: ["FAIL dashboard login: dashboard.passwordFile:", "is empty"], status: 1),
        Login(
            name: "a short password, group-readable", password: "short", mode: 0o640,
            expected: ["warn dashboard login: password from", "readable by its group"], status: 0),
        Login(
            name: "behind TLS with only loopback names: the proxy's Host would get 421",
            password: "correct-horse-battery", mode: 0o600, extra: ["behindTLS": true],
            expected: ["warn dashboard allowed hosts: behindTLS is set"], status: 0),
        Login(
            name: "on every interface without TLS", password: "correct-horse-battery", mode: 0o600,
            extra: ["http": "0.0.0.0:0", "allowedHosts": ["dash.museum.example"]],
            expected: ["warn dashboard allowed hosts: listening on 0.0.0.0 without TLS"], status: 0),
    ]

    @Test("the dashboard's sign-in and allowed hosts, against a real broker", arguments: logins)
    func dashboard(_ login: Login) async throws {
        let broker = try await TestBroker.start()
        let directory = TestScratch.root.appendingPathComponent(
            "perimeter-doctor-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let passwordPath = directory.appendingPathComponent("dashboard.password").path
        if let password = login.password {
            #expect(
                FileManager.default.createFile(
                    atPath: passwordPath, contents: Data((password + "\n").utf8),
                    attributes: [.posixPermissions: login.mode]))
        }
        var dashboard: JSONObject = [
            "venue": "museum", "regions": .string(CLIFixtures.museum), "passwordFile": .string(passwordPath),
            "http": "127.0.0.1:0",
        ]
        for (key, value) in login.extra { dashboard[key] = value }
        let config: JSONValue = [
            "broker": ["host": "127.0.0.1", "port": .number(Double(broker.port))], "dashboard": .object(dashboard),
        ]
        let path = directory.appendingPathComponent("dashboard.json").path
        try config.serialized().write(toFile: path, atomically: true, encoding: .utf8)
        let before = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        let result = try await perimeter(["doctor", "--config", path])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(result.status == .exited(login.status), "\(lines)")
        #expect(lines.first?.hasPrefix("ok   services: dashboard (recognized") == true, "\(lines)")
        let first = login.expected[0]
        let line = lines.first { $0.hasPrefix(first) }
        #expect(line != nil, "no line starting '\(first)' in \(lines)")
        for part in login.expected.dropFirst() { #expect(line?.contains(part) == true, "\(line ?? "")") }
        if login.status == 0 {
            #expect(lines.contains { $0.hasPrefix("ok   dashboard regions: ") }, "\(lines)")
            if login.extra.isEmpty {
                #expect(
                    lines.contains { $0 == "ok   dashboard allowed hosts: localhost, 127.0.0.1, [::1]" }, "\(lines)")
            }
            #expect(lines.contains { $0.hasPrefix("ok   dashboard broker 127.0.0.1:\(broker.port): connected") })
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == before)
        await broker.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    @Test("the agent's gpsd: a real gpsd answers (with no receiver: a warning); a closed port is a FAIL")
    func agentGPSD() async throws {
        guard let gpsdPath = Subprocess.find("gpsd") else {
            throw ChildFailure(message: "gpsd is not installed: run scripts/setup.sh (Debian's gpsd)")
        }
        let broker = try await TestBroker.start()
        let port = try MosquittoBroker.freeLoopbackPort()
        let directory = TestScratch.root.appendingPathComponent(
            "perimeter-doctor-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        // -N foreground, -S our own port, a control socket and no device: it answers clients and
        // reads no receiver.
        let gpsd = try ChildProcess(
            gpsdPath, ["-N", "-S", "\(port)", "-F", directory.appendingPathComponent("gpsd.sock").path])
        func run(gpsdPort: Int) async throws -> (Subprocess.Termination, [String]) {
            let config: JSONValue = [
                "broker": ["host": "127.0.0.1", "port": .number(Double(broker.port))],
                "agent": [
                    "id": "gw-1", "venue": "museum", "source": "gpsd",
                    "database": .string(directory.appendingPathComponent("agent.sqlite").path),
                ],
                "gpsd": ["host": "127.0.0.1", "port": .number(Double(gpsdPort))],
            ]
            let path = directory.appendingPathComponent("agent.json").path
            try config.serialized().write(toFile: path, atomically: true, encoding: .utf8)
            let result = try await perimeter(["doctor", "--config", path])
            return (result.status, result.stdout.split(separator: "\n").map(String.init))
        }
        // gpsd may take a moment to listen: the doctor's own line says when it does.
        var lines: [String] = []
        var status = Subprocess.Termination.exited(1)
        for _ in 0..<50 {
            (status, lines) = try await run(gpsdPort: port)
            if lines.contains(where: { $0.contains("gpsd 127.0.0.1:\(port): gpsd") }) { break }
            // Sleep, not a clock: a retry until Debian's gpsd (another process) listens; the loop ends on what doctor says.
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(status == .exited(0), "\(lines)")
        #expect(
            lines.contains {
                $0.hasPrefix("warn agent gpsd 127.0.0.1:\(port): gpsd 3.") && $0.contains("no GPS receiver")
            },
            "\(lines)")
        #expect(lines.contains { $0.hasPrefix("warn agent database") && $0.contains("missing; the agent creates it") })
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("agent.sqlite").path))
        #expect(lines.contains { $0.hasPrefix("ok   agent broker 127.0.0.1:\(broker.port): connected") })
        gpsd.kill(SIGTERM)
        _ = await gpsd.finish()
        (status, lines) = try await run(gpsdPort: port)
        #expect(status == .exited(1))
        #expect(lines.contains { $0.hasPrefix("FAIL agent gpsd 127.0.0.1:\(port): ") }, "\(lines)")
        await broker.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    @Test("the agent's HCI source needs the controller: one this machine does not have is a FAIL")
    func agentHCI() async throws {
        let path = try temporaryFile(
            "agent.json",
            #"{"broker":{"host":"127.0.0.1","port":1},"agent":{"id":"gw-1","source":"hci","database":"/nonexistent/agent.sqlite"},"hci":{"device":250}}"#
        )
        let result = try await perimeter(["doctor", "--config", path])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(result.status == .exited(1))
        #expect(lines.contains { $0.hasPrefix("FAIL agent hci250: no such Bluetooth controller") }, "\(lines)")
        #expect(
            lines.contains {
                $0.hasPrefix("FAIL agent database /nonexistent/agent.sqlite: missing, and so is its directory")
            })
    }
    @Test("a file with the evaluator's and the dashboard's sections: both are checked, the shared broker once")
    func severalServices() async throws {
        let broker = try await TestBroker.start()
        let directory = TestScratch.root.appendingPathComponent(
            "perimeter-doctor-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let passwordPath = directory.appendingPathComponent("dashboard.password").path
        #expect(
            FileManager.default.createFile(
                atPath: passwordPath, contents: Data("correct-horse-battery\n".utf8),
                attributes: [.posixPermissions: 0o600]
            ))
        let config: JSONValue = [
            "broker": ["host": "127.0.0.1", "port": .number(Double(broker.port)), "clientId": "evaluator-1"],
            "evaluator": ["database": .string(directory.appendingPathComponent("evaluator.sqlite").path)],
            "venues": ["museum": ["regions": .string(CLIFixtures.museum), "timeZone": "Europe/Paris"]],
            "dashboard": ["passwordFile": .string(passwordPath), "http": "127.0.0.1:0"],
        ]
        let path = directory.appendingPathComponent("venue.json").path
        try config.serialized().write(toFile: path, atomically: true, encoding: .utf8)
        let result = try await perimeter(["doctor", "--config", path, "--listen", "0.2"])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(result.status == .exited(0), "\(lines)")
        for expected in [
            "ok   services: evaluator, dashboard (recognized", "ok   configuration: valid (1 venue(s))",
            "ok   venue museum: 7 regions", "ok   broker 127.0.0.1:\(broker.port): connected",
            "ok   ACL museum: may read observations", "ok   dashboard configuration: valid (venue museum",
            "ok   dashboard login: password from", "ok   dashboard regions: 7 regions",
            "ok   dashboard broker 127.0.0.1:\(broker.port): the same broker and account as checked above",
            "ok   broker limits (mosquitto version",
        ] {
            #expect(lines.contains { $0.hasPrefix(expected) }, "no line starting '\(expected)' in \(lines)")
        }
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == [
                "dashboard.password", "venue.json",
            ])
        await broker.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}
