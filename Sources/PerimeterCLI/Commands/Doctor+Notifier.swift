import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterNet
import PerimeterNotifier

extension DoctorCommand {
    /// The notifier: its database, its rules files against its channels, each channel reached
    /// the way a delivery would reach it (nothing delivered), its broker account.
    func checkNotifier(_ scope: Scope, _ brokers: BrokerChecks) async {
        guard let configuration = read(NotifierConfiguration.self, scope) else { return }
        scope.ok(
            "configuration: valid (\(configuration.venues.count) venue(s), \(configuration.channels.count) channel(s))")
        Self.checkDatabase(configuration.databasePath, scope, creator: "the notifier")
        checkRules(configuration, scope)
        for name in configuration.channels.keys.sorted() {
            await checkChannel(name, configuration.channels[name]!, scope)
        }
        _ = await brokers.connect(configuration.broker, scope)
    }

    /// Each venue's rules file loads, every rule with channels that exist (what the notifier
    /// refuses to start on).
    private func checkRules(_ configuration: NotifierConfiguration, _ scope: Scope) {
        let channels = Set(configuration.channels.keys)
        for venue in configuration.venues {
            guard let path = venue.rulesPath else {
                scope.warn("venue \(venue.id): no rules file (venues.\(venue.id).rules); only live rules/{rule} topics")
                continue
            }
            guard let data = FileManager.default.contents(atPath: path) else {
                scope.fail("venue \(venue.id): cannot read rules file \(path)")
                continue
            }
            guard let document = try? JSONParser.parse(data) else {
                scope.fail("venue \(venue.id): \(path) is not JSON")
                continue
            }
            let (rules, problems) = RuleParser.parse(document: document, channels: channels)
            if problems.isEmpty {
                let used = Set(rules.flatMap(\.channels))
                scope.ok("venue \(venue.id): \(rules.count) rules in \(path)")
                for unused in channels.subtracting(used).sorted() {
                    scope.warn("venue \(venue.id): no rule in \(path) uses channel \(unused)")
                }
            } else {
                scope.fail(
                    "venue \(venue.id): \(path) (the notifier will not start): \(problems.joined(separator: "; "))")
            }
        }
    }

    private func checkChannel(_ name: String, _ channel: NotifierConfiguration.Channel, _ scope: Scope) async {
        let label = "channel \(name) (\(channel.kind))"
        switch channel {
        case .mqtt(let topic):
            scope.ok("\(label): published through the broker\(topic.map { " on \($0)" } ?? "")")
        case .webhook(let url, let secret, var options):
            // A probe answers quickly or not at all.
            options.connectTimeout = min(options.connectTimeout, 10)
            options.timeout = min(options.timeout, 15)
            let shown = HTTPClient.redacted(url)
            let tls = url.lowercased().hasPrefix("https:")
            let probe = options
            do {
                let status = try await Blocking.run { try ChannelProbe.head(url, options: probe) }
                let text =
                    "\(label): \(shown) answers HEAD with \(status)"
                    + (tls ? " over TLS, certificate verified" : " (plain HTTP)")
                    + "; secret decodes (\(secret.key.count) bytes)"
                if status >= 500 && status != 501 {
                    scope.warn(text + ": the receiver reports an error of its own")
                } else {
                    scope.ok(text)
                }
                if !tls && !SMTPClient.isLoopback(URL(string: url)?.host ?? "") {
                    scope.warn(
                        "\(label): plain HTTP to another host: notifications cross the network in clear; use https")
                }
            } catch let error as CurlError where error.kind == .tls {
                scope.fail(
                    "\(label): TLS to \(shown) failed: \(error.detail); give the receiver's CA in channels.\(name).caFile"
                )
            } catch {
                scope.fail("\(label): \(shown) unreachable: \(error)")
            }
        case .mail(let relay, let from, let to):
            let account = relay.username.map { ", credentials for '\($0)'" } ?? ""
            if relay.username != nil && (relay.password ?? "").isEmpty {
                scope.fail(
                    "\(label): channels.\(name).username is set and the password is empty; give it in \(ConfigReader.environmentName(for: "channels.\(name).password"))"
                )
                return
            }
            var probe = relay
            probe.connectTimeout = min(probe.connectTimeout, 10)
            probe.timeout = min(probe.timeout, 20)
            let relayProbe = probe
            do {
                let code = try await Blocking.run { try ChannelProbe.smtp(relayProbe) }
                scope.ok(
                    "\(label): smtp://\(relay.host):\(relay.port) answered EHLO, "
                        + (relay.startTLS == .never ? "no STARTTLS (loopback relay)" : "STARTTLS, certificate verified")
                        // curl authenticates when the relay offers AUTH and says nothing when it
                        // does not: the account is named, not claimed accepted.
                        + (relay.username == nil ? "" : "\(account) (AUTH when offered; refused would fail here)")
                        + ", NOOP \(code); no mail sent (from \(from) to \(to.count) recipient(s))")
            } catch let error as CurlError where error.kind == .tls {
                scope.fail(
                    "\(label): STARTTLS with \(relay.host):\(relay.port) failed: \(error.detail); the relay must offer STARTTLS with a certificate that verifies (channels.\(name).caFile for a private CA)"
                )
            } catch let error as CurlError where error.code == 67 {
                scope.fail("\(label): \(relay.host):\(relay.port) refused the credentials\(account): \(error.detail)")
            } catch {
                scope.fail("\(label): \(relay.host):\(relay.port) unreachable: \(error)")
            }
        }
    }
}
