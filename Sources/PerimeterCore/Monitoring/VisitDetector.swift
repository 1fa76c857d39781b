import Foundation

/// The visit detector's thresholds (`venues.{id}.visits`; topics.md, `visit/{subject}`).
///
/// The defaults were chosen on real tracks (the gpxpy test files in the project's shared data):
/// a 100 m radius and 10 minutes find the stops a person would name (a lunch break, a parked
/// car) and not a slow walk, which a 5 minute dwell or a 75 m radius cut into "visits" every
/// few hundred metres of a steep hike.
public struct VisitParameters: Sendable, Hashable, Codable {
    /// How far from a stay's centre a fix may be and still count as staying, metres.
    public var radius: Double = 100
    /// How long (first to last fix within the radius) a stay lasts before it is a visit (its
    /// arrival is published), seconds.
    public var minimumDwell: TimeInterval = 600
    /// How long fixes must stay outside the radius before the visit ends (its departure is
    /// published), seconds; a shorter excursion is part of the visit.
    public var departureAfter: TimeInterval = 120
    /// Fixes whose accuracy is worse (larger) than this are not used, metres. Fixes without an
    /// accuracy are used.
    public var maxAccuracy: Double = 100

    public init(
        radius: Double = 100, minimumDwell: TimeInterval = 600, departureAfter: TimeInterval = 120,
        maxAccuracy: Double = 100
    ) {
        self.radius = radius
        self.minimumDwell = minimumDwell
        self.departureAfter = departureAfter
        self.maxAccuracy = maxAccuracy
    }
}

/// An arrival or a departure of a visit (`CLVisit`): a stay detected with no predefined region.
public struct VisitEvent: Sendable, Hashable, Codable {
    public enum Kind: String, Sendable, Hashable, Codable {
        case arrival, departure
    }

    public var kind: Kind
    public var subject: String
    /// When the detector decided (the fix, or the tick, that confirmed it).
    public var t: Date
    /// The first fix of the stay.
    public var arrival: Date
    /// The last fix of the stay (departures only; nil while the visit goes on).
    public var departure: Date?
    /// The mean of the stay's fixes.
    public var centre: GeoPoint
    /// The root-mean-square distance of the stay's fixes from the centre, and at least their
    /// mean reported accuracy, metres.
    public var accuracy: Double
    /// Fixes in the stay so far.
    public var fixes: Int
    /// Per subject count of visits, from 1; a departure has its arrival's.
    public var seq: Int
    /// Deterministic: SHA-256 over venue, `visit`, subject, kind and the arrival time.
    public var id: String
    /// The source of the fixes ("gps", "replay", "owntracks" …).
    public var source: String

    /// The id of an arrival or departure: the first 16 bytes, in hex, of SHA-256 over `venue`,
    /// `visit`, `subject`, the kind and the arrival time in milliseconds since 1970, each
    /// followed by a zero byte. The arrival time (not `seq`) keeps ids apart across an erasure,
    /// which starts a subject's count again.
    public static func makeID(venue: String, subject: String, kind: Kind, arrival: Date) -> String {
        let milliseconds = Int64((arrival.timeIntervalSince1970 * 1000).rounded())
        var message: [UInt8] = []
        for part in [venue, "visit", subject, kind.rawValue, String(milliseconds)] {
            message.append(contentsOf: part.utf8)
            message.append(0)
        }
        return Hex.encode(SHA256.hash(message).prefix(16))
    }

    /// The payload of `visit/{subject}` (topics.md).
    public var payload: JSONValue {
        var object = JSONObject()
        object["id"] = .string(id)
        object["event"] = .string(kind.rawValue)
        object["subject"] = .string(subject)
        object["arrival"] = .string(Timestamp.format(arrival))
        object["departure"] = departure.map { .string(Timestamp.format($0)) } ?? .null
        object["lat"] = .number(centre.lat)
        object["lon"] = .number(centre.lon)
        object["acc"] = .number((accuracy * 10).rounded() / 10)
        object["fixes"] = .number(Double(fixes))
        object["seq"] = .number(Double(seq))
        object["t"] = .string(Timestamp.format(t))
        object["source"] = .string(source)
        return .object(object)
    }
}

/// Visits (`CLVisit`), pure: stays found in each subject's fixes, with no region defined.
///
/// A subject's fixes gather into a *stay* while each falls within `radius` of the stay's
/// centre (the running mean). When the stay has lasted `minimumDwell` (first to last fix) it
/// is a visit: an arrival, dated at the stay's first fix. Fixes outside the radius start an
/// excursion; a fix back inside ends it (it was part of the visit); when the excursion has
/// lasted `departureAfter` — by a later fix or by the clock (``advance(to:)``) — the visit
/// ends: a departure dated at the stay's last fix inside. The fixes of the excursion that stay
/// together become the next stay, so a visit that starts right after another keeps its true
/// arrival time. No departure is invented for a subject that falls silent inside a stay.
///
/// Memory is bounded per subject: two running clusters (sums, not fixes) and a few times.
public struct VisitDetector: Sendable {
    public let venue: String
    public let parameters: VisitParameters
    private var tracks = SubjectTable<Track>()
    /// Subjects with an excursion under way (the only ones the clock can end a visit of).
    private var away: Set<String> = []

    /// Running sums of a group of fixes, in metres east and north of its first fix.
    struct Cluster: Sendable, Codable, Hashable {
        var origin: GeoPoint
        var first: Date
        var last: Date
        var count = 0
        var sumX = 0.0
        var sumY = 0.0
        var sumSquares = 0.0
        /// Sum of the reported accuracies, and how many fixes reported one.
        var sumAccuracy = 0.0
        var accuracies = 0
        var source: String

        init(_ fix: Fix) {
            origin = fix.position
            first = fix.t
            last = fix.t
            source = fix.source
            add(fix)
        }

        static let metresPerDegree = 111_320.0

        /// Metres east and north of the origin (longitudes across the antimeridian stay near).
        func offset(_ point: GeoPoint) -> (x: Double, y: Double) {
            var dLon = point.lon - origin.lon
            if dLon > 180 { dLon -= 360 } else if dLon < -180 { dLon += 360 }
            return (
                dLon * Self.metresPerDegree * cos(origin.lat * .pi / 180),
                (point.lat - origin.lat) * Self.metresPerDegree
            )
        }

        mutating func add(_ fix: Fix) {
            let (x, y) = offset(fix.position)
            count += 1
            sumX += x
            sumY += y
            sumSquares += x * x + y * y
            if let accuracy = fix.accuracy {
                sumAccuracy += accuracy
                accuracies += 1
            }
            last = max(last, fix.t)
        }

        var meanX: Double { sumX / Double(count) }
        var meanY: Double { sumY / Double(count) }

        func distance(to point: GeoPoint) -> Double {
            let (x, y) = offset(point)
            return ((x - meanX) * (x - meanX) + (y - meanY) * (y - meanY)).squareRoot()
        }

        var centre: GeoPoint {
            let lat = origin.lat + meanY / Self.metresPerDegree
            var lon = origin.lon + meanX / (Self.metresPerDegree * max(0.01, cos(origin.lat * .pi / 180)))
            if lon > 180 { lon -= 360 } else if lon < -180 { lon += 360 }
            return GeoPoint(lon: lon, lat: min(90, max(-90, lat)))
        }

        var accuracy: Double {
            let spread = max(0, sumSquares / Double(count) - meanX * meanX - meanY * meanY).squareRoot()
            return max(spread, accuracies > 0 ? sumAccuracy / Double(accuracies) : 0)
        }
    }

    struct Track: Sendable, Codable, Hashable {
        var stay: Cluster
        /// Whether the stay's arrival was published.
        var confirmed = false
        /// The excursion's fixes that stay together (the next stay if the visit ends).
        var next: Cluster? {
            get { nextBox?.value }
            set { nextBox = newValue.map(OutOfLine.init) }
        }
        /// Out of line: a cluster is ~100 B and most subjects have no excursion under way.
        private var nextBox: OutOfLine<Cluster>?
        /// The first fix outside the stay since the last one inside.
        var outsideSince: Date?
        /// The subject's visits so far.
        var seq = 0
        /// The last fix used (older ones are ignored).
        var lastFix: Date

        init(
            stay: Cluster, confirmed: Bool = false, next: Cluster? = nil, outsideSince: Date? = nil, seq: Int = 0,
            lastFix: Date
        ) {
            self.stay = stay
            self.confirmed = confirmed
            self.outsideSince = outsideSince
            self.seq = seq
            self.lastFix = lastFix
            self.next = next
        }

        private enum CodingKeys: String, CodingKey {
            case stay, confirmed, nextBox = "next", outsideSince, seq, lastFix
        }
    }

    /// What the detector remembers (snapshotted with the evaluator).
    public struct State: Sendable, Codable, Hashable {
        var tracks: SubjectTable<Track>
    }

    public init(venue: String, parameters: VisitParameters = VisitParameters()) {
        self.venue = venue
        self.parameters = parameters
    }

    public init(venue: String, parameters: VisitParameters, restoring state: State) {
        self.init(venue: venue, parameters: parameters)
        tracks = state.tracks
        away = Set(state.tracks.lazy.filter { $0.value.outsideSince != nil }.map(\.key))
    }

    public var snapshot: State { State(tracks: tracks) }

    /// Subjects the detector holds something about.
    public var subjectCount: Int { tracks.count }

    /// The visit under way for a subject (an arrival was published and no departure yet).
    public func currentVisit(of subject: String) -> VisitEvent? {
        guard let track = tracks[subject], track.confirmed else { return nil }
        return event(.arrival, subject: subject, stay: track.stay, seq: track.seq, at: track.stay.last)
    }

    /// One fix. Fixes older than the subject's last, with an invalid accuracy or one worse than
    /// `maxAccuracy`, are ignored.
    public mutating func process(_ fix: Fix) -> [VisitEvent] {
        if let accuracy = fix.accuracy, !(accuracy >= 0 && accuracy <= parameters.maxAccuracy) { return [] }
        guard var track = tracks[fix.subject] else {
            tracks[fix.subject] = Track(stay: Cluster(fix), lastFix: fix.t)
            return []
        }
        guard fix.t >= track.lastFix else { return [] }
        track.lastFix = fix.t
        var events: [VisitEvent] = []
        if track.stay.distance(to: fix.position) <= parameters.radius {
            // Back (or still) inside: an excursion shorter than departureAfter was part of the stay.
            track.stay.add(fix)
            track.next = nil
            track.outsideSince = nil
            away.remove(fix.subject)
        } else {
            if track.next == nil || track.next!.distance(to: fix.position) > parameters.radius {
                track.next = Cluster(fix)
            } else {
                track.next!.add(fix)
            }
            let since = track.outsideSince ?? fix.t
            track.outsideSince = since
            away.insert(fix.subject)
            if fix.t.timeIntervalSince(since) >= parameters.departureAfter {
                events += end(&track, subject: fix.subject, at: fix.t)
            }
        }
        events += confirmIfDue(&track, subject: fix.subject, at: fix.t)
        tracks[fix.subject] = track
        return events
    }

    /// Visits whose excursion has lasted `departureAfter` by `now` end, with no further fix.
    public mutating func advance(to now: Date) -> [VisitEvent] {
        var events: [VisitEvent] = []
        for subject in away.sorted() {
            guard var track = tracks[subject], let since = track.outsideSince else {
                away.remove(subject)
                continue
            }
            guard now.timeIntervalSince(since) >= parameters.departureAfter else { continue }
            events += end(&track, subject: subject, at: now)
            events += confirmIfDue(&track, subject: subject, at: now)
            tracks[subject] = track
        }
        return events
    }

    /// Forgets a subject (no longer allowed, or erased): no departure is published.
    public mutating func forget(subject: String) {
        tracks[subject] = nil
        away.remove(subject)
    }

    /// The stay ends: its departure if it was a visit; the excursion's last group is the next stay.
    private mutating func end(_ track: inout Track, subject: String, at t: Date) -> [VisitEvent] {
        var events: [VisitEvent] = []
        if track.confirmed {
            var departure = event(.departure, subject: subject, stay: track.stay, seq: track.seq, at: t)
            departure.departure = track.stay.last
            events.append(departure)
        }
        if let next = track.next { track.stay = next }
        track.confirmed = false
        track.next = nil
        track.outsideSince = nil
        away.remove(subject)
        return events
    }

    private func confirmIfDue(_ track: inout Track, subject: String, at t: Date) -> [VisitEvent] {
        guard !track.confirmed, track.stay.last.timeIntervalSince(track.stay.first) >= parameters.minimumDwell
        else { return [] }
        track.confirmed = true
        track.seq += 1
        return [event(.arrival, subject: subject, stay: track.stay, seq: track.seq, at: t)]
    }

    private func event(_ kind: VisitEvent.Kind, subject: String, stay: Cluster, seq: Int, at t: Date) -> VisitEvent {
        VisitEvent(
            kind: kind, subject: subject, t: t, arrival: stay.first, departure: nil, centre: stay.centre,
            accuracy: stay.accuracy, fixes: stay.count, seq: seq,
            id: VisitEvent.makeID(venue: venue, subject: subject, kind: kind, arrival: stay.first),
            source: stay.source)
    }
}
