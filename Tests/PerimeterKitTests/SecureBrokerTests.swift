import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A broker started from `deploy/mosquitto/`: certificates from `make-certs.sh`, passwords from
/// `make-passwords.sh`, the shipped `acl.conf` as it is, and `mosquitto.conf` with only its
/// paths, listener addresses and log destination replaced.
///
/// It has two TLS listeners on free loopback ports: `port` as shipped (`require_certificate
/// false`) and `certificatePort` with `require_certificate true`.
final class ProductionBroker: Sendable {
    static let agents = ["phone-a", "phone-b"]
    static let accounts =
        ["evaluator", "notifier", "consent", "operator", "consumer", "dashboard", "homeassistant"] + agents

    let directory: URL
    let port: Int
    let certificatePort: Int
    let passwords: [String: String]
    private let process: Subprocess

    /// The repository's `deploy/mosquitto` folder.
    static var deployDirectory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("deploy/mosquitto")
    }

    var certificates: String { directory.appendingPathComponent("certs").path }
    var logPath: String { Self.logPath(in: directory) }
    var log: String { Self.log(in: directory) }
    static func logPath(in directory: URL) -> String { directory.appendingPathComponent("mosquitto.log").path }
    static func log(in directory: URL) -> String {
        (try? String(contentsOfFile: logPath(in: directory), encoding: .utf8)) ?? ""
    }

    private init(directory: URL, port: Int, certificatePort: Int, passwords: [String: String], process: Subprocess) {
        self.directory = directory
        self.port = port
        self.certificatePort = certificatePort
        self.passwords = passwords
        self.process = process
    }

    static func start() async throws -> ProductionBroker {
        for tool in ["openssl", "mosquitto_passwd"] where Subprocess.find(tool) == nil {
            throw Failure("\(tool) is not installed; run scripts/setup.sh (apt-get install -y openssl mosquitto)")
        }
        let mosquitto = try MosquittoBroker.locate()
        let directory = TestScratch.root.appendingPathComponent(
            "perimeter-secure-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let certs = directory.appendingPathComponent("certs").path
        try await runScript(
            "make-certs.sh", [certs, "broker.test"] + accounts, in: directory)

        var environment = ProcessInfo.processInfo.environment
        var passwords: [String: String] = [:]
        for account in accounts {
            let password = "pw-\(account)-\(UUID().uuidString.prefix(6))"
            passwords[account] = password
            let variable = "PERIMETER_PASSWORD_" + account.uppercased().replacingOccurrences(of: "-", with: "_")
            environment[variable] = password
        }
        let passwordFile = directory.appendingPathComponent("passwd").path
        try await runScript("make-passwords.sh", [passwordFile] + agents, in: directory, environment: environment)

        let shipped = try String(
            contentsOf: deployDirectory.appendingPathComponent("mosquitto.conf"), encoding: .utf8)
        var lastError: (any Error)?
        // A free port can be taken between choosing and binding; choose again a few times.
        for attempt in 0..<3 {
            let port = try MosquittoBroker.freeLoopbackPort()
            let certificatePort = try MosquittoBroker.freeLoopbackPort()
            let configuration = try derive(
                shipped, port: port, certificatePort: certificatePort, certificates: certs,
                passwordFile: passwordFile, directory: directory)
            let configurationPath = directory.appendingPathComponent("mosquitto-\(attempt).conf").path
            try configuration.write(toFile: configurationPath, atomically: true, encoding: .utf8)
            let stderr = directory.appendingPathComponent("mosquitto.stderr").path
            let process = try Subprocess.spawn(
                mosquitto, ["-c", configurationPath], stdout: .null, stderr: .file(stderr, append: true),
                newProcessGroup: true)
            // The broker (whose end removes the directory) exists only once mosquitto listens:
            // a failed attempt must leave the certificates and passwords for the next one.
            do {
                try await waitForListeners(
                    process, ports: [port, certificatePort], stderr: stderr, directory: directory)
                return ProductionBroker(
                    directory: directory, port: port, certificatePort: certificatePort, passwords: passwords,
                    process: process)
            } catch {
                lastError = error
                process.signal(SIGKILL)
                await process.wait()
            }
        }
        try? FileManager.default.removeItem(at: directory)
        throw lastError ?? Failure("mosquitto did not start")
    }

    /// The shipped configuration with this test's paths and ports; fails when a line the test
    /// replaces is missing, so that the shipped file and this test cannot drift apart silently.
    static func derive(
        _ shipped: String, port: Int, certificatePort: Int, certificates: String, passwordFile: String,
        directory: URL
    ) throws -> String {
        let replacements: [String: String] = [
            "listener 8883": "listener \(port) 127.0.0.1",
            "cafile": "cafile \(certificates)/ca.crt",
            "certfile": "certfile \(certificates)/server.crt",
            "keyfile": "keyfile \(certificates)/server.key",
            "password_file": "password_file \(passwordFile)",
            "acl_file": "acl_file \(deployDirectory.appendingPathComponent("acl.conf").path)",
            "persistence_location": "persistence_location \(directory.path)/",
            "log_dest": "log_dest file \(logPath(in: directory))",
        ]
        var lines: [String] = []
        var replaced: Set<String> = []
        for line in shipped.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            let key = replacements.keys.first { line == $0 || line.hasPrefix($0 + " ") }
            if let key {
                lines.append(replacements[key]!)
                replaced.insert(key)
            } else {
                lines.append(line)
            }
        }
        let missing = Set(replacements.keys).subtracting(replaced)
        guard missing.isEmpty else {
            throw Failure("deploy/mosquitto/mosquitto.conf has no line for \(missing.sorted())")
        }
        let user = String(cString: getpwuid(geteuid())!.pointee.pw_name)
        lines += [
            // mosquitto started as root drops to user `mosquitto`, which cannot read the test's files.
            "user \(user)",
            "log_type debug",
            // The same TLS files on a second listener that also demands a client certificate.
            "listener \(certificatePort) 127.0.0.1",
            "cafile \(certificates)/ca.crt",
            "certfile \(certificates)/server.crt",
            "keyfile \(certificates)/server.key",
            "require_certificate true",
        ]
        return lines.joined(separator: "\n") + "\n"
    }

    private static func runScript(
        _ name: String, _ arguments: [String], in directory: URL, environment: [String: String]? = nil
    ) async throws {
        let output = directory.appendingPathComponent("\(name).out").path
        let script = deployDirectory.appendingPathComponent(name).path
        let child = try Subprocess.spawn(
            "/bin/sh", [script] + arguments, environment: environment, stdout: .file(output, append: false),
            stderr: .file(output, append: true))
        let termination = await child.wait()
        guard termination == .exited(0) else {
            let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            throw Failure("\(name) \(termination): \(text)")
        }
    }

    private static func waitForListeners(
        _ process: Subprocess, ports: [Int], stderr: String, directory: URL
    ) async throws {
        let timeout = Duration.seconds(30)
        let listening = try await waitForCondition(timeout: timeout) {
            if let termination = process.poll() {
                let text = (try? String(contentsOfFile: stderr, encoding: .utf8)) ?? ""
                throw Failure("mosquitto \(termination): \(text)\(log(in: directory))")
            }
            return ports.allSatisfy { MosquittoBroker.accepts(port: $0) }
        }
        if !listening {
            throw Failure("mosquitto did not listen on \(ports) within \(timeout): \(log(in: directory))")
        }
    }

    func stop() {
        guard process.isRunning else { return }
        process.signal(SIGKILL)
        process.waitBlocking()
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// A client configuration over TLS, verifying the server against the test CA.
    func configuration(
        _ username: String?, password: String? = nil, protocolVersion: MQTTConfiguration.ProtocolVersion = .v5,
        certificate: (file: String, key: String)? = nil, requireCertificate: Bool = false
    ) -> MQTTConfiguration {
        MQTTConfiguration(
            host: "127.0.0.1", port: requireCertificate ? certificatePort : port,
            clientID: "\(username ?? "anonymous")-\(UUID().uuidString.prefix(8))", keepAlive: 5,
            username: username, password: password ?? username.flatMap { passwords[$0] },
            tls: MQTTConfiguration.TLS(
                caFile: "\(certificates)/ca.crt", certificateFile: certificate?.file, keyFile: certificate?.key),
            protocolVersion: protocolVersion,
            backoff: .init(initial: .milliseconds(100), maximum: .milliseconds(500)))
    }

    /// A client logged in as `account`, connected over TLS.
    func connect(
        _ account: String, protocolVersion: MQTTConfiguration.ProtocolVersion = .v5
    ) async throws -> MQTTClient {
        let client = try MQTTClient(configuration(account, protocolVersion: protocolVersion))
        try await client.connect(timeout: .seconds(5))
        return client
    }

    /// The client certificate `make-certs.sh` made for `account`.
    func clientCertificate(_ account: String) -> (file: String, key: String) {
        ("\(certificates)/clients/\(account).crt", "\(certificates)/clients/\(account).key")
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}

/// How the broker answered a QoS 1 publish: nil when it accepted it (or silently dropped it).
func publishRefusal(_ client: MQTTClient, _ topic: String, _ text: String = "{}") async -> Int32? {
    do {
        try await client.publish(topic, text, qos: .atLeastOnce)
        return nil
    } catch let error as MQTTError {
        if case .publishRefused(let code) = error.kind { return code }
        return -1
    } catch {
        return -2
    }
}

/// The error a connection attempt ends with, or nil when it connected.
func connectFailure(_ configuration: MQTTConfiguration, timeout: Duration = .seconds(3)) async -> MQTTError? {
    let client: MQTTClient
    do {
        client = try MQTTClient(configuration)
    } catch {
        return error  // MQTTClient.init throws MQTTError only (typed throws)
    }
    var failure: MQTTError?
    do {
        try await client.connect(timeout: timeout)
    } catch {
        failure = error as? MQTTError ?? MQTTError(.closed, operation: "connect", reason: "\(error)")
    }
    // The client keeps retrying in the background until it is shut down.
    await client.disconnect()
    return failure
}

let notAuthorized: Int32 = 0x87

@Suite("Production broker configuration")
struct SecureBrokerTests {
    @Test("an agent cannot publish as another agent: MQTT 5 gets reason 0x87, MQTT 3.1.1 is dropped silently")
    func agentCannotPublishAsAnotherAgent() async throws {
        let broker = try await ProductionBroker.start()
        let evaluator = try await broker.connect("evaluator")
        _ = try await evaluator.subscribe("perimeter/v1/+/obs/+/+")
        let agent = try await broker.connect("phone-a")
        let agent311 = try await broker.connect("phone-a", protocolVersion: .v311)

        let forged = await publishRefusal(agent, "perimeter/v1/museum/obs/phone-b/gps", "forged-v5")
        #expect(forged == notAuthorized)
        let forgedStatus = await publishRefusal(agent, "perimeter/v1/museum/agents/phone-b/status", "forged-status")
        #expect(forgedStatus == notAuthorized)
        let elsewhere = await publishRefusal(agent, "perimeter/v1/museum/enter/gallery-1/visitor-42", "forged-event")
        #expect(elsewhere == notAuthorized)
        // MQTT 3.1.1 has no reason in PUBACK: the broker acknowledges and drops.
        let forged311 = await publishRefusal(agent311, "perimeter/v1/museum/obs/phone-b/gps", "forged-v311")
        #expect(forged311 == nil)
        let own = await publishRefusal(agent, "perimeter/v1/museum/obs/phone-a/gps", "own")
        #expect(own == nil)

        // Everything above was routed before its PUBACK; the evaluator's first message is the
        // agent's own one, so none of the forged ones reached it.
        let received = try await nextMessages(evaluator, count: 1)
        let first = received.first.map { "\($0.topic) \(String(decoding: $0.payload, as: UTF8.self))" }
        #expect(first == "perimeter/v1/museum/obs/phone-a/gps own")
        for client in [evaluator, agent, agent311] { await client.disconnect() }
    }

    @Test("a consumer cannot publish events, authorizations, sessions or observations")
    func consumerCannotPublish() async throws {
        let broker = try await ProductionBroker.start()
        let operatorClient = try await broker.connect("operator")
        _ = try await operatorClient.subscribe("perimeter/v1/#")
        let consumer = try await broker.connect("consumer")

        let topics = [
            "perimeter/v1/museum/enter/gallery-1/visitor-42",
            "perimeter/v1/museum/state/gallery-1/visitor-42",
            "perimeter/v1/museum/subjects/visitor-42/authorization",
            "perimeter/v1/museum/sessions/consumer/s1",
            // The agent pattern (obs/%u/#) applies to every account; the consumer's deny wins.
            "perimeter/v1/museum/obs/consumer/gps",
            "perimeter/v1/museum/agents/consumer/status",
        ]
        for topic in topics {
            let refusal = await publishRefusal(consumer, topic, "from-consumer")
            #expect(refusal == notAuthorized, "consumer publishing on \(topic)")
        }
        let consent = try await broker.connect("consent")
        let allowed = await publishRefusal(consent, "perimeter/v1/museum/subjects/visitor-42/authorization", "consent")
        #expect(allowed == nil)

        let received = try await nextMessages(operatorClient, count: 1)
        let first = received.first.map { "\($0.topic) \(String(decoding: $0.payload, as: UTF8.self))" }
        #expect(first == "perimeter/v1/museum/subjects/visitor-42/authorization consent")
        for client in [operatorClient, consumer, consent] { await client.disconnect() }
    }

    @Test(
        "the dashboard declares only its own session, publishes regions (its editor) and reads outputs and authorizations, never observations"
    )
    func dashboardAccount() async throws {
        let broker = try await ProductionBroker.start()
        let dashboard = try await broker.connect("dashboard")
        for filter in [
            "perimeter/v1/museum/enter/+/+", "perimeter/v1/museum/subjects/+/authorization",
            "perimeter/v1/museum/obs/#",
        ] {
            _ = try await dashboard.subscribe(filter)
        }
        let ownSession = await publishRefusal(dashboard, "perimeter/v1/museum/sessions/dashboard/live", "{}")
        #expect(ownSession == nil)
        // The region editor publishes what `perimeter regions put` publishes, and nothing more.
        #expect(await publishRefusal(dashboard, "perimeter/v1/museum/regions/kiosk", "{}") == nil)
        for topic in [
            "perimeter/v1/museum/sessions/consumer/s1", "perimeter/v1/museum/subjects/visitor-42/authorization",
            "perimeter/v1/museum/enter/gallery-1/visitor-42", "perimeter/v1/museum/obs/dashboard/gps",
            "perimeter/v1/museum/rules/greet", "perimeter/v1/museum/admin/erase",
        ] {
            let refusal = await publishRefusal(dashboard, topic, "from-dashboard")
            #expect(refusal == notAuthorized, "dashboard publishing on \(topic)")
        }
        let agent = try await broker.connect("phone-a")
        try await agent.publish("perimeter/v1/museum/obs/phone-a/gps", "fix", qos: .atLeastOnce)
        let consent = try await broker.connect("consent")
        try await consent.publish("perimeter/v1/museum/subjects/visitor-42/authorization", "auth", qos: .atLeastOnce)
        // The observation (published first) never arrives; the authorization does.
        let received = try await nextMessages(dashboard, count: 1)
        #expect(received.first?.topic == "perimeter/v1/museum/subjects/visitor-42/authorization")
        for client in [dashboard, agent, consent] { await client.disconnect() }
    }

    @Test("a batch with a refused message: each acknowledgement says how it went, in order, without throwing")
    func batchAcknowledgements() async throws {
        let broker = try await ProductionBroker.start()
        defer { broker.stop() }
        let evaluator = try await broker.connect("evaluator")
        let receipt = try evaluator.send(batch: [
            MQTTMessage(topic: "perimeter/v1/museum/enter/hall/v1", payload: Array("{}".utf8), qos: .atLeastOnce),
            MQTTMessage(
                topic: "perimeter/v1/museum/sessions/evaluator/s1", payload: Array("{}".utf8), qos: .atLeastOnce),
            MQTTMessage(topic: "perimeter/v1/museum/exit/hall/v1", payload: Array("{}".utf8), qos: .atLeastOnce),
        ])
        let outcomes = try await evaluator.acknowledgements(receipt)
        #expect(outcomes.count == 3)
        #expect(outcomes[0] == nil)
        #expect(outcomes[1]?.kind == .publishRefused(0x87), "sessions belong to the consent account")
        #expect(outcomes[2] == nil)
        await evaluator.disconnect()
    }

    @Test("perimeter doctor over TLS: the evaluator account passes; an account with a broken ACL is named")
    func doctor() async throws {
        let broker = try await ProductionBroker.start()
        defer { broker.stop() }
        func run(as account: String) async throws -> (status: Subprocess.Termination, lines: [String]) {
            let config: JSONValue = [
                "broker": [
                    "host": "127.0.0.1", "port": .number(Double(broker.port)), "username": .string(account),
                    "password": .string(broker.passwords[account] ?? ""),
                    "tls": ["caFile": .string("\(broker.certificates)/ca.crt")],
                ],
                "evaluator": ["database": .string(broker.directory.appendingPathComponent("doctor.sqlite").path)],
                "venues": ["museum": ["timeZone": "Europe/Paris"]],
            ]
            let path = broker.directory.appendingPathComponent("doctor-\(account).json").path
            try config.serialized().write(toFile: path, atomically: true, encoding: .utf8)
            let result = try await runProduct(["doctor", "--config", path, "--listen", "0.2"])
            return (result.status, result.stdout.split(separator: "\n").map(String.init))
        }
        let healthy = try await run(as: "evaluator")
        #expect(healthy.status == .exited(0), "\(healthy.lines)")
        #expect(
            healthy.lines.contains {
                $0.hasPrefix("ok   broker") && $0.contains("over TLS") && $0.contains("'evaluator' accepted")
            })
        #expect(healthy.lines.contains { $0.hasPrefix("ok   TLS CA") })
        #expect(healthy.lines.contains { $0 == "ok   ACL museum: sessions are refused to this account" })
        // The consent account standing in for the evaluator: it may write sessions — a finding.
        let broken = try await run(as: "consent")
        #expect(broken.status == .exited(1))
        #expect(broken.lines.contains { $0.hasPrefix("FAIL ACL museum: the evaluator may write") }, "\(broken.lines)")
    }

    @Test("perimeter regions and rules over TLS: the operator account manages them; an agent's account is refused")
    func managementOverTLS() async throws {
        let broker = try await ProductionBroker.start()
        defer { broker.stop() }
        func run(
            _ arguments: [String], as account: String, stdin: String
        ) async throws -> (
            status: Subprocess.Termination, stdout: String, stderr: String
        ) {
            try await runProduct(
                arguments + [
                    "--venue", "museum", "--set", "broker.port=\(broker.port)", "--set", "broker.username=\(account)",
                    "--set", "broker.password=\(broker.passwords[account] ?? "")", "--set",
                    "broker.tls.caFile=\(broker.certificates)/ca.crt",
                ], stdin: stdin)
        }
        let kiosk =
            #"{"type":"Feature","id":"kiosk","properties":{"radius":5},"geometry":{"type":"Point","coordinates":[2.3362,48.8605]}}"#
        let rule = #"{"id":"greet","on":"enter","regions":"kiosk","channels":["app"],"body":"hi {subject}"}"#
        let put = try await run(["regions", "put", "-"], as: "operator", stdin: kiosk)
        #expect(put.status == .exited(0), "\(put.stderr)")
        let rulePut = try await run(["rules", "put", "-"], as: "operator", stdin: rule)
        #expect(rulePut.status == .exited(0), "\(rulePut.stderr)")

        let sneaky = kiosk.replacingOccurrences(of: "kiosk", with: "sneaky")
        let agentPut = try await run(["regions", "put", "-"], as: "phone-a", stdin: sneaky)
        #expect(agentPut.status == .exited(1), "an agent may not define regions")
        #expect(
            agentPut.stderr.contains("could not publish perimeter/v1/museum/regions/sneaky")
                && agentPut.stderr.contains("Not authorized") && agentPut.stderr.contains("the operator account"),
            "\(agentPut.stderr)")
        let agentRule = try await run(
            ["rules", "put", "-"], as: "phone-a", stdin: rule.replacingOccurrences(of: "greet", with: "sneaky"))
        #expect(agentRule.status == .exited(1), "an agent may not define rules")

        // The operator's view, read through its end-of-retained marker, has only its own.
        let regions = try await run(["regions", "list"], as: "operator", stdin: "")
        #expect(regions.status == .exited(0), "\(regions.stderr)")
        #expect(regions.stdout == "kiosk\tcircle\t\n")
        let rules = try await run(["rules", "list"], as: "operator", stdin: "")
        #expect(rules.stdout == "greet\tlive\tenter\tkiosk\tapp\n", "\(rules.stderr)")
    }

    @Test("the evaluator service end to end over TLS with its credentials: an agent's fix becomes a consumer's event")
    func evaluatorServiceOverTLS() async throws {
        let broker = try await ProductionBroker.start()
        defer { broker.stop() }
        let regions: JSONValue = [
            "type": "FeatureCollection",
            "features": [
                [
                    "type": "Feature", "id": "hall", "properties": ["radius": 30],
                    "geometry": ["type": "Point", "coordinates": [2.336, 48.86]],
                ]
            ],
        ]
        let regionsPath = broker.directory.appendingPathComponent("regions.geojson").path
        try regions.serialized().write(toFile: regionsPath, atomically: true, encoding: .utf8)
        let config: JSONValue = [
            "broker": [
                "host": "127.0.0.1", "port": .number(Double(broker.port)), "username": "evaluator",
                "password": .string(broker.passwords["evaluator"] ?? ""), "clientId": "perimeter-evaluator-tls",
                "tls": ["caFile": .string("\(broker.certificates)/ca.crt")],
            ],
            "evaluator": ["database": .string(broker.directory.appendingPathComponent("evaluator.sqlite").path)],
            "venues": ["museum": ["regions": .string(regionsPath), "privacy": ["open": true]]],
        ]
        let configPath = broker.directory.appendingPathComponent("evaluator.json").path
        try config.serialized().write(toFile: configPath, atomically: true, encoding: .utf8)
        let evaluator = try ChildProcess(Products.executable("perimeter"), ["evaluator", "--config", configPath])
        defer { evaluator.kill(SIGTERM) }
        try await evaluator.waitForLine(containing: "evaluator running", timeout: .seconds(20))

        let consumer = try await broker.connect("consumer")
        _ = try await consumer.subscribe("perimeter/v1/museum/enter/#")
        let agent = try await broker.connect("phone-a")
        let fix: JSONValue = ["t": .number(Date().timeIntervalSince1970), "lat": 48.86, "lon": 2.336, "acc": 3]
        try await agent.publish("perimeter/v1/museum/obs/phone-a/gps", fix.serialized(), qos: .atLeastOnce)
        let received = try await nextMessages(consumer, count: 1, timeout: .seconds(15))
        #expect(received.first?.topic == "perimeter/v1/museum/enter/hall/phone-a")
        let event = try JSONParser.parse(received.first?.payload ?? [])
        #expect(event["subject"] == "phone-a")
        #expect(!evaluator.output.contains("refused a publish"), "the ACL lets the evaluator publish what it must")
        await agent.disconnect()
        await consumer.disconnect()
    }

    @Test(
        "perimeter agent over TLS with its own account: its fixes and status pass the ACL; posing as another agent is refused"
    )
    func agentOverTLS() async throws {
        let broker = try await ProductionBroker.start()
        defer { broker.stop() }
        let observer = try await broker.connect("evaluator")
        _ = try await observer.subscribe("perimeter/v1/museum/obs/#")
        _ = try await observer.subscribe("perimeter/v1/museum/agents/+/status")
        let track = broker.directory.appendingPathComponent("walk.csv").path
        try "2026-12-01T10:00:00Z,48.8606,2.3354,5\n2026-12-01T10:00:01Z,48.8607,2.3355,5\n"
            .write(toFile: track, atomically: true, encoding: .utf8)
        func agent(_ id: String, as account: String) async throws -> (Subprocess.Termination, String) {
            let child = try ChildProcess(
                Products.executable("perimeter"),
                [
                    "agent", "--source", "replay", "--replay", track, "--speed", "0", "--set", "agent.id=\(id)",
                    "--set", "agent.venue=museum", "--set", "broker.port=\(broker.port)",
                    "--set", "broker.username=\(account)", "--set",
                    "broker.password=\(broker.passwords[account] ?? "")",
                    "--set", "broker.tls.caFile=\(broker.certificates)/ca.crt",
                    "--set", "agent.database=\(broker.directory.path)/agent-\(id).sqlite",
                ])
            return try await withTimeout(.seconds(30), "perimeter agent \(id)") { await child.finish() }
        }
        let (ownStatus, ownOutput) = try await agent("phone-a", as: "phone-a")
        #expect(ownStatus == .exited(0), "\(ownOutput)")
        let received = try await nextMessages(observer, count: 4, timeout: .seconds(10))
        #expect(received.map(\.topic).filter { $0 == "perimeter/v1/museum/obs/phone-a/gps" }.count == 2)
        #expect(received.contains { $0.topic == "perimeter/v1/museum/agents/phone-a/status" })
        #expect(!ownOutput.contains("refused"))
        // phone-a's account publishing as phone-b: the broker refuses (MQTT 5 PUBACK 0x87), the
        // agent sets the messages aside and says so, and does not retry them forever.
        let (otherStatus, otherOutput) = try await agent("phone-b", as: "phone-a")
        #expect(otherStatus == .exited(0), "\(otherOutput)")
        #expect(otherOutput.contains("the broker refused a message: set aside"), "\(otherOutput)")
        #expect(otherOutput.contains("outbox.pending=0"))
        await observer.disconnect()
    }

    @Test("privacy and operator topics belong to their accounts")
    func privacyAndAdminTopicsBelongToTheirAccounts() async throws {
        let broker = try await ProductionBroker.start()
        let agent = try await broker.connect("phone-a")
        let evaluator = try await broker.connect("evaluator")
        let consent = try await broker.connect("consent")
        let operatorClient = try await broker.connect("operator")
        let homeAssistant = try await broker.connect("homeassistant")
        let cases: [(client: MQTTClient, account: String, topic: String, refused: Bool)] = [
            (agent, "phone-a", "perimeter/v1/museum/subjects/phone-a/authorization", true),
            (agent, "phone-a", "perimeter/v1/museum/subjects/phone-a/usage", true),
            (agent, "phone-a", "perimeter/v1/museum/regions/kiosk", true),
            (evaluator, "evaluator", "perimeter/v1/museum/subjects/visitor-42/usage", true),
            (evaluator, "evaluator", "perimeter/v1/museum/sessions/consumer/s1", true),
            (evaluator, "evaluator", "perimeter/v1/museum/admin/erase/visitor-42", true),
            (evaluator, "evaluator", "perimeter/v1/museum/obs/evaluator/gps", true),
            (consent, "consent", "perimeter/v1/museum/subjects/visitor-42/usage", false),
            (consent, "consent", "perimeter/v1/museum/sessions/signage/s1", false),
            (consent, "consent", "perimeter/v1/museum/admin/erase/visitor-42", true),
            (operatorClient, "operator", "perimeter/v1/museum/admin/erase/visitor-42", false),
            (operatorClient, "operator", "perimeter/v1/museum/admin/show/visitor-42", false),
            (operatorClient, "operator", "perimeter/v1/museum/subjects/visitor-42/authorization", true),
            // Region and rule definitions are the operator's (perimeter regions|rules put), and
            // the marker those commands wait for is theirs alone.
            (operatorClient, "operator", "perimeter/v1/museum/regions/kiosk", false),
            (operatorClient, "operator", "perimeter/v1/museum/rules/greet", false),
            (operatorClient, "operator", "perimeter/v1/_sys/operator/perimeter-manage-1/marker", false),
            (agent, "phone-a", "perimeter/v1/museum/rules/greet", true),
            (agent, "phone-a", "perimeter/v1/_sys/operator/perimeter-manage-1/marker", true),
            (consent, "consent", "perimeter/v1/museum/rules/greet", true),
            (evaluator, "evaluator", "perimeter/v1/museum/rules/greet", true),
            (evaluator, "evaluator", "perimeter/v1/museum/admin/erased/visitor-42", false),
            (evaluator, "evaluator", "perimeter/v1/museum/subjects/visitor-42/authorization", false),
            (evaluator, "evaluator", "perimeter/v1/_sys/evaluator/1/status", false),
            (evaluator, "evaluator", "owntracks/alice/phone/event", false),
            // Home Assistant discovery: the evaluator writes the configs; Home Assistant only its status.
            (evaluator, "evaluator", "homeassistant/sensor/perimeter_museum/gallery-1/config", false),
            (evaluator, "evaluator", "homeassistant/status", true),
            (homeAssistant, "homeassistant", "homeassistant/status", false),
            (homeAssistant, "homeassistant", "homeassistant/sensor/perimeter_museum/gallery-1/config", true),
            (homeAssistant, "homeassistant", "perimeter/v1/museum/regions/kiosk", true),
            (agent, "phone-a", "homeassistant/sensor/perimeter_museum/gallery-1/config", true),
        ]
        for entry in cases {
            let refusal = await publishRefusal(entry.client, entry.topic)
            let expected: Int32? = entry.refused ? notAuthorized : nil
            #expect(refusal == expected, "\(entry.account) publishing on \(entry.topic)")
        }
        for client in [agent, evaluator, consent, operatorClient, homeAssistant] { await client.disconnect() }
    }

    @Test("anonymous clients, wrong passwords and unknown accounts are refused at connect")
    func unauthenticatedClientsAreRefused() async throws {
        let broker = try await ProductionBroker.start()
        let cases: [(name: String, configuration: MQTTConfiguration)] = [
            ("anonymous v5", broker.configuration(nil)),
            ("anonymous v3.1.1", broker.configuration(nil, protocolVersion: .v311)),
            ("wrong password v5", broker.configuration("evaluator", password: "not-the-password")),
            ("wrong password v3.1.1", broker.configuration("consumer", password: "nope", protocolVersion: .v311)),
            ("unknown account", broker.configuration("mallory", password: "whatever")),
        ]
        for entry in cases {
            let failure = await connectFailure(entry.configuration)
            let refused: Bool
            if case .connectionRefused = failure?.kind { refused = true } else { refused = false }
            #expect(refused, "\(entry.name): \(failure.map { "\($0)" } ?? "connected")")
        }
        // The same accounts with their passwords connect: the refusals above are about credentials.
        let good = await connectFailure(broker.configuration("evaluator"))
        #expect(good == nil)
    }

    @Test("with require_certificate, a client certificate from another CA (or none) is refused")
    func foreignClientCertificateIsRefused() async throws {
        let broker = try await ProductionBroker.start()
        // Another CA, with a client certificate for the same account name.
        let foreign = broker.directory.appendingPathComponent("foreign").path
        let child = try Subprocess.spawn(
            "/bin/sh",
            [
                ProductionBroker.deployDirectory.appendingPathComponent("make-certs.sh").path, foreign, "elsewhere",
                "consumer",
            ], stdout: .null, stderr: .null)
        let made = await child.wait()
        #expect(made == .exited(0))

        let ours = await connectFailure(
            broker.configuration(
                "consumer", certificate: broker.clientCertificate("consumer"), requireCertificate: true))
        #expect(ours == nil, "our CA's certificate: \(ours.map { "\($0)" } ?? "")")

        // A failed handshake never becomes a CONNECT: the client retries until its deadline.
        let stranger = await connectFailure(
            broker.configuration(
                "consumer", certificate: ("\(foreign)/clients/consumer.crt", "\(foreign)/clients/consumer.key"),
                requireCertificate: true), timeout: .seconds(1))
        #expect(stranger?.kind == .timeout, "\(stranger.map { "\($0)" } ?? "connected")")
        let none = await connectFailure(
            broker.configuration("consumer", requireCertificate: true), timeout: .seconds(1))
        #expect(none?.kind == .timeout, "\(none.map { "\($0)" } ?? "connected")")
        // The broker says why.
        let log = broker.log
        #expect(log.contains("certificate verify failed"), "\(log)")
        #expect(log.contains("peer did not return a certificate"), "\(log)")
    }

    @Test("the evaluator publishes events and states; a consumer receives them over TLS and nothing else")
    func evaluatorEventReachesConsumer() async throws {
        let broker = try await ProductionBroker.start()
        let consumer = try await broker.connect("consumer")
        _ = try await consumer.subscribe("perimeter/v1/museum/enter/+/+")
        // Granted, but the ACL delivers nothing from these.
        _ = try await consumer.subscribe("perimeter/v1/museum/obs/+/+")
        _ = try await consumer.subscribe("perimeter/v1/museum/subjects/+/+")
        let agent = try await broker.connect("phone-a")
        let evaluator = try await broker.connect("evaluator")
        let consent = try await broker.connect("consent")

        let observation = await publishRefusal(agent, "perimeter/v1/museum/obs/phone-a/gps", "fix")
        #expect(observation == nil)
        let authorization = await publishRefusal(
            consent, "perimeter/v1/museum/subjects/phone-a/authorization", "always")
        #expect(authorization == nil)
        let event = #"{"id":"e1","event":"enter","region":"gallery-1","subject":"phone-a"}"#
        let published = await publishRefusal(evaluator, "perimeter/v1/museum/enter/gallery-1/phone-a", event)
        #expect(published == nil)

        let received = try await nextMessages(consumer, count: 1)
        let first = received.first.map { "\($0.topic) \(String(decoding: $0.payload, as: UTF8.self))" }
        #expect(first == "perimeter/v1/museum/enter/gallery-1/phone-a \(event)")

        // Retained state: a consumer connecting later gets it.
        try await evaluator.publish(
            "perimeter/v1/museum/state/gallery-1/phone-a", #"{"state":"inside"}"#, qos: .atLeastOnce, retain: true)
        let late = try await broker.connect("consumer")
        _ = try await late.subscribe("perimeter/v1/museum/state/+/+")
        let retained = try await nextMessages(late, count: 1)
        #expect(retained.first?.retain == true)
        for client in [consumer, agent, evaluator, consent, late] { await client.disconnect() }
    }
}
