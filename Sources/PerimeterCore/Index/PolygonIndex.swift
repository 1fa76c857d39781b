/// Point-in-polygon for one polygon with holes, answered in time independent of its vertex count.
///
/// Semantics: even-odd over all rings (what GEOS's ray-crossing locator computes, so a point farther
/// than rounding error from every edge gets shapely's `intersects` answer even for invalid rings), and
/// the boundary counts as inside: a point exactly on an edge or a vertex is contained. Every decision is
/// made with exact orientation signs (`PlanarOrientation`), so collinear runs, repeated vertices, spikes
/// and points sharing a coordinate with a vertex need no special cases and no tolerance.
///
/// Coordinates are planar: x = longitude, y = latitude, no wrapping (a caller unwraps rings crossing the
/// antimeridian, so longitudes may exceed ±180).
///
/// Small polygons (fewer than `gridThreshold` edges) use the plain crossing-number test after a bounding-box
/// check. Larger ones get a `PolygonGrid`: a uniform grid over the bounding box whose cells are inside,
/// outside, or list the few edges passing through them.
public struct PolygonIndex: Sendable {
    /// Below this many edges a linear scan is as fast as a grid lookup and needs no memory.
    static let gridThreshold = 32

    /// The smallest box holding every vertex; `.empty` for a polygon without vertices.
    public let boundingBox: BoundingBox
    /// All rings' vertices as x, y pairs, ring after ring, each ring ending with its first vertex again.
    private let coordinates: [Double]
    /// One past the last vertex (closing vertex included) of each ring. Edge i runs from vertex i to i + 1
    /// for every i that is not the last vertex of a ring.
    private let ringEnds: [Int]
    private let grid: PolygonGrid?

    /// Indexes a polygon.
    ///
    /// - Parameter rings: `rings[0]` is the exterior, the rest are holes (even-odd makes the distinction
    ///   moot). Each ring may be closed (first == last) or not; an open ring is closed implicitly. Empty
    ///   rings are ignored; degenerate rings (zero area, repeated points) are allowed.
    public init(rings: [[GeoPoint]]) {
        var coordinates: [Double] = []
        coordinates.reserveCapacity(2 * rings.reduce(0) { $0 + $1.count + 1 })
        var ringEnds: [Int] = []
        var box = BoundingBox.empty
        for ring in rings {
            guard let first = ring.first, let last = ring.last else { continue }
            for point in ring {
                coordinates.append(point.lon)
                coordinates.append(point.lat)
                box.extend(point)
            }
            if first != last {
                coordinates.append(first.lon)
                coordinates.append(first.lat)
            }
            ringEnds.append(coordinates.count / 2)
        }
        self.coordinates = coordinates
        self.ringEnds = ringEnds
        self.boundingBox = box
        let edgeCount = coordinates.count / 2 - ringEnds.count
        let isGriddable =
            edgeCount >= Self.gridThreshold && box.width > 0 && box.height > 0 && box.width.isFinite
            && box.height.isFinite
        grid = isGriddable ? PolygonGrid(coordinates: coordinates, ringEnds: ringEnds, box: box) : nil
    }

    /// Number of stored vertices, each ring's closing vertex included (added for rings given open).
    public var vertexCount: Int { coordinates.count / 2 }

    /// Whether queries go through the grid (for tests and diagnostics).
    var usesGrid: Bool { grid != nil }

    /// Whether the point is inside (even-odd over all rings) or on the boundary.
    public func contains(lon: Double, lat: Double) -> Bool {
        // Written out rather than `boundingBox.contains` so NaN fails here too (every comparison is false).
        guard lon >= boundingBox.minLon, lon <= boundingBox.maxLon, lat >= boundingBox.minLat,
            lat <= boundingBox.maxLat
        else { return false }
        return coordinates.withUnsafeBufferPointer { coordinates in
            if let grid {
                return grid.contains(x: lon, y: lat, coordinates: coordinates) {
                    Self.crossingNumberContains(x: lon, y: lat, coordinates: coordinates, ringEnds: ringEnds)
                }
            }
            return Self.crossingNumberContains(x: lon, y: lat, coordinates: coordinates, ringEnds: ringEnds)
        }
    }

    /// Calls `body` once with the end points of every edge that meets `box` (closed), and possibly of other
    /// edges whose bounding boxes meet it; in no particular order. Uses the grid to skip far edges, so a
    /// small box costs about the edges near it.
    public func forEachEdge(in box: BoundingBox, _ body: (GeoPoint, GeoPoint) -> Void) {
        guard box.intersects(boundingBox) else { return }
        func visit(_ edge: Int) {
            let ax = coordinates[2 * edge], ay = coordinates[2 * edge + 1]
            let bx = coordinates[2 * edge + 2], by = coordinates[2 * edge + 3]
            guard min(ax, bx) <= box.maxLon, max(ax, bx) >= box.minLon, min(ay, by) <= box.maxLat,
                max(ay, by) >= box.minLat
            else { return }
            body(GeoPoint(lon: ax, lat: ay), GeoPoint(lon: bx, lat: by))
        }
        if let edges = grid?.edgeIDs(near: box) {
            for edge in edges { visit(Int(edge)) }
            return
        }
        var start = 0
        for end in ringEnds {
            for edge in start..<max(start, end - 1) { visit(edge) }
            start = end
        }
    }

    /// The plain test over every edge: parity of the edges crossed by the ray from the point towards +x,
    /// with the half-open rule (a vertex exactly at the point's latitude counts as above it), and an exact
    /// check for the point lying on an edge.
    static func crossingNumberContains(
        x: Double, y: Double, coordinates: UnsafeBufferPointer<Double>, ringEnds: [Int]
    ) -> Bool {
        var inside = false
        var start = 0
        for end in ringEnds {
            var index = 2 * start
            let stop = 2 * (end - 1)
            while index < stop {
                let ax = coordinates[index], ay = coordinates[index + 1]
                let bx = coordinates[index + 2], by = coordinates[index + 3]
                index += 2
                if (ay > y) != (by > y) {
                    // The edge spans the ray's latitude: it is crossed iff the point is on the edge's inner
                    // side (left of an upward edge, right of a downward one). On its line means on the edge,
                    // since the edge meets that latitude in one point.
                    let side = PlanarOrientation.sign(ax, ay, bx, by, x, y)
                    if side == 0 { return true }
                    if (side > 0) == (by > ay) { inside.toggle() }
                } else if (ay == y || by == y) && EdgeCrossing.isOnEdge(x, y, ax, ay, bx, by) {
                    // A horizontal edge at the point's latitude, or a vertex at it: the ray rule skips
                    // both, so check for contact directly.
                    return true
                }
            }
            start = end
        }
        return inside
    }
}
