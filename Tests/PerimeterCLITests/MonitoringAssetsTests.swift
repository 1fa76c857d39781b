import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Testing

/// `deploy/prometheus/` and `deploy/grafana/`: the alert rules load and fire as meant (promtool,
/// from Debian's `prometheus`; a missing promtool fails, never skips), and every metric they and
/// the dashboard name is one the running services expose on `/metrics`.
@Suite("Prometheus rules and the Grafana dashboard", .serialized)
struct MonitoringAssetsTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let prometheus = repository.appendingPathComponent("deploy/prometheus")
    static let dashboard = repository.appendingPathComponent("deploy/grafana/perimeter.json")

    static func promtool(_ arguments: [String]) async throws -> (Subprocess.Termination, String) {
        guard let promtool = Subprocess.find("promtool") else {
            throw ChildFailure(
                message: "promtool is not installed: apt-get install -y prometheus (scripts/setup.sh installs it)")
        }
        let child = try ChildProcess(promtool, arguments)
        let result = await child.finish()
        return (result.termination, result.output)
    }

    @Test(
        "promtool accepts the rules, their unit tests and the sample configuration",
        arguments: [
            ["check", "rules", "alerts.yml"], ["test", "rules", "alerts.test.yml"],
            ["check", "config", "prometheus.yml"],
        ])
    func promtoolAccepts(_ arguments: [String]) async throws {
        let (status, output) = try await Self.promtool(
            arguments.dropLast() + [Self.prometheus.appendingPathComponent(arguments.last!).path])
        #expect(status == .exited(0), "promtool \(arguments.joined(separator: " ")): \(output)")
        #expect(output.contains("SUCCESS"), "\(output)")
    }

    @Test("promtool refuses a broken rule file (the check can fail)")
    func promtoolRefuses() async throws {
        let path = try temporaryFile(
            "broken.yml",
            "groups:\n  - name: x\n    rules:\n      - alert: Broken\n        expr: rate(perimeter_lag_seconds[\n")
        let (status, output) = try await Self.promtool(["check", "rules", path])
        #expect(status != .exited(0), "\(output)")
    }

    /// Every `perimeter_…` name in a text, histogram series (`_bucket`, `_sum`, `_count`) included.
    static func metricNames(in text: String) -> Set<String> {
        var names: Set<String> = []
        var scanner = text[...]
        while let start = scanner.range(of: "perimeter_") {
            let before = start.lowerBound == text.startIndex ? nil : text[text.index(before: start.lowerBound)]
            let rest = scanner[start.lowerBound...]
            let name = rest.prefix { $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "_") }
            // A word that only ends in "perimeter_" is not a metric name.
            if before.map({ !($0.isLetter || $0.isNumber || $0 == "_") }) ?? true { names.insert(String(name)) }
            scanner = rest.dropFirst(name.count)
        }
        return names
    }

    /// The series names a `/metrics` page declares (`# TYPE name kind`; a histogram's three).
    static func declared(in exposition: String) -> Set<String> {
        var names: Set<String> = []
        for line in exposition.split(separator: "\n") where line.hasPrefix("# TYPE ") {
            let parts = line.split(separator: " ")
            guard parts.count == 4 else { continue }
            let name = String(parts[2])
            names.insert(name)
            if parts[3] == "histogram" { names.formUnion(["_bucket", "_sum", "_count"].map { name + $0 }) }
        }
        return names
    }

    @Test("every metric the dashboard and the alert rules name is on the evaluator's or the notifier's /metrics")
    func namesAreExposed() async throws {
        let broker = try await TestBroker.start()
        try await Cleanup.around { cleanup in
            cleanup.add { await broker.stop() }
            let directory = TestScratch.root.appendingPathComponent(
                "perimeter-monitoring-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let brokerSettings: JSONValue = ["host": "127.0.0.1", "port": .number(Double(broker.port))]
            let evaluatorPort = try MosquittoBroker.freeLoopbackPort()
            let notifierPort = try MosquittoBroker.freeLoopbackPort()
            let evaluator: JSONValue = [
                "broker": brokerSettings,
                "evaluator": [
                    "database": .string(directory.appendingPathComponent("evaluator.sqlite").path),
                    "http": .string("127.0.0.1:\(evaluatorPort)"),
                ],
                "venues": ["test": ["timeZone": "UTC"]],
            ]
            let notifier: JSONValue = [
                "broker": brokerSettings,
                "notifier": [
                    "database": .string(directory.appendingPathComponent("notifier.sqlite").path),
                    "http": .string("127.0.0.1:\(notifierPort)"),
                ],
                "venues": ["test": ["timeZone": "UTC"]], "channels": ["app": ["type": "mqtt"]],
            ]
            var exposed: Set<String> = []
            for (name, config, port) in [("evaluator", evaluator, evaluatorPort), ("notifier", notifier, notifierPort)]
            {
                let path = directory.appendingPathComponent("\(name).json").path
                try config.serialized().write(toFile: path, atomically: true, encoding: .utf8)
                let child = try ChildProcess(Products.executable("perimeter"), [name, "--config", path])
                defer { child.kill(SIGTERM) }
                let page = try #require(
                    try await waitForValue(timeout: .seconds(60), every: .milliseconds(100)) { () -> String? in
                        if let ended = child.subprocess.poll() {
                            throw ChildFailure(message: "perimeter \(name) exited (\(ended)): \(child.output)")
                        }
                        guard let answer = try? httpGet(port: port, path: "/metrics"), answer.status == 200 else {
                            return nil
                        }
                        return answer.body
                    }, "perimeter \(name): no /metrics on port \(port)")
                exposed.formUnion(Self.declared(in: page))
            }
            #expect(exposed.contains("perimeter_lag_seconds") && exposed.contains("perimeter_notifications_total"))

            let rules = try String(contentsOf: Self.prometheus.appendingPathComponent("alerts.yml"), encoding: .utf8)
            let dashboardText = try String(contentsOf: Self.dashboard, encoding: .utf8)
            for (file, text) in [("alerts.yml", rules), ("perimeter.json", dashboardText)] {
                let named = Self.metricNames(in: text)
                #expect(named.count >= 8, "\(file) names \(named.sorted())")
                let unknown = named.subtracting(exposed)
                #expect(unknown.isEmpty, "\(file) names metrics no service exposes: \(unknown.sorted())")
            }
            // The dashboard covers what operators asked for (issue 20): one query at least on each.
            let dashboardNames = Self.metricNames(in: dashboardText)
            for wanted in [
                "perimeter_observations_total", "perimeter_events_total", "perimeter_lag_seconds",
                "perimeter_outbox_pending", "perimeter_notifier_outbox", "perimeter_notifications_total",
                "perimeter_broker_dropped_since_start", "perimeter_agent_messages_missing_total",
            ] {
                #expect(dashboardNames.contains(wanted), "the dashboard has no panel on \(wanted)")
            }
        }
    }

    @Test("the dashboard is importable JSON: unique panel ids, each panel placed, each query on the datasource")
    func dashboardShape() throws {
        let document = try JSONParser.parse(Array(try Data(contentsOf: Self.dashboard)))
        #expect(document["uid"]?.stringValue == "perimeter")
        let panels = document["panels"]?.arrayValue ?? []
        #expect(panels.count >= 10)
        let ids = panels.compactMap { $0["id"]?.intValue }
        #expect(Set(ids).count == panels.count, "panel ids must be unique: \(ids)")
        for panel in panels {
            let title = panel["title"]?.stringValue ?? "?"
            #expect(panel["gridPos"]?["w"]?.intValue != nil, "\(title) has no place")
            guard panel["type"]?.stringValue != "row" else { continue }
            let targets = panel["targets"]?.arrayValue ?? []
            #expect(!targets.isEmpty, "\(title) has no query")
            for target in targets {
                let expression = target["expr"]?.stringValue ?? ""
                #expect(!Self.metricNames(in: expression).isEmpty, "\(title): '\(expression)'")
                // Balanced brackets: a cheap guard against a query Grafana would refuse.
                for (open, close) in [("(", ")"), ("{", "}"), ("[", "]")] {
                    #expect(
                        expression.filter { String($0) == open }.count
                            == expression.filter { String($0) == close }.count,
                        "\(title): unbalanced \(open)\(close) in '\(expression)'")
                }
            }
        }
    }
}
