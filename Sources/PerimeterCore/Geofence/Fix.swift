import Foundation

/// A position observation for a subject: what `obs/{agent}/gps` carries.
public struct Fix: Sendable, Hashable, Codable {
    public var subject: String
    /// When the position was measured (event time, not arrival time).
    public var t: Date
    public var position: GeoPoint
    /// Horizontal accuracy, metres (radius of ~68 % confidence). Negative means invalid, as in
    /// Core Location; nil means not reported.
    public var accuracy: Double?
    public var floor: Int?
    /// What produced it, for events' `source` field ("gps", "replay", "owntracks" …).
    public var source: String

    public init(
        subject: String, t: Date, position: GeoPoint, accuracy: Double? = nil, floor: Int? = nil, source: String = "gps"
    ) {
        self.subject = subject
        self.t = t
        self.position = position
        self.accuracy = accuracy
        self.floor = floor
        self.source = source
    }
}

/// Why a fix was not used.
public enum FixRejection: Error, Sendable, Hashable, CustomStringConvertible {
    case notFinite(latitude: Double, longitude: Double)
    case latitudeOutOfRange(Double)
    case longitudeOutOfRange(Double)
    case accuracyNotFinite
    case negativeAccuracy(Double)
    case accuracyRequired
    case outOfOrder(t: Date, last: Date)
    case emptySubject

    public var description: String {
        switch self {
        case .notFinite(let latitude, let longitude): "position is not finite (lat \(latitude), lon \(longitude))"
        case .latitudeOutOfRange(let value): "latitude \(value) out of range [-90, 90]"
        case .longitudeOutOfRange(let value): "longitude \(value) out of range [-180, 180]"
        case .accuracyNotFinite: "accuracy is not a finite number"
        case .negativeAccuracy(let value): "accuracy \(value) is negative: the fix is marked invalid"
        case .accuracyRequired: "accuracy is missing and this venue requires it"
        case .outOfOrder(let t, let last):
            "out of order: t \(Timestamp.format(t)) is older than the last fix processed (\(Timestamp.format(last)))"
        case .emptySubject: "the subject is empty"
        }
    }

    /// A short machine-readable reason for counters and dead letters.
    public var code: String {
        switch self {
        case .notFinite: "notFinite"
        case .latitudeOutOfRange: "latitudeOutOfRange"
        case .longitudeOutOfRange: "longitudeOutOfRange"
        case .accuracyNotFinite: "accuracyNotFinite"
        case .negativeAccuracy: "negativeAccuracy"
        case .accuracyRequired: "accuracyRequired"
        case .outOfOrder: "outOfOrder"
        case .emptySubject: "emptySubject"
        }
    }
}

/// Times as Perimeter writes them: ISO 8601 UTC with milliseconds.
public enum Timestamp {
    public static func format(_ date: Date) -> String {
        date.formatted(
            Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: TimeZone(identifier: "UTC")!))
    }

    /// Parses ISO 8601 with or without fractional seconds and with any offset; or a number of
    /// seconds since 1970.
    public static func parse(_ text: String) -> Date? {
        if let seconds = Double(text), seconds.isFinite { return Date(timeIntervalSince1970: seconds) }
        let withFraction = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        if let date = try? withFraction.parse(text) { return date }
        return try? Date.ISO8601FormatStyle().parse(text)
    }
}
