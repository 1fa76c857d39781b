/// Planar predicates on linear rings in lon/lat: orientation, segment intersection,
/// self-intersection, antimeridian unwrapping and pole closing.
public enum RingGeometry {
    /// Twice the signed area of triangle a, b, c: > 0 when c is left of a→b.
    @inline(__always)
    public static func orientation(_ a: GeoPoint, _ b: GeoPoint, _ c: GeoPoint) -> Double {
        (b.lon - a.lon) * (c.lat - a.lat) - (b.lat - a.lat) * (c.lon - a.lon)
    }

    /// Whether c (known to be collinear with a and b) lies within the segment's box.
    @inline(__always)
    static func within(_ a: GeoPoint, _ b: GeoPoint, _ c: GeoPoint) -> Bool {
        min(a.lon, b.lon) <= c.lon && c.lon <= max(a.lon, b.lon) && min(a.lat, b.lat) <= c.lat
            && c.lat <= max(a.lat, b.lat)
    }

    /// Whether the closed segments a–b and c–d share any point.
    public static func segmentsIntersect(_ a: GeoPoint, _ b: GeoPoint, _ c: GeoPoint, _ d: GeoPoint) -> Bool {
        let d1 = orientation(c, d, a)
        let d2 = orientation(c, d, b)
        let d3 = orientation(a, b, c)
        let d4 = orientation(a, b, d)
        if ((d1 > 0 && d2 < 0) || (d1 < 0 && d2 > 0)) && ((d3 > 0 && d4 < 0) || (d3 < 0 && d4 > 0)) { return true }
        if d1 == 0 && within(c, d, a) { return true }
        if d2 == 0 && within(c, d, b) { return true }
        if d3 == 0 && within(a, b, c) { return true }
        if d4 == 0 && within(a, b, d) { return true }
        return false
    }

    /// The intersection point of lines a–b and c–d (for messages); the midpoint when parallel.
    static func intersectionPoint(_ a: GeoPoint, _ b: GeoPoint, _ c: GeoPoint, _ d: GeoPoint) -> GeoPoint {
        let denominator = (b.lon - a.lon) * (d.lat - c.lat) - (b.lat - a.lat) * (d.lon - c.lon)
        if denominator == 0 {
            return GeoPoint(lon: (b.lon + c.lon) / 2, lat: (b.lat + c.lat) / 2)
        }
        let t = ((c.lon - a.lon) * (d.lat - c.lat) - (c.lat - a.lat) * (d.lon - c.lon)) / denominator
        return GeoPoint(lon: a.lon + t * (b.lon - a.lon), lat: a.lat + t * (b.lat - a.lat))
    }

    /// Twice the signed planar area (shoelace); positive for counter-clockwise rings.
    static func signedArea(_ ring: [GeoPoint]) -> Double {
        guard ring.count > 2 else { return 0 }
        var sum = 0.0
        for index in 0..<(ring.count - 1) {
            sum += ring[index].lon * ring[index + 1].lat - ring[index + 1].lon * ring[index].lat
        }
        return sum
    }

    /// Crossing-number containment against one ring (boundary counts as inside). Linear time:
    /// for validation and tests; evaluation uses ``PolygonIndex``.
    public static func contains(_ ring: [GeoPoint], _ point: GeoPoint) -> Bool {
        var inside = false
        var j = ring.count - 1
        for i in 0..<ring.count {
            let a = ring[i]
            let b = ring[j]
            if orientation(a, b, point) == 0 && within(a, b, point) { return true }
            if (a.lat > point.lat) != (b.lat > point.lat) {
                let x = a.lon + (point.lat - a.lat) * (b.lon - a.lon) / (b.lat - a.lat)
                if point.lon < x { inside.toggle() }
            }
            j = i
        }
        return inside
    }

    /// Ring `ring` with consecutive duplicate positions removed (they make zero-length edges).
    static func withoutRepeats(_ ring: [GeoPoint]) -> [GeoPoint] {
        var result: [GeoPoint] = []
        result.reserveCapacity(ring.count)
        for point in ring where result.last != point { result.append(point) }
        return result
    }

    /// Descriptions of where a closed ring crosses or touches itself, at most `limit` of them:
    /// "self-intersects at vertex 14: edges 14–15 and 20–21 meet at [2.35, 48.86]".
    ///
    /// Edges are bucketed in a uniform grid sized from the ring's mean edge length, so a ring
    /// of n vertices costs about O(n) rather than O(n²) — for real outlines. Crafted rings whose
    /// edges crowd the same cells (a comb of long teeth, a fan of spikes) would cost O(n²): the
    /// check stops once its work (bucket entries plus edge pairs compared) passes ``workPerEdge``
    /// per edge plus ``workAllowance``, and says the ring is too intricate to check (a 58 KB comb
    /// took 165 ms, a 10,000-vertex one would take seconds; real time-zone outlines need a few
    /// units of work per edge).
    public static func selfIntersections(of ring: [GeoPoint], limit: Int) -> [String] {
        // Work in the unwrapped frame so that a ring crossing the antimeridian is judged whole.
        selfIntersections(points: unwrapped(ring).points, limit: limit)
    }

    static let workPerEdge = 64
    static let workAllowance = 1 << 20

    static func selfIntersections(points ring: [GeoPoint], limit: Int) -> [String] {
        let points = withoutRepeats(ring)
        let edgeCount = points.count - 1
        guard edgeCount >= 3, let box = BoundingBox(points) else { return [] }
        let workLimit = workPerEdge * edgeCount + workAllowance
        var work = 0
        let tooIntricate =
            "is too intricate to check for self-intersections: its \(edgeCount) edges crowd the same places "
            + "(more than \(workLimit) edge pairs to compare); simplify it or split it into several polygons"
        var totalLength = 0.0
        for i in 0..<edgeCount {
            totalLength += abs(points[i + 1].lon - points[i].lon) + abs(points[i + 1].lat - points[i].lat)
        }
        let cellSize = max(totalLength / Double(edgeCount) * 2, 1e-12)
        let columns = min(max(Int(box.width / cellSize) + 1, 1), 2048)
        let rows = min(max(Int(box.height / cellSize) + 1, 1), 2048)
        let cellWidth = max(box.width / Double(columns), 1e-300)
        let cellHeight = max(box.height / Double(rows), 1e-300)
        // Counted before filling: one long edge in a fine grid would otherwise fill millions of buckets.
        for edge in 0..<edgeCount {
            let a = points[edge]
            let b = points[edge + 1]
            let columns =
                min(Int((max(a.lon, b.lon) - box.minLon) / cellWidth), columns - 1)
                - min(Int((min(a.lon, b.lon) - box.minLon) / cellWidth), columns - 1) + 1
            let rows =
                min(Int((max(a.lat, b.lat) - box.minLat) / cellHeight), rows - 1)
                - min(Int((min(a.lat, b.lat) - box.minLat) / cellHeight), rows - 1) + 1
            work += columns * rows
            if work > workLimit { return [tooIntricate] }
        }
        var buckets: [Int: [Int32]] = [:]
        for edge in 0..<edgeCount {
            let a = points[edge]
            let b = points[edge + 1]
            let column0 = min(Int((min(a.lon, b.lon) - box.minLon) / cellWidth), columns - 1)
            let column1 = min(Int((max(a.lon, b.lon) - box.minLon) / cellWidth), columns - 1)
            let row0 = min(Int((min(a.lat, b.lat) - box.minLat) / cellHeight), rows - 1)
            let row1 = min(Int((max(a.lat, b.lat) - box.minLat) / cellHeight), rows - 1)
            for row in row0...row1 {
                for column in column0...column1 { buckets[row * columns + column, default: []].append(Int32(edge)) }
            }
        }
        var found: [String] = []
        var reported: Set<Int> = []
        for key in buckets.keys.sorted() {
            let edges = buckets[key]!
            guard edges.count > 1 else { continue }
            work += edges.count * (edges.count - 1) / 2
            if work > workLimit { return found + [tooIntricate] }
            for x in 0..<(edges.count - 1) {
                for y in (x + 1)..<edges.count {
                    let i = Int(min(edges[x], edges[y]))
                    let j = Int(max(edges[x], edges[y]))
                    let pair = i * edgeCount + j
                    guard !reported.contains(pair) else { continue }
                    let a = points[i]
                    let b = points[i + 1]
                    let c = points[j]
                    let d = points[j + 1]
                    let adjacent = j == i + 1 || (i == 0 && j == edgeCount - 1)
                    if adjacent {
                        // Neighbours share a vertex; they are wrong only when they fold back over each other.
                        let shared = j == i + 1 ? b : a
                        let far1 = j == i + 1 ? a : b
                        let far2 = j == i + 1 ? d : c
                        guard orientation(far1, shared, far2) == 0,
                            within(shared, far1, far2) || within(shared, far2, far1)
                        else { continue }
                        reported.insert(pair)
                        let vertex = j == i + 1 ? j : 0
                        found.append("folds back on itself at vertex \(vertex) \(shared) (a zero-width spike)")
                    } else {
                        guard segmentsIntersect(a, b, c, d) else { continue }
                        reported.insert(pair)
                        let at = intersectionPoint(a, b, c, d)
                        found.append(
                            "self-intersects at vertex \(i + 1): edges \(i)–\(i + 1) and \(j)–\(j + 1) meet at "
                                + "[\(rounded(at.lon)), \(rounded(at.lat))]")
                    }
                    if found.count >= limit { return found }
                }
            }
        }
        return found
    }

    private static func rounded(_ value: Double) -> Double { (value * 1e7).rounded() / 1e7 }

    /// The index of a vertex of `hole` that lies strictly outside `shell`, checking at most 64
    /// evenly spread vertices; nil when none is found.
    public static func firstVertexOutside(_ hole: [GeoPoint], shell: [GeoPoint]) -> Int? {
        let shellFrame = unwrapped(shell).points
        var holeFrame = unwrapped(hole).points
        // Bring the hole into the shell's frame when one of them was unwrapped past ±180.
        if let shellBox = BoundingBox(shellFrame), let holeBox = BoundingBox(holeFrame), !shellBox.intersects(holeBox),
            let shift = [360.0, -360.0].first(where: { holeBox.shifted(lon: $0).intersects(shellBox) })
        {
            holeFrame = holeFrame.map { GeoPoint(lon: $0.lon + shift, lat: $0.lat) }
        }
        let step = max(1, holeFrame.count / 64)
        for index in stride(from: 0, to: holeFrame.count, by: step) where !contains(shellFrame, holeFrame[index]) {
            return index
        }
        return nil
    }

    /// A ring made continuous in longitude where it crosses the antimeridian.
    ///
    /// GeoJSON should split such shapes at ±180 (RFC 7946 §3.1.9), and real data does; a
    /// ring that instead jumps by more than 180° (but less than 360°) between consecutive
    /// positions is read as crossing the antimeridian the short way when that makes it
    /// narrower than 180° of longitude, and later positions are shifted by 360°. Otherwise
    /// its edges are taken literally, as planar GeoJSON (a continent-sized triangle may have
    /// an edge 270° long). Edges exactly 360° long (along a pole, as in polar caps) are literal.
    /// - Returns: the points, and `wraps` = ±1 when the ring goes once around the globe (it
    ///   encloses a pole and needs closing over it), else 0.
    public static func unwrapped(_ ring: [GeoPoint]) -> (points: [GeoPoint], wraps: Int) {
        guard var previous = ring.first else { return ([], 0) }
        var shift = 0.0
        var crossed = false
        var points = [previous]
        points.reserveCapacity(ring.count)
        for point in ring.dropFirst() {
            let delta = point.lon - previous.lon
            if delta > 180 && delta < 360 {
                shift -= 360
                crossed = true
            } else if delta < -180 && delta > -360 {
                shift += 360
                crossed = true
            }
            points.append(GeoPoint(lon: point.lon + shift, lat: point.lat))
            previous = point
        }
        guard crossed else { return (ring, 0) }
        let wraps = Int((shift / 360).rounded())
        if wraps != 0 {
            // Once around the globe: a ring around a pole, unless taken literally it is already
            // a proper polygon (then it is one with an edge over 180° long).
            let literalIsProper = signedArea(ring) != 0 && selfIntersections(points: ring, limit: 1).isEmpty
            return literalIsProper ? (ring, 0) : (points, wraps)
        }
        let literal = BoundingBox(ring)!.width
        let continuous = BoundingBox(points)!.width
        return continuous <= 180 && continuous < literal ? (points, 0) : (ring, 0)
    }
}
