/// A position on the WGS 84 ellipsoid in degrees, in GeoJSON's order: longitude, then latitude.
///
/// Inside polygon structures the longitude may lie outside ±180 after a ring crossing the
/// antimeridian has been unwrapped into one continuous frame (e.g. 170…190).
public struct GeoPoint: Sendable, Hashable, Codable, CustomStringConvertible {
    public var lon: Double
    public var lat: Double

    public init(lon: Double, lat: Double) {
        self.lon = lon
        self.lat = lat
    }

    /// Both numbers finite and within ±180 / ±90.
    public var isValid: Bool {
        lon.isFinite && lat.isFinite && abs(lon) <= 180 && abs(lat) <= 90
    }

    public var description: String { "[\(lon), \(lat)]" }
}

/// An axis-aligned box in degrees (planar lon/lat). May extend past ±180 for unwrapped shapes.
public struct BoundingBox: Sendable, Hashable, CustomStringConvertible {
    public var minLon: Double
    public var minLat: Double
    public var maxLon: Double
    public var maxLat: Double

    public init(minLon: Double, minLat: Double, maxLon: Double, maxLat: Double) {
        self.minLon = minLon
        self.minLat = minLat
        self.maxLon = maxLon
        self.maxLat = maxLat
    }

    /// The smallest box holding every point; nil for none.
    public init?(_ points: some Sequence<GeoPoint>) {
        var iterator = points.makeIterator()
        guard let first = iterator.next() else { return nil }
        self.init(minLon: first.lon, minLat: first.lat, maxLon: first.lon, maxLat: first.lat)
        while let point = iterator.next() { extend(point) }
    }

    /// An empty box that any `extend` replaces.
    public static let empty = BoundingBox(minLon: .infinity, minLat: .infinity, maxLon: -.infinity, maxLat: -.infinity)

    public var isEmpty: Bool { minLon > maxLon || minLat > maxLat }

    public mutating func extend(_ point: GeoPoint) {
        minLon = Swift.min(minLon, point.lon)
        minLat = Swift.min(minLat, point.lat)
        maxLon = Swift.max(maxLon, point.lon)
        maxLat = Swift.max(maxLat, point.lat)
    }

    public func union(_ other: BoundingBox) -> BoundingBox {
        BoundingBox(
            minLon: Swift.min(minLon, other.minLon), minLat: Swift.min(minLat, other.minLat),
            maxLon: Swift.max(maxLon, other.maxLon), maxLat: Swift.max(maxLat, other.maxLat))
    }

    /// Closed containment: points on the edge count.
    @inline(__always)
    public func contains(lon: Double, lat: Double) -> Bool {
        lon >= minLon && lon <= maxLon && lat >= minLat && lat <= maxLat
    }

    public func contains(_ point: GeoPoint) -> Bool { contains(lon: point.lon, lat: point.lat) }

    public func intersects(_ other: BoundingBox) -> Bool {
        minLon <= other.maxLon && other.minLon <= maxLon && minLat <= other.maxLat && other.minLat <= maxLat
    }

    /// The box moved east by `lon` degrees.
    public func shifted(lon: Double) -> BoundingBox {
        BoundingBox(minLon: minLon + lon, minLat: minLat, maxLon: maxLon + lon, maxLat: maxLat)
    }

    public var width: Double { maxLon - minLon }
    public var height: Double { maxLat - minLat }

    public var description: String { "[\(minLon), \(minLat), \(maxLon), \(maxLat)]" }
}
