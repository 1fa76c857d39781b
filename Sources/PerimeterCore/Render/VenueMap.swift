import Foundation

/// What a venue map shows: regions, receivers, a track and the events along it.
public struct VenueMap: Sendable {
    /// A fixed receiver drawn as a square (a BLE gateway), or a known beacon position.
    public struct Marker: Sendable, Hashable {
        public var id: String
        public var position: GeoPoint
        public init(id: String, position: GeoPoint) {
            self.id = id
            self.position = position
        }
    }

    /// A transition drawn at the fix that caused it.
    public struct Event: Sendable, Hashable {
        public var kind: String
        public var region: String
        public var position: GeoPoint
        public init(kind: String, region: String, position: GeoPoint) {
            self.kind = kind
            self.region = region
            self.position = position
        }
    }

    public var title: String?
    public var regions: [Region]
    public var gateways: [Marker]
    public var track: [GeoPoint]
    public var events: [Event]

    public init(
        title: String? = nil, regions: [Region], gateways: [Marker] = [], track: [GeoPoint] = [], events: [Event] = []
    ) {
        self.title = title
        self.regions = regions
        self.gateways = gateways
        self.track = track
        self.events = events
    }

    /// Radius (metres) drawn around each known beacon of a beacon region without its own.
    public static let defaultBeaconRadius = 8.0

    /// The positions of a beacon region's beacons, where the Feature gives them:
    /// `properties.beacons: [{"lat": …, "lon": …, "radius"?: m, "id"?: …}]`.
    public static func beaconPositions(_ region: Region) -> [(id: String?, position: GeoPoint, radius: Double)] {
        guard case .beacon = region.shape, let list = region.properties["beacons"]?.arrayValue else { return [] }
        return list.compactMap { item in
            guard let lat = item["lat"]?.doubleValue, let lon = item["lon"]?.doubleValue else { return nil }
            let point = GeoPoint(lon: lon, lat: lat)
            guard point.isValid else { return nil }
            let radius = item["radius"]?.doubleValue.flatMap { $0 > 0 ? $0 : nil } ?? defaultBeaconRadius
            return (item["id"]?.stringValue, point, radius)
        }
    }

    /// The ring of a geodesic circle: `count` destination points around the centre.
    public static func circleRing(center: GeoPoint, radius: Double, count: Int = 72) -> [GeoPoint] {
        (0..<count).map { index in
            Geodesy.destination(center, bearing: 2 * Double.pi * Double(index) / Double(count), distance: radius)
        }
    }

    /// The rings drawn for a region: polygons with their holes, a circle's ring, beacon circles.
    public static func rings(of region: Region) -> [[GeoPoint]] {
        switch region.shape {
        case .circle(let center, let radius): return [circleRing(center: center, radius: radius)]
        case .polygons(let polygons): return polygons.flatMap { $0 }
        case .beacon: return beaconPositions(region).map { circleRing(center: $0.position, radius: $0.radius) }
        }
    }

    /// Every point the picture must hold.
    public var extentPoints: [GeoPoint] {
        var points = regions.flatMap { Self.rings(of: $0).flatMap { $0 } }
        points += gateways.map(\.position)
        points += track
        points += events.map(\.position)
        return points
    }
}

extension VenueMap.Event {
    /// The markers for transitions (enter, exit, dwell; states are not drawn), each at the fix
    /// that caused it, or — for a dwell or an event without a fix — at the track's last fix
    /// at or before the event's time. Events with neither are left out.
    public static func markers(for events: [RegionEvent], track: [Fix]) -> [VenueMap.Event] {
        events.compactMap { event in
            guard event.kind != .state else { return nil }
            guard let position = event.fix?.position ?? lastPosition(in: track, atOrBefore: event.t) else { return nil }
            return VenueMap.Event(kind: event.kind.rawValue, region: event.region, position: position)
        }
    }

    /// A marker for one line of `perimeter replay`'s output (or an event payload from the broker):
    /// `{"event": "enter", "region": …, "t": …, "fix": {"lat": …, "lon": …}}`. Nil for states and
    /// for events that cannot be placed.
    public static func marker(json: JSONValue, track: [Fix]) -> VenueMap.Event? {
        guard let kind = json["event"]?.stringValue, ["enter", "exit", "dwell"].contains(kind),
            let region = json["region"]?.stringValue
        else { return nil }
        if let lat = json["fix"]?["lat"]?.doubleValue, let lon = json["fix"]?["lon"]?.doubleValue {
            return VenueMap.Event(kind: kind, region: region, position: GeoPoint(lon: lon, lat: lat))
        }
        guard let t = json["t"]?.stringValue.flatMap(Timestamp.parse),
            let position = lastPosition(in: track, atOrBefore: t)
        else { return nil }
        return VenueMap.Event(kind: kind, region: region, position: position)
    }

    static func lastPosition(in track: [Fix], atOrBefore t: Date) -> GeoPoint? {
        track.last { $0.t <= t }?.position
    }
}
