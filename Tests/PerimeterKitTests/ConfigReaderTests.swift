import Foundation
import PerimeterKit
import PerimeterTestSupport
import Synchronization
import Testing

@Suite("Configuration: file, environment, flags")
struct ConfigReaderTests {
    func file(_ json: String) throws -> String {
        let path = TestScratch.root.appendingPathComponent(
            "perimeter-config-\(UUID().uuidString).json"
        ).path
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test("precedence: defaults < file < PERIMETER_* < --set")
    func precedence() throws {
        let path = try file(
            #"{"broker": {"host": "file-host", "port": 1884, "clientId": "from-file"}, "log": {"level": "debug"}}"#)
        let reader = try ConfigReader(
            filePath: path, environment: ["PERIMETER_BROKER_PORT": "1885", "PERIMETER_BROKER_CLIENT_ID": "from-env"],
            overrides: ["broker.clientId=from-flag"])
        let broker = BrokerSettings.read(from: reader, defaultClientID: "default")
        let log = LogSettings.read(from: reader)
        try reader.finish()
        #expect(broker.host == "file-host")
        #expect(broker.port == 1885)
        #expect(broker.clientID == "from-flag")
        #expect(broker.keepAlive == 30)
        #expect(log.level == .debug)
    }

    /// Found by fuzzing `config`: long garbage keys were each compared with every setting by
    /// edit distance (seconds for a 725-byte file). Each is still named; a near miss still
    /// gets its suggestion.
    @Test("many long unknown keys are each named; a near miss keeps its suggestion")
    func longUnknownKeys() throws {
        var members = (0..<40).map { #""venues\#(String(repeating: "\u{FFFD}", count: 300))\#($0)": \#($0)"# }
        members.append(#""broker": {"prot": 1883}"#)
        let path = try file("{" + members.joined(separator: ", ") + "}")
        let reader = try ConfigReader(filePath: path, environment: [:])
        _ = BrokerSettings.read(from: reader, defaultClientID: "default")
        do {
            try reader.finish()
            Issue.record("accepted")
        } catch {
            let lines = error.problems.map(\.description)
            #expect(lines.filter { $0.contains(": unknown setting (from") }.count == 40)
            #expect(lines.contains("broker.prot: unknown setting (did you mean broker.port?) (from \(path))"))
        }
    }

    @Test("a bad value names the key path, the expectation, the value and its source")
    func badValue() throws {
        let reader = try ConfigReader(environment: ["PERIMETER_BROKER_PORT": "abc"])
        _ = BrokerSettings.read(from: reader, defaultClientID: "x")
        do {
            try reader.finish()
            Issue.record("a bad port was accepted")
        } catch {
            #expect(
                error.description
                    == #"configuration error: broker.port: expected an integer 1–65535, got "abc" (from PERIMETER_BROKER_PORT)"#
            )
        }
    }

    @Test("every problem is listed, unknown keys with a suggestion")
    func everyProblem() throws {
        let path = try file(#"{"broker": {"prot": 1883, "port": 70000, "protocol": "4"}, "log": {"level": "loud"}}"#)
        let reader = try ConfigReader(filePath: path, environment: [:], overrides: ["broker.tls.certFile=/c.pem"])
        _ = BrokerSettings.read(from: reader, defaultClientID: "x")
        _ = LogSettings.read(from: reader)
        do {
            try reader.finish()
            Issue.record("accepted")
        } catch {
            let lines = error.problems.map(\.description)
            #expect(lines.contains("broker.port: expected an integer 1–65535, got 70000 (from \(path))"))
            #expect(lines.contains("broker.protocol: expected one of 5, 3.1.1, got \"4\" (from \(path))"))
            #expect(
                lines.contains(
                    "log.level: expected one of trace, debug, info, notice, warning, error, critical, got \"loud\" (from \(path))"
                ))
            #expect(lines.contains("broker.prot: unknown setting (did you mean broker.port?) (from \(path))"))
            #expect(lines.contains { $0.hasPrefix("broker.tls.keyFile: a client certificate and its key go together") })
            #expect(error.problems.count == 5)
        }
    }

    @Test("a malformed file is reported with its position")
    func malformedFile() throws {
        let path = try file("{\"broker\": {\"port\": }}")
        #expect(throws: ConfigError.self) { try ConfigReader(filePath: path) }
        do {
            _ = try ConfigReader(filePath: path)
        } catch {
            #expect(error.description.contains("\(path) is not valid JSON: line 1, column 21"))
        }
    }

    @Test("secrets are redacted in the printed configuration")
    func redaction() throws {
        let reader = try ConfigReader(environment: [
            "PERIMETER_BROKER_USERNAME": "svc", "PERIMETER_BROKER_PASSWORD": "hunter2",
        ])
        let broker = BrokerSettings.read(from: reader, defaultClientID: "x")
        try reader.finish()
        #expect(broker.password == "hunter2")
        #expect(reader.effectiveMetadata["config.broker.password"] == "***")
        #expect(reader.effectiveMetadata["config.broker.username"] == "svc")
        #expect(!reader.effectiveMetadata.values.contains { $0.description.contains("hunter2") })
    }

    @Test(
        "environment variable names",
        arguments: [
            ("broker.port", "PERIMETER_BROKER_PORT"), ("broker.clientId", "PERIMETER_BROKER_CLIENT_ID"),
            ("broker.tls.caFile", "PERIMETER_BROKER_TLS_CA_FILE"), ("log.level", "PERIMETER_LOG_LEVEL"),
        ])
    func environmentNames(key: String, variable: String) {
        #expect(ConfigReader.environmentName(for: key) == variable)
    }
}

@Suite("Logger")
struct LoggerTests {
    @Test("JSON lines carry level, label, message and dotted metadata")
    func jsonLines() throws {
        let lines = LinesBox()
        var logger = Logger(
            label: "evaluator", level: .info, handler: StreamLogHandler(format: .json) { lines.append($0) })
        logger[metadataKey: "venue"] = "museum"
        logger.info("region loaded", metadata: ["region.id": "gallery-3"])
        logger.debug("not shown")
        #expect(lines.all.count == 1)
        let object = try #require(try? JSONSerialization.jsonObject(with: Data(lines.all[0].utf8)) as? [String: Any])
        #expect(object["level"] as? String == "info")
        #expect(object["label"] as? String == "evaluator")
        #expect(object["msg"] as? String == "region loaded")
        #expect(object["region.id"] as? String == "gallery-3")
        #expect(object["venue"] as? String == "museum")
        #expect((object["t"] as? String)?.hasSuffix("Z") == true)
    }

    @Test("logfmt quotes what needs quoting")
    func logfmt() {
        let lines = LinesBox()
        let logger = Logger(
            label: "kit", level: .trace, handler: StreamLogHandler(format: .logfmt) { lines.append($0) })
        logger.warning("broker said \"no\"", metadata: ["mqtt.topic": "a/b", "why": "two words"])
        let line = lines.all[0]
        #expect(line.contains(#"level=warning label=kit msg="broker said \"no\"""#))
        #expect(line.contains("mqtt.topic=a/b"))
        #expect(line.contains(#"why="two words""#))
    }

    @Test("levels parse by name", arguments: ["trace", "DEBUG", "warn", "critical"])
    func levelNames(name: String) {
        #expect(Logger.Level(name: name) != nil)
    }

    @Test("the in-memory handler keeps records for tests")
    func inMemory() {
        let handler = InMemoryLogHandler()
        handler.logger(level: .info).error("boom", metadata: ["x": "1"])
        #expect(handler.records(containing: "boom").first?.metadata["x"] == "1")
    }
}

final class LinesBox: Sendable {
    private let storage = Mutex<[String]>([])
    func append(_ line: String) { storage.withLock { $0.append(line.trimmingCharacters(in: .newlines)) } }
    var all: [String] { storage.withLock { $0 } }
}
