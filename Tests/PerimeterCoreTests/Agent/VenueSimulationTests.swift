import Foundation
import PerimeterCore
import Testing

@Suite("Venue simulation")
struct VenueSimulationTests {
    /// A small venue: two waypoints 100 m apart, one beacon at each end, one gateway.
    static func venue(topology: String = "scanner", visitors: Int = 4, dropout: Double = 0.1) throws -> VenueFile {
        let a = GeoPoint(lon: 2.3350, lat: 48.8600)
        let b = Geodesy.destination(a, bearing: 90, distance: 100)
        let json = """
            {"name": "test", "timeZone": "Europe/Paris", "currency": "EUR", "pathLossExponent": 2,
             "beacons": [
               {"id": "a", "uuid": "F7826DA6-4FA2-4E98-8024-BC5B71E0893E", "major": 1, "minor": 1, "lat": \(a.lat), "lon": \(a.lon)},
               {"id": "b", "uuid": "F7826DA6-4FA2-4E98-8024-BC5B71E0893E", "major": 1, "minor": 2, "lat": \(b.lat), "lon": \(b.lon)}],
             "gateways": [{"id": "gw-a", "lat": \(a.lat), "lon": \(a.lon), "zone": "a"}],
             "simulator": {"visitors": \(visitors), "topology": "\(topology)", "seed": 3, "pause": [0, 2],
               "dropout": \(dropout), "rssiNoise": 2, "sensitivity": -100,
               "waypoints": {"a": [\(a.lon), \(a.lat)], "b": [\(b.lon), \(b.lat)]}, "paths": [["a", "b"]],
               "locales": ["en_US", "de_DE", "fr_FR", "ja_JP"], "defaultPlaces": ["a"]}}
            """
        return try VenueFile.parse(try JSONValue(parsing: json))
    }

    static let start = Date(timeIntervalSince1970: 1_796_083_200)

    @Test("the same seed gives the same messages, in any order of asking; another seed differs")
    func deterministic() throws {
        let venue = try Self.venue()
        let one = VenueSimulation(venue: venue, start: Self.start)
        let two = VenueSimulation(venue: venue, start: Self.start)
        let forward = (0..<60).map { one.messages(tick: $0) }
        let backward = (0..<60).reversed().map { two.messages(tick: $0) }.reversed()
        #expect(forward == Array(backward))
        #expect(one.initialMessages() == two.initialMessages())
        let other = VenueSimulation(venue: venue, start: Self.start, seed: 4)
        #expect((0..<60).map { other.messages(tick: $0) } != forward)
    }

    @Test("beacon regions get their venue's matching beacons as positions for maps; other regions stay as they are")
    func placingBeacons() throws {
        let venue = try Self.venue()
        let regions = RegionParser.parse(
            text:
                #"{"type":"FeatureCollection","features":[{"type":"Feature","id":"one","properties":{"beacon":{"uuid":"F7826DA6-4FA2-4E98-8024-BC5B71E0893E","major":1,"minor":2}},"geometry":null},{"type":"Feature","id":"all","properties":{"beacon":{"uuid":"F7826DA6-4FA2-4E98-8024-BC5B71E0893E"}},"geometry":null},{"type":"Feature","id":"none","properties":{"beacon":{"uuid":"2F234454-CF6D-4A0F-ADF2-F4911BA9FFA6"}},"geometry":null},{"type":"Feature","id":"c","properties":{"radius":5},"geometry":{"type":"Point","coordinates":[2.3,48.8]}}]}"#
        ).regions
        #expect(regions.count == 4)
        let placed = Dictionary(uniqueKeysWithValues: venue.placingBeacons(in: regions).map { ($0.id, $0) })
        let ids = { (id: String) in placed[id]?.properties["beacons"]?.arrayValue?.compactMap { $0["id"]?.stringValue }
        }
        #expect(ids("one") == ["b"])
        #expect(ids("all") == ["a", "b"])
        #expect(ids("none") == nil)
        #expect(ids("c") == nil)
    }

    @Test("visitors walk at human speed: 1.2–1.4 m/s, never faster")
    func walkingSpeed() throws {
        let simulation = VenueSimulation(venue: try Self.venue(visitors: 10), start: Self.start)
        for visitor in simulation.visitors {
            #expect((1.2...1.4).contains(visitor.speed))
            var moved = 0.0
            for second in 0..<300 {
                let step = Geodesy.distance(
                    simulation.position(of: visitor, at: Double(second)),
                    simulation.position(of: visitor, at: Double(second + 1)))
                #expect(step <= visitor.speed + 0.01, "\(visitor.subject) at \(second) s moved \(step) m")
                moved += step
            }
            // Pauses of at most 2 s per waypoint: mostly walking.
            #expect(moved > 300 * 1.2 * 0.8)
        }
    }

    @Test("RSSI falls with distance (log-distance model), and the simulated mean follows it")
    func rssiFallsWithDistance() throws {
        let distances = [0.5, 1, 2, 5, 10, 20, 40]
        let expected = distances.map { VenueSimulation.expectedRSSI(tx: -59, distance: $0, exponent: 2) }
        #expect(expected == expected.sorted(by: >))
        #expect(abs(VenueSimulation.expectedRSSI(tx: -59, distance: 1, exponent: 2) - -59) < 1e-9)
        #expect(abs(VenueSimulation.expectedRSSI(tx: -59, distance: 10, exponent: 2) - -79) < 1e-9)
        // Over many ticks, a visitor near beacon a hears a stronger mean than beacon b.
        let simulation = VenueSimulation(venue: try Self.venue(visitors: 1, dropout: 0), start: Self.start)
        let visitor = try #require(simulation.visitors.first)
        var near: [(distance: Double, rssi: Int)] = []
        let beacon = simulation.venue.beacons[0].position
        for tick in 0..<400 {
            for case .ble(_, let scan) in simulation.messages(tick: tick) {
                for case .iBeacon(_, _, let minor, let rssi, _) in scan.adverts where minor == 1 {
                    near.append((Geodesy.distance(simulation.position(of: visitor, at: Double(tick)), beacon), rssi))
                }
            }
        }
        let close = near.filter { $0.distance < 20 }.map { Double($0.rssi) }
        let far = near.filter { $0.distance > 60 }.map { Double($0.rssi) }
        #expect(close.count > 10 && far.count > 10)
        let closeMean: Double = close.reduce(0, +) / Double(close.count)
        let farMean: Double = far.reduce(0, +) / Double(far.count)
        #expect(closeMean > farMean + 10)
    }

    @Test("dropouts: some adverts are missed, scanners still publish a scan every tick")
    func dropouts() throws {
        let simulation = VenueSimulation(venue: try Self.venue(visitors: 2, dropout: 0.5), start: Self.start)
        var scans = 0
        var heard = 0
        for tick in 0..<100 {
            for case .ble(_, let scan) in simulation.messages(tick: tick) {
                scans += 1
                heard += scan.adverts.count
            }
        }
        #expect(scans == 200)
        // Two beacons in range (-100 dBm sensitivity, 100 m apart), half dropped.
        #expect(heard > 120 && heard < 280)
    }

    @Test("GPS readings carry an accuracy in the outdoor range and stay near the truth")
    func gpsNoise() throws {
        let simulation = VenueSimulation(venue: try Self.venue(visitors: 3), start: Self.start)
        for tick in 0..<100 {
            for case .gps(let agent, let reading) in simulation.messages(tick: tick) {
                let visitor = try #require(simulation.visitors.first { $0.agent == agent })
                let accuracy = try #require(reading.accuracy)
                #expect((4...12).contains(accuracy))
                #expect(
                    Geodesy.distance(reading.position, simulation.position(of: visitor, at: Double(tick))) < 5
                        * accuracy)
                #expect(reading.t == Self.start.addingTimeInterval(Double(tick)))
            }
        }
    }

    @Test("gateway topology: gateways publish what tags they hear, about nobody in particular")
    func gatewayTopology() throws {
        let simulation = VenueSimulation(venue: try Self.venue(topology: "gateway", visitors: 3), start: Self.start)
        let messages = simulation.messages(tick: 5)
        let scans = messages.compactMap { message -> (String?, BLEScan)? in
            if case .ble(let agent, let scan) = message { return (agent, scan) }
            return nil
        }
        #expect(scans.count == 1)
        #expect(scans.first?.0 == "gw-a")
        #expect(scans.first?.1.subject == nil)
        #expect(!messages.contains { if case .gps = $0 { true } else { false } })
        // Records are about the tag identities, the subjects the evaluator sees in gateway mode.
        let subjects = simulation.initialMessages().compactMap { message -> String? in
            if case .authorization(let subject, _, _) = message { return subject }
            return nil
        }
        #expect(subjects.first == "ibeacon:e2c56db5-dffb-48d2-b060-d0f5a71096e0:100:1")
    }

    @Test("visitors publish a realistic mix of authorizations, several locales and default places")
    func records() throws {
        let simulation = VenueSimulation(venue: try Self.venue(visitors: 40), start: Self.start)
        var statuses: [String: Int] = [:]
        var locales: Set<String> = []
        var places = 0
        for message in simulation.initialMessages() {
            switch message {
            case .authorization(_, let status, _): statuses[status, default: 0] += 1
            case .preferences(_, let locale, let place):
                locales.insert(locale)
                if place != nil { places += 1 }
            default: break
            }
        }
        #expect(Set(statuses.keys) == ["always", "whenInUse", "provisionalAlways", "denied"])
        #expect(locales == ["en_US", "de_DE", "fr_FR", "ja_JP"])
        #expect(places > 5 && places < 35)
        // When-in-use visitors open and close the app over ten minutes.
        let usage = (1..<600).flatMap { simulation.messages(tick: $0) }.filter {
            if case .usage = $0 { true } else { false }
        }
        #expect(usage.count > 10)
    }

    static let badVenues: [(json: String, message: String)] = [
        (#"{"timeZone": "UTC"}"#, "name: missing"),
        (#"{"name": "a/b"}"#, "one topic level"),
        (#"{"name": "x", "timeZone": "Mars/Olympus"}"#, "not an IANA time zone"),
        (#"{"name": "x", "currency": "euro"}"#, "ISO 4217"),
        (
            #"{"name": "x", "beacons": [{"id": "b", "uuid": "nope", "major": 1, "minor": 1, "lat": 0, "lon": 0}]}"#,
            "beacons[0]"
        ),
        (
            #"{"name": "x", "simulator": {"visitors": 2, "waypoints": {"a": [0, 0]}, "paths": [["a", "b"]]}}"#,
            "unknown waypoint 'b'"
        ),
        (#"{"name": "x", "simulator": {"visitors": 2}}"#, "at least one path"),
        (#"{"name": "x", "simulator": {"topology": "mesh", "visitors": 0}}"#, "scanner or gateway"),
        (#"{"name": "x", "simulator": {"speed": [2, 1], "visitors": 0}}"#, "simulator.speed"),
    ]

    @Test("bad venue files are refused naming the field", arguments: badVenues)
    func badVenue(_ example: (json: String, message: String)) {
        #expect {
            try VenueFile.parse(try JSONValue(parsing: example.json))
        } throws: { error in
            "\(error)".contains(example.message)
        }
    }
}

@Suite("Location filter")
struct LocationFilterTests {
    static let origin = GeoPoint(lon: 2.335, lat: 48.86)
    static func reading(_ metresEast: Double, accuracy: Double?) -> GPSReading {
        GPSReading(
            t: Date(timeIntervalSince1970: 0), position: Geodesy.destination(origin, bearing: 90, distance: metresEast),
            accuracy: accuracy)
    }

    @Test("desired accuracy drops worse fixes, distance filter drops fixes too close to the last published")
    func filters() {
        var filter = LocationFilter(distanceFilter: 10, desiredAccuracy: 20)
        let steps: [(east: Double, accuracy: Double?, published: Bool)] = [
            (0, 5, true),
            (4, 5, false),  // 4 m from the last published
            (30, 50, false),  // too inaccurate
            (30, nil, false),  // no accuracy at all
            (12, 19, true),  // 12 m on, accurate enough
            (20, 5, false),  // 8 m from 12
            (23, 5, true),  // 11 m from 12
        ]
        for step in steps {
            let decision = filter.admit(Self.reading(step.east, accuracy: step.accuracy), subject: "s")
            #expect((decision == .publish) == step.published, "at \(step.east) m: \(decision)")
        }
        // Per subject: another subject's first fix is always published.
        #expect(filter.admit(Self.reading(23, accuracy: 5), subject: "other") == .publish)
    }
}
