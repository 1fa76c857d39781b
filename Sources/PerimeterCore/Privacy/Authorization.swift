import Foundation

/// Core Location's authorization status, per subject.
public enum AuthorizationStatus: String, Sendable, Hashable, Codable, CaseIterable {
    case notDetermined, denied, restricted, whenInUse, always, provisionalAlways

    /// Whether observations of the subject may be used at all.
    public var admitsObservations: Bool {
        switch self {
        case .notDetermined, .denied, .restricted: false
        case .whenInUse, .always, .provisionalAlways: true
        }
    }
}

/// `subjects/{s}/authorization`: `{"status": …, "accuracy": "full|reduced", "temporary": false}`.
public struct AuthorizationRecord: Sendable, Hashable, Codable {
    public var status: AuthorizationStatus
    /// The subject chose approximate location.
    public var reducedAccuracy: Bool
    /// Allow once: when-in-use that reverts to notDetermined when the subject stops using it.
    public var temporary: Bool
    /// Temporary full accuracy (Core Location's `requestTemporaryFullAccuracy(withPurposeKey:)`):
    /// the session (`consumer/session`) the subject granted full accuracy to, for as long as that
    /// session lasts and asks for it (a `fullAccuracyPurpose`). Only with `reducedAccuracy`.
    public var temporaryFullAccuracy: String?

    public init(
        status: AuthorizationStatus, reducedAccuracy: Bool = false, temporary: Bool = false,
        temporaryFullAccuracy: String? = nil
    ) {
        self.status = status
        self.reducedAccuracy = reducedAccuracy
        self.temporary = temporary
        self.temporaryFullAccuracy = temporaryFullAccuracy
    }

    /// Reads a record the inbound decoder has already checked; nil for anything else.
    public init?(json: JSONValue) {
        guard let status = json["status"]?.stringValue.flatMap(AuthorizationStatus.init(rawValue:)) else {
            return nil
        }
        self.status = status
        reducedAccuracy = json["accuracy"]?.stringValue == "reduced"
        temporary = json["temporary"]?.boolValue ?? false
        temporaryFullAccuracy = reducedAccuracy ? json["temporaryFullAccuracy"]?.stringValue : nil
    }

    public var json: JSONValue {
        var object: JSONObject = [
            "status": .string(status.rawValue), "accuracy": .string(reducedAccuracy ? "reduced" : "full"),
            "temporary": .bool(temporary),
        ]
        if let temporaryFullAccuracy { object["temporaryFullAccuracy"] = .string(temporaryFullAccuracy) }
        return .object(object)
    }
}

/// What a consumer asks for (CLServiceSession): `sessions/{consumer}/{session}`.
public struct ServiceSession: Sendable, Hashable, Codable {
    public enum Level: String, Sendable, Hashable, Codable, Comparable {
        case whenInUse, always

        public static func < (left: Level, right: Level) -> Bool { left == .whenInUse && right == .always }
    }

    /// The subjects covered; nil for every subject (`"*"`).
    public var subjects: Set<String>?
    public var level: Level
    /// Set when the consumer needs full accuracy, with the purpose shown to the subject.
    public var fullAccuracyPurpose: String?

    public init(subjects: Set<String>? = nil, level: Level, fullAccuracyPurpose: String? = nil) {
        self.subjects = subjects
        self.level = level
        self.fullAccuracyPurpose = fullAccuracyPurpose
    }

    /// Reads a session the inbound decoder has already checked; nil for anything else.
    public init?(json: JSONValue) {
        guard let level = json["level"]?.stringValue.flatMap(Level.init(rawValue:)) else { return nil }
        switch json["subjects"] {
        case .string("*")?: subjects = nil
        case .array(let ids)?: subjects = Set(ids.compactMap(\.stringValue))
        default: return nil
        }
        self.level = level
        fullAccuracyPurpose = json["fullAccuracyPurpose"]?.stringValue
    }

    public func covers(_ subject: String) -> Bool { subjects?.contains(subject) ?? true }
}

/// A venue's privacy settings (`venues.{id}.privacy`).
public struct PrivacySettings: Sendable, Hashable, Codable {
    /// The status of a subject without a record (people: notDetermined).
    public var defaultStatus: AuthorizationStatus
    /// Subjects whose canonical beacon identity matches one of these (equipment tags) get
    /// `assetStatus` by default instead.
    public var assets: [BeaconConstraint]
    public var assetStatus: AuthorizationStatus
    /// How long after leaving the foreground a subject still counts as in use.
    public var inUseGrace: TimeInterval
    /// Held events older than this are dropped.
    public var heldMaxAge: TimeInterval
    /// Reduced accuracy: the grid fixes are snapped to, and the smallest region size that
    /// still gives events.
    public var reducedAccuracyMeters: Double
    /// Sessions that exist without any consumer declaring them (the implicit sessions of
    /// CLLocationUpdate and CLMonitor).
    public var defaultSessions: [ServiceSession]

    public init(
        defaultStatus: AuthorizationStatus = .notDetermined, assets: [BeaconConstraint] = [],
        assetStatus: AuthorizationStatus = .always, inUseGrace: TimeInterval = 10, heldMaxAge: TimeInterval = 1800,
        reducedAccuracyMeters: Double = 5000, defaultSessions: [ServiceSession] = []
    ) {
        self.defaultStatus = defaultStatus
        self.assets = assets
        self.assetStatus = assetStatus
        self.inUseGrace = inUseGrace
        self.heldMaxAge = heldMaxAge
        self.reducedAccuracyMeters = reducedAccuracyMeters
        self.defaultSessions = defaultSessions
    }

    /// Everything allowed: every subject `always`, one session for everyone at `always`.
    /// For demos and tests of other parts, never the default of a venue with people.
    public static let open = PrivacySettings(
        defaultStatus: .always, defaultSessions: [ServiceSession(level: .always)])
}
