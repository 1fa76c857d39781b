import Foundation

/// Distances on the sphere and a local plane for distances to polygon edges.
///
/// The sphere has the IUGG mean radius; haversine on it is within 0.5 % of the WGS 84
/// ellipsoid everywhere, which is far inside GPS error for geofencing.
public enum Geodesy {
    /// Mean Earth radius (IUGG), metres.
    public static let earthRadius = 6_371_008.8
    static let degrees = Double.pi / 180

    /// Great-circle distance in metres (haversine, stable for small distances).
    public static func distance(_ a: GeoPoint, _ b: GeoPoint) -> Double {
        let phi1 = a.lat * degrees
        let phi2 = b.lat * degrees
        let dPhi = phi2 - phi1
        let dLambda = (b.lon - a.lon) * degrees
        let s1 = sin(dPhi / 2)
        let s2 = sin(dLambda / 2)
        let h = min(1, s1 * s1 + cos(phi1) * cos(phi2) * s2 * s2)
        return 2 * earthRadius * asin(h.squareRoot())
    }

    /// Initial bearing from a to b, radians clockwise from north.
    public static func bearing(_ a: GeoPoint, _ b: GeoPoint) -> Double {
        let phi1 = a.lat * degrees
        let phi2 = b.lat * degrees
        let dLambda = (b.lon - a.lon) * degrees
        return atan2(sin(dLambda) * cos(phi2), cos(phi1) * sin(phi2) - sin(phi1) * cos(phi2) * cos(dLambda))
    }

    /// The point `distance` metres from `origin` along the great circle with initial `bearing` (radians).
    public static func destination(_ origin: GeoPoint, bearing: Double, distance: Double) -> GeoPoint {
        let delta = distance / earthRadius
        let phi1 = origin.lat * degrees
        let lambda1 = origin.lon * degrees
        let phi2 = asin(sin(phi1) * cos(delta) + cos(phi1) * sin(delta) * cos(bearing))
        let lambda2 = lambda1 + atan2(sin(bearing) * sin(delta) * cos(phi1), cos(delta) - sin(phi1) * sin(phi2))
        var lon = lambda2 / degrees
        lon = (lon + 540).truncatingRemainder(dividingBy: 360) - 180
        return GeoPoint(lon: lon, lat: phi2 / degrees)
    }

    /// A box (in degrees) around `center` holding every point within `meters` of it, split in
    /// two where it crosses the antimeridian; full longitude when it reaches a pole.
    public static func boxes(around center: GeoPoint, meters: Double) -> [BoundingBox] {
        let angular = meters / earthRadius
        let dLat = angular / degrees
        let minLat = center.lat - dLat
        let maxLat = center.lat + dLat
        if maxLat >= 90 || minLat <= -90 || angular >= .pi / 2 {
            return [BoundingBox(minLon: -180, minLat: max(minLat, -90), maxLon: 180, maxLat: min(maxLat, 90))]
        }
        let dLon = asin(min(1, sin(angular) / cos(center.lat * degrees))) / degrees
        return split(minLon: center.lon - dLon, maxLon: center.lon + dLon, minLat: minLat, maxLat: maxLat)
    }

    /// A longitude range cut at ±180 into boxes within [-180, 180].
    public static func split(minLon: Double, maxLon: Double, minLat: Double, maxLat: Double) -> [BoundingBox] {
        if maxLon - minLon >= 360 {
            return [BoundingBox(minLon: -180, minLat: minLat, maxLon: 180, maxLat: maxLat)]
        }
        var boxes: [BoundingBox] = []
        // Bring the range to start within [-180, 180).
        var low = minLon
        var high = maxLon
        while low < -180 {
            low += 360
            high += 360
        }
        while low >= 180 {
            low -= 360
            high -= 360
        }
        if high <= 180 {
            boxes.append(BoundingBox(minLon: low, minLat: minLat, maxLon: high, maxLat: maxLat))
        } else {
            boxes.append(BoundingBox(minLon: low, minLat: minLat, maxLon: 180, maxLat: maxLat))
            boxes.append(BoundingBox(minLon: -180, minLat: minLat, maxLon: high - 360, maxLat: maxLat))
        }
        return boxes
    }

    /// An azimuthal equidistant plane centred on a point: distances and bearings from the
    /// centre are exact on the sphere, so the distance from the centre to a nearby edge is
    /// accurate once the edge is cut into short pieces.
    public struct LocalPlane: Sendable {
        public let origin: GeoPoint
        private let sinPhi0: Double
        private let cosPhi0: Double

        public init(origin: GeoPoint) {
            self.origin = origin
            sinPhi0 = sin(origin.lat * degrees)
            cosPhi0 = cos(origin.lat * degrees)
        }

        /// Metres east and north of the origin (along the projection's axes).
        public func project(_ point: GeoPoint) -> (x: Double, y: Double) {
            let phi = point.lat * degrees
            let dLambda = (point.lon - origin.lon) * degrees
            let sinPhi = sin(phi)
            let cosPhi = cos(phi)
            let cosC = min(1, max(-1, sinPhi0 * sinPhi + cosPhi0 * cosPhi * cos(dLambda)))
            let c = acos(cosC)
            if c < 1e-12 { return (0, 0) }
            // Near 0 acos loses precision; haversine gives the distance exactly.
            let distance = c < 1e-3 ? Geodesy.distance(origin, point) / earthRadius : c
            let k = distance / sin(distance)
            let x = k * cosPhi * sin(dLambda)
            let y = k * (cosPhi0 * sinPhi - sinPhi0 * cosPhi * cos(dLambda))
            return (x * earthRadius, y * earthRadius)
        }
    }

    /// Metres from `plane.origin` to the lon/lat segment a–b (a straight line in lon/lat, as
    /// GeoJSON draws it), cut into pieces of at most `maxPiece` degrees so that its curve in
    /// the local plane is followed closely.
    public static func distance(
        from plane: LocalPlane, toSegment a: GeoPoint, _ b: GeoPoint, maxPiece: Double = 0.02
    )
        -> Double
    {
        let span = max(abs(b.lon - a.lon), abs(b.lat - a.lat))
        let pieces = max(1, Int((span / maxPiece).rounded(.up)))
        var best = Double.infinity
        var previous = plane.project(a)
        for piece in 1...pieces {
            let t = Double(piece) / Double(pieces)
            let point = GeoPoint(lon: a.lon + (b.lon - a.lon) * t, lat: a.lat + (b.lat - a.lat) * t)
            let current = plane.project(point)
            best = min(best, distanceToOrigin(previous, current))
            previous = current
        }
        return best
    }

    /// Distance from (0, 0) to the plane segment p–q.
    static func distanceToOrigin(_ p: (x: Double, y: Double), _ q: (x: Double, y: Double)) -> Double {
        let dx = q.x - p.x
        let dy = q.y - p.y
        let length2 = dx * dx + dy * dy
        var t = length2 > 0 ? -(p.x * dx + p.y * dy) / length2 : 0
        t = min(1, max(0, t))
        let x = p.x + t * dx
        let y = p.y + t * dy
        return (x * x + y * y).squareRoot()
    }

    /// Degrees of latitude spanning `meters`.
    public static func latitudeDegrees(meters: Double) -> Double { meters / earthRadius / degrees }
}
