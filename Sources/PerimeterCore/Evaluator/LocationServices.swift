import Foundation

/// Settings of the location services that need no region: visits (`venues.{id}.visits`).
public struct LocationServiceSettings: Sendable, Hashable, Codable {
    public var visits = VisitParameters()

    public init(visits: VisitParameters = VisitParameters()) {
        self.visits = visits
    }
}

/// The state of a venue's visits, kept beside the engines (VenueEvaluator+LocationServices).
struct LocationServices: Sendable {
    var visits: VisitDetector

    /// What is snapshotted with the evaluator.
    struct State: Sendable, Codable, Hashable {
        var visits: VisitDetector.State
    }

    init(venue: String, settings: LocationServiceSettings) {
        visits = VisitDetector(venue: venue, parameters: settings.visits)
    }

    init(venue: String, settings: LocationServiceSettings, restoring state: State?) {
        self.init(venue: venue, settings: settings)
        if let state { visits = VisitDetector(venue: venue, parameters: settings.visits, restoring: state.visits) }
    }

    var snapshot: State { State(visits: visits.snapshot) }

    /// Forgets a subject (erased, or no longer allowed to be observed).
    mutating func forget(subject: String) {
        visits.forget(subject: subject)
    }
}
