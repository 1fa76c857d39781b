import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Synchronization
import Testing

/// Evaluators sharded by venue, the lease that refuses two actives, and standby takeover:
/// real evaluator processes on one real broker.
@Suite("Sharding and standby takeover", .serialized)
struct ShardingTests {
    static let hall =
        #"{"type":"FeatureCollection","features":[{"type":"Feature","id":"hall","properties":{"radius":50},"geometry":{"type":"Point","coordinates":[2.3362,48.8604]}}]}"#
    static let inside = (lat: 48.8604, lon: 2.3362)
    static let outside = (lat: 48.8700, lon: 2.3362)

    /// A broker, an observer of everything, a publisher, and evaluator processes on demand.
    final class Cluster: Sendable {
        let broker: MosquittoBroker
        let directory: URL
        let observer: MQTTClient
        let publisher: MQTTClient
        private let log = Log()
        private let collector: Task<Void, Never>
        private let children = Mutex<[String: ChildProcess]>([:])

        init() async throws {
            broker = try await TestBroker.start()
            directory = TestScratch.root.appendingPathComponent(
                "perimeter-shard-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try ShardingTests.hall.write(
                to: directory.appendingPathComponent("hall.geojson"), atomically: true, encoding: .utf8)
            observer = try await broker.connectedClient("observer")
            try await observer.subscribe("perimeter/v1/#", qos: .atLeastOnce)
            publisher = try await broker.connectedClient("publisher")
            let messages = observer.messages
            let sink = log
            collector = Task { for await message in messages { sink.append(message) } }
        }

        /// Writes a configuration for `instance` serving `venues` and starts it; returns once it
        /// runs (or its output, when it exits first).
        @discardableResult
        func start(_ instance: String, venues: [String], role: String = "active") async throws -> ChildProcess {
            let regions = directory.appendingPathComponent("hall.geojson").path
            var venueObject = JSONObject()
            for venue in venues { venueObject[venue] = ["regions": .string(regions), "privacy": ["open": true]] }
            let config: JSONValue = [
                "broker": [
                    "host": "127.0.0.1", "port": .number(Double(broker.port)),
                    "clientId": .string("evaluator-\(instance)"),
                ],
                "evaluator": [
                    "instance": .string(instance), "role": .string(role), "leaseWait": 0.5, "tickInterval": 0.2,
                    "statsInterval": 1,
                    "database": .string(directory.appendingPathComponent("\(instance).sqlite").path),
                ],
                "venues": .object(venueObject),
            ]
            let path = directory.appendingPathComponent("\(instance).json").path
            try config.serialized().write(toFile: path, atomically: true, encoding: .utf8)
            let child = try ChildProcess(Products.executable("perimeter"), ["evaluator", "--config", path])
            children.withLock { $0[instance] = child }
            try await child.waitForLine(containing: "evaluator running", timeout: .seconds(30))
            return child
        }

        func child(_ instance: String) -> ChildProcess? { children.withLock { $0[instance] } }

        func fix(venue: String, subject: String, t: Int, inside: Bool) async throws {
            let point = inside ? ShardingTests.inside : ShardingTests.outside
            try await publisher.publish(
                "perimeter/v1/\(venue)/obs/\(subject)/gps",
                #"{"t":\#(t),"lat":\#(point.lat),"lon":\#(point.lon),"acc":3}"#,
                qos: .atLeastOnce)
        }

        var messages: [(MQTTMessage, ContinuousClock.Instant)] { log.all }

        /// Transition ids seen for a venue.
        func eventIDs(_ venue: String) -> Set<String> {
            Set(
                messages.compactMap { message, _ -> String? in
                    let levels = message.topic.split(separator: "/")
                    guard levels.count == 6, levels[2] == venue, ["enter", "exit", "dwell"].contains(levels[3])
                    else { return nil }
                    return (try? JSONParser.parse(message.payload))?["id"]?.stringValue
                })
        }

        func waitFor(_ what: String, timeout: Duration = .seconds(30), _ condition: () -> Bool) async throws {
            try await waitUntil(
                what, timeout: timeout,
                context: {
                    let outputs = children.withLock { $0.map { "\($0.key): \($0.value.output.suffix(1500))" } }
                    return "evaluators said: \(outputs)"
                }, condition)
        }

        func stop() async {
            children.withLock { list in
                for child in list.values where child.subprocess.isRunning { child.kill(SIGTERM) }
            }
            collector.cancel()
            await observer.disconnect()
            await publisher.disconnect()
            await broker.stop()
            try? FileManager.default.removeItem(at: directory)
        }
    }

    final class Log: Sendable {
        private let storage = Mutex<[(MQTTMessage, ContinuousClock.Instant)]>([])
        func append(_ message: MQTTMessage) { storage.withLock { $0.append((message, .now)) } }
        var all: [(MQTTMessage, ContinuousClock.Instant)] { storage.withLock { $0 } }
    }

    static func expectedIDs(venue: String, subjects: [String], rounds: Int) -> Set<String> {
        var ids: Set<String> = []
        for subject in subjects {
            for seq in 1...(2 * rounds) {
                ids.insert(
                    RegionEvent.makeID(
                        venue: venue, region: "hall", subject: subject, kind: seq % 2 == 1 ? .enter : .exit, seq: seq))
            }
        }
        return ids
    }

    @Test("two venues on two evaluators: each publishes only its own venue's events")
    func twoVenues() async throws {
        let cluster = try await Cluster()
        do {
            try await cluster.start("north-1", venues: ["north"])
            try await cluster.start("south-1", venues: ["south"])
            let t = Int(Date().timeIntervalSince1970)
            try await cluster.fix(venue: "north", subject: "ann", t: t, inside: true)
            try await cluster.fix(venue: "south", subject: "bea", t: t, inside: true)
            try await cluster.waitFor("both enters") {
                cluster.eventIDs("north").count == 1 && cluster.eventIDs("south").count == 1
            }
            // Each evaluator saw and published only its venue: with south's evaluator stopped,
            // south goes quiet while north goes on.
            // South's evaluator is gone before bea leaves, and ann leaves after her: north's exit
            // for ann comes after the broker has had bea's fix for anyone serving south.
            if let south = cluster.child("south-1") {
                south.kill(SIGTERM)
                _ = try await withTimeout(.seconds(60), "south-1 to stop") { await south.finish() }
            }
            try await cluster.fix(venue: "south", subject: "bea", t: t + 1, inside: false)
            try await cluster.fix(venue: "north", subject: "ann", t: t + 1, inside: false)
            try await cluster.waitFor("north's exit") { cluster.eventIDs("north").count == 2 }
            #expect(cluster.eventIDs("south").count == 1, "nobody serves south now")
            let leases = cluster.messages.filter { $0.0.topic.hasPrefix("perimeter/v1/_sys/leases/") }.map {
                ($0.0.topic, (try? JSONParser.parse($0.0.payload))?["instance"]?.stringValue)
            }
            #expect(leases.contains { $0.0.hasSuffix("/north") && $0.1 == "north-1" })
            #expect(leases.contains { $0.0.hasSuffix("/south") && $0.1 == "south-1" })
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    @Test("a second active evaluator for a served venue is refused at start, naming the venue and the holder")
    func twoActives() async throws {
        let cluster = try await Cluster()
        do {
            try await cluster.start("a", venues: ["test"])
            do {
                try await cluster.start("b", venues: ["other", "test"])
                Issue.record("the second active started")
            } catch {
                let output = cluster.child("b")?.output ?? ""
                #expect(output.contains("venue 'test' is already served by the active evaluator 'a'"), "\(output)")
                let end = await cluster.child("b")!.finish()
                #expect(end.termination == .exited(1))
            }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    @Test(
        "kill -9 of the active mid-replay: the standby takes over within 10 s, nothing lost; the old active returns as standby"
    )
    func takeover() async throws {
        let cluster = try await Cluster()
        do {
            try await cluster.start("a", venues: ["test"])
            try await cluster.start("b", venues: ["test"], role: "standby")
            let subjects = (0..<20).map { "visitor-\($0)" }
            let rounds = 12
            // Dated in the recent past, two seconds a round; published without pause, so that
            // the kill lands while a still has rounds to process.
            let start = Int(Date().timeIntervalSince1970) - 2 * rounds
            var killedAt: ContinuousClock.Instant?
            for round in 0..<rounds {
                for inside in [true, false] {
                    for subject in subjects {
                        try await cluster.fix(
                            venue: "test", subject: subject, t: start + round * 2 + (inside ? 0 : 1), inside: inside)
                    }
                }
                if round == 4 {
                    cluster.child("a")?.kill(SIGKILL)
                    killedAt = .now
                }
            }
            let expected = Self.expectedIDs(venue: "test", subjects: subjects, rounds: rounds)
            try await cluster.waitFor("every transition, deduplicated by id", timeout: .seconds(40)) {
                cluster.eventIDs("test").isSuperset(of: expected)
            }
            #expect(cluster.eventIDs("test") == expected, "the same transitions as a fault-free run")
            // The takeover: b's lease after a's last will.
            let will = cluster.messages.first {
                $0.0.topic == "perimeter/v1/_sys/evaluator/a/status"
                    && (try? JSONParser.parse($0.0.payload))?["online"]?.boolValue == false
            }
            let taken = cluster.messages.first {
                $0.0.topic == "perimeter/v1/_sys/leases/test"
                    && (try? JSONParser.parse($0.0.payload))?["instance"]?.stringValue == "b"
            }
            let willTime = try #require(will?.1)
            let takenTime = try #require(taken?.1)
            #expect(takenTime - willTime < .seconds(10), "taken over \(takenTime - willTime) after the last will")
            #expect(willTime - killedAt! < .seconds(5))

            // The old active comes back and joins as the standby.
            try await cluster.start("a", venues: ["test"])
            try await cluster.waitFor("a's status as standby") {
                cluster.messages.contains {
                    $0.0.topic == "perimeter/v1/_sys/evaluator/a/status"
                        && (try? JSONParser.parse($0.0.payload))?["role"]?.stringValue == "standby"
                }
            }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }
}
