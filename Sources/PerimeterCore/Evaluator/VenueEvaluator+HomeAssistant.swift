import Foundation

/// Home Assistant discovery as the venue changes (``HomeAssistantDiscovery`` builds the
/// messages; this decides when). Nothing here runs unless `settings.homeAssistant` is set.
///
/// - A region defined or changed: its two configs (`sensor`, `binary_sensor`); deleted: both
///   cleared.
/// - A subject gets a `device_tracker` when the operator lists it, its status lets its
///   observations be used (whenInUse, always, provisional) and a session covers it — decided
///   when it is first observed or its place first published (gateway-mode tags), when its
///   authorization changes (an allow once reverting included) and when sessions change. When that stops, or the subject is erased, the config
///   is cleared. In-use windows do not add or remove trackers: the place topic itself is gated.
extension VenueEvaluator {
    /// The builder for this venue, nil when discovery is off.
    var homeAssistantDiscovery: HomeAssistantDiscovery? {
        settings.homeAssistant.map { HomeAssistantDiscovery(settings: $0, venue: settings.id) }
    }

    /// Whether `subject` should have a `device_tracker` now.
    public func wantsHomeAssistantTracker(_ subject: String) -> Bool {
        guard let homeAssistant = settings.homeAssistant, homeAssistant.lists(subject) else { return false }
        return privacy.refusal(of: subject) == nil && !privacy.sessions(covering: subject).isEmpty
    }

    /// Subjects with a `device_tracker` config out now.
    public var homeAssistantTrackerSubjects: Set<String> { homeAssistantTrackers }

    func homeAssistantConfigs(of region: Region) -> [EvaluatorOutput] {
        guard let discovery = homeAssistantDiscovery else { return [] }
        return discovery.regionConfigs(region).map { EvaluatorOutput.discovery(topic: $0.topic, config: $0.config) }
    }

    func homeAssistantRemoval(of regionID: String) -> [EvaluatorOutput] {
        guard let discovery = homeAssistantDiscovery else { return [] }
        return discovery.regionTopics(regionID).map { EvaluatorOutput.discovery(topic: $0, config: nil) }
    }

    /// The tracker changes one input's outputs call for.
    mutating func followHomeAssistant(_ outputs: [EvaluatorOutput], after input: Inbound?) -> [EvaluatorOutput] {
        guard let discovery = homeAssistantDiscovery else { return [] }
        var subjects: [String] = []
        var erased: [String] = []
        for output in outputs {
            switch output {
            case .place(let subject, _, _) where !homeAssistantTrackers.contains(subject): subjects.append(subject)
            case .authorization(let subject, _): subjects.append(subject)
            case .erased(let subject, _): erased.append(subject)
            default: break
            }
        }
        switch input {
        case .fix(let fix)? where !homeAssistantTrackers.contains(fix.subject):
            // A subject's first accepted observation (a phone, a tracker) announces it, place or not.
            subjects.append(fix.subject)
        case .beacons(let report)? where !beacons.isGateway(report.agent):
            let subject = report.subject ?? report.agent
            if !homeAssistantTrackers.contains(subject) { subjects.append(subject) }
        case .authorization(let subject, _)?:
            subjects.append(subject)
        case .session?:
            // A session may cover or stop covering anyone: the subjects the gate has records
            // of, those with a place, and those with a tracker.
            let known = Set(authorization.keys).union(homeAssistantTrackers).union(placedSubjects)
            subjects += known.filter { settings.homeAssistant?.lists($0) ?? false }.sorted()
        default:
            break
        }
        var changes: [EvaluatorOutput] = []
        var seen: Set<String> = []
        for subject in erased where homeAssistantTrackers.remove(subject) != nil {
            seen.insert(subject)
            changes.append(.discovery(topic: discovery.configTopic(.deviceTracker, id: subject), config: nil))
        }
        for subject in subjects where seen.insert(subject).inserted {
            let wanted = wantsHomeAssistantTracker(subject)
            if wanted && homeAssistantTrackers.insert(subject).inserted {
                let tracker = discovery.tracker(subject)
                changes.append(.discovery(topic: tracker.topic, config: tracker.config))
            } else if !wanted && homeAssistantTrackers.remove(subject) != nil {
                changes.append(.discovery(topic: discovery.configTopic(.deviceTracker, id: subject), config: nil))
            }
        }
        return changes
    }

    /// Makes the retained discovery configs of this venue what the settings and the state call
    /// for: at start, so that turning discovery on (or changing its settings, or turning it off)
    /// takes effect for the regions and subjects already there.
    ///
    /// - Parameter retained: this venue's config topics as last published (retained), with their
    ///   payloads; topics of other venues are ignored.
    /// - Returns: the configs to publish (new or changed) and to clear (no longer wanted), in
    ///   topic order.
    public mutating func reconcileHomeAssistant(retained: [String: [UInt8]]) -> [EvaluatorOutput] {
        var wanted: [String: JSONValue] = [:]
        if let discovery = homeAssistantDiscovery {
            for region in allRegions {
                for config in discovery.regionConfigs(region) { wanted[config.topic] = config.config }
            }
            let candidates = homeAssistantTrackers.union(authorization.keys).union(placedSubjects)
            homeAssistantTrackers = candidates.filter(wantsHomeAssistantTracker)
            for subject in homeAssistantTrackers {
                let tracker = discovery.tracker(subject)
                wanted[tracker.topic] = tracker.config
            }
        } else {
            homeAssistantTrackers = []
        }
        let own = HomeAssistantDiscovery(
            settings: settings.homeAssistant ?? HomeAssistantSettings(), venue: settings.id)
        var outputs: [EvaluatorOutput] = []
        for topic in Set(wanted.keys).union(retained.keys.filter(own.isOwnConfigTopic)).sorted() {
            switch (wanted[topic], retained[topic]) {
            case (let config?, let old):
                if old != Array(config.serialized().utf8) { outputs.append(.discovery(topic: topic, config: config)) }
            case (nil, _?):
                outputs.append(.discovery(topic: topic, config: nil))
            case (nil, nil):
                break
            }
        }
        return outputs
    }
}
