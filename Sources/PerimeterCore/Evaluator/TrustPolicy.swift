import Foundation

/// Who may say what, and about when (docs/security.md): the checks between a decoded input
/// and a venue. Pure: the arrival time is passed in.
///
/// - An agent reports its own subject (the agent id). It may name another subject only where
///   the venue's ``reporters`` bind that subject to it (a phone agent reporting its person, a
///   tracker gateway reporting its trackers). Registered BLE gateways report the tags they
///   hear without naming a subject, so they need no binding.
/// - An observation may not be dated more than ``maxFutureSkew`` after it arrived: a clock
///   ahead by hours (or a hostile `t` of 9999) must not fire other subjects' timers.
public struct TrustPolicy: Sendable, Hashable {
    /// Seconds an observation's `t` may lie after its arrival (clock skew between an agent
    /// and the evaluator). Later ones are refused with `futureTime`.
    public var maxFutureSkew: TimeInterval
    /// Which subjects each agent may report besides itself.
    public var reporters: [ReporterRule]
    /// What an OwnTracks user's waypoints become.
    public var waypoints: WaypointScope

    public init(maxFutureSkew: TimeInterval = 60, reporters: [ReporterRule] = [], waypoints: WaypointScope = .own) {
        self.maxFutureSkew = maxFutureSkew
        self.reporters = reporters
        self.waypoints = waypoints
    }

    /// A waypoint region as the scope allows it, or nil when the scope drops it. `own`: a
    /// circle that applies only to the sending user's devices (`subjectPrefix`
    /// `owntracks:{user}:`); beacon waypoints are dropped, since OwnTracks ranges beacons on
    /// the phone and Perimeter never hears those scans. `venue`: as sent, for every subject.
    public func waypoint(_ region: Region, user: String) -> Region? {
        switch waypoints {
        case .off: return nil
        case .venue: return region
        case .own:
            guard region.isGeographic else { return nil }
            var scoped = region
            scoped.subjectPrefix = InboundDecoder.ownTracksSubjectPrefix(user: user)
            scoped.properties["subjectPrefix"] = .string(scoped.subjectPrefix!)
            return scoped
        }
    }

    /// Whether `agent` may report observations of `subject`.
    public func mayReport(agent: String, subject: String) -> Bool {
        subject == agent || reporters.contains { $0.allows(agent: agent, subject: subject) }
    }

    /// Why `input`, carried on `agent`'s topic and arrived at `receivedAt`, is refused; nil
    /// when it may go on. Codes: `sender` (a subject the agent may not speak for) and
    /// `futureTime`.
    public func refusal(of input: Inbound, agent: String?, receivedAt: Date) -> InboundError? {
        let t: Date?
        let subject: String?
        switch input {
        case .fix(let fix): (t, subject) = (fix.t, fix.subject)
        case .beacons(let report): (t, subject) = (report.t, report.subject)
        case .tags(let report): (t, subject) = (report.t, nil)
        case .agentStatus(let status): (t, subject) = (status.t, nil)
        default: (t, subject) = (nil, nil)
        }
        if let agent, let subject, !mayReport(agent: agent, subject: subject) {
            return InboundError(
                code: "sender", field: "subject",
                "agent '\(agent)' may report only its own subject; '\(subject)' is not bound to it (venues.{id}.reporters)"
            )
        }
        if let t, t.timeIntervalSince(receivedAt) > maxFutureSkew {
            let ahead = t.timeIntervalSince(receivedAt)
            return InboundError(
                code: "futureTime", field: "t",
                "dated \(Self.duration(ahead)) after it arrived (\(Timestamp.format(receivedAt))); at most \(Self.duration(maxFutureSkew)) of clock skew is accepted"
            )
        }
        return nil
    }

    static func duration(_ seconds: TimeInterval) -> String {
        if seconds < 120 { return "\(Int(seconds.rounded(.up))) s" }
        if seconds < 7200 { return "\(Int((seconds / 60).rounded(.up))) min" }
        if seconds < 172_800 { return "\(Int((seconds / 3600).rounded(.up))) h" }
        return "\(Int(min(seconds / 86_400, 1e12).rounded(.up))) days"
    }
}

/// What the OwnTracks adapter makes of a user's waypoints (`adapters.ownTracksWaypoints`).
public enum WaypointScope: String, Sendable, Hashable, CaseIterable, Codable {
    /// Regions only for the user that sent them (the default).
    case own
    /// Regions for every subject of the venue: an operator who trusts every OwnTracks user.
    case venue
    /// Ignored.
    case off
}

/// One binding of `venues.{id}.reporters`: agents matching ``agent`` may report subjects
/// matching one of ``subjects``.
///
/// A pattern is an id with at most one `*`, which stands for any non-empty text. A `*` in a
/// subject pattern repeats what the agent pattern's `*` matched, so `"phone-*": ["visitor-*"]`
/// lets `phone-17` report `visitor-17` and nobody else; when the agent pattern has no `*`, a
/// subject's `*` matches any text (`"lora-gw": ["tracker-*"]`).
public struct ReporterRule: Sendable, Hashable {
    public var agent: String
    public var subjects: [String]

    /// Nil with the problem when a pattern holds more than one `*` or is not an id.
    public static func make(agent: String, subjects: [String]) -> Result<ReporterRule, InboundError> {
        for pattern in [agent] + subjects {
            if let problem = Topics.idProblem(pattern) {
                return .failure(InboundError(code: "config", field: pattern, problem))
            }
            if pattern.filter({ $0 == "*" }).count > 1 {
                return .failure(InboundError(code: "config", field: pattern, "at most one '*' per pattern"))
            }
        }
        return .success(ReporterRule(agent: agent, subjects: subjects))
    }

    private init(agent: String, subjects: [String]) {
        self.agent = agent
        self.subjects = subjects
    }

    public func allows(agent id: String, subject: String) -> Bool {
        guard let captured = Self.match(agent, id) else { return false }
        return subjects.contains { pattern in
            guard let wildcard = pattern.firstIndex(of: "*") else { return pattern == subject }
            if let captured {
                var bound = pattern
                bound.replaceSubrange(wildcard...wildcard, with: captured)
                return bound == subject
            }
            return Self.match(pattern, subject) != nil
        }
    }

    /// Nil when `text` does not match `pattern`; otherwise what its `*` matched (`.some(nil)`
    /// for a pattern without one).
    static func match(_ pattern: String, _ text: String) -> String?? {
        guard let star = pattern.firstIndex(of: "*") else { return pattern == text ? .some(nil) : nil }
        let head = pattern[..<star]
        let tail = pattern[pattern.index(after: star)...]
        guard text.count > head.count + tail.count, text.hasPrefix(head), text.hasSuffix(tail) else { return nil }
        return .some(String(text.dropFirst(head.count).dropLast(tail.count)))
    }
}
