import Foundation

/// Reads the `obs/{agent}/gps` payload (`{subject?, t, lat, lon, acc?, alt?, vacc?, floor?, speed?, course?}`)
/// into a ``Fix``, naming the field and the problem when it is wrong.
///
/// This reads the shape only (types, presence, finite numbers): whether a position is on the
/// globe is the engine's question for `perimeter replay`, and ``InboundDecoder`` asks it too
/// before a live fix is accepted.
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
        do {
            return try read(FieldReader(value), defaultSubject: defaultSubject, source: source)
        } catch {
            throw Error(field: error.field, message: error.message)
        }
    }

    /// Reads a fix from the payload's object; `alt`, `vacc`, `speed` and `course` are checked
    /// to be numbers, though a ``Fix`` does not carry them.
    static func read(_ reader: FieldReader, defaultSubject: String?, source: String) throws(InboundError) -> Fix {
        let subject: String
        if let named = try reader.string("subject") {
            subject = named
        } else if let defaultSubject {
            subject = defaultSubject
        } else {
            throw reader.schema("subject", "missing, and the agent names no default")
        }
        guard let t = try reader.time("t") else {
            throw reader.schema("t", "missing (ISO 8601 time or seconds since 1970)")
        }
        guard let lat = try reader.number("lat") else { throw reader.missing("lat") }
        guard let lon = try reader.number("lon") else { throw reader.missing("lon") }
        let accuracy = try reader.number("acc")
        for key in ["alt", "vacc", "speed", "course"] { _ = try reader.number(key) }
        return Fix(
            subject: subject, t: t, position: GeoPoint(lon: lon, lat: lat), accuracy: accuracy,
            floor: try reader.integer("floor"), source: source)
    }
}
