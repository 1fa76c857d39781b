import Foundation
import PerimeterCore
import Testing

@Suite("Geometry: hard cases")
struct GeometryTests {
    static func polygon(_ id: String, _ ring: [(Double, Double)]) -> Region {
        Region(id: id, shape: .polygons([[ring.map { GeoPoint(lon: $0.0, lat: $0.1) }]]))
    }

    @Test(
        "a ring crossing the antimeridian (given with a jump) contains both sides",
        arguments: [
            (180.0, 0.0, true), (-179.5, 0.5, true), (179.5, -0.5, true), (178.0, 0.0, false), (-178.0, 0.0, false),
            (0.0, 0.0, false),
        ])
    func antimeridianRing(lon: Double, lat: Double, inside: Bool) {
        let region = PreparedRegion(Self.polygon("dateline", [(179, -1), (-179, -1), (-179, 1), (179, 1), (179, -1)]))
        #expect(region.contains(GeoPoint(lon: lon, lat: lat)) == inside)
        let index = GeofenceIndex([region.region])
        #expect(index.regionIDs(containing: GeoPoint(lon: lon, lat: lat)) == (inside ? ["dateline"] : []))
    }

    @Test(
        "a ring around the North Pole contains the pole cap",
        arguments: [
            (0.0, 85.0, true), (123.0, 89.9, true), (-170.0, 81.0, true), (180.0, 90.0, true), (0.0, 79.0, false),
            (90.0, -85.0, false),
        ])
    func northPoleRing(lon: Double, lat: Double, inside: Bool) {
        let ring: [(Double, Double)] = [(0, 80), (90, 80), (180, 80), (-90, 80), (0, 80)]
        let region = PreparedRegion(Self.polygon("arctic", ring))
        #expect(region.contains(GeoPoint(lon: lon, lat: lat)) == inside)
        #expect(
            GeofenceIndex([region.region]).regionIDs(containing: GeoPoint(lon: lon, lat: lat))
                == (inside ? ["arctic"] : []))
    }

    @Test("circles across the antimeridian and over a pole")
    func wrappingCircles() {
        let dateline = PreparedRegion(
            Region(id: "d", shape: .circle(center: GeoPoint(lon: 179.9, lat: 0), radius: 50_000)))
        #expect(dateline.contains(GeoPoint(lon: -179.9, lat: 0)))
        #expect(!dateline.contains(GeoPoint(lon: -179.4, lat: 0)))
        let polar = PreparedRegion(Region(id: "p", shape: .circle(center: GeoPoint(lon: 0, lat: 89.9), radius: 50_000)))
        #expect(polar.contains(GeoPoint(lon: 180, lat: 89.9)))
        #expect(polar.contains(GeoPoint(lon: -90, lat: 90)))
        let index = GeofenceIndex([dateline.region, polar.region])
        #expect(index.regionIDs(containing: GeoPoint(lon: -179.95, lat: 0.1)) == ["d"])
        #expect(index.regionIDs(containing: GeoPoint(lon: 135, lat: 89.95)) == ["p"])
    }

    @Test("a 1 m square and a continent-sized one")
    func extremeSizes() {
        let metre = Geodesy.latitudeDegrees(meters: 1)
        let tiny = Self.polygon(
            "tiny",
            [
                (2.35, 48.85), (2.35 + metre * 1.5, 48.85), (2.35 + metre * 1.5, 48.85 + metre), (2.35, 48.85 + metre),
                (2.35, 48.85),
            ])
        let huge = Self.polygon("huge", [(-10, 35), (40, 35), (40, 70), (-10, 70), (-10, 35)])
        let index = GeofenceIndex([tiny, huge])
        #expect(
            index.regionIDs(containing: GeoPoint(lon: 2.35 + metre * 0.5, lat: 48.85 + metre * 0.5)) == [
                "huge", "tiny",
            ])
        #expect(index.regionIDs(containing: GeoPoint(lon: 2.35 + metre * 2, lat: 48.85)) == ["huge"])
        let distance = PreparedRegion(tiny).signedDistance(GeoPoint(lon: 2.35 + metre * 0.75, lat: 48.85 + metre * 0.5))
        #expect(abs(distance - -0.5) < 0.01)
    }

    @Test(
        "signed distance to a polygon: within 0.5 % of the true geodesic distance, right sign",
        arguments: [0.0, 45.0, 60.0, 70.0])
    func polygonDistanceAccuracy(latitude: Double) {
        // A 50 km-wide square; true distance by dense sampling of its edges with haversine.
        let half = Geodesy.latitudeDegrees(meters: 25_000)
        let halfLon = half / cos(latitude * .pi / 180)
        let ring = [
            (-halfLon, latitude - half), (halfLon, latitude - half), (halfLon, latitude + half),
            (-halfLon, latitude + half), (-halfLon, latitude - half),
        ]
        let region = PreparedRegion(Self.polygon("sq", ring))
        let points = [
            GeoPoint(lon: 0, lat: latitude), GeoPoint(lon: halfLon * 0.9, lat: latitude + half * 0.3),
            GeoPoint(lon: halfLon * 1.4, lat: latitude), GeoPoint(lon: halfLon * 0.5, lat: latitude + half * 1.6),
        ]
        for point in points {
            var truth = Double.infinity
            for edge in 0..<4 {
                let a = ring[edge]
                let b = ring[edge + 1]
                for step in 0...4000 {
                    let t = Double(step) / 4000
                    truth = min(
                        truth, Geodesy.distance(point, GeoPoint(lon: a.0 + (b.0 - a.0) * t, lat: a.1 + (b.1 - a.1) * t))
                    )
                }
            }
            let inside = region.contains(point)
            let measured = region.signedDistance(point)
            #expect((measured < 0) == inside)
            #expect(abs(abs(measured) - truth) <= truth * 0.005 + 0.5, "\(point): \(measured) vs \(truth)")
        }
    }

    @Test("circle signed distance is exact on the sphere")
    func circleDistance() {
        let center = GeoPoint(lon: 10, lat: 50)
        let region = PreparedRegion(Region(id: "c", shape: .circle(center: center, radius: 1000)))
        let point = Geodesy.destination(center, bearing: 1, distance: 1500)
        #expect(abs(region.signedDistance(point) - 500) < 1e-6)
        #expect(abs(region.signedDistance(center) - -1000) < 1e-9)
    }

    @Test("haversine and destination agree; known distance Paris–London")
    func geodesy() {
        let paris = GeoPoint(lon: 2.3522, lat: 48.8566)
        let london = GeoPoint(lon: -0.1276, lat: 51.5072)
        #expect(abs(Geodesy.distance(paris, london) - 343_500) < 1_500)
        let there = Geodesy.destination(paris, bearing: 0.7, distance: 12_345)
        #expect(abs(Geodesy.distance(paris, there) - 12_345) < 1e-6)
    }

    @Test("segment crossing fractions for a polygon")
    func polygonCrossing() {
        let region = PreparedRegion(Self.polygon("sq", [(0, 0), (1, 0), (1, 1), (0, 1), (0, 0)]))
        let span = region.crossing(from: GeoPoint(lon: -1, lat: 0.5), to: GeoPoint(lon: 3, lat: 0.5))
        #expect(span.map { abs($0.enter - 0.25) < 1e-12 && abs($0.exit - 0.5) < 1e-12 } == true)
        #expect(region.crossing(from: GeoPoint(lon: -1, lat: 2), to: GeoPoint(lon: 3, lat: 2)) == nil)
    }

    @Test(
        "time zones: enclaves and antimeridian pieces locate correctly",
        arguments: [
            // Dubai (UAE) with the Omani enclave Madha, which holds the UAE counter-enclave Nahwa.
            (55.2708, 25.2048, ["Asia/Dubai"]),
            (56.3220, 25.2830, ["Asia/Muscat"]),  // Madha
            (56.2809, 25.2758, ["Asia/Dubai"]),  // Nahwa, inside Madha
            (-177.0, -77.0, ["Antarctica/McMurdo"]),
            (0.0, -89.9, ["Antarctica/McMurdo"]),  // the ring with edges along -90 holds the pole
            (178.44, -18.14, ["Pacific/Fiji"]),  // Suva
            (-179.87, -16.25, ["Pacific/Fiji"]),  // east of ±180
            (179.1583, -8.6405, ["Pacific/Funafuti"]),
            (-179.963, -9.4063, ["Pacific/Funafuti"]),  // the piece east of ±180
            (0.0, 0.0, []),
        ])
    func timeZones(lon: Double, lat: Double, zones: [String]) throws {
        let document = RegionParser.parse(bytes: try Fixtures.data("tz/tz-sample.geojson"))
        let index = GeofenceIndex(document.regions)
        #expect(index.regionIDs(containing: GeoPoint(lon: lon, lat: lat)) == zones)
    }
}

@Suite("Circle containment shortcut")
struct CircleShortcutTests {
    @Test(
        "the flat-earth shortcut never disagrees with haversine",
        arguments: [0.0, 35.0, 48.85, 60.0, 75.0, 79.5, -66.0])
    func shortcutAgrees(latitude: Double) {
        var rng = SplitMix64(seed: UInt64(bitPattern: Int64(latitude * 1000)))
        var compared = 0
        for radius in [1.0, 20.0, 150.0, 2_000.0, 30_000.0] {
            let center = GeoPoint(lon: 13.4, lat: latitude)
            let region = PreparedRegion(Region(id: "c", shape: .circle(center: center, radius: radius)))
            // Points on rings just inside and just outside the edge, and anywhere in the box.
            for _ in 0..<2_000 {
                let bearing = Double.random(in: 0..<(2 * .pi), using: &rng)
                let distance = radius * Double.random(in: 0.999...1.001, using: &rng)
                let point = Geodesy.destination(center, bearing: bearing, distance: distance)
                let exact = Geodesy.distance(center, point)
                // Within a nanometre of the edge the two exact formulas differ by rounding alone
                // (a seedless run once drew a point 6e-10 m outside that the threshold test kept).
                guard abs(exact - radius) > 1e-9 * max(radius, 1) else { continue }
                compared += 1
                #expect(region.contains(point) == (exact <= radius), "r \(radius) at \(point)")
            }
        }
        #expect(compared > 9_900, "only \(compared) points away from the edge's rounding")
    }
}
