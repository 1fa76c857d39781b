import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Testing

/// `perimeter rules list|get|put|delete` against a real broker and a real `perimeter notifier`:
/// the rule the command publishes is the one the notifier fires.
@Suite("perimeter rules against a running notifier", .serialized)
struct LiveRulesCommandTests {
    private static let t0 = Date(timeIntervalSince1970: 1_764_603_660)

    private func greeting(_ id: String, channel: String = "app") -> String {
        #"{"id":""# + id + #"","on":"enter","regions":"gallery","channels":[""# + channel
            + #""],"body":"{subject} entered {region}"}"#
    }

    @Test("rules put → the notifier fires the live rule; rules delete → it fires no more; invalid rules are refused")
    func putFiresDeleteStops() async throws {
        let harness = try await NotifierHarness()
        do {
            let fileRule =
                #"{"id":"lobby-hello","on":"enter","regions":"lobby","channels":["app"],"body":"hello {subject}"}"#
            try harness.configure(rules: #"{"rules":["# + fileRule + "]}", channels: ["app": ["type": "mqtt"]])
            try await harness.startNotifier()
            func cli(
                _ arguments: [String], stdin: String? = nil
            ) async throws -> (
                status: Subprocess.Termination, stdout: String, stderr: String
            ) {
                try await runProduct(arguments + ["--config", harness.configPath], stdin: stdin)
            }
            let put = try await cli(["rules", "put", "-"], stdin: greeting("greet"))
            #expect(put.status == .exited(0), "\(put.stderr)")
            #expect(put.stdout.contains("published perimeter/v1/test/rules/greet"))
            try await harness.waitUntilProcessed()
            try await harness.publishEvent("enter", region: "gallery", subject: "ann", t: Self.t0)
            try await harness.waitFor("the live rule's notification") {
                harness.payloads("notifications/app/").contains { $0["rule"]?.stringValue == "greet" }
            }
            let body = harness.payloads("notifications/app/").first { $0["rule"]?.stringValue == "greet" }?["body"]
            #expect(body?.stringValue == "ann entered gallery")

            let list = try await cli(["rules", "list"])
            #expect(list.status == .exited(0), "\(list.stderr)")
            #expect(list.stdout == "greet\tlive\tenter\tgallery\tapp\nlobby-hello\tfile\tenter\tlobby\tapp\n")
            let get = try await cli(["rules", "get", "greet"])
            #expect((try? JSONParser.parse(Array(get.stdout.utf8)))?["id"]?.stringValue == "greet")

            // Refused before publishing: an unknown channel (the notifier's config names the
            // channels), the id of a rule of the rules file, a rule that is not one.
            let unknownChannel = try await cli(["rules", "put", "-"], stdin: greeting("pager-rule", channel: "pager"))
            #expect(unknownChannel.status == .exited(1))
            #expect(unknownChannel.stderr.contains("rule 'pager-rule'"), "\(unknownChannel.stderr)")
            #expect(unknownChannel.stderr.contains("unknown channel 'pager'"), "\(unknownChannel.stderr)")
            #expect(unknownChannel.stderr.contains("nothing published"))
            let clash = try await cli(["rules", "put", "-"], stdin: greeting("lobby-hello"))
            #expect(clash.status == .exited(1))
            #expect(clash.stderr.contains("rule 'lobby-hello': the rules file"), "\(clash.stderr)")
            let typo = try await cli(
                ["rules", "put", "-"], stdin: #"{"id":"typo","on":"enter","regions":"x","channels":["app"],"bdy":"x"}"#)
            #expect(typo.status == .exited(1))
            #expect(typo.stderr.contains("unknown field 'bdy'"), "\(typo.stderr)")

            let delete = try await cli(["rules", "delete", "greet"])
            #expect(delete.status == .exited(0), "\(delete.stderr)")
            try await harness.waitUntilProcessed()
            try await harness.publishEvent("enter", region: "gallery", subject: "bea", t: Self.t0 + 60)
            try await harness.publishEvent("enter", region: "lobby", subject: "bea", t: Self.t0 + 61)
            // Everything before the marker is decided: the file rule fired, the deleted one did not.
            try await harness.waitUntilProcessed()
            #expect(try harness.outboxCount(rule: "greet") == 1, "a deleted live rule fires no more")
            #expect(try harness.outboxCount(rule: "lobby-hello") == 1)
            #expect(
                !harness.messages.contains {
                    $0.topic.hasSuffix("/rules/pager-rule") || $0.topic.hasSuffix("/rules/typo")
                },
                "refused rules were never published")
            #expect(try await cli(["rules", "get", "greet"]).status == .exited(1))
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    @Test("a rules file that gains a live rule's id on SIGHUP: the file's rule is used, with a warning")
    func fileRuleShadowsLiveRule() async throws {
        let harness = try await NotifierHarness()
        do {
            try harness.configure(rules: #"{"rules":[]}"#, channels: ["app": ["type": "mqtt"]])
            let notifier = try await harness.startNotifier()
            let live = #"{"id":"greet","on":"enter","regions":"gallery","channels":["app"],"body":"live {subject}"}"#
            let put = try await runProduct(["rules", "put", "-", "--config", harness.configPath], stdin: live)
            #expect(put.status == .exited(0), "\(put.stderr)")
            try await harness.waitUntilProcessed()
            let file =
                #"{"rules":[{"id":"greet","on":"enter","regions":"gallery","channels":["app"],"body":"file {subject}"}]}"#
            try file.write(
                toFile: harness.directory.appendingPathComponent("rules.json").path, atomically: true, encoding: .utf8)
            kill(notifier.subprocess.pid, SIGHUP)
            _ = try await notifier.waitForLine(containing: "live rule shadowed by the rules file")
            try await harness.publishEvent("enter", region: "gallery", subject: "ann", t: Self.t0)
            try await harness.waitUntilProcessed()
            #expect(try harness.outboxCount(rule: "greet") == 1)
            try await harness.waitFor("the notification") {
                harness.payloads("notifications/app/").contains { $0["rule"]?.stringValue == "greet" }
            }
            let bodies = harness.payloads("notifications/app/").compactMap { $0["body"]?.stringValue }
            #expect(bodies == ["file ann"])
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }
}
