import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import Synchronization

/// `perimeter doctor --config FILE`: checks a deployment and says what to fix.
///
/// One configuration file may hold several services' sections (the evaluator's file often has
/// the dashboard's too): each service found is checked. Doctor never writes a file: databases
/// are opened read-only, and a missing one is a finding.
struct DoctorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check a deployment: configuration, broker, TLS, credentials, ACL, channels, databases, clocks.",
        discussion: """
            Reads a configuration file and prints one line per finding: 'ok', 'warn' or 'FAIL',
            with what to fix. It recognizes the services the file configures by its sections
            (evaluator, notifier or channels, dashboard, agent; a file with only venues is the
            evaluator's) or checks those named by --service. Lines without a service name are the
            evaluator's and the broker's; the others start with the service's name.
            Probes are real: it connects to the broker with the configured credentials (and TLS)
            and checks the certificates' expiry with openssl. For the evaluator it publishes to
            topics the evaluator must be allowed to write and to one it must not
            (sessions/_doctor/_probe, empty and unretained), subscribes to what it must read, and
            compares the times of observations seen for a few seconds (or the first ten) with this
            machine's clock. For the notifier it sends HEAD to each webhook and opens an SMTP
            session to each mail relay (EHLO, STARTTLS, AUTH, NOOP: no message), and loads the
            rules files. For the dashboard it checks the sign-in password and the allowed hosts;
            for an agent, gpsd or the Bluetooth controller. For every broker it reads $SYS (the
            version and the dropped-message counter) and the queue limits in the broker's
            configuration file (--broker-config, or the file the local mosquitto was started
            with).
            Databases are opened read-only and never created. Exit status 1 when anything failed.
            """)

    @Option(help: "The configuration file (one service's, or several services' sections).", valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(
        help:
            "Check as this service (repeatable): evaluator, notifier, dashboard, agent. Default: from the file's sections.",
        valueName: "service")
    var service: [String] = []

    @Option(
        help:
            "The broker's configuration (mosquitto.conf) to check its queue limits; default: the file the mosquitto listening on a loopback broker port was started with.",
        valueName: "file")
    var brokerConfig: String?

    @Option(
        help: "Seconds to listen for observations (clock skew); it stops sooner once it has seen 10.",
        valueName: "s")
    var listen: Double = 3

    /// Observations enough to judge the agents' clocks.
    static let enoughObservations = 10

    enum Service: String, CaseIterable, Sendable {
        case evaluator, notifier, dashboard, agent

        /// How its lines start: the evaluator's as they always have, the others with the name.
        var prefix: String { self == .evaluator ? "" : "\(rawValue) " }
    }

    final class Findings: Sendable {
        private let lines = Mutex<[(String, String)]>([])
        func ok(_ text: String) { add("ok  ", text) }
        func warn(_ text: String) { add("warn", text) }
        func fail(_ text: String) { add("FAIL", text) }
        private func add(_ level: String, _ text: String) {
            lines.withLock { $0.append((level, text)) }
            print("\(level) \(text)")
        }
        var failed: Bool { lines.withLock { $0.contains { $0.0 == "FAIL" } } }
    }

    /// Findings of one service: each line starts with its prefix.
    struct Scope: Sendable {
        let findings: Findings
        let prefix: String
        func ok(_ text: String) { findings.ok(prefix + text) }
        func warn(_ text: String) { findings.warn(prefix + text) }
        func fail(_ text: String) { findings.fail(prefix + text) }
    }

    mutating func validate() throws {
        for name in service where Service(rawValue: name) == nil {
            throw ValidationError("--service: '\(name)' is not one of evaluator, notifier, dashboard, agent")
        }
    }

    /// The services a configuration is for, from the sections it has.
    static func recognize(_ reader: ConfigReader) -> [Service] {
        func has(_ section: String) -> Bool { !reader.children(of: section).isEmpty }
        var services: [Service] = []
        let notifier = has("notifier") || has("channels")
        let agent = has("agent") || has("gpsd") || has("hci") || has("replay") || has("simulator")
        if has("evaluator") || has("adapters") || (has("venues") && !notifier && !agent) { services.append(.evaluator) }
        if notifier { services.append(.notifier) }
        if has("dashboard") { services.append(.dashboard) }
        if agent { services.append(.agent) }
        return services
    }

    /// A fresh reader for each service: a reader collects one service's problems.
    func reader() throws(ConfigError) -> ConfigReader {
        try ConfigReader.forCommand(config: config, overrides: set)
    }

    func run() async throws {
        let findings = Findings()
        let services: [Service]
        do {
            let reader = try reader()
            let named = service.compactMap(Service.init(rawValue:))
            services = named.isEmpty ? Self.recognize(reader) : named
        } catch {
            findings.fail("configuration: \(error)")
            throw ExitCode(1)
        }
        guard !services.isEmpty else {
            findings.fail(
                "configuration: cannot tell which service it is for (no evaluator, notifier, channels, dashboard or agent section); name it with --service"
            )
            throw ExitCode(1)
        }
        findings.ok(
            "services: \(services.map(\.rawValue).joined(separator: ", "))"
                + (service.isEmpty ? " (recognized from the configuration's sections)" : " (--service)"))
        let brokers = BrokerChecks(findings: findings)
        for service in services {
            let scope = Scope(findings: findings, prefix: service.prefix)
            switch service {
            case .evaluator: await checkEvaluator(scope, brokers)
            case .notifier: await checkNotifier(scope, brokers)
            case .dashboard: await checkDashboard(scope, brokers)
            case .agent: await checkAgent(scope, brokers)
            }
        }
        await brokers.finish(brokerConfig: brokerConfig)
        if findings.failed { throw ExitCode(1) }
    }

    /// Reads one service's settings; on problems, one FAIL line each (`login` names the keys
    /// whose problems are the sign-in's) and nil.
    func read<Settings: ServiceSettings>(
        _ type: Settings.Type, _ scope: Scope, loginKeys: [String] = []
    ) -> Settings? {
        do {
            return try Settings.read(try reader())
        } catch let error as ConfigError {
            for problem in error.problems {
                let login = loginKeys.contains { problem.key.hasPrefix($0) }
                scope.fail("\(login ? "login" : "configuration"): \(problem)")
            }
        } catch {
            scope.fail("configuration: \(error)")
        }
        return nil
    }
}
