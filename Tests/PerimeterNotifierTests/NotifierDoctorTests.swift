import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Testing

/// `perimeter doctor` given the notifier's configuration (issue 20): it checks the notifier —
/// each channel reached as a delivery would reach it, nothing delivered — and writes no file.
@Suite("perimeter doctor for the notifier", .serialized)
struct NotifierDoctorTests {
    static let rules = #"[{"id":"r1","on":"enter","regions":"*","channels":["hook","mail","app"],"body":"{subject}"}]"#

    @Test(
        "the notifier's file is checked as the notifier's: webhook, SMTP with STARTTLS, rules, broker limits; no mail, no POST, no file"
    )
    func healthyNotifier() async throws {
        let harness = try await NotifierHarness()
        do {
            let secret = "whsec_" + Data((0..<32).map { UInt8($0) }).base64EncodedString()
            let (receiver, webhookPort) = try await harness.startPeer("webhook_receiver.py", ["--secret", secret])
            let certs = try await NotifierMailTests.certificates(harness)
            let (smtp, smtpPort) = try await harness.startPeer(
                "smtp_receiver.py", ["--cert", "\(certs)/server.crt", "--key", "\(certs)/server.key"])
            try harness.configure(
                rules: Self.rules,
                channels: [
                    "hook": [
                        "type": "webhook", "url": .string("http://127.0.0.1:\(webhookPort)/hook"),
                        "secret": .string(secret),
                    ],
                    "mail": [
                        "type": "mail", "host": "localhost", "port": .number(Double(smtpPort)),
                        "from": "perimeter@museum.example", "to": ["desk@museum.example"],
                        "caFile": .string("\(certs)/ca.crt"),
                    ],
                    "app": ["type": "mqtt"],
                ])
            let before = directorySnapshot(harness.directory)
            let result = try await runProduct(["doctor", "--config", harness.configPath, "--listen", "0.2"])
            let lines = result.stdout.split(separator: "\n").map(String.init)
            #expect(result.status == .exited(0), "\(lines) \(result.stderr)")
            for expected in [
                "ok   services: notifier (recognized",
                "ok   notifier configuration: valid (1 venue(s), 3 channel(s))",
                "warn notifier database \(harness.databasePath): missing; the notifier creates it",
                "ok   notifier venue test: 1 rules in",
                "ok   notifier channel app (mqtt): published through the broker",
                // webhook_receiver.py takes only POST: Python's server answers HEAD with 501.
                "ok   notifier channel hook (webhook): http://127.0.0.1:\(webhookPort)/hook answers HEAD with 501 (plain HTTP); secret decodes (32 bytes)",
                "ok   notifier channel mail (mail): smtp://localhost:\(smtpPort) answered EHLO, STARTTLS, certificate verified, NOOP 250; no mail sent",
                "ok   notifier broker 127.0.0.1:\(harness.broker.port): connected (no TLS), anonymously",
                // The test broker runs with the shipped limits (MosquittoBroker), read from the
                // file it was started with.
                "ok   broker limits (mosquitto version", "ok   broker loss:",
            ] {
                #expect(lines.contains { $0.hasPrefix(expected) }, "no line starting '\(expected)' in \(lines)")
            }
            #expect(
                !lines.contains { $0.hasPrefix("ok   configuration:") || $0.contains("ACL") },
                "nothing is checked as the evaluator's: \(lines)")
            // The probes delivered nothing: each receiver prints a record before it answers, and
            // the doctor has finished waiting for every answer.
            #expect(peerRecords(receiver).isEmpty, "\(receiver.output)")
            #expect(peerRecords(smtp).isEmpty, "\(smtp.output)")
            #expect(directorySnapshot(harness.directory) == before, "doctor wrote into \(harness.directory.path)")
            #expect(!FileManager.default.fileExists(atPath: harness.databasePath))
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    struct Broken: Sendable, CustomStringConvertible {
        var name: String
        var rules: String
        var channels: JSONObject
        /// The channel's FAIL line starts so (after "FAIL notifier ").
        var expected: String
        /// …and holds this.
        var contains = ""
        var description: String { name }
    }

    static let broken: [Broken] = [
        Broken(
            name: "a webhook nobody listens on",
            rules: #"[{"id":"r","on":"enter","regions":"*","channels":["hook"],"body":"x"}]"#,
            channels: [
                "hook": ["type": "webhook", "url": "http://127.0.0.1:1/hook", "secret": "0123456789abcdef0123"]
            ],
            expected: "channel hook (webhook): http://127.0.0.1:1/hook unreachable:"),
        Broken(
            name: "a relay whose certificate is not trusted (no caFile)",
            rules: #"[{"id":"r","on":"enter","regions":"*","channels":["mail"],"body":"x"}]"#,
            channels: [
                "mail": [
                    "type": "mail", "host": "localhost", "port": "SMTP", "from": "p@museum.example",
                    "to": ["d@museum.example"],
                ]
            ], expected: "channel mail (mail): STARTTLS with localhost:"),
        Broken(
            name: "a relay account without its password",
            rules: #"[{"id":"r","on":"enter","regions":"*","channels":["mail"],"body":"x"}]"#,
            channels: [
                "mail": [
                    "type": "mail", "host": "localhost", "port": 25, "from": "p@museum.example",
                    "to": ["d@museum.example"], "username": "perimeter",
                ]
            ],
            expected: "channel mail (mail): channels.mail.username is set and the password is empty",
            contains: "PERIMETER_CHANNELS_MAIL_PASSWORD"),
        Broken(
            name: "a rule naming a channel that does not exist",
            rules: #"[{"id":"r","on":"enter","regions":"*","channels":["pager"],"body":"x"}]"#,
            channels: ["app": ["type": "mqtt"]], expected: "venue test: ",
            contains: "channels: unknown channel 'pager' (configured: app)"),
    ]

    @Test("a broken channel or rules file is a FAIL naming it and what to fix; exit 1", arguments: broken)
    func brokenNotifier(_ broken: Broken) async throws {
        let harness = try await NotifierHarness()
        do {
            var channels = broken.channels
            if case .object(var mail)? = channels["mail"], mail["port"] == "SMTP" {
                let certs = try await NotifierMailTests.certificates(harness)
                let (_, port) = try await harness.startPeer(
                    "smtp_receiver.py", ["--cert", "\(certs)/server.crt", "--key", "\(certs)/server.key"])
                mail["port"] = .number(Double(port))
                channels["mail"] = .object(mail)
            }
            try harness.configure(rules: broken.rules, channels: channels)
            let result = try await runProduct(["doctor", "--config", harness.configPath, "--listen", "0.2"])
            let lines = result.stdout.split(separator: "\n").map(String.init)
            #expect(result.status == .exited(1), "\(lines)")
            #expect(
                lines.contains {
                    $0.hasPrefix("FAIL notifier " + broken.expected)
                        && (broken.contains.isEmpty || $0.contains(broken.contains))
                },
                "\(lines)")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
    @Test("an https webhook: a HEAD over verified TLS, nothing posted; a certificate it cannot verify is a FAIL")
    func httpsWebhook() async throws {
        let harness = try await NotifierHarness()
        do {
            let certs = try await NotifierMailTests.certificates(harness)
            let (peer, port) = try await harness.startPeer(
                "hostile_receiver.py", ["--cert", "\(certs)/server.crt", "--key", "\(certs)/server.key"])
            for trusted in [true, false] {
                var hook: JSONObject = [
                    "type": "webhook", "url": .string("https://localhost:\(port)/ok"),
                    "secret": "0123456789abcdef0123",
                ]
                if trusted { hook["caFile"] = .string("\(certs)/ca.crt") }
                try harness.configure(
                    rules: #"[{"id":"r","on":"enter","regions":"*","channels":["hook"],"body":"x"}]"#,
                    channels: ["hook": .object(hook)])
                let result = try await runProduct(["doctor", "--config", harness.configPath, "--listen", "0.2"])
                let lines = result.stdout.split(separator: "\n").map(String.init)
                if trusted {
                    #expect(result.status == .exited(0), "\(lines)")
                    #expect(
                        lines.contains {
                            $0.hasPrefix(
                                "ok   notifier channel hook (webhook): https://localhost:\(port)/ok answers HEAD with 200 over TLS, certificate verified"
                            )
                        }, "\(lines)")
                } else {
                    #expect(result.status == .exited(1), "\(lines)")
                    #expect(
                        lines.contains {
                            $0.hasPrefix(
                                "FAIL notifier channel hook (webhook): TLS to https://localhost:\(port)/ok failed:")
                                && $0.contains("channels.hook.caFile")
                        }, "\(lines)")
                }
                // The receiver records each request before it answers: one HEAD without a body,
                // from the trusted run; nothing from the one whose certificate did not verify.
                let records = peerRecords(peer)
                #expect(records.count == 1, "\(peer.output)")
                #expect(records.first?["request_line"]?.stringValue == "HEAD /ok HTTP/1.1", "\(records)")
                #expect(records.first?["body_bytes"]?.intValue == 0)
            }
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    @Test(
        "a mail relay asking for AUTH: the right account passes, a wrong password is a FAIL; no mail either way",
        arguments: [("a-long-secret", true), ("not-the-secret", false)])
    func mailCredentials(_ password: String, _ accepted: Bool) async throws {
        let harness = try await NotifierHarness()
        do {
            let certs = try await NotifierMailTests.certificates(harness)
            let (smtp, port) = try await harness.startPeer(
                "smtp_receiver.py",
                ["--cert", "\(certs)/server.crt", "--key", "\(certs)/server.key", "--auth", "perimeter:a-long-secret"])
            try harness.configure(
                rules: #"[{"id":"r","on":"enter","regions":"*","channels":["desk"],"body":"x"}]"#,
                channels: [
                    "desk": [
                        "type": "mail", "host": "localhost", "port": .number(Double(port)),
                        "from": "perimeter@museum.example", "to": ["desk@museum.example"],
                        "caFile": .string("\(certs)/ca.crt"), "username": "perimeter", "password": .string(password),
                    ]
                ])
            let result = try await runProduct(["doctor", "--config", harness.configPath, "--listen", "0.2"])
            let lines = result.stdout.split(separator: "\n").map(String.init)
            if accepted {
                #expect(result.status == .exited(0), "\(lines)")
                #expect(
                    lines.contains {
                        $0.hasPrefix(
                            "ok   notifier channel desk (mail): smtp://localhost:\(port) answered EHLO, STARTTLS")
                            && $0.contains("credentials for 'perimeter'")
                    }, "\(lines)")
            } else {
                #expect(result.status == .exited(1), "\(lines)")
                #expect(
                    lines.contains {
                        $0.hasPrefix("FAIL notifier channel desk (mail): localhost:\(port) refused the credentials")
                    }, "\(lines)")
            }
            // The relay prints each AUTH attempt before it answers it.
            #expect(smtp.output.contains("auth perimeter \(accepted ? "ok" : "refused")"), "\(smtp.output)")
            #expect(peerRecords(smtp).isEmpty, "no mail: \(smtp.output)")
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
    @Test(
        "regression: given the notifier's file, doctor checked it as the evaluator's and created ./perimeter-evaluator.sqlite"
    )
    func notifierFileInWorkingDirectory() async throws {
        let harness = try await NotifierHarness()
        let empty = harness.directory.appendingPathComponent("cwd")
        do {
            try harness.configure(
                rules: #"[{"id":"r","on":"enter","regions":"*","channels":["app"],"body":"x"}]"#,
                channels: ["app": ["type": "mqtt"]])
            try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: true)
            // In a directory of its own, where the evaluator's default database would have appeared.
            let doctor = try ChildProcess(
                "/bin/sh",
                [
                    "-c", "cd \"$1\" && exec \"$2\" doctor --config \"$3\" --listen 0.2", "sh", empty.path,
                    Products.executable("perimeter"), harness.configPath,
                ])
            let result = await doctor.finish()
            let lines = result.output.split(separator: "\n").map(String.init)
            #expect(result.termination == .exited(0), "\(lines)")
            #expect(lines.first?.hasPrefix("ok   services: notifier (recognized") == true, "\(lines)")
            #expect(!lines.contains { $0.hasPrefix("ok   configuration:") || $0.contains("ACL") }, "\(lines)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: empty.path).isEmpty)
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
}
