/// Where a subject's place answer came from.
public enum PlaceSource: String, Sendable, Hashable, Codable {
    /// The place of its nearest beacon, heard near or immediate.
    case beacon
    /// A geographic region it is inside.
    case gps
    /// The place the subject chose, used when there is no live answer.
    case `default`
}

/// A subject's current place, as `place/{subject}` publishes it.
public struct PlaceAnswer: Sendable, Hashable, Codable {
    public var place: String
    public var source: PlaceSource
    /// For beacon answers: how close the deciding beacon was.
    public var proximity: Proximity?

    public init(place: String, source: PlaceSource, proximity: Proximity? = nil) {
        self.place = place
        self.source = source
        self.proximity = proximity
    }

    public var payload: JSONValue {
        var object = JSONObject()
        object["place"] = .string(place)
        object["source"] = .string(source.rawValue)
        if let proximity { object["proximity"] = .string(proximity.rawValue) }
        return .object(object)
    }
}

/// A subject's nearest beacon as the place rule sees it.
public struct NearestBeacon: Sendable, Hashable {
    public var place: String
    public var proximity: Proximity

    public init(place: String, proximity: Proximity) {
        self.place = place
        self.proximity = proximity
    }
}

/// What the place rule looks at for one subject.
public struct PlaceEvidence: Sendable, Hashable {
    /// The place of the subject's nearest ranged beacon, and how close that beacon was.
    public var nearestBeacon: NearestBeacon?
    /// Whether any beacon was heard within the exit timeout (the beacon answer is live).
    public var beaconsLive: Bool
    /// A geographic place region the subject is inside, when its fixes are live.
    public var gpsPlace: String?
    /// The place the subject chose (`subjects/{s}/preferences` `defaultPlace`).
    public var defaultPlace: String?
    /// Whether the privacy gate lets the subject's location decide its place.
    public var authorized: Bool

    public init(
        nearestBeacon: NearestBeacon? = nil, beaconsLive: Bool = false,
        gpsPlace: String? = nil, defaultPlace: String? = nil, authorized: Bool = true
    ) {
        self.nearestBeacon = nearestBeacon
        self.beaconsLive = beaconsLive || nearestBeacon != nil
        self.gpsPlace = gpsPlace
        self.defaultPlace = defaultPlace
        self.authorized = authorized
    }
}

/// The Caffè Macs rule for a subject's place.
///
/// 1. Without authorization, only the subject's own choice counts: its default place.
/// 2. A near or immediate beacon decides: the place is its region.
/// 3. Far or unknown beacons never switch the place: while beacons are live, a beacon answer stays.
/// 4. Otherwise a geographic place the subject is inside.
/// 5. With no live answer, the default place; with none, no place.
public enum PlaceRule {
    public static func resolve(previous: PlaceAnswer?, evidence: PlaceEvidence) -> PlaceAnswer? {
        let fallback = evidence.defaultPlace.map { PlaceAnswer(place: $0, source: .default) }
        guard evidence.authorized else { return fallback }
        if let nearest = evidence.nearestBeacon, nearest.proximity.isClose {
            return PlaceAnswer(place: nearest.place, source: .beacon, proximity: nearest.proximity)
        }
        // The answer keeps the proximity that decided it: a weaker reading is not news.
        if evidence.beaconsLive, let previous, previous.source == .beacon { return previous }
        if let place = evidence.gpsPlace { return PlaceAnswer(place: place, source: .gps) }
        return fallback
    }
}
