import Foundation

/// Reads the `obs/{agent}/gps` payload (`{subject?, t, lat, lon, acc, alt?, floor?, …}`)
/// into a ``Fix``, naming the field and the problem when it is wrong.
public enum GPSObservation {
    public struct Error: Swift.Error, CustomStringConvertible, Sendable, Equatable {
        public var field: String
        public var message: String
        public var description: String { field.isEmpty ? message : "\(field): \(message)" }
    }

    /// - Parameters:
    ///   - defaultSubject: the subject when the payload names none (a phone reporting itself).
    ///   - source: the events' `source` for fixes read here.
    public static func decode(_ value: JSONValue, defaultSubject: String?, source: String = "gps") throws(Error) -> Fix
    {
        guard case .object(let object) = value else {
            throw Error(field: "", message: "expected a JSON object, got \(value.typeName)")
        }
        let subject: String
        switch object["subject"] {
        case .string(let name)?: subject = name
        case nil, .null?:
            guard let defaultSubject else {
                throw Error(field: "subject", message: "missing, and the agent names no default")
            }
            subject = defaultSubject
        case let other?: throw Error(field: "subject", message: "expected a string, got \(other.typeName)")
        }
        let t: Date
        switch object["t"] {
        case .string(let text)?:
            guard let date = Timestamp.parse(text) else {
                throw Error(field: "t", message: "'\(text)' is not an ISO 8601 time")
            }
            t = date
        case .number(let seconds)?:
            guard seconds.isFinite else { throw Error(field: "t", message: "not a finite number") }
            t = Date(timeIntervalSince1970: seconds)
        case nil: throw Error(field: "t", message: "missing (ISO 8601 time or seconds since 1970)")
        case let other?: throw Error(field: "t", message: "expected a time string or number, got \(other.typeName)")
        }
        let lat = try number(object, "lat", required: true)!
        let lon = try number(object, "lon", required: true)!
        let accuracy = try number(object, "acc", required: false)
        var floor: Int?
        if let value = object["floor"], value != .null {
            guard let integer = value.intValue else {
                throw Error(field: "floor", message: "expected an integer, got \(value.serialized())")
            }
            floor = integer
        }
        return Fix(
            subject: subject, t: t, position: GeoPoint(lon: lon, lat: lat), accuracy: accuracy, floor: floor,
            source: source)
    }

    private static func number(_ object: JSONObject, _ key: String, required: Bool) throws(Error) -> Double? {
        switch object[key] {
        case .number(let value)?: return value
        case nil, .null?:
            if required { throw Error(field: key, message: "missing") }
            return nil
        case let other?: throw Error(field: key, message: "expected a number, got \(other.typeName)")
        }
    }
}
