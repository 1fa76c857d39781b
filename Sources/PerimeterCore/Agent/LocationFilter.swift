/// Which readings an agent publishes, as `CLLocationManager` decides which locations to deliver:
/// `desiredAccuracy` drops fixes worse than it, `distanceFilter` drops fixes closer than it
/// to the last one published for the same subject.
public struct LocationFilter: Sendable {
    /// Metres; a reading must be at least this far from the last one published. nil: every reading.
    public var distanceFilter: Double?
    /// Metres; readings with a worse (larger) accuracy, or none, are dropped. nil: any accuracy.
    public var desiredAccuracy: Double?
    private var last: [String: GeoPoint] = [:]

    public enum Decision: Sendable, Hashable {
        case publish
        case tooInaccurate(accuracy: Double?)
        case tooClose(distance: Double)
    }

    public init(distanceFilter: Double? = nil, desiredAccuracy: Double? = nil) {
        self.distanceFilter = distanceFilter
        self.desiredAccuracy = desiredAccuracy
    }

    /// Decides on `reading` for `subject` and remembers it when it is published.
    public mutating func admit(_ reading: GPSReading, subject: String) -> Decision {
        if let desiredAccuracy {
            guard let accuracy = reading.accuracy, accuracy >= 0, accuracy <= desiredAccuracy else {
                return .tooInaccurate(accuracy: reading.accuracy)
            }
        }
        if let distanceFilter, let previous = last[subject] {
            let distance = Geodesy.distance(previous, reading.position)
            if distance < distanceFilter { return .tooClose(distance: distance) }
        }
        last[subject] = reading.position
        return .publish
    }
}
