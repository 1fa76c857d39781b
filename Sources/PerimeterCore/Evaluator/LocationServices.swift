import Foundation

/// Settings of the location services that need no region: visits (`venues.{id}.visits`) and
/// the live location stream (`venues.{id}.live`).
public struct LocationServiceSettings: Sendable, Hashable, Codable {
    public var visits = VisitParameters()
    public var live = LiveParameters()

    public init(visits: VisitParameters = VisitParameters(), live: LiveParameters = LiveParameters()) {
        self.visits = visits
        self.live = live
    }
}

/// The state of a venue's visits and live streams, kept beside the engines
/// (VenueEvaluator+LocationServices).
struct LocationServices: Sendable {
    var visits: VisitDetector
    var live: LiveStreams

    /// What is snapshotted with the evaluator.
    struct State: Sendable, Codable, Hashable {
        var visits: VisitDetector.State
        /// Absent from snapshots written before the live stream.
        var live: LiveStreams.State? = nil
    }

    init(venue: String, settings: LocationServiceSettings) {
        visits = VisitDetector(venue: venue, parameters: settings.visits)
        live = LiveStreams(parameters: settings.live)
    }

    init(venue: String, settings: LocationServiceSettings, restoring state: State?) {
        self.init(venue: venue, settings: settings)
        if let state { visits = VisitDetector(venue: venue, parameters: settings.visits, restoring: state.visits) }
        if let live = state?.live { self.live = LiveStreams(parameters: settings.live, restoring: live) }
    }

    var snapshot: State { State(visits: visits.snapshot, live: live.snapshot) }

    /// Forgets a subject's visit (erased, or no longer allowed to be observed).
    mutating func forget(subject: String) {
        visits.forget(subject: subject)
    }

    /// Forgets everything about a subject, its live streams too, without a word (erasure).
    mutating func erase(subject: String) {
        visits.forget(subject: subject)
        live.forget(subject: subject)
    }
}
