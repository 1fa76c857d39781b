import Foundation

/// A local map projection for drawing a venue: azimuthal equidistant about the centre of what
/// is drawn (``Geodesy/LocalPlane``), in metres, then scaled uniformly into a picture.
///
/// Distances from the centre are exact on the sphere; across a venue (a few kilometres) any
/// two points keep their distance to well under 0.1 %, so the scale bar is honest everywhere.
/// North is up at the centre.
public struct MapProjection: Sendable {
    public let plane: Geodesy.LocalPlane
    /// Picture units (pixels) per metre.
    public let scale: Double
    public let width: Double
    public let height: Double
    /// The picture position of the plane's origin.
    private let originX: Double
    private let originY: Double

    /// A projection that fits `points` into a `width` × `height` picture with `margin` on each side.
    ///
    /// The origin is the centre of the points' bounding box (taken across the antimeridian when
    /// the points straddle it). With no points (or a single one),
    /// the picture spans `minimumSpan` metres.
    public init(fitting points: [GeoPoint], width: Double, height: Double, margin: Double, minimumSpan: Double = 50) {
        // Longitudes unwrapped about the first point, so that a venue across the antimeridian
        // (179.99 and -179.99) is centred there and not on the other side of the Earth.
        let reference = points.first?.lon ?? 0
        let unwrapped = points.map { point -> GeoPoint in
            var lon = point.lon
            while lon - reference > 180 { lon -= 360 }
            while lon - reference < -180 { lon += 360 }
            return GeoPoint(lon: lon, lat: point.lat)
        }
        let box = BoundingBox(unwrapped) ?? BoundingBox(minLon: 0, minLat: 0, maxLon: 0, maxLat: 0)
        let centre = GeoPoint(lon: (box.minLon + box.maxLon) / 2, lat: (box.minLat + box.maxLat) / 2)
        let plane = Geodesy.LocalPlane(origin: centre)
        var minX = 0.0
        var maxX = 0.0
        var minY = 0.0
        var maxY = 0.0
        for point in points {
            let p = plane.project(point)
            minX = min(minX, p.x)
            maxX = max(maxX, p.x)
            minY = min(minY, p.y)
            maxY = max(maxY, p.y)
        }
        let spanX = max(maxX - minX, minimumSpan)
        let spanY = max(maxY - minY, minimumSpan)
        let usableWidth = max(width - 2 * margin, 1)
        let usableHeight = max(height - 2 * margin, 1)
        let scale = min(usableWidth / spanX, usableHeight / spanY)
        self.plane = plane
        self.scale = scale
        self.width = width
        self.height = height
        // Centre the drawing's extent in the picture.
        originX = width / 2 - (minX + maxX) / 2 * scale
        originY = height / 2 + (minY + maxY) / 2 * scale
    }

    /// Metres east and north of the projection's centre.
    public func metres(_ point: GeoPoint) -> (x: Double, y: Double) { plane.project(point) }

    /// Picture coordinates: x to the right, y down.
    public func point(_ point: GeoPoint) -> (x: Double, y: Double) {
        let m = plane.project(point)
        return (originX + m.x * scale, originY - m.y * scale)
    }

    /// The projection as one affine map from (lon, lat) to picture coordinates, fitted through
    /// the centre and points 0.01° east and north of it: within a venue (a few kilometres) it
    /// is off by far less than a picture unit. The page's editor uses its inverse to turn a
    /// click into a place.
    public var linearized: PlaneTransform {
        let o = plane.origin
        let geo = [o, GeoPoint(lon: o.lon + 0.01, lat: o.lat), GeoPoint(lon: o.lon, lat: o.lat + 0.01)]
        let picture = geo.map { point($0) }
        return
            (try? PlaneTransform.fitting(
                from: geo.map { PlaneTransform.Point($0.lon, $0.lat) },
                to: picture.map { PlaneTransform.Point($0.x, $0.y) }))
            ?? .identity
    }

    /// The longest "round" length (1, 2 or 5 × 10ⁿ metres) whose bar is at most `maxPixels` long.
    public func scaleBarMetres(maxPixels: Double) -> Double {
        let limit = maxPixels / scale
        guard limit.isFinite, limit > 0 else { return 1 }
        var magnitude = pow(10, floor(log10(limit)))
        while magnitude > limit { magnitude /= 10 }
        for step in [5.0, 2, 1] where step * magnitude <= limit { return step * magnitude }
        return magnitude
    }
}
