import Foundation

/// A location-triggered notification rule (UNLocationNotificationTrigger on the server): which
/// transitions of which regions and subjects fire it, how often, when not, where it goes and
/// what it says. Rules come from a venue's rules file and from retained `rules/{rule}` topics.
public struct NotificationRule: Sendable, Hashable {
    /// Who may learn of the notification (the privacy gate's rule 10).
    public enum Audience: String, Sendable, Hashable, CaseIterable {
        /// Building systems and staff: only events the privacy gate delivered to consumers.
        case consumers
        /// The subject's own device: when-in-use authorization suffices, even while the
        /// subject is not in use (events the evaluator publishes on `self/…` for the notifier).
        case subject
    }

    /// Which subjects a rule is for.
    public enum Subjects: Sendable, Hashable {
        case any
        /// Ids or glob patterns.
        case patterns([Glob])
        /// Tags whose canonical beacon identity (`ibeacon:uuid:major:minor` …) matches.
        case beacon(BeaconConstraint)

        public func matches(_ subject: String) -> Bool {
            switch self {
            case .any: true
            case .patterns(let globs): globs.contains { $0.matches(subject) }
            case .beacon(let constraint): BeaconIdentity(canonical: subject).map(constraint.matches) ?? false
            }
        }
    }

    /// `[A-Za-z0-9._-]`, at most 64: rule ids go into topics, headers and idempotency keys.
    public var id: String
    public var events: Set<RegionEvent.Kind>
    public var regions: [Glob]
    public var subjects: Subjects
    public var audience: Audience
    /// False: fire once per subject, then disarm (until the rule is deleted and added again).
    public var repeats: Bool
    /// Seconds after firing for a subject during which the rule does not fire for it again.
    public var cooldown: Double
    /// Windows (venue time) in which the rule stays silent; what it would have sent is dropped.
    public var quietHours: WeeklySchedule?
    /// Windows (venue time) outside which the rule stays silent.
    public var schedule: WeeklySchedule?
    public var channels: [String]
    public var title: LocalizedText?
    public var body: LocalizedText
    /// Values the templates may show (`{price:currency}`).
    public var fields: [String: JSONValue]
    /// The rule as given, for `rules` listings.
    public var source: JSONValue

    /// Whether the rule is about this transition of this region by this subject, from a topic
    /// this rule's audience may use.
    public func matches(_ event: NotifiedEvent) -> Bool {
        guard events.contains(event.kind) else { return false }
        if event.selfOnly && audience != .subject { return false }
        return regions.contains { $0.matches(event.region) } && subjects.matches(event.subject)
    }

    /// Whether the rule fires for `event` given what it did for the subject before; the
    /// reason when it does not. Times are the event's, read in the venue's time zone.
    public func verdict(for event: NotifiedEvent, state: RuleState?, timeZone: TimeZone) -> RuleVerdict {
        if let state {
            if !repeats && state.fired > 0 { return .skip("disarmed") }
            if let last = state.lastFired {
                if event.t < last { return .skip("outOfOrder") }
                if cooldown > 0 && event.t.timeIntervalSince(last) < cooldown { return .skip("cooldown") }
            }
        }
        if let schedule, !schedule.isActive(at: event.t, in: timeZone) { return .skip("schedule") }
        if let quietHours, quietHours.isActive(at: event.t, in: timeZone) { return .skip("quietHours") }
        return .fire
    }
}

/// What a rule did for one subject so far (kept by the notifier per (rule, subject)).
public struct RuleState: Sendable, Hashable, Codable {
    public var fired: Int
    public var lastFired: Date?

    public init(fired: Int = 0, lastFired: Date? = nil) {
        self.fired = fired
        self.lastFired = lastFired
    }

    /// The state after firing for an event at `t`.
    public func firing(at t: Date) -> RuleState { RuleState(fired: fired + 1, lastFired: t) }
}

public enum RuleVerdict: Sendable, Hashable {
    case fire
    /// Not now: `disarmed`, `cooldown`, `quietHours`, `schedule`, `outOfOrder`.
    case skip(String)
}

/// A transition as the notifier receives it from the evaluator's event topics.
public struct NotifiedEvent: Sendable, Hashable {
    public var id: String
    public var kind: RegionEvent.Kind
    public var venue: String
    public var region: String
    public var subject: String
    public var t: Date
    public var held: Bool
    /// True when it came from `self/…`: the privacy gate withheld it from consumers, and only
    /// notifications to the subject's own device may use it.
    public var selfOnly: Bool

    public init(
        id: String, kind: RegionEvent.Kind, venue: String, region: String, subject: String, t: Date,
        held: Bool = false, selfOnly: Bool = false
    ) {
        self.id = id
        self.kind = kind
        self.venue = venue
        self.region = region
        self.subject = subject
        self.t = t
        self.held = held
        self.selfOnly = selfOnly
    }

    /// Reads an event payload (`enter/…`, `exit/…`, `dwell/…` or `self/…`).
    /// - Throws: ``InboundError`` naming the field.
    public static func decode(_ payload: some Collection<UInt8>, selfOnly: Bool) throws(InboundError) -> NotifiedEvent {
        let value: JSONValue
        do { value = try JSONParser.parse(payload) } catch { throw InboundError(code: "json", "\(error)") }
        let reader = try FieldReader(value)
        guard let id = try reader.string("id"), !id.isEmpty else { throw reader.missing("id") }
        guard let kindName = try reader.choice("event", ["enter", "exit", "dwell"]) else {
            throw reader.missing("event")
        }
        guard let region = try reader.string("region") else { throw reader.missing("region") }
        guard let subject = try reader.string("subject") else { throw reader.missing("subject") }
        guard let t = try reader.time("t") else { throw reader.missing("t") }
        return NotifiedEvent(
            id: id, kind: RegionEvent.Kind(rawValue: kindName)!, venue: try reader.string("venue") ?? "",
            region: region, subject: subject, t: t, held: try reader.bool("held") ?? false, selfOnly: selfOnly)
    }
}
