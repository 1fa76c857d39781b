import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterMQTT
import PerimeterStore
import Synchronization

/// `perimeter doctor --config FILE`: checks a deployment and says what to fix.
struct DoctorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check a deployment: configuration, broker, TLS, credentials, ACL, database, clocks.",
        discussion: """
            Reads the evaluator's configuration and prints one line per finding: 'ok', 'warn' or
            'FAIL', with what to fix. Probes are real: it connects with the configured
            credentials (and TLS), checks the certificates' expiry with openssl, publishes to
            topics the evaluator must be allowed to write and to one it must not
            (sessions/_doctor/_probe, empty and unretained),
            subscribes to what it must read, opens the database for writing, and compares the
            times of observations seen for a few seconds (or the first ten) with this machine's
            clock.
            Exit status 1 when anything failed.
            """)

    @Option(help: "The evaluator's configuration file.", valueName: "file")
    var config: String?

    @Option(help: "A setting, key=value (repeatable).", valueName: "key=value")
    var set: [String] = []

    @Option(
        help: "Seconds to listen for observations (clock skew); it stops sooner once it has seen 10.",
        valueName: "s")
    var listen: Double = 3

    /// Observations enough to judge the agents' clocks.
    static let enoughObservations = 10

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

    func run() async throws {
        let findings = Findings()
        let configuration: EvaluatorConfiguration
        do {
            let reader = try ConfigReader.forCommand(config: config, overrides: set)
            configuration = try EvaluatorConfiguration.read(reader)
            findings.ok("configuration: valid (\(configuration.venues.count) venue(s))")
        } catch {
            findings.fail("configuration: \(error)")
            throw ExitCode(1)
        }
        checkRegions(configuration, findings)
        checkCertificates(configuration.broker, findings)
        checkDatabase(configuration.databasePath, findings)
        await checkBroker(configuration, findings)
        if findings.failed { throw ExitCode(1) }
    }

    private func checkRegions(_ configuration: EvaluatorConfiguration, _ findings: Findings) {
        for venue in configuration.venues {
            guard let path = venue.regionsPath else { continue }
            guard let data = FileManager.default.contents(atPath: path) else {
                findings.fail("venue \(venue.settings.id): cannot read regions file \(path)")
                continue
            }
            let document = RegionParser.parse(bytes: Array(data))
            let id = venue.settings.id
            for warning in document.warnings { findings.warn("venue \(id): \(path): \(warning)") }
            let problems = document.problems.map(\.description).joined(separator: "; ")
            if document.problems.isEmpty {
                findings.ok("venue \(id): \(document.regions.count) regions in \(path)")
            } else if venue.strictRegions {
                findings.fail("venue \(id): \(path) (strictRegions: the evaluator will not start): \(problems)")
            } else {
                findings.warn(
                    "venue \(id): degraded: \(document.problems.count) problem(s) in \(path); the evaluator serves its "
                        + "\(document.regions.count) valid regions without the invalid features: \(problems)")
            }
        }
    }

    /// Expiry of the configured CA and client certificates (openssl).
    private func checkCertificates(_ broker: BrokerSettings, _ findings: Findings) {
        for (name, path) in [("CA", broker.caFile), ("client certificate", broker.certificateFile)] {
            guard let path else { continue }
            guard let end = Self.certificateEnd(path) else {
                findings.fail("TLS \(name) \(path): unreadable (openssl x509 could not read it)")
                continue
            }
            let days = end.timeIntervalSinceNow / 86_400
            if days < 0 {
                findings.fail(
                    "TLS \(name) \(path): expired on \(Timestamp.format(end)); renew it (deploy/mosquitto/make-certs.sh)"
                )
            } else if days < 30 {
                findings.warn("TLS \(name) \(path): expires in \(Int(days)) days (\(Timestamp.format(end)))")
            } else {
                findings.ok("TLS \(name) \(path): valid until \(Timestamp.format(end))")
            }
        }
    }

    static func certificateEnd(_ path: String) -> Date? {
        guard let openssl = Subprocess.find("openssl"),
            let output = try? BaselineRunner.capture(
                openssl, ["x509", "-in", path, "-noout", "-enddate"], quiet: true)
        else { return nil }
        guard
            let text = output.split(separator: "=", maxSplits: 1).last?.trimmingCharacters(in: .whitespacesAndNewlines)
        else { return nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "MMM d HH:mm:ss yyyy zzz"
        return formatter.date(from: text.replacingOccurrences(of: "  ", with: " "))
    }

    private func checkDatabase(_ path: String, _ findings: Findings) {
        do {
            let database = try Database(path: path)
            try database.execute("BEGIN IMMEDIATE; ROLLBACK")
            findings.ok("database \(path): writable")
        } catch {
            findings.fail("database \(path): \(error); check the directory's owner and free space")
        }
    }

    private func checkBroker(_ configuration: EvaluatorConfiguration, _ findings: Findings) async {
        var mqtt = configuration.broker.mqttConfiguration(clientID: "perimeter-doctor-\(getpid())")
        mqtt.backoff = .init(initial: .milliseconds(100), maximum: .milliseconds(500))
        let client: MQTTClient
        do {
            client = try MQTTClient(mqtt)
            try await client.connect(timeout: .seconds(5))
        } catch {
            let what = configuration.broker.username == nil ? "" : " as '\(configuration.broker.username!)'"
            findings.fail(
                "broker \(mqtt.endpoint)\(what): \(error); check broker.host/port (or broker.hosts), that mosquitto runs, TLS (broker.tls.*) and credentials"
            )
            return
        }
        defer { Task { await client.disconnect() } }
        findings.ok(
            "broker \(client.endpoint)\(mqtt.alternates.isEmpty ? "" : " (of \(mqtt.endpoint))"): connected"
                + (mqtt.tls == nil ? " (no TLS)" : " over TLS, certificate verified")
                + (configuration.broker.username.map { ", credentials for '\($0)' accepted" } ?? ", anonymously"))
        if mqtt.tls == nil && configuration.broker.host != "127.0.0.1" && configuration.broker.host != "localhost" {
            findings.warn("broker: plaintext MQTT to a non-loopback host; use the TLS listener (deploy/mosquitto)")
        }
        let log = MessageInbox(client)
        defer { log.stop() }
        for venue in configuration.venues.map(\.settings.id) {
            let topics = Topics(prefix: configuration.prefix, venue: venue)
            // Must be allowed: read observations, write what the evaluator publishes.
            do {
                let granted = try await client.subscribe("\(topics.root)/obs/+/+", qos: .atLeastOnce)
                findings.ok("ACL \(venue): may read observations (granted QoS \(granted))")
            } catch {
                findings.fail("ACL \(venue): may not read \(topics.root)/obs/+/+: \(error); fix the acl_file")
            }
            do {
                try await client.publish(
                    "\(topics.root)/deadletter/evaluator", #"{"probe":"perimeter doctor"}"#, qos: .atLeastOnce)
                findings.ok("ACL \(venue): may write its dead-letter topic")
            } catch {
                findings.fail(
                    "ACL \(venue): may not write \(topics.root)/deadletter/evaluator: \(error); fix the acl_file")
            }
            // Must be denied: the consent service's sessions (an empty, unretained probe: if it
            // gets through it ends a session that does not exist).
            let forbidden = "\(topics.root)/sessions/_doctor/_probe"
            do {
                try await client.publish(forbidden, payload: [], qos: .atLeastOnce)
                if configuration.broker.username == nil {
                    findings.warn("ACL \(venue): anonymous access with no ACL: anyone may write sessions and records")
                } else {
                    findings.fail("ACL \(venue): the evaluator may write \(forbidden); only the consent account should")
                }
            } catch {
                findings.ok("ACL \(venue): sessions are refused to this account")
            }
        }
        // Loss at the broker: Mosquitto's dropped-message counter ($SYS, retained), read while
        // the observations below are listened for.
        // Mosquitto keeps that counter only 60 s after it last changed; its uptime, published
        // every sys_interval, tells a quiet counter from a broker without $SYS.
        let dropped = (try? await client.subscribe(EvaluatorService.brokerDroppedTopic, qos: .atMostOnce)) != nil
        var uptime = false
        if dropped { uptime = (try? await client.subscribe(Self.brokerUptimeTopic, qos: .atMostOnce)) != nil }
        // Clock skew: each observation's time against this machine's clock when it arrived,
        // until enough are seen.
        func skews() -> [Double] {
            log.timed.filter { $0.message.topic.hasSuffix("/gps") || $0.message.topic.hasSuffix("/ble") }.compactMap {
                received in
                (try? JSONParser.parse(received.message.payload))?["t"].flatMap { value -> Double? in
                    switch value {
                    case .number(let seconds): seconds
                    case .string(let text): Timestamp.parse(text)?.timeIntervalSince1970
                    default: nil
                    }
                }.map { received.at.timeIntervalSince1970 - $0 }
            }
        }
        let skews =
            (try? await waitForValue(timeout: .milliseconds(Int(listen * 1000)), every: .milliseconds(50)) {
                let seen = skews()
                return seen.count >= Self.enoughObservations ? seen : nil
            }) ?? skews()
        if let worst = skews.max(by: { abs($0) < abs($1) }) {
            let text = "clock: \(skews.count) observations seen, worst offset \(String(format: "%.1f", worst)) s"
            if abs(worst) > 5 { findings.warn(text + "; check NTP on the agents and here") } else { findings.ok(text) }
        } else {
            findings.warn("clock: no observation seen in \(listen) s; skew not measured")
        }
        checkNumbering(log.timed.map(\.message), findings)
        // Mosquitto publishes $SYS every sys_interval (10 s in the shipped configs): a broker
        // that started moments ago may not have yet.
        if dropped {
            _ = try? await waitForValue(timeout: .seconds(12), every: .milliseconds(100)) {
                log.timed.contains {
                    $0.message.topic == EvaluatorService.brokerDroppedTopic
                        || (uptime && $0.message.topic == Self.brokerUptimeTopic)
                } ? true : nil
            }
        }
        checkBrokerLoss(subscribed: dropped, log.timed.map(\.message), findings)
    }

    /// Gaps in the numbers (`n`) of the observations seen, per agent: messages lost between the
    /// agents and the broker's subscribers. Said only when some observation is numbered
    /// (Perimeter's agents number theirs; OwnTracks and ESPresense do not).
    private func checkNumbering(_ messages: [MQTTMessage], _ findings: Findings) {
        var watch = SequenceWatch()
        var numbered = 0
        var gaps: [String] = []
        for message in messages where message.topic.hasSuffix("/gps") || message.topic.hasSuffix("/ble") {
            let levels = message.topic.split(separator: "/", omittingEmptySubsequences: false)
            guard levels.count >= 2, let n = (try? JSONParser.parse(message.payload))?["n"]?.intValue else { continue }
            let agent = String(levels[levels.count - 2])
            numbered += 1
            if case .gap(let after, let next) = watch.note(agent: agent, n: n) {
                gaps.append("\(agent) \(after + 1)…\(next - 1)")
            }
        }
        guard numbered > 0 else { return }
        let text = "numbering: \(numbered) numbered observations from \(watch.count) agent(s)"
        if gaps.isEmpty {
            findings.ok(text + ", no gap")
        } else {
            findings.warn(
                text
                    + "; missing: \(gaps.prefix(5).joined(separator: ", ")): input lost between agents and here (a queue limit?)"
            )
        }
    }

    /// Mosquitto's uptime, republished every sys_interval.
    static let brokerUptimeTopic = "$SYS/broker/uptime"

    /// Reports what the broker says it dropped since it started (queue and in-flight limits).
    private func checkBrokerLoss(subscribed: Bool, _ messages: [MQTTMessage], _ findings: Findings) {
        let topic = EvaluatorService.brokerDroppedTopic
        guard subscribed, let last = messages.last(where: { $0.topic == topic }),
            let count = Int(String(decoding: last.payload.prefix(32), as: UTF8.self))
        else {
            if subscribed, messages.contains(where: { $0.topic == Self.brokerUptimeTopic }) {
                findings.ok(
                    "broker loss: nothing dropped in the last minute (\(topic) is kept 60 s after it changes; the evaluator reports later drops)"
                )
                return
            }
            findings.warn(
                "broker loss: \(topic) not readable (not Mosquitto, sys_interval 0, or the ACL); loss at the broker cannot be seen"
            )
            return
        }
        if count > 0 {
            findings.warn(
                "broker loss: the broker dropped \(count) messages since it started; raise max_queued_messages/max_queued_bytes or find the client that falls behind (deploy/mosquitto.conf, docs/security.md)"
            )
        } else {
            findings.ok("broker loss: no message dropped since the broker started (\(topic))")
        }
    }
}
