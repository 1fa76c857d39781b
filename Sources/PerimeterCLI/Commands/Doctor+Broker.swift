import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterMQTT

extension DoctorCommand {
    /// One connection to the broker for a service's settings, and what it received.
    struct BrokerSession: Sendable {
        let client: MQTTClient
        let inbox: MessageInbox
        let settings: BrokerSettings
    }

    /// The broker checks every service shares: one connection per distinct broker and account,
    /// certificates checked once, and — on the first connection — `$SYS` read for the broker's
    /// version and its dropped-message counter, then the queue limits of its configuration.
    actor BrokerChecks {
        let findings: DoctorCommand.Findings
        private var sessions: [BrokerSession] = []
        /// Connections already made (or failed), by endpoint and account: a second service with
        /// the same settings reuses the result instead of printing it again.
        private var tried: [String: BrokerSession?] = [:]
        private var certificatesChecked: Set<String> = []
        private var sys: (session: BrokerSession, dropped: Bool, uptime: Bool, version: Bool)?

        init(findings: DoctorCommand.Findings) {
            self.findings = findings
        }

        /// Mosquitto's uptime and version, republished every sys_interval.
        static let uptimeTopic = "$SYS/broker/uptime"
        static let versionTopic = "$SYS/broker/version"

        static func key(_ settings: BrokerSettings) -> String {
            "\(settings.host):\(settings.port) \(settings.alternates) \(settings.username ?? "") \(settings.caFile ?? "") \(settings.certificateFile ?? "")"
        }

        /// Connects with `settings` (each service's own account) and says how it went.
        /// - Parameter fresh: connect even when the same settings were tried (the evaluator's
        ///   ACL probes need a connection of their own).
        func connect(_ settings: BrokerSettings, _ scope: Scope, fresh: Bool = false) async -> BrokerSession? {
            checkCertificates(settings)
            let key = Self.key(settings)
            if !fresh, let done = tried[key] {
                let endpoint = "\(settings.host):\(settings.port)"
                if done == nil {
                    scope.fail("broker \(endpoint): not reachable with these settings (see above)")
                } else {
                    scope.ok("broker \(endpoint): the same broker and account as checked above")
                }
                return done
            }
            var mqtt = settings.mqttConfiguration(clientID: "perimeter-doctor-\(getpid())-\(sessions.count)")
            mqtt.backoff = .init(initial: .milliseconds(100), maximum: .milliseconds(500))
            let client: MQTTClient
            do {
                client = try MQTTClient(mqtt)
                try await client.connect(timeout: .seconds(5))
            } catch {
                let what = settings.username.map { " as '\($0)'" } ?? ""
                scope.fail(
                    "broker \(mqtt.endpoint)\(what): \(error); check broker.host/port (or broker.hosts), that mosquitto runs, TLS (broker.tls.*) and credentials"
                )
                tried[key] = .some(nil)
                return nil
            }
            scope.ok(
                "broker \(client.endpoint)\(mqtt.alternates.isEmpty ? "" : " (of \(mqtt.endpoint))"): connected"
                    + (mqtt.tls == nil ? " (no TLS)" : " over TLS, certificate verified")
                    + (settings.username.map { ", credentials for '\($0)' accepted" } ?? ", anonymously"))
            if mqtt.tls == nil && !["127.0.0.1", "localhost", "::1"].contains(settings.host) {
                scope.warn("broker: plaintext MQTT to a non-loopback host; use the TLS listener (deploy/mosquitto)")
            }
            let session = BrokerSession(client: client, inbox: MessageInbox(client), settings: settings)
            sessions.append(session)
            tried[key] = session
            if sys == nil {
                // Loss at the broker: Mosquitto's dropped-message counter ($SYS, retained), read
                // while the services are checked. Mosquitto keeps that counter only 60 s after it
                // last changed; its uptime, published every sys_interval, tells a quiet counter
                // from a broker without $SYS.
                // The version first: retained, it arrives before what the later subscriptions bring.
                let version = (try? await client.subscribe(Self.versionTopic, qos: .atMostOnce)) != nil
                let dropped =
                    (try? await client.subscribe(EvaluatorService.brokerDroppedTopic, qos: .atMostOnce)) != nil
                var uptime = false
                if dropped { uptime = (try? await client.subscribe(Self.uptimeTopic, qos: .atMostOnce)) != nil }
                sys = (session, dropped, uptime, version)
            }
            return session
        }

        /// Expiry of the configured CA and client certificates (openssl), once per file.
        private func checkCertificates(_ broker: BrokerSettings) {
            for (name, path) in [("CA", broker.caFile), ("client certificate", broker.certificateFile)] {
                guard let path, certificatesChecked.insert(path).inserted else { continue }
                guard let end = DoctorCommand.certificateEnd(path) else {
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

        /// The broker's version and losses from `$SYS`, its queue limits from its configuration
        /// file; then every connection is closed.
        func finish(brokerConfig: String?) async {
            await checkSys(brokerConfig: brokerConfig)
            for session in sessions {
                session.inbox.stop()
                await session.client.disconnect()
            }
        }

        private func checkSys(brokerConfig: String?) async {
            guard let sys else {
                findings.warn("broker loss and limits: not checked (no connection to the broker)")
                return
            }
            let log = sys.session.inbox
            // Mosquitto publishes $SYS every sys_interval (10 s in the shipped configs): a broker
            // that started moments ago may not have yet.
            if sys.dropped || sys.version {
                _ = try? await waitForValue(timeout: .seconds(12), every: .milliseconds(100)) {
                    let seen = log.timed.map(\.message.topic)
                    let counter =
                        !sys.dropped || seen.contains(EvaluatorService.brokerDroppedTopic)
                        || (sys.uptime && seen.contains(Self.uptimeTopic))
                    return counter && (!sys.version || seen.contains(Self.versionTopic)) ? true : nil
                }
            }
            let messages = log.timed.map(\.message)
            checkBrokerLoss(subscribed: sys.dropped, messages)
            let version = messages.last { $0.topic == Self.versionTopic }.map {
                String(decoding: $0.payload.prefix(200), as: UTF8.self)
            }
            checkLimits(brokerConfig: brokerConfig, settings: sys.session.settings, version: version)
        }

        /// Reports what the broker says it dropped since it started (queue and in-flight limits).
        private func checkBrokerLoss(subscribed: Bool, _ messages: [MQTTMessage]) {
            let topic = EvaluatorService.brokerDroppedTopic
            guard subscribed, let last = messages.last(where: { $0.topic == topic }),
                let count = Int(String(decoding: last.payload.prefix(32), as: UTF8.self))
            else {
                if subscribed, messages.contains(where: { $0.topic == Self.uptimeTopic }) {
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

        /// The queue limits that decide whether the broker drops messages for a subscriber that
        /// falls behind. Mosquitto does not publish them: they come from its configuration file.
        private func checkLimits(brokerConfig: String?, settings: BrokerSettings, version: String?) {
            let running = version.map { " (\($0))" } ?? ""
            let path: String?
            let origin: String
            if let brokerConfig {
                path = brokerConfig
                origin = brokerConfig
            } else if let found = MosquittoLimits.locate(host: settings.host, port: settings.port) {
                guard let file = found else {
                    report(MosquittoLimits(), origin: "mosquitto started without -c: its defaults", running: running)
                    return
                }
                path = file
                origin = file
            } else {
                path = nil
                origin = ""
            }
            guard let path else {
                findings.warn(
                    "broker limits\(running): max_queued_messages and max_queued_bytes cannot be checked from here (the broker does not publish them and its configuration file is not readable on this machine); check them on the broker's host: perimeter doctor --broker-config /etc/mosquitto/mosquitto.conf"
                )
                return
            }
            do {
                report(try MosquittoLimits.read(path), origin: origin, running: running)
            } catch {
                findings.warn("broker limits\(running): \(error); the queue limits cannot be checked")
            }
        }

        private func report(_ limits: MosquittoLimits, origin: String, running: String) {
            for problem in limits.problems {
                findings.warn("broker limits\(running) (\(origin)): \(problem)")
            }
            if limits.problems.isEmpty {
                findings.ok("broker limits\(running) (\(origin)): \(limits.summary)")
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
}

/// Mosquitto's per-client queue limits as its configuration file sets them (later lines win,
/// `include_dir` followed), and what they mean for QoS 1 input under load (DESIGN.md §11: the
/// stock `max_queued_messages` of 1,000 silently drops QoS 1 messages for a subscriber that falls
/// behind).
struct MosquittoLimits: Equatable {
    /// Mosquitto's defaults: 1,000 messages, no byte bound.
    var maxQueuedMessages = 1000
    var maxQueuedBytes = 0
    var setMessages = false

    static let stockMessages = 1000

    /// What would drop or grow without bound, with the fix.
    var problems: [String] {
        var problems: [String] = []
        if maxQueuedMessages != 0 && maxQueuedMessages <= Self.stockMessages {
            let what =
                setMessages ? "max_queued_messages \(maxQueuedMessages)" : "max_queued_messages unset (stock 1000)"
            problems.append(
                "\(what): a subscriber that falls behind by more loses QoS 1 messages silently; raise it (deploy/mosquitto/mosquitto.conf sets 1000000 with max_queued_bytes 268435456)"
            )
        }
        if maxQueuedBytes == 0 && (maxQueuedMessages == 0 || maxQueuedMessages > Self.stockMessages) {
            problems.append(
                "max_queued_bytes 0 (no byte bound) with \(maxQueuedMessages == 0 ? "no message bound" : "max_queued_messages \(maxQueuedMessages)"): a parked session's queue grows until the broker runs out of memory; set max_queued_bytes (e.g. 268435456)"
            )
        }
        return problems
    }

    var summary: String {
        "max_queued_messages \(maxQueuedMessages), max_queued_bytes \(maxQueuedBytes): no drop below those bounds"
    }

    struct ReadError: Error, CustomStringConvertible {
        var description: String
    }

    /// Reads `path` and the files its `include_dir` lines name (`*.conf`, in order).
    static func read(_ path: String) throws -> MosquittoLimits {
        var limits = MosquittoLimits()
        try limits.apply(path, depth: 0)
        return limits
    }

    /// The limits a configuration's text sets, starting from mosquitto's defaults (`include_dir`
    /// lines are not followed here: ``read(_:)`` does that).
    static func parse(_ text: String) throws -> MosquittoLimits {
        var limits = MosquittoLimits()
        for (key, value) in directives(text) where key != "include_dir" { try limits.set(key, value) }
        return limits
    }

    /// The `key value` lines of a configuration, comments and blank lines left out.
    static func directives(_ text: String) -> [(String, String)] {
        text.split(whereSeparator: \.isNewline).compactMap { raw in
            let line = raw.trimmingCharacters(in: .whitespaces)
            guard !line.isEmpty, !line.hasPrefix("#") else { return nil }
            let parts = line.split(separator: " ", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            return parts.count == 2 ? (parts[0], parts[1]) : nil
        }
    }

    private mutating func set(_ key: String, _ value: String) throws {
        guard key == "max_queued_messages" || key == "max_queued_bytes" else { return }
        guard let number = Int(value), number >= 0 else {
            throw ReadError(description: "\(key) '\(value)' is not a number")
        }
        if key == "max_queued_messages" {
            maxQueuedMessages = number
            setMessages = true
        } else {
            maxQueuedBytes = number
        }
    }

    private mutating func apply(_ path: String, depth: Int) throws {
        guard depth < 8, let data = FileManager.default.contents(atPath: path) else {
            throw ReadError(description: "cannot read \(path)")
        }
        for (key, value) in Self.directives(String(decoding: data, as: UTF8.self)) {
            guard key == "include_dir" else {
                try set(key, value)
                continue
            }
            let files = ((try? FileManager.default.contentsOfDirectory(atPath: value)) ?? [])
                .filter { $0.hasSuffix(".conf") }.sorted()
            for file in files { try apply("\(value)/\(file)", depth: depth + 1) }
        }
    }

    /// The configuration file of the mosquitto listening on `port` of this machine: `.some(path)`,
    /// `.some(nil)` when it was started without `-c` (its defaults), nil when the broker is not on
    /// this machine or its process cannot be seen (another user's, without root).
    static func locate(host: String, port: Int) -> String?? {
        guard ["127.0.0.1", "localhost", "::1"].contains(host) || host.hasPrefix("127.") else { return nil }
        var inodes: Set<String> = []
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = readAll(table) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                // local address HEX:PORT, state 0A = LISTEN, inode is field 9.
                guard fields.count > 9, fields[3] == "0A",
                    let local = fields[1].split(separator: ":").last, Int(local, radix: 16) == port
                else { continue }
                inodes.insert(String(fields[9]))
            }
        }
        guard !inodes.isEmpty else { return nil }
        let processes = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        // Another program may listen on the same port at another address: look for mosquitto
        // among every owner rather than stop at the first.
        for pid in processes where pid.allSatisfy(\.isNumber) {
            guard let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else {
                continue
            }
            let owns = descriptors.contains { fd in
                guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)")
                else { return false }
                return target.hasPrefix("socket:[") && inodes.contains(String(target.dropFirst(8).dropLast()))
            }
            guard owns, let text = readAll("/proc/\(pid)/cmdline") else { continue }
            let arguments = text.split(separator: "\0").map(String.init)
            guard arguments.first.map({ ($0 as NSString).lastPathComponent == "mosquitto" }) == true else { continue }
            guard let flag = arguments.firstIndex(where: { $0 == "-c" || $0 == "--config-file" }),
                flag + 1 < arguments.count
            else { return .some(nil) }
            let file = arguments[flag + 1]
            if file.hasPrefix("/") { return .some(file) }
            let directory = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/cwd")) ?? "."
            return .some("\(directory)/\(file)")
        }
        return nil
    }

    /// A /proc file read to its end: they report a size of 0 and come a page per read, so a
    /// reader that trusts the size or reads once sees only the first ~30 sockets.
    static func readAll(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += buffer[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
