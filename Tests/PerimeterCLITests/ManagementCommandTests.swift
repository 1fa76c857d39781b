import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// `perimeter regions list|get|put|delete` against a real Mosquitto on a free loopback port.
/// The tests play the evaluator where they need its retained state topics.
@Suite("regions management over MQTT", .serialized)
struct ManagementCommandTests {
    static let venue = "test"

    /// A real broker, an observer of the venue and a configuration file naming them.
    struct Deployment {
        let broker: MosquittoBroker
        let observer: MQTTClient
        let inbox: Inbox
        let config: String
        var root: String { "perimeter/v1/\(ManagementCommandTests.venue)" }

        static func start() async throws -> Deployment {
            let broker = try await TestBroker.start()
            let observer = try await broker.connectedClient("observer")
            let inbox = Inbox(observer)
            try await observer.subscribe("perimeter/v1/#", qos: .atLeastOnce)
            // The evaluator's client id on purpose: the commands must never use it.
            let config = try temporaryFile(
                "evaluator.json",
                #"{"broker":{"host":"127.0.0.1","port":\#(broker.port),"clientId":"evaluator-1"},"#
                    + #""evaluator":{"database":"/nonexistent/evaluator.sqlite"},"#
                    + #""venues":{"\#(ManagementCommandTests.venue)":{"timeZone":"Europe/Paris"}}}"#)
            return Deployment(broker: broker, observer: observer, inbox: inbox, config: config)
        }

        func run(
            _ arguments: [String], stdin: String? = nil
        ) async throws -> (
            status: Subprocess.Termination, stdout: String, stderr: String
        ) {
            try await perimeter(arguments + ["--config", config], stdin: stdin)
        }

        func publish(_ topic: String, _ payload: String) async throws {
            try await observer.publish("\(root)/\(topic)", payload, qos: .atLeastOnce, retain: true)
        }

        /// The retained picture under `regions/` now: a marker published after subscribing
        /// comes back after every retained message.
        func retainedRegions() async throws -> [String: String] {
            let client = try await broker.connectedClient("picture")
            let inbox = Inbox(client)
            try await client.subscribe("\(root)/regions/+", qos: .atLeastOnce)
            let marker = "\(root)/zz-marker/\(UUID().uuidString)"
            try await client.subscribe(marker, qos: .atLeastOnce)
            try await client.publish(marker, "end", qos: .atLeastOnce)
            let messages = try await inbox.waitFor("the marker") { $0.contains { $0.topic == marker } }
            inbox.stop()
            await client.disconnect()
            var picture: [String: String] = [:]
            for message in messages where message.retain && !message.payload.isEmpty {
                picture[message.topic] = message.payloadString
            }
            return picture
        }

        func stop() async {
            inbox.stop()
            await observer.disconnect()
            await broker.stop()
        }
    }

    static let kiosk = #"""
        {"type":"Feature","id":"kiosk","geometry":{"type":"Point","coordinates":[2.3364,48.8606]},
         "properties":{"name":"Kiosk","radius":15}}
        """#

    static let hall = #"""
        {"type":"FeatureCollection","features":[{"type":"Feature","id":"hall","properties":{"name":"Hall"},
         "geometry":{"type":"Polygon","coordinates":[[[2.3350,48.8600],[2.3360,48.8600],[2.3360,48.8608],
         [2.3350,48.8608],[2.3350,48.8600]]]}}]}
        """#

    @Test("put, get, list and delete round trip through the retained regions/{id} topics")
    func roundTrip() async throws {
        let deployment = try await Deployment.start()
        do {
            let kioskFile = try temporaryFile("kiosk.geojson", Self.kiosk)
            let put = try await deployment.run(["regions", "put", kioskFile])
            #expect(put.status == .exited(0), "\(put.stderr)")
            #expect(put.stdout.contains("published perimeter/v1/test/regions/kiosk"))
            let fromStdin = try await deployment.run(["regions", "put", "-"], stdin: Self.hall)
            #expect(fromStdin.status == .exited(0), "\(fromStdin.stderr)")

            let retained = try await deployment.retainedRegions()
            #expect(Set(retained.keys) == ["perimeter/v1/test/regions/kiosk", "perimeter/v1/test/regions/hall"])

            let get = try await deployment.run(["regions", "get", "kiosk"])
            #expect(get.status == .exited(0), "\(get.stderr)")
            let feature = try JSONParser.parse(Array(get.stdout.utf8))
            #expect(feature["id"]?.stringValue == "kiosk")
            #expect(feature["geometry"]?["type"]?.stringValue == "Point")
            #expect(feature["properties"]?["radius"]?.doubleValue == 15)

            let list = try await deployment.run(["regions", "list"])
            #expect(list.status == .exited(0), "\(list.stderr)")
            #expect(list.stdout == "hall\tpolygon\tHall\nkiosk\tcircle\tKiosk\n")

            let delete = try await deployment.run(["regions", "delete", "kiosk"])
            #expect(delete.status == .exited(0), "\(delete.stderr)")
            #expect(delete.stdout.contains("deleted perimeter/v1/test/regions/kiosk"))
            let after = try await deployment.run(["regions", "list"])
            #expect(after.stdout == "hall\tpolygon\tHall\n")
            let gone = try await deployment.run(["regions", "get", "kiosk"])
            #expect(gone.status == .exited(1))
            #expect(gone.stderr.contains("no region 'kiosk' is retained on perimeter/v1/test/regions/kiosk"))
            let again = try await deployment.run(["regions", "delete", "kiosk"])
            #expect(again.status == .exited(1), "deleting what is not there is said, not done")

            #expect(
                !deployment.inbox.messages.contains { $0.topic.contains("/_sys/operator/") && $0.retain },
                "the end-of-retained markers are never retained")
        } catch {
            await deployment.stop()
            throw error
        }
        await deployment.stop()
    }

    @Test("put refuses an invalid file, naming the feature and the problem, and publishes nothing")
    func invalidPutPublishesNothing() async throws {
        let deployment = try await Deployment.start()
        do {
            let bad = try temporaryFile(
                "bad.geojson",
                """
                {"type":"FeatureCollection","features":[
                  {"type":"Feature","id":"good","properties":{"radius":10},"geometry":{"type":"Point","coordinates":[2.3,48.8]}},
                  {"type":"Feature","id":"bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[2,2],[2,0],[0,2],[0,0]]]}},
                  {"type":"Feature","properties":{"radius":10},"geometry":{"type":"Point","coordinates":[2.3,48.8]}}
                ]}
                """)
            let result = try await deployment.run(["regions", "put", bad])
            #expect(result.status == .exited(1))
            #expect(
                result.stderr.contains("region 'bowtie' (feature 1): ring 0 self-intersects at vertex 1"),
                "\(result.stderr)")
            #expect(result.stderr.contains("feature 2: no id"))
            #expect(result.stderr.contains("3 problem(s)") == false)
            #expect(result.stderr.contains("2 problem(s); nothing published"))
            #expect(result.stdout.isEmpty)
            let notJSON = try await deployment.run(["regions", "put", "-"], stdin: "{\"type\":")
            #expect(notJSON.status == .exited(1))
            #expect(notJSON.stderr.contains("-: not JSON"))
            let missing = try await deployment.run(["regions", "put", "/nonexistent/regions.geojson"])
            #expect(missing.status == .exited(1))
            #expect(missing.stderr.contains("/nonexistent/regions.geojson does not exist"))
            #expect(try await deployment.retainedRegions().isEmpty, "not even the valid region was published")

            // One published by hand: listed with the reason the evaluator refuses it.
            try await deployment.publish(
                "regions/broken",
                #"{"type":"Feature","geometry":{"type":"Point","coordinates":[500,1]},"properties":{"radius":3}}"#)
            let list = try await deployment.run(["regions", "list"])
            #expect(list.status == .exited(0))
            #expect(
                list.stdout.hasPrefix("broken\tinvalid\tgeometry.coordinates: longitude 500.0 out of range"),
                "\(list.stdout)")
        } catch {
            await deployment.stop()
            throw error
        }
        await deployment.stop()
    }

    @Test("put --dry-run names the subjects inside and outside and the rules their transitions would fire")
    func dryRun() async throws {
        let deployment = try await Deployment.start()
        do {
            let kioskFile = try temporaryFile("kiosk.geojson", Self.kiosk)
            #expect(try await deployment.run(["regions", "put", kioskFile]).status == .exited(0))
            // What the evaluator and an operator would have published.
            try await deployment.publish("state/kiosk/ann", #"{"state":"inside","t":"2026-12-02T05:00:00Z"}"#)
            try await deployment.publish("state/kiosk/bob", #"{"state":"outside","t":"2026-12-02T05:00:00Z"}"#)
            try await deployment.publish(
                "rules/farewell", #"{"id":"farewell","on":"exit","regions":"kiosk","channels":["app"],"body":"bye"}"#)
            try await deployment.publish(
                "rules/welcome", #"{"id":"welcome","on":"enter","regions":"k*","channels":["app"],"body":"hi"}"#)
            try await deployment.publish(
                "rules/elsewhere", #"{"id":"elsewhere","on":"exit","regions":"hall","channels":["app"],"body":"x"}"#)

            let bigger = Self.kiosk.replacingOccurrences(of: #""radius":15"#, with: #""radius":40"#)
            let dry = try await deployment.run(["regions", "put", "--dry-run", "-"], stdin: bigger)
            #expect(dry.status == .exited(0), "\(dry.stderr)")
            let lines = dry.stdout.split(separator: "\n").map(String.init)
            #expect(lines.first == "dry run: nothing published")
            #expect(lines.contains("region 'kiosk': changed (shape)"), "\(dry.stdout)")
            #expect(
                lines.contains {
                    $0.contains("ann: inside now; may exit")
                        && $0.hasSuffix("rules that would fire on its exit: farewell")
                }, "\(dry.stdout)")
            #expect(
                lines.contains {
                    $0.contains("bob: outside now; may enter")
                        && $0.hasSuffix("rules that would fire on its enter: welcome")
                }, "\(dry.stdout)")
            #expect(lines.contains { $0.contains("positions are not published over MQTT") })
            #expect(!dry.stdout.contains("elsewhere"))

            let unchanged = try await deployment.run(["regions", "put", "--dry-run", kioskFile])
            #expect(unchanged.stdout.contains("region 'kiosk': unchanged"), "\(unchanged.stdout)")

            let deleting = try await deployment.run(["regions", "delete", "--dry-run", "kiosk"])
            #expect(deleting.status == .exited(0), "\(deleting.stderr)")
            #expect(deleting.stdout.contains("ann: inside → unmonitored now (no exit event; no rule fires)"))
            #expect(deleting.stdout.contains("bob: outside → unmonitored now"))

            // A region of the evaluator's regions file, never published: compared with the file.
            let regionsFile = try temporaryFile("regions.geojson", Self.hall)
            let fromFile = try await deployment.run(
                ["regions", "put", "--dry-run", "-", "--set", "venues.test.regions=\(regionsFile)"], stdin: Self.hall)
            #expect(fromFile.stdout.contains("region 'hall': not retained; compared with \(regionsFile)"))
            #expect(fromFile.stdout.contains("region 'hall': unchanged"), "\(fromFile.stdout)")

            let kept = try await deployment.run(["regions", "get", "kiosk"])
            #expect(kept.stdout.contains(#""radius":15"#), "the dry runs published nothing: \(kept.stdout)")
        } catch {
            await deployment.stop()
            throw error
        }
        await deployment.stop()
    }

    @Test(
        "management usage errors exit 64 and name the problem",
        arguments: [
            (["regions", "get"], "missing argument <id>"),
            (["regions", "put"], "missing argument <file>"),
            (["regions", "list", "--venue", "zoo"], "venue 'zoo' is not in this configuration (test)"),
            (["rules", "delete", "a/b"], "rule id 'a/b' may hold only letters"),
        ])
    func usage(arguments: [String], message: String) async throws {
        let config = try temporaryFile(
            "c.json", #"{"broker":{"host":"127.0.0.1","port":1},"venues":{"test":{"timeZone":"UTC"}}}"#)
        let result = try await perimeter(arguments + ["--config", config])
        #expect(result.status == .exited(64), "\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }
}
