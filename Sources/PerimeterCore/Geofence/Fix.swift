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
    /// The time to the nearest millisecond. Rounded, not truncated: a time read from `….060Z`
    /// is a double a hair below .06 s, which truncation wrote back as `.059Z`.
    public static func format(_ date: Date) -> String {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded()
        // Years 1…9999 (ISO 8601 without an expanded year); beyond, Foundation's formatter.
        guard milliseconds.isFinite, abs(milliseconds) < 253_402_300_800_000, milliseconds >= -62_135_596_800_000
        else {
            return date.formatted(
                Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: TimeZone(identifier: "UTC")!))
        }
        let total = Int64(milliseconds)
        let (seconds, millisecond) = floorDivision(total, 1000)
        let (days, secondOfDay) = floorDivision(seconds, 86_400)
        let (year, month, day) = civil(fromDays: days)
        var text = ""
        text.reserveCapacity(24)
        func append(_ value: Int64, digits: Int) {
            let string = String(value)
            if string.count < digits { text += String(repeating: "0", count: digits - string.count) }
            text += string
        }
        append(year, digits: 4)
        text += "-"
        append(month, digits: 2)
        text += "-"
        append(day, digits: 2)
        text += "T"
        append(secondOfDay / 3600, digits: 2)
        text += ":"
        append(secondOfDay / 60 % 60, digits: 2)
        text += ":"
        append(secondOfDay % 60, digits: 2)
        text += "."
        append(millisecond, digits: 3)
        text += "Z"
        return text
    }

    /// Quotient and remainder rounded toward minus infinity (the remainder is never negative).
    private static func floorDivision(_ value: Int64, _ divisor: Int64) -> (Int64, Int64) {
        let remainder = value % divisor
        return remainder < 0 ? (value / divisor - 1, remainder + divisor) : (value / divisor, remainder)
    }

    /// The proleptic Gregorian date of a day number (days since 1970-01-01); Howard Hinnant's
    /// `civil_from_days`.
    private static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
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
