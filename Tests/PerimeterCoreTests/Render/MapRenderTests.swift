import Foundation
import PerimeterCore
import Testing

@Suite("Map projection and SVG rendering")
struct MapRenderTests {
    /// Pairs of points a venue map might hold, at several latitudes and sizes.
    static let pairs: [(name: String, a: GeoPoint, b: GeoPoint)] = [
        (
            "museum, east-west 240 m", GeoPoint(lon: 2.3345596, lat: 48.8600805),
            GeoPoint(lon: 2.3378404, lat: 48.8600805)
        ),
        ("museum, diagonal", GeoPoint(lon: 2.3345596, lat: 48.8600805), GeoPoint(lon: 2.3378404, lat: 48.8615195)),
        ("Višnjan track, 1 km", GeoPoint(lon: 13.7142, lat: 45.2735), GeoPoint(lon: 13.7224, lat: 45.2809)),
        ("equator campus, 3 km", GeoPoint(lon: -78.50, lat: -0.20), GeoPoint(lon: -78.48, lat: -0.18)),
        ("arctic station, 2 km", GeoPoint(lon: 15.60, lat: 78.22), GeoPoint(lon: 15.68, lat: 78.23)),
        ("across the antimeridian, 1 km", GeoPoint(lon: 179.996, lat: -16.5), GeoPoint(lon: -179.995, lat: -16.5)),
    ]

    @Test("Distances in the projected plane equal great-circle distances (within 0.1 %)", arguments: pairs)
    func projectionKeepsDistances(_ pair: (name: String, a: GeoPoint, b: GeoPoint)) {
        let projection = MapProjection(fitting: [pair.a, pair.b], width: 800, height: 600, margin: 20)
        let p = projection.metres(pair.a)
        let q = projection.metres(pair.b)
        let planar = ((p.x - q.x) * (p.x - q.x) + (p.y - q.y) * (p.y - q.y)).squareRoot()
        let sphere = Geodesy.distance(pair.a, pair.b)
        let error = abs(planar - sphere) / sphere
        #expect(error < 0.001, "\(pair.name): planar \(planar) m, sphere \(sphere) m")
        // And the picture keeps them too, at one scale for both axes.
        let pa = projection.point(pair.a)
        let pb = projection.point(pair.b)
        let pixels = ((pa.x - pb.x) * (pa.x - pb.x) + (pa.y - pb.y) * (pa.y - pb.y)).squareRoot()
        let pictureError = abs(pixels / projection.scale - sphere) / sphere
        #expect(pictureError < 0.001, "\(pair.name)")
    }

    @Test("North is up and east is right; the drawing fits inside the margins")
    func orientationAndFit() {
        let south = GeoPoint(lon: 2.335, lat: 48.860)
        let north = GeoPoint(lon: 2.335, lat: 48.861)
        let east = GeoPoint(lon: 2.336, lat: 48.860)
        let projection = MapProjection(fitting: [south, north, east], width: 400, height: 300, margin: 10)
        #expect(projection.point(north).y < projection.point(south).y)
        #expect(projection.point(east).x > projection.point(south).x)
        for point in [south, north, east] {
            let p = projection.point(point)
            #expect(p.x >= 9.99 && p.x <= 390.01 && p.y >= 9.99 && p.y <= 290.01, "\(point) at \(p)")
        }
    }

    @Test(
        "The scale bar is a round length no longer than asked",
        arguments: [
            (metresPerPixel: 0.25, maxPixels: 240.0, expected: 50.0),
            (metresPerPixel: 1, maxPixels: 240, expected: 200),
            (metresPerPixel: 3, maxPixels: 240, expected: 500),
            (metresPerPixel: 0.01, maxPixels: 240, expected: 2),
            (metresPerPixel: 10, maxPixels: 100, expected: 1000),
        ])
    func scaleBar(metresPerPixel: Double, maxPixels: Double, expected: Double) {
        // A picture 1000 px wide (no margin) spanning 1000 × metresPerPixel metres east-west.
        let span = 1000 * metresPerPixel
        let west = GeoPoint(lon: 0, lat: 0)
        let east = Geodesy.destination(west, bearing: .pi / 2, distance: span)
        let projection = MapProjection(fitting: [west, east], width: 1000, height: 1000, margin: 0, minimumSpan: 0.001)
        let metres = projection.scaleBarMetres(maxPixels: maxPixels)
        #expect(abs(metres - expected) < 1e-9, "got \(metres)")
        #expect(metres * projection.scale <= maxPixels + 1e-9)
    }

    static let squareWithHole = Region(
        id: "garden",
        shape: .polygons([
            [
                [
                    GeoPoint(lon: 2.3353798, lat: 48.8610698), GeoPoint(lon: 2.3370202, lat: 48.8610698),
                    GeoPoint(lon: 2.3370202, lat: 48.8614745), GeoPoint(lon: 2.3353798, lat: 48.8614745),
                    GeoPoint(lon: 2.3353798, lat: 48.8610698),
                ],
                [
                    GeoPoint(lon: 2.3360906, lat: 48.8612047), GeoPoint(lon: 2.3363094, lat: 48.8612047),
                    GeoPoint(lon: 2.3363094, lat: 48.8613396), GeoPoint(lon: 2.3360906, lat: 48.8613396),
                    GeoPoint(lon: 2.3360906, lat: 48.8612047),
                ],
            ]
        ]), name: "Sculpture garden")

    @Test("A polygon with a hole is one evenodd path of two closed subpaths")
    func polygonWithHole() throws {
        let svg = SVGMapRenderer().render(VenueMap(regions: [Self.squareWithHole]))
        let line = try #require(svg.split(separator: "\n").first { $0.contains("id=\"region-garden\"") })
        #expect(line.contains("fill-rule=\"evenodd\""))
        let d = try #require(line.split(separator: "d=\"").last?.split(separator: "\"").first)
        let moves = d.filter { $0 == "M" }.count
        let closes = d.filter { $0 == "Z" }.count
        #expect(moves == 2)
        #expect(closes == 2)
        // Closed GeoJSON rings are drawn without repeating the first vertex: 4 + 4 vertices.
        let vertices = d.filter { $0 == "M" || $0 == "L" }.count
        #expect(vertices == 8)
    }

    @Test("A circle is drawn geodesically: every vertex at the radius from the centre")
    func circleIsGeodesic() {
        let centre = GeoPoint(lon: 2.3362, lat: 48.8604403)
        let ring = VenueMap.circleRing(center: centre, radius: 12)
        #expect(ring.count == 72)
        let worst = ring.map { abs(Geodesy.distance(centre, $0) - 12) }.max() ?? 1
        #expect(worst < 1e-6)
    }

    @Test("Text is escaped in labels, ids and titles")
    func escaping() {
        let region = Region(
            id: "a\"b<c>", shape: .circle(center: GeoPoint(lon: 2.3362, lat: 48.86), radius: 10),
            name: "Tom & Jerry's <café>")
        let svg = SVGMapRenderer().render(VenueMap(title: "x</svg><script>", regions: [region]))
        #expect(svg.contains("Tom &amp; Jerry&#39;s &lt;café&gt;"))
        #expect(svg.contains("id=\"region-a&quot;b&lt;c&gt;\""))
        #expect(svg.contains("x&lt;/svg&gt;&lt;script&gt;"))
        #expect(!svg.contains("<script"))
        #expect(!svg.contains("Tom & Jerry"))
    }

    @Test(
        "escape() table",
        arguments: [
            ("plain", "plain"), ("a&b", "a&amp;b"), ("<>", "&lt;&gt;"), ("\"'", "&quot;&#39;"),
            ("bell\u{07}", "bell\u{FFFD}"), ("tab\tok", "tab\tok"), ("Ünïcode ✓", "Ünïcode ✓"),
        ])
    func escapeTable(input: String, expected: String) {
        #expect(SVGMapRenderer.escape(input) == expected)
    }

    @Test("The scale bar drawn matches the projection: its pixels are its metres times the scale")
    func scaleBarDrawn() throws {
        let map = VenueMap(regions: [Self.squareWithHole])
        let renderer = SVGMapRenderer(width: 800, height: 600)
        let svg = renderer.render(map)
        let projection = renderer.projection(for: map)
        let line = try #require(svg.split(separator: "\n").first { $0.contains("id=\"scale-bar\"") })
        let metres = try #require(Self.attribute("data-metres", in: line).flatMap(Double.init))
        let pixels = try #require(Self.attribute("data-pixels", in: line).flatMap(Double.init))
        #expect(abs(pixels - metres * projection.scale) < 0.01)
        #expect(pixels <= 200 && pixels >= 200 / 2.5 - 0.01, "a round length within a factor 2.5 of the limit")
        #expect(line.contains(">\(Int(metres)) m</text>"))
        #expect(svg.contains("id=\"north-arrow\""))
    }

    @Test("Beacon regions are drawn around their known beacons, and not at all without positions")
    func beaconRegions() throws {
        var properties = JSONObject()
        properties["beacons"] = [["lat": 48.8606, "lon": 2.3354, "radius": 5], ["lat": 48.8607, "lon": 2.3356]]
        let placed = Region(
            id: "b1", shape: .beacon(["uuid": "F7826DA6-4FA2-4E98-8024-BC5B71E0893E"]), properties: properties)
        let unplaced = Region(id: "b2", shape: .beacon(["uuid": "F7826DA6-4FA2-4E98-8024-BC5B71E0893E"]))
        let svg = SVGMapRenderer().render(VenueMap(regions: [Self.squareWithHole, placed, unplaced]))
        let line = try #require(svg.split(separator: "\n").first { $0.contains("id=\"region-b1\"") })
        #expect(line.filter { $0 == "M" }.count == 2)
        #expect(!svg.contains("region-b2"))
    }

    @Test("Events are drawn at their fix, a dwell at the last fix before it; states are not drawn")
    func eventMarkers() {
        let t0 = Date(timeIntervalSince1970: 1_000)
        let track = [
            Fix(subject: "s", t: t0, position: GeoPoint(lon: 1, lat: 1)),
            Fix(subject: "s", t: t0 + 10, position: GeoPoint(lon: 2, lat: 2)),
            Fix(subject: "s", t: t0 + 20, position: GeoPoint(lon: 3, lat: 3)),
        ]
        let enter = RegionEvent(
            kind: .enter, region: "r", subject: "s", t: t0 + 10, seq: 1, id: "x", source: "gps", fix: track[1])
        let dwell = RegionEvent(kind: .dwell, region: "r", subject: "s", t: t0 + 15, seq: 2, id: "y", source: "timer")
        let state = RegionEvent(
            kind: .state, region: "r", subject: "s", t: t0 + 10, seq: 1, id: "z", state: .inside, source: "gps")
        let markers = VenueMap.Event.markers(for: [enter, dwell, state], track: track)
        #expect(markers.map(\.kind) == ["enter", "dwell"])
        #expect(markers.map(\.position) == [track[1].position, track[1].position])
        let fromJSON = VenueMap.Event.marker(
            json: ["event": "exit", "region": "r", "t": "1970-01-01T00:17:00Z"], track: track)
        #expect(fromJSON?.position == track[2].position)
    }

    static func attribute(_ name: String, in line: Substring) -> String? {
        guard let range = line.range(of: "\(name)=\"") else { return nil }
        return String(line[range.upperBound...].prefix { $0 != "\"" })
    }
}
