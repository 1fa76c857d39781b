import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterMQTT

extension DoctorCommand {
    /// The evaluator: its regions files, its database, its account's ACL (real publishes), the
    /// agents' clocks and numbering in what it would read.
    func checkEvaluator(_ scope: Scope, _ brokers: BrokerChecks) async {
        guard let configuration = read(EvaluatorConfiguration.self, scope) else { return }
        scope.ok("configuration: valid (\(configuration.venues.count) venue(s))")
        checkRegions(configuration, scope)
        Self.checkDatabase(configuration.databasePath, scope, creator: "the evaluator")
        guard let session = await brokers.connect(configuration.broker, scope, fresh: true) else { return }
        await checkACL(configuration, session, scope)
        await checkObservations(session.inbox, scope)
    }

    private func checkRegions(_ configuration: EvaluatorConfiguration, _ scope: Scope) {
        for venue in configuration.venues {
            guard let path = venue.regionsPath else { continue }
            guard let data = FileManager.default.contents(atPath: path) else {
                scope.fail("venue \(venue.settings.id): cannot read regions file \(path)")
                continue
            }
            let document = RegionParser.parse(bytes: Array(data))
            let id = venue.settings.id
            for warning in document.warnings { scope.warn("venue \(id): \(path): \(warning)") }
            let problems = document.problems.map(\.description).joined(separator: "; ")
            if document.problems.isEmpty {
                scope.ok("venue \(id): \(document.regions.count) regions in \(path)")
            } else if venue.strictRegions {
                scope.fail("venue \(id): \(path) (strictRegions: the evaluator will not start): \(problems)")
            } else {
                scope.warn(
                    "venue \(id): degraded: \(document.problems.count) problem(s) in \(path); the evaluator serves its "
                        + "\(document.regions.count) valid regions without the invalid features: \(problems)")
            }
        }
    }

    /// Must be allowed: read observations, write what the evaluator publishes; must be denied:
    /// the consent service's sessions.
    private func checkACL(_ configuration: EvaluatorConfiguration, _ session: BrokerSession, _ scope: Scope) async {
        let client = session.client
        for venue in configuration.venues.map(\.settings.id) {
            let topics = Topics(prefix: configuration.prefix, venue: venue)
            do {
                let granted = try await client.subscribe("\(topics.root)/obs/+/+", qos: .atLeastOnce)
                scope.ok("ACL \(venue): may read observations (granted QoS \(granted))")
            } catch {
                scope.fail("ACL \(venue): may not read \(topics.root)/obs/+/+: \(error); fix the acl_file")
            }
            do {
                try await client.publish(
                    "\(topics.root)/deadletter/evaluator", #"{"probe":"perimeter doctor"}"#, qos: .atLeastOnce)
                scope.ok("ACL \(venue): may write its dead-letter topic")
            } catch {
                scope.fail(
                    "ACL \(venue): may not write \(topics.root)/deadletter/evaluator: \(error); fix the acl_file")
            }
            // An empty, unretained probe: if it gets through it ends a session that does not exist.
            let forbidden = "\(topics.root)/sessions/_doctor/_probe"
            do {
                try await client.publish(forbidden, payload: [], qos: .atLeastOnce)
                if configuration.broker.username == nil {
                    scope.warn("ACL \(venue): anonymous access with no ACL: anyone may write sessions and records")
                } else {
                    scope.fail("ACL \(venue): the evaluator may write \(forbidden); only the consent account should")
                }
            } catch {
                scope.ok("ACL \(venue): sessions are refused to this account")
            }
        }
    }

    /// Clock skew: each observation's time against this machine's clock when it arrived, until
    /// enough are seen; then gaps in the agents' numbering.
    private func checkObservations(_ log: MessageInbox, _ scope: Scope) async {
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
            if abs(worst) > 5 { scope.warn(text + "; check NTP on the agents and here") } else { scope.ok(text) }
        } else {
            scope.warn("clock: no observation seen in \(listen) s; skew not measured")
        }
        checkNumbering(log.timed.map(\.message), scope)
    }

    /// Gaps in the numbers (`n`) of the observations seen, per agent: messages lost between the
    /// agents and the broker's subscribers. Said only when some observation is numbered
    /// (Perimeter's agents number theirs; OwnTracks and ESPresense do not).
    private func checkNumbering(_ messages: [MQTTMessage], _ scope: Scope) {
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
            scope.ok(text + ", no gap")
        } else {
            scope.warn(
                text
                    + "; missing: \(gaps.prefix(5).joined(separator: ", ")): input lost between agents and here (a queue limit?)"
            )
        }
    }
}
