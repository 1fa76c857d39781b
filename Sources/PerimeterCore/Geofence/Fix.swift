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

    /// The form agents send (and Perimeter writes), read without Foundation's ISO 8601 parser,
    /// which was 4% of the evaluator's processing (`perf`, bench pipeline):
    /// `YYYY-MM-DDTHH:MM:SS`, an optional fraction of 1–9 digits, then `Z` or `±HH:MM`, from
    /// 1583 (before the Gregorian reform Foundation's calendar is the Julian one). Anything else
    /// (or an impossible date such as February 30) is nil, left to Foundation's parser.
    static func parseCommon(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { bytes -> Date? in
            let count = bytes.count
            guard count >= 20 else { return nil }
            func number(_ start: Int, _ length: Int) -> Int64? {
                var value: Int64 = 0
                for index in start..<(start + length) {
                    let digit = bytes[index] &- UInt8(ascii: "0")
                    guard digit < 10 else { return nil }
                    value = value * 10 + Int64(digit)
                }
                return value
            }
            guard bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
                bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
                let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
                let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
                year >= 1583, (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
                hour < 24, minute < 60, second < 60
            else { return nil }
            var index = 19
            var fraction = 0.0
            if bytes[index] == UInt8(ascii: ".") {
                let start = index + 1
                var end = start
                while end < count, end - start < 10, bytes[end] &- UInt8(ascii: "0") < 10 { end += 1 }
                guard end > start, end - start <= 9, let digits = number(start, end - start) else { return nil }
                fraction = Double(digits) / pow(10, Double(end - start))
                index = end
            }
            var offset: Int64 = 0
            switch count - index {
            case 1 where bytes[index] == UInt8(ascii: "Z"): break
            case 6
            where (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-"))
                && bytes[index + 3] == UInt8(ascii: ":"):
                guard let hours = number(index + 1, 2), let minutes = number(index + 4, 2), hours < 24, minutes < 60
                else { return nil }
                offset = (hours * 3600 + minutes * 60) * (bytes[index] == UInt8(ascii: "-") ? -1 : 1)
            default: return nil
            }
            let days = Self.days(fromCivil: year, month, day)
            let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset
            return Date(timeIntervalSince1970: Double(seconds) + fraction)
        }
    }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date; Howard Hinnant's `days_from_civil`.
    private static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
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
        if let date = parseCommon(text) { return date }
        if let seconds = Double(text), seconds.isFinite { return Date(timeIntervalSince1970: seconds) }
        let withFraction = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        if let date = try? withFraction.parse(text) { return date }
        return try? Date.ISO8601FormatStyle().parse(text)
    }
}
