import Foundation

/// Home Assistant MQTT discovery for one venue (`venues.{id}.homeAssistant`): off unless set.
///
/// With it on, the evaluator publishes retained discovery configs so that Home Assistant shows
/// the venue as one device with, per region, an occupancy count (`sensor`) and an occupied flag
/// (`binary_sensor`) — both reading the existing `occupancy/{region}` topic — and, for the
/// subjects the operator names in ``subjects`` and the privacy gate allows, a `device_tracker`
/// reading `place/{subject}`. topics.md, "Home Assistant discovery", is the contract.
public struct HomeAssistantSettings: Sendable, Hashable {
    /// Home Assistant's `discovery_prefix` (its default: `homeassistant`).
    public var discoveryPrefix: String
    /// Subjects (patterns, `*` and `?`) that get a `device_tracker`; none by default. A listed
    /// subject gets one only while the privacy gate lets its observations be used and a
    /// session covers it; it is removed when that stops or the subject is erased.
    public var subjects: [Glob]
    /// The Home Assistant device's name; the venue id when nil.
    public var deviceName: String?
    /// Perimeter's topic prefix (`topics.prefix`): the state topics the configs point at.
    public var topicPrefix: String
    /// The evaluator's status topic (retained, and its last will): the entities' availability.
    public var availabilityTopic: String

    public init(
        discoveryPrefix: String = "homeassistant", subjects: [Glob] = [], deviceName: String? = nil,
        topicPrefix: String = "perimeter/v1", availabilityTopic: String = "perimeter/v1/_sys/evaluator/1/status"
    ) {
        self.discoveryPrefix = discoveryPrefix
        self.subjects = subjects
        self.deviceName = deviceName
        self.topicPrefix = topicPrefix
        self.availabilityTopic = availabilityTopic
    }

    /// Whether the operator asked for a `device_tracker` for `subject` (the gate decides too).
    public func lists(_ subject: String) -> Bool { subjects.contains { $0.matches(subject) } }

    /// Why `prefix` cannot be a discovery prefix, nil when it can: topic levels without
    /// wildcards, no empty level, no leading or trailing `/`.
    public static func prefixProblem(_ prefix: String) -> String? {
        if prefix.isEmpty { return "must not be empty" }
        if prefix.contains("+") || prefix.contains("#") { return "must not hold '+' or '#'" }
        if prefix.split(separator: "/", omittingEmptySubsequences: false).contains(where: \.isEmpty) {
            return "must not have an empty level (no leading, trailing or double '/')"
        }
        return nil
    }
}
