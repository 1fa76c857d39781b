import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterNotifier
import Testing

@Suite("Notifier configuration")
struct NotifierConfigurationTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test("config/notifier.example.json reads, and the sample venue's rules load against its channels")
    func example() throws {
        let reader = try ConfigReader(
            filePath: Self.root.appendingPathComponent("config/notifier.example.json").path, environment: [:],
            overrides: [])
        let configuration = try NotifierConfiguration.read(reader)
        #expect(Set(configuration.channels.keys) == ["app", "signage", "ops", "desk"])
        #expect(configuration.venues.first?.conventions.currency == "EUR")
        guard case .mail(let relay, _, let to)? = configuration.channels["desk"] else {
            Issue.record("desk is not a mail channel")
            return
        }
        #expect(relay.startTLS == .required && relay.port == 587 && to == ["front-desk@museum.example"])
        let rulesPath = try #require(configuration.venues.first?.rulesPath)
        let document = try JSONParser.parse(
            try #require(FileManager.default.contents(atPath: Self.root.appendingPathComponent(rulesPath).path)))
        let (rules, problems) = RuleParser.parse(document: document, channels: Set(configuration.channels.keys))
        #expect(problems.isEmpty, "\(problems)")
        #expect(rules.count == 4)
    }

    /// The URL goes to curl exactly as written: percent-escapes stay escapes.
    @Test("a webhook URL is kept byte for byte, and a whsec_ secret decodes")
    func webhookURLKept() throws {
        let url = "http://127.0.0.1:9/hook%0D%0AX-Injected:%20yes"
        let reader = try ConfigReader(
            filePath: nil, environment: [:],
            overrides: [
                "channels.x.type=webhook", "channels.x.url=\(url)",
                "channels.x.secret=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "venues.v.locale=en_US",
            ])
        guard case .webhook(let kept, let secret, let options)? = try NotifierConfiguration.read(reader).channels["x"]
        else {
            Issue.record("x is not a webhook")
            return
        }
        #expect(kept == url)
        #expect(secret.key.count == 24)
        #expect(options.proxy == .none && options.maxResponseBytes == 65_536)
    }

    @Test(
        "bad settings are refused before anything starts, each naming its key",
        arguments: [
            (["channels.x.type": "pager"], "channels.x.type"),
            (
                ["channels.x.type": "webhook", "channels.x.url": "ftp://a", "channels.x.secret": "0123456789abcdef"],
                "channels.x.url"
            ),
            (
                ["channels.x.type": "webhook", "channels.x.url": "http://a/", "channels.x.secret": "short"],
                "channels.x.secret"
            ),
            (["channels.x.type": "mail", "channels.x.host": "h", "channels.x.from": "a@b"], "channels.x.to"),
            (["channels.x.type": "mqtt", "channels.x.topic": "a/+/b"], "channels.x.topic"),
            (["channels.x.type": "mqtt", "venues.v.currency": "euro"], "venues.v.currency"),
            (["channels.x.type": "mqtt", "venues.v.timeZone": "Mars/Olympus"], "venues.v.timeZone"),
            (["channels.x.type": "mqtt", "notifier.maxAttempts": "0"], "notifier.maxAttempts"),
            (
                [
                    "channels.x.type": "mail", "channels.x.host": "smtp.example", "channels.x.from": "a@b.example",
                    "channels.x.to": "c@d.example", "channels.x.startTLS": "never",
                ], "channels.x.startTLS"
            ),
            (
                [
                    "channels.x.type": "mail", "channels.x.host": "127.0.0.1", "channels.x.from": "a@b.example",
                    "channels.x.to": "c@d.example", "channels.x.startTLS": "opportunistic",
                ], "channels.x.startTLS"
            ),
            (
                [
                    "channels.x.type": "mail", "channels.x.host": "127.0.0.1", "channels.x.from": "a@b.example",
                    "channels.x.to": "c@d.example", "channels.x.startTLS": "never", "channels.x.username": "u",
                ], "channels.x.username"
            ),
            (
                [
                    "channels.x.type": "webhook", "channels.x.url": "https://a/",
                    "channels.x.secret": "0123456789abcdef",
                    "channels.x.insecure": "true",
                ], "channels.x.insecure"
            ),
            (
                [
                    "channels.x.type": "webhook", "channels.x.url": "http://a/x y",
                    "channels.x.secret": "0123456789abcdef",
                ], "channels.x.url"
            ),
            (
                ["channels.x.type": "webhook", "channels.x.url": "http://a/", "channels.x.secret": "whsec_AAAA"],
                "channels.x.secret"
            ),
            (["channels.x.type": "mqtt", "notifier.retention.delivered": "60"], "notifier.retention.delivered"),
        ])
    func refused(settings: [String: String], key: String) throws {
        var overrides = settings.map { "\($0.key)=\($0.value)" }
        if !settings.keys.contains(where: { $0.hasPrefix("venues.") }) { overrides.append("venues.v.locale=en_US") }
        let reader = try ConfigReader(filePath: nil, environment: [:], overrides: overrides)
        do {
            _ = try NotifierConfiguration.read(reader)
            Issue.record("accepted \(settings)")
        } catch let error as ConfigError {
            #expect("\(error)".contains(key), "\(error)")
        }
    }
}
