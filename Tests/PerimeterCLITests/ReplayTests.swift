import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// A GPX track read with a plain pattern match, independent of the product's XML reader.
struct TrackPoint {
    var lat: Double
    var lon: Double
    var t: Date
}

func readTrack(_ path: String) throws -> [TrackPoint] {
    let text = try String(contentsOfFile: path, encoding: .utf8)
    let pattern = try NSRegularExpression(
        pattern: #"<trkpt lat="([-0-9.]+)" lon="([-0-9.]+)">.*?<time>([^<]+)</time>"#,
        options: [.dotMatchesLineSeparators])
    return pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap { match in
        func group(_ index: Int) -> String { String(text[Range(match.range(at: index), in: text)!]) }
        guard let t = Timestamp.parse(group(3)) else { return nil }
        return TrackPoint(lat: Double(group(1))!, lon: Double(group(2))!, t: t)
    }
}

func circleRegions(_ circles: [(id: String, center: TrackPoint, radius: Double)]) throws -> String {
    let features = circles.map {
        #"{"type":"Feature","id":"\#($0.id)","properties":{"radius":\#($0.radius)},"geometry":{"type":"Point","coordinates":[\#($0.center.lon),\#($0.center.lat)]}}"#
    }
    return try temporaryFile(
        "regions.geojson", #"{"type":"FeatureCollection","features":[\#(features.joined(separator: ","))]}"#)
}

struct ReplayedEvent {
    var topic: String
    var event: String
    var region: String
    var t: Date
    var interpolated: Bool
}

func replay(_ arguments: [String]) async throws -> [ReplayedEvent] {
    let result = try await perimeter(["replay"] + arguments)
    #expect(result.status == .exited(0), "\(result.stderr)")
    return try result.stdout.split(separator: "\n").map { line in
        let value = try JSONValue(parsing: String(line))
        return ReplayedEvent(
            topic: value["topic"]!.stringValue!, event: value["event"]!.stringValue!,
            region: value["region"]!.stringValue!,
            t: Timestamp.parse(value["t"]!.stringValue!)!, interpolated: value["interpolated"]?.boolValue ?? false)
    }
}

@Suite("perimeter replay on real GPS tracks")
struct ReplayTests {
    @Test(
        "a car trip past two circles: enters and exits exactly where the fixes say",
        arguments: ["around-visnjan-with-car.gpx", "cerknicko-jezero.gpx"])
    func realTrack(file: String) async throws {
        let path = CLIFixtures.path("gpx/\(file)")
        let track = try readTrack(path)
        #expect(track.count > 100)
        let circles = [
            (id: "a", center: track[track.count / 3], radius: 120.0),
            (id: "b", center: track[2 * track.count / 3], radius: 60.0),
        ]
        let regions = try circleRegions(circles)
        let events = try await replay(["--regions", regions, path, "--subject", "car"])

        // The oracle: each fix inside or outside by plain haversine; a change between fixes is an event.
        var expected: [(String, String, Date)] = []
        for circle in circles {
            var inside: Bool?
            for point in track {
                let now =
                    Geodesy.distance(
                        GeoPoint(lon: point.lon, lat: point.lat),
                        GeoPoint(lon: circle.center.lon, lat: circle.center.lat)) <= circle.radius
                if now && inside != true { expected.append(("enter", circle.id, point.t)) }
                if !now && inside == true { expected.append(("exit", circle.id, point.t)) }
                if now || inside != nil { inside = now }
            }
        }
        let measured = events.filter { ($0.event == "enter" || $0.event == "exit") && !$0.interpolated }
            .map { ($0.event, $0.region, $0.t) }
        #expect(measured.count == expected.count)
        for (got, want) in zip(measured.sorted { $0.2 < $1.2 }, expected.sorted { $0.2 < $1.2 }) {
            #expect(
                got.0 == want.0 && got.1 == want.1 && abs(got.2.timeIntervalSince(want.2)) < 0.001, "\(got) vs \(want)")
        }
        #expect(expected.filter { $0.0 == "enter" }.count >= 2, "both circles are entered")
        // Interpolated crossings (a segment between two outside fixes clipping a circle) come in pairs.
        let crossings = events.filter { $0.interpolated && $0.event != "state" }
        #expect(crossings.count % 2 == 0)
        // Topics follow the contract.
        let topicsFollowContract = events.allSatisfy {
            $0.topic.hasPrefix("perimeter/v1/replay/\($0.event)/\($0.region)/car")
        }
        #expect(topicsFollowContract)
    }

    @Test(
        "replay --config takes the evaluator's venue settings (kIn, kOut, staleAfter, regions) and its event shape: source gps, the venue's topics and ids (issue 19)"
    )
    func evaluatorParity() async throws {
        let path = CLIFixtures.path("gpx/around-visnjan-with-car.gpx")
        let track = try readTrack(path)
        let regions = try circleRegions([(id: "a", center: track[track.count / 3], radius: 120.0)])
        let config = try temporaryFile(
            "evaluator.json",
            #"{"venues":{"museum":{"regions":"\#(regions)","kIn":1.5,"kOut":1.5,"staleAfter":600}}}"#)
        // GPX carries no accuracy: 30 m each, so that the hysteresis factors matter.
        let result = try await perimeter([
            "replay", "--config", config, path, "--subject", "car", "--accuracy", "30",
        ])
        #expect(result.status == .exited(0), "\(result.stderr)")
        let lines = try result.stdout.split(separator: "\n").map { try JSONValue(parsing: String($0)) }
        let enters = lines.filter { $0["event"] == "enter" }
        #expect(!enters.isEmpty)
        #expect(enters.allSatisfy { $0["source"] == "gps" }, "the evaluator's source for obs/{agent}/gps")
        #expect(enters.allSatisfy { $0["topic"]?.stringValue?.hasPrefix("perimeter/v1/museum/enter/a/car") == true })
        let first = try #require(enters.first)
        #expect(
            first["id"]?.stringValue
                == RegionEvent.makeID(venue: "museum", region: "a", subject: "car", kind: .enter, seq: 1))
        // The same settings as flags give the same events.
        let flags = try await perimeter([
            "replay", "--regions", regions, "--venue", "museum", "--k-in", "1.5", "--k-out", "1.5", "--stale-after",
            "600", path, "--subject", "car", "--accuracy", "30",
        ])
        #expect(flags.stdout == result.stdout)
        // And the settings matter: the default hysteresis gives other times.
        let defaults = try await perimeter([
            "replay", "--regions", regions, "--venue", "museum", path, "--subject", "car",
        ])
        #expect(defaults.stdout != result.stdout)
    }

    @Test("a sparse tracker crossing a small fence between two fixes: interpolated enter and exit")
    func sparseCrossing() async throws {
        let track = try readTrack(CLIFixtures.path("gpx/cerknicko-jezero.gpx"))
        let sparse = stride(from: 0, to: track.count, by: 25).map { track[$0] }
        // A 15 m circle on the middle of one sparse segment.
        let a = sparse[4]
        let b = sparse[5]
        let middle = TrackPoint(lat: (a.lat + b.lat) / 2, lon: (a.lon + b.lon) / 2, t: a.t)
        let regions = try circleRegions([(id: "gate", center: middle, radius: 15)])
        let csv =
            "t,lat,lon\n" + sparse.map { "\(Timestamp.format($0.t)),\($0.lat),\($0.lon)" }.joined(separator: "\n")
            + "\n"
        let events = try await replay([
            "--regions", regions, try temporaryFile("sparse.csv", csv), "--subject", "tracker",
        ])
        let transitions = events.filter { $0.event == "enter" || $0.event == "exit" }
        #expect(transitions.map(\.event) == ["enter", "exit"])
        let allInterpolated = transitions.allSatisfy { $0.interpolated }
        #expect(allInterpolated)
        let length = Geodesy.distance(GeoPoint(lon: a.lon, lat: a.lat), GeoPoint(lon: b.lon, lat: b.lat))
        let gap = b.t.timeIntervalSince(a.t)
        let enterTime = a.t.addingTimeInterval(gap * (0.5 - 15 / length))
        #expect(abs(transitions[0].t.timeIntervalSince(enterTime)) < max(1, gap * 0.01))
        #expect(transitions[0].t < transitions[1].t)
    }

    @Test(
        "raw NMEA (a real receiver's sentences; one with a bad checksum): fixes from RMC+GGA cycles, the bad line named"
    )
    func nmea() async throws {
        // GlobalSat BU-353-S4, Hamilton NZ (gpsd 3.22's test log bu353s4.log, BSD-2-Clause); the
        // third RMC's checksum changed from 71 to 72.
        let nmea = """
            $GPGGA,030719.000,3747.0873,S,17518.8938,E,1,08,1.1,59.9,M,23.7,M,,0000*7D
            $GPGSA,A,3,17,28,06,01,30,20,26,13,,,,,1.8,1.1,1.5*33
            $GPRMC,030719.000,A,3747.0873,S,17518.8938,E,0.69,181.39,311214,,,A*7D
            $GPGGA,030720.000,3747.0875,S,17518.8938,E,1,08,1.1,59.8,M,23.7,M,,0000*70
            $GPRMC,030720.000,A,3747.0875,S,17518.8938,E,1.15,181.39,311214,,,A*7B
            $GPGGA,030721.000,3747.0876,S,17518.8934,E,1,08,1.1,60.1,M,23.7,M,,0000*7D
            $GPRMC,030721.000,A,3747.0876,S,17518.8934,E,0.89,181.39,311214,,,A*72
            """
        let regions = try circleRegions([
            (id: "yard", center: TrackPoint(lat: -37.78479, lon: 175.31489, t: Date()), radius: 50)
        ])
        let result = try await perimeter(["replay", "--regions", regions, try temporaryFile("walk.nmea", nmea)])
        #expect(result.status == .exited(0), "\(result.stderr)")
        #expect(result.stderr.contains("walk.nmea:7: skipped: checksum mismatch: sentence says 72, content gives 71"))
        #expect(result.stdout.contains(#""event":"enter""#))
        #expect(result.stdout.contains(#""t":"2014-12-31T03:07:19.000Z""#))
    }

    @Test("a track that makes no event says so on stderr, with what it read; stdout stays empty")
    func noEvents() async throws {
        let regions = try circleRegions([(id: "c", center: TrackPoint(lat: 45, lon: 13, t: Date()), radius: 100)])
        let csv = """
            t,lat,lon,acc
            2026-01-01T10:00:00Z,46,13,5
            2026-01-01T10:00:10Z,46.001,13,5
            """
        let result = try await perimeter(["replay", "--regions", regions, try temporaryFile("far.csv", csv)])
        #expect(result.status == .exited(0))
        #expect(result.stdout.isEmpty, "\(result.stdout)")
        #expect(
            result.stderr.contains("far.csv: no events: 2 fix(es) processed against 1 region(s)"), "\(result.stderr)")
    }

    @Test("bad records are reported with their place and skipped")
    func badRecords() async throws {
        let regions = try circleRegions([(id: "c", center: TrackPoint(lat: 45, lon: 13, t: Date()), radius: 100)])
        let csv = """
            t,lat,lon,acc
            2026-01-01T10:00:00Z,45,13,5
            yesterday,45,13,5
            2026-01-01T10:00:20Z,95,13,5
            2026-01-01T10:00:10Z,45,13,-1
            2026-01-01T10:00:30Z,45.01,13,5
            """
        let result = try await perimeter(["replay", "--regions", regions, try temporaryFile("t.csv", csv)])
        #expect(result.status == .exited(0))
        #expect(result.stderr.contains("t.csv:3: skipped: t 'yesterday' is not an ISO 8601 time or epoch seconds"))
        #expect(result.stderr.contains("t.csv:4: rejected: latitude 95.0 out of range [-90, 90]"))
        #expect(result.stderr.contains("t.csv:5: rejected: accuracy -1.0 is negative"))
        #expect(result.stdout.contains(#""event":"enter""#))
        #expect(result.stdout.contains(#""event":"exit""#))
    }
}

@Suite("perimeter up and bench")
struct UpTests {
    @Test("up: a private broker, the venue's regions retained, the live tree printed; stops after --duration")
    func upWithDuration() async throws {
        let result = try await perimeter(
            [
                "up", "--duration", "2", "--raw", "--venue", CLIFixtures.venue("museum"), "--set",
                "venue.regions=\(CLIFixtures.museum)",
            ], timeout: .seconds(30))
        #expect(result.status == .exited(0), "\(result.stderr)")
        #expect(result.stderr.contains("mosquitto_sub -h 127.0.0.1 -p "))
        for region in ["museum", "gallery-1", "gallery-2", "garden", "cafe", "entrance", "gallery-1-beacons"] {
            #expect(result.stdout.contains("perimeter/v1/museum/regions/\(region) {\"type\":\"Feature\""), "\(region)")
        }
    }

    @Test("up: SIGINT shuts everything down gracefully, broker last, exit 0")
    func upInterrupted() async throws {
        let child = try ChildProcess(
            Products.executable("perimeter"),
            [
                "up", "--raw", "--venue", CLIFixtures.venue("museum"), "--set", "venue.regions=\(CLIFixtures.museum)",
                "--set", "log.level=info",
            ])
        try await child.waitForLine(containing: "regions/cafe", timeout: .seconds(60))
        child.subprocess.signal(SIGINT)
        let (termination, output) = try await withTimeout(.seconds(20), "perimeter up to stop") { await child.finish() }
        #expect(termination == .exited(0), "\(output)")
        let stops = output.split(separator: "\n").filter { $0.contains("msg=stopped") }
        // The dashboard, the notifier, the live view, the simulator's agent, the evaluator, then the broker.
        #expect(stops.count == 6, "\(stops)")
        for service in ["dashboard", "notifier", "live-view", "agent", "evaluator"] {
            #expect(stops.contains { $0.contains("service=\(service)") }, "\(service)")
        }
        #expect(stops.last?.contains("service=broker") == true, "the broker stops last")
    }

    @Test(
        "up --duration 60 --broker-port P: a subscriber on P sees the simulated visitors' enter, exit, ranging and notifications; the feed is readable; nothing is left running"
    )
    func upDemo() async throws {
        let port = try MosquittoBroker.freeLoopbackPort()
        // The subscriber is up's own recipe, mosquitto_sub, started before up and retrying until
        // the broker answers: most notifications (the arrival welcome) come in the first seconds,
        // and a subscriber on a test task could miss them when the whole suite keeps the test's
        // threads busy. A process of its own gets its turn from the kernel. The loop ends by
        // itself after 150 s should the test not stop it.
        guard Subprocess.find("mosquitto_sub") != nil else {
            throw ChildFailure(message: "mosquitto_sub is not installed; run scripts/setup.sh (mosquitto-clients)")
        }
        let watcher = try ChildProcess(
            "/bin/sh",
            [
                "-c",
                """
                end=$(($(date +%s) + 150))
                while [ "$(date +%s)" -lt "$end" ]; do
                    mosquitto_sub -h 127.0.0.1 -p \(port) -t 'perimeter/v1/museum/#' -v -q 1 -W 150 2>/dev/null
                    # Sleep, not a clock: a pause before subscribing again to a broker that is another process.
                    sleep 0.05
                done
                """,
            ])
        func stopWatching() {
            for pid in childProcesses(of: watcher.subprocess.pid) { kill(pid, SIGKILL) }
            watcher.kill()
        }
        defer { stopWatching() }
        let child = try ChildProcess(
            Products.executable("perimeter"),
            // 30 s is enough on a quiet machine; under the whole suite on two cores start-up alone
            // can take a good part of it.
            ["up", "--venue", CLIFixtures.venue("museum"), "--duration", "60", "--broker-port", "\(port)"])
        // Read its output as it comes: a full pipe would block up's writes (and so up itself).
        let drain = Task {
            while !Task.isCancelled {
                _ = child.output
                // Sleep, not a clock: a pipe read from another process; no assertion rests on its timing.
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
        defer { drain.cancel() }
        try await waitUntil("the broker on \(port)", timeout: .seconds(60)) {
            MosquittoBroker.accepts(port: port) || !child.subprocess.isRunning
        }
        #expect(child.subprocess.isRunning, "up ended early: \(child.output)")
        // Whatever up started as a child (the broker), to check it is gone afterwards.
        var children: [pid_t] = []
        try await waitUntil("up's broker among its children", timeout: .seconds(30)) {
            children = childProcesses(of: child.subprocess.pid)
            return !children.isEmpty
        }
        // The kind of each message mosquitto_sub printed ("topic payload"): the topic level
        // after perimeter/v1/museum.
        func kinds() -> Set<String> {
            Set(
                watcher.output.split(separator: "\n").compactMap {
                    $0.split(separator: " ").first?.split(separator: "/").dropFirst(3).first.map(String.init)
                })
        }
        let wanted: Set<String> = ["enter", "exit", "ranging", "obs", "subjects", "diagnostics", "notifications"]
        try await waitUntil(
            "enter, exit, ranging and notifications from the demo", timeout: .seconds(120), every: .milliseconds(250),
            context: { "missing \(wanted.subtracting(kinds()).sorted()); up said: \(child.output.suffix(4000))" }
        ) { kinds().isSuperset(of: wanted) }
        stopWatching()
        let (termination, output) = try await withTimeout(.seconds(120), "perimeter up to stop") {
            await child.finish()
        }
        #expect(termination == .exited(0), "\(output)")
        #expect(output.contains("mosquitto_sub -h 127.0.0.1 -p \(port) -t 'perimeter/v1/museum/#' -v"))
        #expect(output.contains("→ entered"))
        #expect(output.contains("≈ ranging"))
        #expect(output.contains("⊘ privacy   denied: authorizationDenied"))
        #expect(output.contains("✉ app"), "a notification to a visitor's phone in the feed")
        #expect(output.contains("perimeter up: dashboard at http://127.0.0.1:"))
        #expect(!MosquittoBroker.accepts(port: port))
        for pid in children { #expect(kill(pid, 0) != 0, "process \(pid) started by up is still running") }
    }

    @Test("agent: a source without what it needs is named, exit 1, nothing started")
    func agentBadConfig() async throws {
        let replay = try await perimeter(["agent", "--source", "replay"])
        #expect(replay.status == .exited(1))
        #expect(replay.stderr.contains("replay.file: the replay source needs a track file"), "\(replay.stderr)")
        let source = try await perimeter(["agent", "--source", "radio"])
        #expect(source.status == .exited(1))
        #expect(source.stderr.contains("agent.source"), "\(source.stderr)")
        let venue = try await perimeter(["agent", "--venue", "/nonexistent/venue.json"])
        #expect(venue.status == .exited(1))
        #expect(venue.stderr.contains("venue file /nonexistent/venue.json: cannot read"), "\(venue.stderr)")
    }

    @Test("up: a bad setting names the key, exits 1 before starting anything")
    func upBadConfig() async throws {
        let result = try await perimeter(["up", "--set", "broker.port=abc"])
        #expect(result.status == .exited(1))
        #expect(
            result.stderr.contains(#"broker.port: expected an integer 0–65535, got "abc" (from --set broker.port)"#))
    }

    @Test("bench mqtt runs both sides and prints the ratio")
    func benchMQTT() async throws {
        let result = try await perimeter(
            ["bench", "mqtt", "--count", "3000", "--rounds", "1", "--qos", "1"], timeout: .seconds(120))
        #expect(result.status == .exited(0), "\(result.stderr)")
        #expect(result.stdout.contains("ratio (perimeter / mosquitto tools): "))
    }

    @Test("bench beacons runs the whole sighting path and reports its rate (Perimeter side only)")
    func benchBeacons() async throws {
        let result = try await perimeter([
            "bench", "beacons", "--beacons", "200", "--regions", "20", "--subjects", "300", "--seconds", "3",
            "--decode-adverts", "2000", "--no-baseline",
        ])
        #expect(result.status == .exited(0), "\(result.stderr)")
        #expect(result.stdout.contains("2700 sightings in "))
        #expect(result.stdout.contains("ranging reports"))
        #expect(result.stdout.contains("decoder alone: Perimeter "))
    }
}
