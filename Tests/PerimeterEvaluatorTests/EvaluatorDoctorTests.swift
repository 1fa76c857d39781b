import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Testing

/// Doctor writes nothing (issue 20: it created a stray `./perimeter-evaluator.sqlite`) and says
/// when the broker's queue limits would drop input.
@Suite("perimeter doctor writes nothing; broker limits", .serialized)
struct EvaluatorDoctorTests {
    @Test(
        "regression: doctor created the database it checked; now a missing one is a finding, and an existing one is read without writing"
    )
    func createsNoFile() async throws {
        let harness = try await EvaluatorHarness(
            regions: Venue.collection([Venue.circle("hall", lat: 48.86, lon: 2.336, radius: 30)]))
        let database = harness.directory.appendingPathComponent("evaluator.sqlite").path
        var before = directorySnapshot(harness.directory)
        var result = try await runProduct(["doctor", "--config", harness.configPath, "--listen", "0.2"])
        var lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(result.status == .exited(0), "\(lines)")
        #expect(
            lines.contains {
                $0.hasPrefix("warn database \(database): missing; the evaluator creates it at its first start")
            },
            "\(lines)")
        #expect(directorySnapshot(harness.directory) == before, "doctor wrote into the directory")
        #expect(!FileManager.default.fileExists(atPath: database))

        // An evaluator killed with -9 leaves its -wal and -shm: the file is opened read-only. A
        // reader takes its read mark in the -shm (SQLite's shared-memory index, rebuilt by whoever
        // opens the file next): that file's time may change; no file appears, none changes size,
        // the database and its WAL are not written.
        try await harness.startEvaluator()
        harness.killEvaluator()
        _ = try await harness.waitForEvaluatorExit()
        #expect(FileManager.default.fileExists(atPath: database + "-wal"))
        before = directorySnapshot(harness.directory)
        result = try await runProduct(["doctor", "--config", harness.configPath, "--listen", "0.2"])
        lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(
            lines.contains {
                $0.hasPrefix("ok   database \(database): readable (schema version")
                    && $0.hasSuffix("writable by this user")
            }, "\(lines)")
        let after = directorySnapshot(harness.directory)
        #expect(after.keys.sorted() == before.keys.sorted(), "doctor created or removed a file")
        for (name, state) in before where !name.hasSuffix("-shm") {
            #expect(after[name] == state, "doctor changed \(name)")
        }

        // A database closed cleanly (no -wal, no -shm; python3's sqlite3 makes one): a plain
        // read-only connection would create both; doctor opens it immutable and nothing changes.
        let closed = harness.directory.appendingPathComponent("closed").path
        try FileManager.default.createDirectory(atPath: closed, withIntermediateDirectories: true)
        let made = await
            (try ChildProcess(
                "/usr/bin/python3",
                [
                    "-c",
                    "import sqlite3; c = sqlite3.connect('\(closed)/e.sqlite'); c.execute('PRAGMA journal_mode=WAL'); "
                        + "c.execute('CREATE TABLE t (x)'); c.execute('PRAGMA user_version=7'); c.commit(); c.close()",
                ])).finish()
        #expect(made.termination == .exited(0), "\(made.output)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: closed) == ["e.sqlite"])
        let closedBefore = directorySnapshot(URL(fileURLWithPath: closed))
        result = try await runProduct([
            "doctor", "--config", harness.configPath, "--listen", "0.2", "--set",
            "evaluator.database=\(closed)/e.sqlite",
        ])
        lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(
            lines.contains { $0.hasPrefix("ok   database \(closed)/e.sqlite: readable (schema version 7, 1 tables)") },
            "\(lines)")
        #expect(
            directorySnapshot(URL(fileURLWithPath: closed)) == closedBefore, "doctor wrote beside a closed database")
        await harness.stop()
    }

    struct Limits: Sendable, CustomStringConvertible {
        var broker: [String]
        var level: String
        var says: String
        var description: String { broker.isEmpty ? "the shipped limits" : broker.joined(separator: ", ") }
    }

    @Test(
        "the broker's queue limits, read from the file the local mosquitto was started with",
        arguments: [
            Limits(broker: [], level: "ok  ", says: "max_queued_messages 1000000, max_queued_bytes 268435456"),
            Limits(
                broker: ["max_queued_messages 1000"], level: "warn",
                says: "max_queued_messages 1000: a subscriber that falls behind by more loses QoS 1 messages silently"),
            Limits(
                broker: ["max_queued_messages 0", "max_queued_bytes 0"], level: "warn",
                says: "max_queued_bytes 0 (no byte bound) with no message bound"),
        ])
    func brokerLimits(_ limits: Limits) async throws {
        let harness = try await EvaluatorHarness(regions: Venue.collection([]), brokerConfiguration: limits.broker)
        let result = try await runProduct(["doctor", "--config", harness.configPath, "--listen", "0.2"])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(
            lines.contains {
                $0.hasPrefix("\(limits.level) broker limits (mosquitto version") && $0.contains(limits.says)
            },
            "\(lines)")
        // Given the file explicitly, the same.
        let given = harness.directory.appendingPathComponent("given.conf").path
        try (limits.broker.joined(separator: "\n") + "\n").write(toFile: given, atomically: true, encoding: .utf8)
        let explicit = try await runProduct([
            "doctor", "--config", harness.configPath, "--listen", "0.2", "--broker-config", given,
        ])
        let explicitLines = explicit.stdout.split(separator: "\n").map(String.init)
        let expectedLevel = limits.broker.isEmpty ? "warn" : limits.level  // an empty file: the stock 1000
        #expect(
            explicitLines.contains {
                $0.hasPrefix("\(expectedLevel) broker limits (mosquitto version") && $0.contains("(\(given))")
            },
            "\(explicitLines)")
        await harness.stop()
    }
    @Test(
        "regression: with many sockets open the broker's file was not found (/proc/net/tcp read once gives only its first page)"
    )
    func manySockets() async throws {
        // 400 listening sockets: /proc/net/tcp grows to about 60 kB, where the broker's line is
        // past the first page almost surely.
        var sockets: [Int32] = []
        defer { for fd in sockets { close(fd) } }
        for _ in 0..<400 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 && listen(fd, 1) == 0
                }
            }
            #expect(bound)
            sockets.append(fd)
        }
        let harness = try await EvaluatorHarness(regions: Venue.collection([]))
        let result = try await runProduct(["doctor", "--config", harness.configPath, "--listen", "0.2"])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(
            lines.contains { $0.hasPrefix("ok   broker limits (mosquitto version") && $0.contains("mosquitto.conf)") },
            "\(lines)")
        await harness.stop()
    }
}
