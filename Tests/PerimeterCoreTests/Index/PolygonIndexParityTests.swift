import Foundation
import Testing

@testable import PerimeterCore

/// PolygonIndex and RTree against shapely 2.2.0 / GEOS 3.14.1 `intersects` on the parity fixture
/// (`Fixtures/parity/README.md`): real time zones (antimeridian-split, enclaves, a ring with edges on
/// lat -90) and synthetic traps, 2,900 points at least 1e-7° from every boundary.
@Suite("PolygonIndex parity with shapely")
struct PolygonIndexParityTests {
    /// One fixture region: its id, and per polygon its rings and index.
    struct Region {
        let id: String
        let rings: [[[GeoPoint]]]
        let polygons: [PolygonIndex]

        func contains(lon: Double, lat: Double) -> Bool {
            polygons.contains { $0.contains(lon: lon, lat: lat) }
        }
    }

    enum FixtureError: Error, CustomStringConvertible {
        case malformed(String)
        var description: String {
            switch self {
            case .malformed(let what): "parity fixture: \(what)"
            }
        }
    }

    static func fixture(_ name: String) throws -> Data {
        let directory = try #require(Bundle.module.url(forResource: "Fixtures", withExtension: nil))
        return try Data(contentsOf: directory.appendingPathComponent("parity").appendingPathComponent(name))
    }

    /// Polygon and MultiPolygon features (the fixture has no circles; anything else is an error here).
    static func regions() throws -> [Region] {
        let document = try JSONParser.parse(fixture("regions.geojson"))
        guard let features = document["features"]?.arrayValue else { throw FixtureError.malformed("no features") }
        return try features.map { feature in
            guard let id = feature["id"]?.stringValue, let geometry = feature["geometry"],
                let type = geometry["type"]?.stringValue, let coordinates = geometry["coordinates"]?.arrayValue
            else { throw FixtureError.malformed("feature without id or geometry") }
            let polygons: [JSONValue]
            switch type {
            case "Polygon": polygons = [.array(coordinates)]
            case "MultiPolygon": polygons = coordinates
            default: throw FixtureError.malformed("\(id): unexpected geometry \(type)")
            }
            let rings = try polygons.map { polygon in
                try (polygon.arrayValue ?? []).map { ring in
                    try (ring.arrayValue ?? []).map { position in
                        guard let pair = position.arrayValue, pair.count >= 2, let lon = pair[0].doubleValue,
                            let lat = pair[1].doubleValue
                        else { throw FixtureError.malformed("\(id): bad position") }
                        return GeoPoint(lon: lon, lat: lat)
                    }
                }
            }
            return Region(id: id, rings: rings, polygons: rings.map { PolygonIndex(rings: $0) })
        }
    }

    /// Rows of a CSV file without its header, split at commas (the fixture has no quoting).
    static func rows(_ name: String) throws -> [[Substring]] {
        let text = String(decoding: try fixture(name), as: UTF8.self)
        return text.split(separator: "\n").dropFirst().map {
            $0.split(separator: ",", omittingEmptySubsequences: false)
        }
    }

    @Test("every fixture point gets exactly shapely's regions, by brute force and through the R-tree")
    func parity() throws {
        let regions = try Self.regions()
        #expect(regions.count == 27)
        var entries: [(box: BoundingBox, id: Int32)] = []
        for (regionIndex, region) in regions.enumerated() {
            for polygon in region.polygons { entries.append((polygon.boundingBox, Int32(regionIndex))) }
        }
        let tree = RTree(bulkLoading: entries)

        var expected: [Int: String] = [:]
        for row in try Self.rows("expected.csv") {
            expected[try #require(Int(row[0]))] = String(row[1])
        }
        let points = try Self.rows("points.csv")
        #expect(points.count == 2_900)
        #expect(expected.count == points.count)

        var mismatches: [String] = []
        for row in points {
            let id = try #require(Int(row[0]))
            let lat = try #require(Double(String(row[1]))), lon = try #require(Double(String(row[2])))
            let bruteForce = regions.filter { $0.contains(lon: lon, lat: lat) }.map(\.id)
            var candidates = Set<Int32>()
            tree.search(lon: lon, lat: lat) { candidates.insert($0) }
            let viaTree = candidates.map { regions[Int($0)] }.filter { $0.contains(lon: lon, lat: lat) }.map(\.id)
            // The fixture sorts ids by bytes.
            func joined(_ ids: [String]) -> String {
                ids.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }.joined(separator: ";")
            }
            let want = expected[id] ?? "<missing>"
            if joined(bruteForce) != want || joined(viaTree) != want {
                mismatches.append(
                    "point \(id) (\(lat), \(lon)): shapely \(want), brute force \(joined(bruteForce)), tree \(joined(viaTree))"
                )
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.count) mismatches, first: \(mismatches.prefix(10))")
    }

    @Test("fixture polygons with many vertices use the grid, and every fixture vertex is a boundary point")
    func verticesAndGrid() throws {
        let regions = try Self.regions()
        var gridded = 0, vertices = 0
        for region in regions {
            for (rings, polygon) in zip(region.rings, region.polygons) {
                let edges = rings.reduce(0) { $0 + $1.count - 1 }
                #expect(polygon.usesGrid == (edges >= PolygonIndex.gridThreshold), "\(region.id)")
                if polygon.usesGrid { gridded += 1 }
                for vertex in rings.joined() {
                    vertices += 1
                    if !polygon.contains(lon: vertex.lon, lat: vertex.lat) {
                        Issue.record("\(region.id): vertex \(vertex) not contained")
                    }
                }
            }
        }
        #expect(gridded >= 10)
        #expect(vertices > 10_000)
        // Antarctica-like ring: edges along lat -90 and lon ±180; the pole and points on those edges are inside.
        let mcMurdo = try #require(regions.first { $0.id == "Antarctica/McMurdo" })
        #expect(mcMurdo.contains(lon: 170, lat: -90))
        #expect(mcMurdo.contains(lon: 180, lat: -89))
        let cap = try #require(regions.first { $0.id == "syn-south-cap" })
        #expect(cap.contains(lon: 0, lat: -90))
        #expect(cap.contains(lon: -180, lat: -85))
        #expect(!cap.contains(lon: 0, lat: -79.9))
    }
}
