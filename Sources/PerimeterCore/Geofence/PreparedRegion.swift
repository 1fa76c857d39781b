import Foundation

/// A region made ready for evaluation: circles with their trigonometry precomputed, polygons
/// unwrapped across the antimeridian, closed around poles and indexed for point location.
public struct PreparedRegion: Sendable {
    public let region: Region
    let geometry: Geometry
    /// Boxes within [-180, 180] for the spatial index: one or more per part (split at ±180).
    let indexBoxes: [(box: BoundingBox, part: Int)]

    enum Geometry: Sendable {
        case circle(PreparedCircle)
        case polygons([PreparedPolygon])
        case beacon
    }

    public init(_ region: Region) {
        self.region = region
        switch region.shape {
        case .circle(let center, let radius):
            let circle = PreparedCircle(center: center, radius: radius)
            geometry = .circle(circle)
            indexBoxes = Geodesy.boxes(around: center, meters: radius).map { ($0, 0) }
        case .polygons(let polygons):
            let parts = polygons.map(PreparedPolygon.init(rings:))
            geometry = .polygons(parts)
            var boxes: [(BoundingBox, Int)] = []
            for (number, part) in parts.enumerated() {
                let frame = part.frameBox
                for box in Geodesy.split(
                    minLon: frame.minLon, maxLon: frame.maxLon, minLat: frame.minLat, maxLat: frame.maxLat)
                {
                    boxes.append((box, number))
                }
            }
            indexBoxes = boxes
        case .beacon:
            geometry = .beacon
            indexBoxes = []
        }
    }

    public var id: String { region.id }

    /// Whether the point lies in the region (boundary included). Beacon regions contain nothing.
    @inline(__always)
    public func contains(_ point: GeoPoint) -> Bool {
        switch geometry {
        case .circle(let circle): return circle.contains(point)
        case .polygons(let parts): return parts.contains { $0.contains(point) }
        case .beacon: return false
        }
    }

    /// Whether part `part` (a polygon of a MultiPolygon) contains the point.
    @inline(__always)
    func contains(part: Int, _ point: GeoPoint) -> Bool {
        switch geometry {
        case .circle(let circle): return circle.contains(point)
        case .polygons(let parts): return parts[part].contains(point)
        case .beacon: return false
        }
    }

    /// Signed distance in metres from `point` to the region's boundary: negative inside.
    ///
    /// Exact on the sphere for circles. For polygons the sign comes from containment (so it
    /// always agrees with ``contains(_:)``) and the magnitude from a local azimuthal plane;
    /// when the boundary is farther than `limit` metres, ±infinity is returned, since callers
    /// only need to know it is beyond their margin.
    public func signedDistance(_ point: GeoPoint, limit: Double = .infinity) -> Double {
        switch geometry {
        case .circle(let circle):
            return Geodesy.distance(circle.center, point) - circle.radius
        case .polygons(let parts):
            let inside = parts.contains { $0.contains(point) }
            let plane = Geodesy.LocalPlane(origin: point)
            var best = Double.infinity
            for part in parts { best = min(best, part.boundaryDistance(from: plane, limit: min(limit, best))) }
            return inside ? -best : best
        case .beacon:
            return .infinity
        }
    }

    /// Where the straight segment from a to b (lon/lat, the short way across ±180) runs
    /// through the region: the fractions along it of the first entry and the last exit, or nil
    /// when it does not enter. Meant for two fixes both outside the region.
    public func crossing(from a: GeoPoint, to b: GeoPoint) -> (enter: Double, exit: Double)? {
        switch geometry {
        case .circle(let circle): return circle.crossing(from: a, to: b)
        case .polygons(let parts):
            var enter = Double.infinity
            var exit = -Double.infinity
            for part in parts {
                if let span = part.crossing(from: a, to: b) {
                    enter = min(enter, span.enter)
                    exit = max(exit, span.exit)
                }
            }
            return enter <= exit ? (enter, exit) : nil
        case .beacon: return nil
        }
    }
}

/// A geodesic circle with its trigonometry precomputed.
///
/// Containment is the haversine test, decided first by a flat-earth estimate where that is
/// safe: the local equirectangular distance differs from the spherical one by less than a
/// bound computed per circle, so only points in a thin band around the edge pay for the
/// trigonometry, and the answer is always the haversine one.
struct PreparedCircle: Sendable {
    let center: GeoPoint
    let radius: Double
    private let phi: Double
    private let cosPhi: Double
    /// sin²(angular radius / 2): a point is inside when its haversine term is at most this.
    private let threshold: Double
    /// Metres per degree of latitude and of longitude (at the centre) for the estimate.
    private let metresPerDegreeLat: Double
    private let metresPerDegreeLon: Double
    /// Squared radii below / above which the estimate decides; between them, the exact test.
    private let surelyInside2: Double
    private let surelyOutside2: Double

    init(center: GeoPoint, radius: Double) {
        self.center = center
        self.radius = radius
        phi = center.lat * .pi / 180
        cosPhi = cos(phi)
        let angular = min(radius / Geodesy.earthRadius, .pi)
        let half = angular / 2
        threshold = sin(half) * sin(half)
        metresPerDegreeLat = Geodesy.earthRadius * .pi / 180
        metresPerDegreeLon = metresPerDegreeLat * cosPhi
        // The estimate's relative error within the circle's box: the longitude scale changes by
        // about tan(φ)·Δφ across it, and the chord/arc and projection terms are of order Δφ².
        let latitudeReach = abs(phi) + angular
        if radius < 50_000 && latitudeReach < 80 * .pi / 180 {
            let error = 2 * tan(latitudeReach) * angular + 2 * angular * angular + 1e-9
            surelyInside2 = pow(radius * (1 - error), 2)
            surelyOutside2 = pow(radius * (1 + error), 2)
        } else {
            surelyInside2 = -1
            surelyOutside2 = 0
        }
    }

    @inline(__always)
    func contains(_ point: GeoPoint) -> Bool {
        let dx = (point.lon - center.lon) * metresPerDegreeLon
        let dy = (point.lat - center.lat) * metresPerDegreeLat
        let d2 = dx * dx + dy * dy
        if d2 < surelyInside2 { return true }
        if d2 > surelyOutside2 && surelyOutside2 > 0 && abs(point.lon - center.lon) < 180 { return false }
        return exactlyContains(point)
    }

    /// Haversine containment without the inverse trigonometry.
    func exactlyContains(_ point: GeoPoint) -> Bool {
        let phi2 = point.lat * .pi / 180
        let s1 = sin((phi2 - phi) / 2)
        let s2 = sin((point.lon - center.lon) * .pi / 360)
        return s1 * s1 + cosPhi * cos(phi2) * s2 * s2 <= threshold
    }

    func crossing(from a: GeoPoint, to b: GeoPoint) -> (enter: Double, exit: Double)? {
        let plane = Geodesy.LocalPlane(origin: center)
        let p = plane.project(a)
        let q = plane.project(PreparedPolygon.nearestCopy(of: b, to: a))
        let dx = q.x - p.x
        let dy = q.y - p.y
        let aa = dx * dx + dy * dy
        guard aa > 0 else { return nil }
        let bb = 2 * (p.x * dx + p.y * dy)
        let cc = p.x * p.x + p.y * p.y - radius * radius
        let discriminant = bb * bb - 4 * aa * cc
        guard discriminant > 0 else { return nil }
        let root = discriminant.squareRoot()
        let t0 = (-bb - root) / (2 * aa)
        let t1 = (-bb + root) / (2 * aa)
        guard t1 >= 0, t0 <= 1 else { return nil }
        return (max(0, t0), min(1, t1))
    }
}

/// One polygon (exterior and holes) in a continuous longitude frame, with its point index.
struct PreparedPolygon: Sendable {
    /// Rings unwrapped across the antimeridian and, for a ring around a pole, closed over the pole.
    let rings: [[GeoPoint]]
    let index: PolygonIndex
    /// The bounding box in the polygon's own frame (longitudes may pass ±180).
    let frameBox: BoundingBox

    /// A placeholder for a freed slot of ``GeofenceIndex``.
    static let empty = PreparedPolygon(rings: [])

    init(rings original: [[GeoPoint]]) {
        var rings: [[GeoPoint]] = []
        for ring in original {
            var (points, wraps) = RingGeometry.unwrapped(ring)
            if wraps != 0, let first = points.first, let last = points.last {
                // The ring goes once around the globe: close it over the pole on its side.
                let meanLatitude = points.reduce(0) { $0 + $1.lat } / Double(points.count)
                let pole = meanLatitude >= 0 ? 90.0 : -90.0
                points.append(GeoPoint(lon: last.lon, lat: pole))
                points.append(GeoPoint(lon: first.lon, lat: pole))
                points.append(first)
            }
            rings.append(points)
        }
        // Holes share the exterior's frame.
        if let shell = rings.first.flatMap(BoundingBox.init) {
            for hole in rings.indices.dropFirst() {
                guard let box = BoundingBox(rings[hole]), !box.intersects(shell),
                    let shift = [360.0, -360.0].first(where: { box.shifted(lon: $0).intersects(shell) })
                else { continue }
                rings[hole] = rings[hole].map { GeoPoint(lon: $0.lon + shift, lat: $0.lat) }
            }
        }
        self.rings = rings
        index = PolygonIndex(rings: rings)
        frameBox = index.boundingBox
    }

    /// Containment, trying the point in each copy of the frame (lon, lon ± 360).
    @inline(__always)
    func contains(_ point: GeoPoint) -> Bool {
        if frameBox.contains(lon: point.lon, lat: point.lat) && index.contains(lon: point.lon, lat: point.lat) {
            return true
        }
        guard frameBox.minLon < -180 || frameBox.maxLon > 180 else { return false }
        for shift in [360.0, -360.0] where frameBox.contains(lon: point.lon + shift, lat: point.lat) {
            if index.contains(lon: point.lon + shift, lat: point.lat) { return true }
        }
        return false
    }

    /// `point` moved by ±360° to lie within 180° of `reference` in longitude.
    static func nearestCopy(of point: GeoPoint, to reference: GeoPoint) -> GeoPoint {
        var lon = point.lon
        while lon - reference.lon > 180 { lon -= 360 }
        while lon - reference.lon < -180 { lon += 360 }
        return GeoPoint(lon: lon, lat: point.lat)
    }

    /// `point` moved into this polygon's frame (the copy nearest the frame's centre).
    func inFrame(_ point: GeoPoint) -> GeoPoint {
        let center = GeoPoint(lon: (frameBox.minLon + frameBox.maxLon) / 2, lat: 0)
        return Self.nearestCopy(of: point, to: center)
    }

    /// Metres from the plane's origin to the nearest boundary edge, or infinity when every
    /// edge is farther than `limit`.
    func boundaryDistance(from plane: Geodesy.LocalPlane, limit: Double) -> Double {
        let origin = inFrame(plane.origin)
        var best = Double.infinity
        let search: BoundingBox
        if limit.isFinite {
            let degreesLat = Geodesy.latitudeDegrees(meters: limit) * 1.01
            let cosine = max(cos(min(abs(origin.lat) + degreesLat, 89.999) * .pi / 180), 1e-6)
            let degreesLon = min(degreesLat / cosine, 360)
            search = BoundingBox(
                minLon: origin.lon - degreesLon, minLat: origin.lat - degreesLat, maxLon: origin.lon + degreesLon,
                maxLat: origin.lat + degreesLat)
        } else {
            search = BoundingBox(minLon: -.infinity, minLat: -.infinity, maxLon: .infinity, maxLat: .infinity)
        }
        // Edges are straight in lon/lat; shift them next to the origin so the plane sees them whole.
        let shift = origin.lon - plane.origin.lon
        index.forEachEdge(in: search) { a, b in
            let a2 = GeoPoint(lon: a.lon - shift, lat: a.lat)
            let b2 = GeoPoint(lon: b.lon - shift, lat: b.lat)
            best = min(best, Geodesy.distance(from: plane, toSegment: a2, b2))
        }
        return best <= limit ? best : .infinity
    }

    /// Fractions along a→b of the first and last boundary crossings, when the segment enters
    /// the polygon.
    func crossing(from a: GeoPoint, to b: GeoPoint) -> (enter: Double, exit: Double)? {
        let start = inFrame(a)
        let end = Self.nearestCopy(of: b, to: start)
        guard
            let segmentBox = BoundingBox([start, end]),
            segmentBox.intersects(frameBox)
        else { return nil }
        var first = Double.infinity
        var last = -Double.infinity
        index.forEachEdge(in: segmentBox) { c, d in
            guard RingGeometry.segmentsIntersect(start, end, c, d) else { return }
            let denominator = (end.lon - start.lon) * (d.lat - c.lat) - (end.lat - start.lat) * (d.lon - c.lon)
            guard denominator != 0 else { return }
            let t = ((c.lon - start.lon) * (d.lat - c.lat) - (c.lat - start.lat) * (d.lon - c.lon)) / denominator
            first = min(first, t)
            last = max(last, t)
        }
        // The caller checks that the stretch between is really inside (not a graze along a notch).
        guard first < last else { return nil }
        return (max(0, first), min(1, last))
    }
}
