/// A monitored region: a circle, a polygon set, or a beacon region, with its monitoring rules.
///
/// Read from a GeoJSON Feature (RFC 7946): the id is the Feature's `id` or `properties.id`;
/// a circle is a Point with `properties.radius` (metres); polygons keep holes; a Feature
/// with `geometry: null` and a `properties.beacon` object is a beacon region, carried here
/// and interpreted by the beacon module. Every property, known or not, is kept so that the
/// region exports back to the same Feature.
public struct Region: Sendable, Hashable, Codable, Identifiable {
    public enum Shape: Sendable, Hashable, Codable {
        /// A geodesic circle: every point within `radius` metres (on the sphere) of `center`.
        case circle(center: GeoPoint, radius: Double)
        /// One or more polygons; each is an exterior ring followed by its holes, as given
        /// (closed rings, positions in lon/lat; rings may cross the antimeridian).
        case polygons([[[GeoPoint]]])
        /// A beacon region: the `properties.beacon` object, for the beacon module.
        case beacon(JSONValue)
    }

    public var id: String
    public var shape: Shape
    public var name: String?
    public var notifyOnEntry: Bool
    public var notifyOnExit: Bool
    /// Seconds inside before a `dwell` event; nil for none.
    public var dwellAfter: Double?
    /// Seconds the subject must stay in before an `enter` is confirmed.
    public var enterDelay: Double
    /// Seconds the subject must stay out before an `exit` is confirmed.
    public var exitDelay: Double
    /// Extra metres beyond the boundary (plus the accuracy margin) before a fix counts as outside.
    public var exitBuffer: Double
    /// Fixes whose accuracy (metres) is worse than this are ignored for this region.
    public var minAccuracy: Double?
    /// A fix with a floor matches only regions on that floor or without one.
    public var floor: Int?
    /// When the region is monitored; nil for always.
    public var schedule: WeeklySchedule?
    /// The Feature's properties as given (including the ones above), for lossless export.
    public var properties: JSONObject
    /// Whether the GeoJSON gave the id as the Feature's `id` (else in `properties.id`).
    public var idInFeature: Bool
    /// Whether the geometry was a MultiPolygon (kept for export even with one polygon).
    public var isMultiPolygon: Bool = false
    /// When set, the region applies only to subjects whose id starts with it
    /// (`properties.subjectPrefix`; an OwnTracks user's own waypoints: `owntracks:{user}:`).
    public var subjectPrefix: String?

    /// Whether the region is monitored for `subject` at all.
    public func applies(to subject: String) -> Bool {
        subjectPrefix.map { subject.hasPrefix($0) } ?? true
    }

    public init(
        id: String, shape: Shape, name: String? = nil, notifyOnEntry: Bool = true, notifyOnExit: Bool = true,
        dwellAfter: Double? = nil, enterDelay: Double = 0, exitDelay: Double = 0, exitBuffer: Double = 0,
        minAccuracy: Double? = nil, floor: Int? = nil, schedule: WeeklySchedule? = nil,
        properties: JSONObject = JSONObject(),
        idInFeature: Bool = true
    ) {
        self.id = id
        self.shape = shape
        self.name = name
        self.notifyOnEntry = notifyOnEntry
        self.notifyOnExit = notifyOnExit
        self.dwellAfter = dwellAfter
        self.enterDelay = enterDelay
        self.exitDelay = exitDelay
        self.exitBuffer = exitBuffer
        self.minAccuracy = minAccuracy
        self.floor = floor
        self.schedule = schedule
        self.properties = properties
        self.idInFeature = idInFeature
    }

    /// True for circles and polygons; false for beacon regions.
    public var isGeographic: Bool {
        if case .beacon = shape { return false }
        return true
    }
}
