import Foundation
import Testing

@testable import PerimeterCore

/// A Feature with the given id, properties (JSON object text) and geometry (JSON text).
private func feature(_ id: String, properties: String = "{}", geometry: String) -> String {
    #"{"type":"Feature","id":"\#(id)","properties":\#(properties),"geometry":\#(geometry)}"#
}

private func polygon(_ rings: [[(Double, Double)]]) -> String {
    let text = rings.map { ring in
        "[" + (ring + [ring[0]]).map { "[\(JSONValue.number($0.0).serialized()),\($0.1)]" }.joined(separator: ",")
            + "]"
    }
    return #"{"type":"Polygon","coordinates":[\#(text.joined(separator: ","))]}"#
}

/// A comb: `teeth` long thin teeth standing on a base, 4 positions per tooth. Simple (no
/// self-intersection), but every tooth's long edges cross the same rows of any grid.
func comb(teeth: Int) -> [(Double, Double)] {
    var points: [(Double, Double)] = [(0, 0)]
    for tooth in 0..<teeth {
        let x = Double(tooth) * 1e-4
        points += [(x, 1), (x + 0.5e-4, 1), (x + 0.5e-4, 0.01), (x + 1e-4, 0.01)]
    }
    points.append((Double(teeth) * 1e-4, 0))
    return points
}

/// A star of `count` positions alternating between radius 1 and 1e-4 around the origin: every
/// edge passes within 1e-4 of the centre.
func star(count: Int) -> [(Double, Double)] {
    (0..<count).map { index in
        let angle = Double(index) / Double(count) * 2 * .pi
        let radius = index % 2 == 0 ? 1.0 : 1e-4
        return (radius * cos(angle), radius * sin(angle))
    }
}

@Suite("Regions: coordinates a hair past ±180/±90")
struct CoordinateToleranceTests {
    // Constructed (no file in ../shared/data carries such a coordinate: the time-zone export
    // rounds to 6 decimals): 180.00000000000006 is 180 plus 2 units in the last place, what
    // projection round trips leave in widely used datasets, e.g. a Fiji outline ending at the
    // antimeridian.
    struct Case: Sendable, CustomTestStringConvertible {
        var geometry: String
        /// The coordinate the parser should read.
        var expected: GeoPoint
        /// What the warning names.
        var warning: String
        var testDescription: String { warning }
    }

    static let cases: [Case] = [
        Case(
            geometry: polygon([
                [(179.9, -16.8), (180.00000000000006, -16.8), (180.00000000000006, -16.7), (179.9, -16.7)]
            ]),
            expected: GeoPoint(lon: 180, lat: -16.8),
            warning: "ring 0 position 1: longitude 180.00000000000006 clamped to 180 (within 1e-9° of the bound)"),
        Case(
            geometry: polygon([
                [(-180.00000000000006, -16.8), (-179.9, -16.8), (-179.9, -16.7), (-180.00000000000006, -16.7)]
            ]),
            expected: GeoPoint(lon: -180, lat: -16.8),
            warning: "ring 0 position 0: longitude -180.00000000000006 clamped to -180"),
        Case(
            geometry: #"{"type":"Point","coordinates":[0,90.00000000000001]}"#, expected: GeoPoint(lon: 0, lat: 90),
            warning: "geometry.coordinates: latitude 90.00000000000001 clamped to 90"),
        Case(
            geometry: #"{"type":"Point","coordinates":[180.0000000009,-90.0000000001]}"#,
            expected: GeoPoint(lon: 180, lat: -90),
            warning: "geometry.coordinates: longitude 180.0000000009 clamped to 180"),
    ]

    @Test(
        "coordinates within 1e-9° past ±180/±90 are clamped, with a warning naming the feature and coordinate",
        arguments: cases)
    func coordinatesWithinToleranceAreClamped(_ testCase: Case) throws {
        let text = collection(
            feature("ok", geometry: polygon([[(0, 0), (1, 0), (1, 1)]])),
            feature("fiji", properties: #"{"radius":10}"#, geometry: testCase.geometry))
        let document = RegionParser.parse(text: text)
        #expect(document.problems.isEmpty, "\(document.problems)")
        #expect(document.regions.map(\.id) == ["ok", "fiji"])
        let fiji = try #require(document.regions.last)
        switch fiji.shape {
        case .circle(let center, _): #expect(center == testCase.expected)
        case .polygons(let polygons): #expect(polygons.first?.first?.contains(testCase.expected) == true)
        case .beacon: Issue.record("not a beacon region")
        }
        let warning = try #require(document.warnings.first, "no warning")
        #expect(warning.regionID == "fiji" && warning.feature == 1, "\(warning)")
        #expect(warning.description.contains(testCase.warning), "\(warning)")
        // What is exported (and so what the evaluator serves) is the clamped coordinate.
        let exported = RegionExporter.featureCollection(document.regions).serialized()
        #expect(!exported.contains("180.0000000") && !exported.contains("90.0000000"), "\(exported)")
    }

    @Test(
        "beyond the tolerance a coordinate stays an error",
        arguments: [
            (#"{"type":"Point","coordinates":[180.000001,0]}"#, "longitude 180.000001 out of range [-180, 180]"),
            (#"{"type":"Point","coordinates":[-180.0000000011,0]}"#, "longitude -180.0000000011 out of range"),
            (#"{"type":"Point","coordinates":[0,90.01]}"#, "latitude 90.01 out of range [-90, 90]"),
        ])
    func beyondToleranceIsAnError(geometry: String, expected: String) {
        let document = RegionParser.parse(
            text: collection(feature("far", properties: #"{"radius":10}"#, geometry: geometry)))
        #expect(document.regions.isEmpty)
        #expect(document.warnings.isEmpty)
        #expect(document.problems.contains { $0.description.contains(expected) }, "\(document.problems)")
    }

    @Test("many clamped coordinates: three named, the rest counted")
    func manyClamped() {
        let ring = (0..<8).map { (180.00000000000006, Double($0)) } + [(179.0, 7.0), (179.0, 0.0)]
        let document = RegionParser.parse(text: collection(feature("edge", geometry: polygon([ring]))))
        #expect(document.isValid, "\(document.problems)")
        #expect(document.warnings.count == 4)
        #expect(
            document.warnings.last?.message == "and 6 more coordinates clamped the same way", "the closing position too"
        )
    }

    @Test(
        "observations a hair past the bounds are clamped; beyond, refused",
        arguments: [
            (#"{"t":1780000000,"lat":1,"lon":180.00000000000006}"#, GeoPoint(lon: 180, lat: 1)),
            (#"{"t":1780000000,"lat":-90.00000000000001,"lon":-180.00000000000006}"#, GeoPoint(lon: -180, lat: -90)),
            (#"{"t":1780000000,"lat":1,"lon":180.0000001}"#, nil),
            (#"{"t":1780000000,"lat":90.0000001,"lon":0}"#, nil),
        ] as [(String, GeoPoint?)])
    func observationsClamped(payload: String, expected: GeoPoint?) throws {
        let route = InboundRoute.gps(venue: "museum", agent: "phone-1")
        let decoded = try? InboundDecoder.decode(route, payload: Array(payload.utf8), receivedAt: Date())
        guard let expected else {
            #expect(decoded == nil, "accepted: \(String(describing: decoded))")
            return
        }
        guard case .fix(let fix)? = decoded?.inputs.first else {
            Issue.record("not a fix: \(String(describing: decoded))")
            return
        }
        #expect(fix.position == expected)
    }
}

@Suite("Regions: bounds on size and values")
struct RegionBoundsTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var feature: String
        var limits: RegionParser.Limits = .file
        /// Expected problem text; nil when the region is accepted.
        var problem: String?
        var testDescription: String { name }
    }

    static let square = polygon([[(0, 0), (0.001, 0), (0.001, 0.001), (0, 0.001)]])
    static let point = #"{"type":"Point","coordinates":[2.35,48.85]}"#
    /// A regular polygon of `count` positions (valid, simple).
    static func ring(_ count: Int) -> [(Double, Double)] {
        (0..<count).map { (cos(Double($0) / Double(count) * 2 * .pi), sin(Double($0) / Double(count) * 2 * .pi)) }
    }

    static let cases: [Case] = [
        Case(
            name: "a circle of radius 1e308 (unboundedLiveRegions)",
            feature: feature("huge", properties: #"{"radius":1e308}"#, geometry: point),
            problem: "properties.radius must be a finite number greater than 0 and at most 50000 (m), got 1e+308"),
        Case(
            name: "a circle of 50,001 m", feature: feature("big", properties: #"{"radius":50001}"#, geometry: point),
            problem: "properties.radius must be a finite number greater than 0 and at most 50000 (m)"),
        Case(name: "a circle of 50 km", feature: feature("ok", properties: #"{"radius":50000}"#, geometry: point)),
        Case(
            name: "exitBuffer 1e300", feature: feature("b", properties: #"{"exitBuffer":1e300}"#, geometry: square),
            problem: "properties.exitBuffer must be a finite number at least 0 and at most 50000 (m)"),
        Case(
            name: "minAccuracy 1e300", feature: feature("b", properties: #"{"minAccuracy":1e300}"#, geometry: square),
            problem: "properties.minAccuracy must be a finite number greater than 0 and at most 50000 (m)"),
        Case(
            name: "dwellAfter a million years",
            feature: feature("b", properties: #"{"dwellAfter":3.2e13}"#, geometry: square),
            problem: "properties.dwellAfter must be a finite number at least 0 and at most 2592000 (s)"),
        Case(
            name: "enterDelay 1e9", feature: feature("b", properties: #"{"enterDelay":1e9}"#, geometry: square),
            problem: "properties.enterDelay must be a finite number at least 0 and at most 86400 (s)"),
        Case(
            name: "exitDelay of a day", feature: feature("b", properties: #"{"exitDelay":86400}"#, geometry: square)),
        Case(
            name: "floor 10^15", feature: feature("b", properties: #"{"floor":1000000000000000}"#, geometry: square),
            problem: "properties.floor must be an integer from -1000 to 1000, got 1000000000000000"),
        Case(
            name: "10,001 positions in a live region",
            feature: feature("big", geometry: polygon([ring(10_000)])), limits: .live,
            problem: "more than 10000 positions: a live region holds at most 10000"),
        Case(
            name: "10,000 positions in a live region",
            feature: feature("big", geometry: polygon([ring(9_999)])), limits: .live),
        Case(
            name: "10,001 positions in a regions file",
            feature: feature("big", geometry: polygon([ring(10_000)])), limits: .file),
        Case(
            name: "101 rings in a live region",
            feature: feature(
                "holes",
                geometry: polygon(
                    [[(0, 0), (200, 0), (200, 1), (0, 1)]]
                        + (0..<100).map { hole in
                            let x = Double(hole) * 2 + 0.5
                            return [(x, 0.25), (x, 0.75), (x + 1, 0.75), (x + 1, 0.25)]
                        })), limits: .live,
            problem: "more than 100 rings: a live region holds at most 100"),
        Case(
            name: "a comb of 3,000 teeth (12,003 positions) in a regions file",
            feature: feature("comb", geometry: polygon([comb(teeth: 3_000)])),
            problem: "ring 0 is too intricate to check for self-intersections: its 12002 edges crowd the same places"),
        Case(
            name: "a comb of 60 teeth", feature: feature("comb", geometry: polygon([comb(teeth: 60)])), limits: .live),
    ]

    @Test("regions are bounded, each refusal naming the limit", arguments: cases)
    func bounded(_ testCase: Case) {
        let document = RegionParser.parse(text: collection(testCase.feature), limits: testCase.limits)
        if let problem = testCase.problem {
            #expect(document.regions.isEmpty)
            #expect(
                document.problems.contains { $0.description.contains(problem) }, "\(document.problems.prefix(3))")
        } else {
            #expect(document.problems.isEmpty, "\(document.problems)")
            #expect(document.regions.count == 1)
        }
    }

    @Test("a region topic refuses a live region past its bounds (code region, naming the limit)")
    func liveRegionTopic() {
        let route = InboundRoute.region(venue: "museum", id: "huge")
        let payload = feature("huge", properties: #"{"radius":1e308}"#, geometry: Self.point)
        #expect {
            try InboundDecoder.decode(route, payload: Array(payload.utf8), receivedAt: Date())
        } throws: { error in
            guard let error = error as? InboundError else { return false }
            return error.code == "region" && error.message.contains("at most 50000")
        }
    }

    @Test(
        "polygons no grid can separate are indexed without one, and answer as the plain scan does",
        arguments: ["star", "comb"])
    func crowdedPolygonsSkipTheGrid(name: String) {
        let points = name == "star" ? star(count: 3_000) : comb(teeth: 750)
        let ring = (points + [points[0]]).map { GeoPoint(lon: $0.0, lat: $0.1) }
        let index = PolygonIndex(rings: [ring])
        #expect(!index.usesGrid, "\(name): the grid build should have given up")
        var random = SplitMix64(seed: 11)
        let box = index.boundingBox
        for _ in 0..<500 {
            let lon = box.minLon + Double(random.next() % 1_000_000) / 1_000_000 * box.width
            let lat = box.minLat + Double(random.next() % 1_000_000) / 1_000_000 * box.height
            #expect(
                index.contains(lon: lon, lat: lat) == RingGeometry.contains(ring, GeoPoint(lon: lon, lat: lat)),
                "\(name) at \(lon), \(lat)")
        }
    }
}
