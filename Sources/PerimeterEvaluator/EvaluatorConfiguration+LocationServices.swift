import PerimeterCore
import PerimeterKit

extension EvaluatorConfiguration {
    /// `venues.{id}.visits`: the visit detector's thresholds (topics.md, `visit/{subject}`);
    /// `venues.{id}.live`: the live location stream's rate limit (`live/{consumer}/{subject}`).
    static func readLocationServices(_ key: String, _ reader: ConfigReader) -> LocationServiceSettings {
        var settings = LocationServiceSettings()
        let defaults = VisitParameters()
        settings.visits.radius = reader.double("\(key).visits.radius", default: defaults.radius, range: 1...10_000)
        settings.visits.minimumDwell = reader.double(
            "\(key).visits.minimumDwell", default: defaults.minimumDwell, range: 0...86_400)
        settings.visits.departureAfter = reader.double(
            "\(key).visits.departureAfter", default: defaults.departureAfter, range: 0...86_400)
        settings.visits.maxAccuracy = reader.double(
            "\(key).visits.maxAccuracy", default: defaults.maxAccuracy, range: 1...1_000_000)
        settings.live.minInterval = reader.double(
            "\(key).live.minInterval", default: LiveParameters().minInterval, range: 0...3600)
        return settings
    }
}
