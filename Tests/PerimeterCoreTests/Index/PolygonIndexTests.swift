import Foundation
import Testing

@testable import PerimeterCore

/// A ring from (lon, lat) pairs.
private func ring(_ pairs: [(Double, Double)]) -> [GeoPoint] {
    pairs.map { GeoPoint(lon: $0.0, lat: $0.1) }
}

/// Each edge split into `pieces` at fractions i / pieces: with small-integer or axis-aligned edges the new
/// vertices lie exactly on the old edges, so the shape (and every boundary point) is unchanged while the
/// polygon gets enough edges for the grid.
private func densified(_ rings: [[GeoPoint]], pieces: Int = 16) -> [[GeoPoint]] {
    rings.map { ring in
        guard ring.count > 1 else { return ring }
        var closed = ring
        if closed.first != closed.last { closed.append(closed[0]) }
        var result: [GeoPoint] = []
        for (a, b) in zip(closed, closed.dropFirst()) {
            for piece in 0..<pieces {
                let t = Double(piece) / Double(pieces)
                result.append(GeoPoint(lon: a.lon + (b.lon - a.lon) * t, lat: a.lat + (b.lat - a.lat) * t))
            }
        }
        result.append(closed[0])
        return result
    }
}

/// A polygon's edges as flat arrays, for the brute-force references below.
private struct EdgeList {
    var ax: [Double] = [], ay: [Double] = [], bx: [Double] = [], by: [Double] = []

    init(_ rings: [[GeoPoint]]) {
        for ring in rings where !ring.isEmpty {
            for index in ring.indices {
                let a = ring[index], b = ring[(index + 1) % ring.count]
                ax.append(a.lon)
                ay.append(a.lat)
                bx.append(b.lon)
                by.append(b.lat)
            }
        }
    }

    /// The textbook crossing-number test in floating point: exact enough for points well away from edges.
    func contains(lon: Double, lat: Double) -> Bool {
        var inside = false
        for edge in ax.indices where (ay[edge] > lat) != (by[edge] > lat) {
            let x = (bx[edge] - ax[edge]) * (lat - ay[edge]) / (by[edge] - ay[edge]) + ax[edge]
            if lon < x { inside.toggle() }
        }
        return inside
    }

    func distance(lon: Double, lat: Double) -> Double {
        var nearest = Double.infinity
        for edge in ax.indices {
            let dx = bx[edge] - ax[edge], dy = by[edge] - ay[edge]
            let length = dx * dx + dy * dy
            let t = length > 0 ? min(max(((lon - ax[edge]) * dx + (lat - ay[edge]) * dy) / length, 0), 1) : 0
            let ex = lon - (ax[edge] + t * dx), ey = lat - (ay[edge] + t * dy)
            nearest = min(nearest, (ex * ex + ey * ey).squareRoot())
        }
        return nearest
    }
}

@Suite("PolygonIndex")
struct PolygonIndexTests {
    struct Probe: Sendable {
        let lon, lat: Double
        let inside: Bool
        let why: String
    }

    struct Shape: Sendable, CustomStringConvertible {
        let name: String
        let rings: [[GeoPoint]]
        let probes: [Probe]
        var description: String { name }
    }

    static let parisLon = 2.3522, parisLat = 48.8566, meterLon = 1.3668e-5, meterLat = 9e-6

    static let cases: [Shape] = [
        Shape(
            name: "square", rings: [ring([(0, 0), (10, 0), (10, 10), (0, 10), (0, 0)])],
            probes: [
                Probe(lon: 5, lat: 5, inside: true, why: "inside"),
                Probe(lon: 11, lat: 5, inside: false, why: "right of it"),
                Probe(lon: 10, lat: 5, inside: true, why: "on the right edge"),
                Probe(lon: 0, lat: 0, inside: true, why: "on a vertex"),
                Probe(lon: 5, lat: 10, inside: true, why: "on the top edge"),
                Probe(lon: 10.000001, lat: 5, inside: false, why: "just right of the edge"),
                Probe(lon: -1, lat: 10, inside: false, why: "left, at a vertex's latitude"),
                Probe(lon: 5, lat: -1e-12, inside: false, why: "just below the bottom edge"),
                Probe(lon: 9.999999999, lat: 9.999999999, inside: true, why: "just inside a corner"),
                Probe(lon: .nan, lat: 5, inside: false, why: "NaN"),
            ]),
        Shape(
            name: "concave U", rings: [ring([(0, 0), (10, 0), (10, 10), (7, 10), (7, 3), (3, 3), (3, 10), (0, 10)])],
            probes: [
                Probe(lon: 5, lat: 5, inside: false, why: "in the notch"),
                Probe(lon: 1, lat: 5, inside: true, why: "in the left arm"),
                Probe(lon: 8.5, lat: 9, inside: true, why: "in the right arm"),
                Probe(lon: 5, lat: 3, inside: true, why: "on the notch's floor"),
                Probe(lon: 7, lat: 6, inside: true, why: "on the notch's wall"),
                Probe(lon: 5, lat: 10, inside: false, why: "across the notch's mouth"),
                Probe(lon: 1, lat: 10, inside: true, why: "on the left arm's top"),
                Probe(lon: -1, lat: 3, inside: false, why: "left of it, level with the notch floor"),
                Probe(lon: 1.5, lat: 3, inside: true, why: "left arm, level with the notch floor"),
                Probe(lon: 8, lat: 3, inside: true, why: "right arm, level with the notch floor"),
                Probe(lon: 5, lat: 2.9, inside: true, why: "below the notch"),
                Probe(lon: 5, lat: 10.5, inside: false, why: "above the notch"),
            ]),
        Shape(
            name: "square with a hole",
            rings: [
                ring([(0, 0), (10, 0), (10, 10), (0, 10), (0, 0)]), ring([(3, 3), (3, 7), (7, 7), (7, 3), (3, 3)]),
            ],
            probes: [
                Probe(lon: 5, lat: 5, inside: false, why: "in the hole"),
                Probe(lon: 2, lat: 2, inside: true, why: "between the rings"),
                Probe(lon: 3, lat: 5, inside: true, why: "on the hole's edge"),
                Probe(lon: 3, lat: 3, inside: true, why: "on a hole vertex"),
                Probe(lon: 8, lat: 5, inside: true, why: "beside the hole, level with it"),
                Probe(lon: 3.000001, lat: 5, inside: false, why: "just inside the hole"),
                Probe(lon: 1, lat: 7, inside: true, why: "level with a hole vertex"),
            ]),
        Shape(
            name: "a ring inside a hole (even-odd)",
            rings: [
                ring([(0, 0), (10, 0), (10, 10), (0, 10)]), ring([(2, 2), (8, 2), (8, 8), (2, 8)]),
                ring([(4, 4), (6, 4), (6, 6), (4, 6)]),
            ],
            probes: [
                Probe(lon: 5, lat: 5, inside: true, why: "in the innermost ring"),
                Probe(lon: 3, lat: 3, inside: false, why: "in the hole"),
                Probe(lon: 1, lat: 1, inside: true, why: "in the outer band"),
                Probe(lon: 4, lat: 5, inside: true, why: "on the innermost ring"),
            ]),
        Shape(
            name: "outward spike", rings: [ring([(0, 0), (10, 0), (10, 5), (15, 5), (10, 5), (10, 10), (0, 10)])],
            probes: [
                Probe(lon: 12, lat: 5, inside: true, why: "on the spike"),
                Probe(lon: 15, lat: 5, inside: true, why: "on the spike's tip"),
                Probe(lon: 12, lat: 5.0001, inside: false, why: "just above the spike"),
                Probe(lon: 12, lat: 4.9999, inside: false, why: "just below the spike"),
                Probe(lon: 9, lat: 5, inside: true, why: "inside, level with the spike"),
                Probe(lon: 16, lat: 5, inside: false, why: "beyond the tip"),
                Probe(lon: -1, lat: 5, inside: false, why: "left, level with the spike"),
            ]),
        Shape(
            name: "inward spike", rings: [ring([(0, 0), (10, 0), (10, 10), (5, 10), (5, 4), (5, 10), (0, 10)])],
            probes: [
                Probe(lon: 5, lat: 7, inside: true, why: "on the spike"),
                Probe(lon: 5.0001, lat: 7, inside: true, why: "beside the spike"),
                Probe(lon: 4.9999, lat: 4, inside: true, why: "beside the spike's tip"),
                Probe(lon: 5, lat: 4, inside: true, why: "on the spike's tip"),
                Probe(lon: 5, lat: 3.9999, inside: true, why: "below the tip"),
                Probe(lon: 5, lat: 10.0001, inside: false, why: "above the spike's base"),
            ]),
        Shape(
            name: "collinear runs",
            rings: [ring([(0, 0), (2, 0), (4, 0), (6, 0), (10, 0), (10, 2), (10, 4), (10, 10), (0, 10), (0, 5)])],
            probes: [
                Probe(lon: 5, lat: 0, inside: true, why: "on a collinear run"),
                Probe(lon: 4, lat: 0, inside: true, why: "on a collinear vertex"),
                Probe(lon: 5, lat: -1e-9, inside: false, why: "just below the run"),
                Probe(lon: 11, lat: 2, inside: false, why: "right, level with a collinear vertex"),
                Probe(lon: 9, lat: 2, inside: true, why: "inside, level with a collinear vertex"),
                Probe(lon: 9, lat: 4, inside: true, why: "inside, level with another"),
                Probe(lon: -1, lat: 5, inside: false, why: "left, level with a vertex"),
                Probe(lon: 1, lat: 5, inside: true, why: "inside, level with a vertex on the left edge"),
                Probe(lon: 0, lat: 7, inside: true, why: "on the left edge"),
            ]),
        Shape(
            name: "repeated vertices",
            rings: [ring([(0, 0), (0, 0), (10, 0), (10, 0), (10, 10), (0, 10), (0, 10), (0, 0)])],
            probes: [
                Probe(lon: 5, lat: 5, inside: true, why: "inside"),
                Probe(lon: 0, lat: 0, inside: true, why: "on the repeated vertex"),
                Probe(lon: 10, lat: 5, inside: true, why: "on an edge"),
                Probe(lon: -0.5, lat: 0, inside: false, why: "left, level with a repeated vertex"),
                Probe(lon: 5, lat: 10.1, inside: false, why: "above"),
            ]),
        Shape(
            name: "staircase (horizontal and vertical edges)",
            rings: [ring([(0, 0), (3, 0), (3, 1), (2, 1), (2, 2), (1, 2), (1, 3), (0, 3)])],
            probes: [
                Probe(lon: 2.5, lat: 1, inside: true, why: "on a horizontal step"),
                Probe(lon: 2.5, lat: 1.5, inside: false, why: "above the first step"),
                Probe(lon: 1.5, lat: 1.5, inside: true, why: "inside the middle step"),
                Probe(lon: 0.5, lat: 2.5, inside: true, why: "inside the top step"),
                Probe(lon: 1.5, lat: 2.5, inside: false, why: "above the middle step"),
                Probe(lon: -1, lat: 1, inside: false, why: "left, level with a step"),
                Probe(lon: 0.5, lat: 1, inside: true, why: "inside, level with a step"),
                Probe(lon: 1.5, lat: 2, inside: true, why: "on a step"),
                Probe(lon: 2.5, lat: 2, inside: false, why: "right of the steps, level with a corner"),
                Probe(lon: 3, lat: 0.5, inside: true, why: "on the right wall"),
            ]),
        Shape(
            name: "unwrapped frame past lon 180", rings: [ring([(170, -20), (190, -20), (190, -10), (170, -10)])],
            probes: [
                Probe(lon: 185, lat: -15, inside: true, why: "east of 180 in the unwrapped frame"),
                Probe(lon: 180, lat: -15, inside: true, why: "on the antimeridian"),
                Probe(lon: 190, lat: -15, inside: true, why: "on the east edge"),
                Probe(lon: -175, lat: -15, inside: false, why: "the wrapped longitude: the caller's business"),
                Probe(lon: 195, lat: -15, inside: false, why: "east of it"),
            ]),
        Shape(
            name: "1 m square near Paris",
            rings: [
                ring([
                    (parisLon, parisLat), (parisLon + meterLon, parisLat), (parisLon + meterLon, parisLat + meterLat),
                    (parisLon, parisLat + meterLat),
                ])
            ],
            probes: [
                Probe(lon: parisLon + meterLon / 2, lat: parisLat + meterLat / 2, inside: true, why: "centre"),
                Probe(lon: parisLon, lat: parisLat, inside: true, why: "corner"),
                Probe(lon: parisLon + meterLon / 2, lat: parisLat, inside: true, why: "on the south edge"),
                Probe(lon: parisLon + meterLon, lat: parisLat + meterLat / 3, inside: true, why: "on the east edge"),
                Probe(lon: parisLon + meterLon + 3e-7, lat: parisLat + meterLat / 2, inside: false, why: "2 cm east"),
                Probe(
                    lon: parisLon + meterLon / 2, lat: parisLat + meterLat + 1e-9, inside: false, why: "0.1 mm north"),
            ]),
        Shape(
            name: "zero-area ring", rings: [ring([(0, 0), (10, 0), (5, 0)])],
            probes: [
                Probe(lon: 5, lat: 0, inside: true, why: "on the degenerate ring"),
                Probe(lon: 2, lat: 0, inside: true, why: "on it, elsewhere"),
                Probe(lon: 5, lat: 1, inside: false, why: "off it"),
                Probe(lon: 11, lat: 0, inside: false, why: "beyond its end"),
            ]),
        Shape(
            name: "empty and one-point rings beside a square",
            rings: [[], ring([(1, 1)]), ring([(0, 0), (2, 0), (2, 2), (0, 2)])],
            probes: [
                Probe(lon: 1.5, lat: 1.5, inside: true, why: "inside the square"),
                Probe(lon: 3, lat: 3, inside: false, why: "outside"),
            ]),
    ]

    @Test("geometric cases, through the plain test and through the grid", arguments: cases, [false, true])
    func geometricCases(_ shape: Shape, dense: Bool) {
        let rings = dense ? densified(shape.rings) : shape.rings
        let index = PolygonIndex(rings: rings)
        let box = index.boundingBox
        #expect(index.usesGrid == (dense && box.width > 0 && box.height > 0), "which path is tested")
        for probe in shape.probes {
            #expect(index.contains(lon: probe.lon, lat: probe.lat) == probe.inside, "\(probe.why)")
        }
        // Every vertex is on the boundary.
        for ring in rings {
            for vertex in ring { #expect(index.contains(lon: vertex.lon, lat: vertex.lat), "vertex \(vertex)") }
        }
    }

    @Test("orientation signs are exact for nearly collinear points (Kettner et al.'s 256 × 256 grid)")
    func exactOrientation() {
        // p = (0.5 + i·ulp, 0.5 + j·ulp) against the line y = x through (12, 12) and (24, 24): the exact
        // sign is sign(j − i); plain floating-point evaluation gets a large share of these wrong.
        let ulp = 0.5.ulp
        var wrong = 0
        for i in 0..<256 {
            for j in 0..<256 {
                let px = 0.5 + Double(i) * ulp, py = 0.5 + Double(j) * ulp
                let sign = PlanarOrientation.sign(12, 12, 24, 24, px, py)
                if sign != (j > i ? 1 : (j < i ? -1 : 0)) { wrong += 1 }
            }
        }
        #expect(wrong == 0)
        #expect(PlanarOrientation.sign(0, 0, 1, 0, 0.5, 1e-300) == 1)
        #expect(PlanarOrientation.sign(0, 0, 1, 0, 0.5, -1e-300) == -1)
        #expect(
            PlanarOrientation.sign(0.1, 0.1, 0.3, 0.3, 0.2, 0.2)
                == PlanarOrientation.exactSign(0.1, 0.1, 0.3, 0.3, 0.2, 0.2))
    }

    @Test("vertex count includes each ring's closing vertex, added when a ring comes open")
    func vertexCount() {
        #expect(PolygonIndex(rings: [ring([(0, 0), (1, 0), (1, 1), (0, 0)])]).vertexCount == 4)
        #expect(PolygonIndex(rings: [ring([(0, 0), (1, 0), (1, 1)])]).vertexCount == 4)
        #expect(PolygonIndex(rings: [ring([(0, 0), (1, 0), (1, 1)]), []]).vertexCount == 4)
        #expect(PolygonIndex(rings: []).vertexCount == 0)
        #expect(PolygonIndex(rings: []).boundingBox.isEmpty)
        #expect(!PolygonIndex(rings: []).contains(lon: 0, lat: 0))
    }

    @Test(
        "the grid agrees with brute force on random concave polygons with holes",
        arguments: [
            (seed: UInt64(1), lon: 2.35, lat: 48.85, radius: 0.01, vertices: 2_000),
            (seed: 2, lon: 170.0, lat: -40.0, radius: 15.0, vertices: 3_000),
            (seed: 3, lon: -0.5, lat: 0.5, radius: 1e-4, vertices: 2_500),
        ])
    func randomConcavePolygons(seed: UInt64, lon: Double, lat: Double, radius: Double, vertices: Int) {
        var random = SplitMix64(seed: seed)
        // A star-shaped ring (concave, simple) with a star-shaped hole around the same centre.
        func star(count: Int, minimum: Double, maximum: Double) -> [GeoPoint] {
            let angles = (0..<count).map { _ in random.uniform(0, 2 * .pi) }.sorted()
            var points = angles.map { angle -> GeoPoint in
                let r = random.uniform(minimum, maximum)
                return GeoPoint(lon: lon + r * cos(angle), lat: lat + r * sin(angle))
            }
            points.append(points[0])
            return points
        }
        let rings = [
            star(count: vertices, minimum: 0.4 * radius, maximum: radius),
            star(count: vertices / 4, minimum: 0.1 * radius, maximum: 0.35 * radius),
        ]
        let index = PolygonIndex(rings: rings)
        #expect(index.usesGrid)

        var probes: [(Double, Double)] = []
        let box = index.boundingBox
        for _ in 0..<1_500 {
            probes.append((random.uniform(box.minLon, box.maxLon), random.uniform(box.minLat, box.maxLat)))
        }
        let allVertices = rings.flatMap { $0 }
        for _ in 0..<400 {
            // Level with a vertex (the ray-casting trap) and close to vertices.
            let vertex = allVertices.randomElement(using: &random)!
            probes.append((random.uniform(box.minLon, box.maxLon), vertex.lat))
            let offset = radius * 1e-3 * random.uniform(0.001, 1)
            probes.append((vertex.lon + offset * random.uniform(-1, 1), vertex.lat + offset * random.uniform(-1, 1)))
        }
        let edges = EdgeList(rings)
        var checked = 0, mismatches: [String] = []
        for (x, y) in probes {
            let expected = edges.contains(lon: x, lat: y)
            // Points within 1e-9 of an edge are out of scope (the reference is not exact there); measuring
            // the distance only on disagreement keeps the test fast.
            if index.contains(lon: x, lat: y) == expected {
                checked += 1
            } else if edges.distance(lon: x, lat: y) > 1e-9 {
                checked += 1
                mismatches.append("(\(x), \(y)) expected \(expected)")
            }
        }
        #expect(checked > 2_000)
        #expect(mismatches.isEmpty, "\(mismatches.prefix(10))")
        for vertex in allVertices where !index.contains(lon: vertex.lon, lat: vertex.lat) {
            Issue.record("vertex \(vertex) not on the boundary")
        }
    }

    @Test("edges near a box: all edges meeting it, each once")
    func edgesNearBox() {
        var random = SplitMix64(seed: 9)
        let ring = (0..<400).map { index -> GeoPoint in
            let angle = Double(index) / 400 * 2 * .pi
            let r = random.uniform(0.5, 1)
            return GeoPoint(lon: r * cos(angle), lat: r * sin(angle))
        }
        let index = PolygonIndex(rings: [ring])
        #expect(index.usesGrid)
        let closed = ring + [ring[0]]
        for query in [
            BoundingBox(minLon: 0.2, minLat: 0.2, maxLon: 0.4, maxLat: 0.9),
            BoundingBox(minLon: -2, minLat: -2, maxLon: 2, maxLat: 2),
            BoundingBox(minLon: 0.7, minLat: -0.01, maxLon: 0.71, maxLat: 0.01),
            BoundingBox(minLon: -.infinity, minLat: -.infinity, maxLon: .infinity, maxLat: .infinity),
            BoundingBox(minLon: 5, minLat: 5, maxLon: 6, maxLat: 6),
        ] {
            var seen: [String: Int] = [:]
            index.forEachEdge(in: query) { a, b in seen["\(a)-\(b)", default: 0] += 1 }
            #expect(seen.values.allSatisfy { $0 == 1 }, "each edge once")
            for (a, b) in zip(closed, closed.dropFirst()) {
                // Edges crossing the box (tested by sampling along them) must be visited.
                let meets = (0...64).contains { step in
                    let t = Double(step) / 64
                    return query.contains(lon: a.lon + (b.lon - a.lon) * t, lat: a.lat + (b.lat - a.lat) * t)
                }
                if meets { #expect(seen["\(a)-\(b)"] == 1, "edge \(a)-\(b) meets \(query)") }
            }
        }
    }
}
