import Foundation

/// Reads the members of one JSON object of an inbound payload, each read naming its field on
/// failure: the one set of field helpers behind ``InboundDecoder`` and ``GPSObservation``.
///
/// A member that is absent or `null` is missing. Wrong types and missing required members are
/// `schema` errors; numbers that are not finite (`1e400` overflows to infinity) and values
/// outside their range are `range` errors. Every error's field is the member's path in the
/// payload (`adverts[3].rssi`).
struct FieldReader {
    let object: JSONObject
    /// The object's own path (`adverts[3]`), empty at the top of the payload.
    let path: String

    /// The earliest and latest times accepted: years 1 to 9999, what ISO 8601 text can say.
    static let earliest = Date(timeIntervalSince1970: -62_135_596_800)
    static let latest = Date(timeIntervalSince1970: 253_402_300_799)

    /// - Throws: a `schema` error when `value` is not an object.
    init(_ value: JSONValue, path: String = "") throws(InboundError) {
        guard case .object(let object) = value else {
            throw InboundError(code: "schema", field: path, "expected a JSON object, got \(value.typeName)")
        }
        self.object = object
        self.path = path
    }

    /// Refuses members not in `known`: in our own payloads a misspelt field would otherwise be
    /// silently ignored (DESIGN.md §7 dead-letters unknown fields).
    func onlyKnown(_ known: [String]) throws(InboundError) {
        for key in object.keys where !known.contains(key) {
            throw InboundError(
                code: "schema", field: field(key), "unknown field (known here: \(known.joined(separator: ", ")))")
        }
    }

    /// The path of a member of this object.
    func field(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    func schema(_ key: String, _ message: String) -> InboundError {
        InboundError(code: "schema", field: field(key), message)
    }

    func range(_ key: String, _ message: String) -> InboundError {
        InboundError(code: "range", field: field(key), message)
    }

    /// The member, nil when it is absent or `null`.
    func value(_ key: String) -> JSONValue? {
        guard let value = object[key], value != .null else { return nil }
        return value
    }

    /// The error for a required member that is absent or `null`.
    func missing(_ key: String) -> InboundError { schema(key, "missing") }

    // MARK: Scalars

    /// A finite number.
    func number(_ key: String) throws(InboundError) -> Double? {
        guard let value = value(key) else { return nil }
        guard case .number(let number) = value else { throw schema(key, "expected a number, got \(value.typeName)") }
        guard number.isFinite else { throw range(key, "not a finite number") }
        return number
    }

    func number(_ key: String, in bounds: ClosedRange<Double>, unit: String = "") throws(InboundError) -> Double? {
        guard let number = try number(key) else { return nil }
        guard bounds.contains(number) else {
            throw range(
                key,
                "\(Self.show(number))\(unit) out of range [\(Self.show(bounds.lowerBound)), \(Self.show(bounds.upperBound))]"
            )
        }
        return number
    }

    /// A number as JSON writes it (`90`, not `90.0`).
    static func show(_ number: Double) -> String { JSONValue.number(number).serialized() }

    /// An integral number.
    func integer(_ key: String) throws(InboundError) -> Int? {
        guard let value = value(key) else { return nil }
        guard let integer = value.intValue else { throw schema(key, "expected an integer, got \(value.serialized())") }
        return integer
    }

    /// An integer in `bounds`.
    func integer(_ key: String, in bounds: ClosedRange<Int>) throws(InboundError) -> Int? {
        guard let integer = try integer(key) else { return nil }
        guard bounds.contains(integer) else {
            throw range(key, "\(integer) out of range \(bounds.lowerBound)…\(bounds.upperBound)")
        }
        return integer
    }

    func string(_ key: String) throws(InboundError) -> String? {
        guard let value = value(key) else { return nil }
        guard case .string(let string) = value else { throw schema(key, "expected a string, got \(value.typeName)") }
        return string
    }

    /// A string that is one of `choices`.
    func choice(_ key: String, _ choices: [String]) throws(InboundError) -> String? {
        guard let string = try string(key) else { return nil }
        guard choices.contains(string) else {
            throw schema(key, "'\(string)' is not one of \(choices.joined(separator: ", "))")
        }
        return string
    }

    /// An id that can be a topic level as it is: an id (``Topics/idProblem(_:)``) with no `/`, `+` or `#`.
    func topicSafeID(_ key: String) throws(InboundError) -> String? {
        guard let string = try string(key) else { return nil }
        if let problem = Self.topicSafetyProblem(string) { throw schema(key, problem) }
        return string
    }

    /// Why an id cannot stand in a topic level unencoded, nil when it can.
    static func topicSafetyProblem(_ id: String) -> String? {
        if let problem = Topics.idProblem(id) { return problem }
        if let bad = Topics.separator(in: id) {
            return "the id '\(id)' holds '\(bad)', which topic levels cannot carry"
        }
        return nil
    }

    func bool(_ key: String) throws(InboundError) -> Bool? {
        guard let value = value(key) else { return nil }
        guard case .bool(let bool) = value else { throw schema(key, "expected true or false, got \(value.typeName)") }
        return bool
    }

    /// A time: ISO 8601 text, or seconds since 1970 as a number (or as text).
    func time(_ key: String) throws(InboundError) -> Date? {
        guard let value = value(key) else { return nil }
        let date: Date
        switch value {
        case .string(let text):
            guard let parsed = Timestamp.parse(text) else { throw schema(key, "'\(text)' is not an ISO 8601 time") }
            date = parsed
        case .number(let seconds):
            guard seconds.isFinite else { throw range(key, "not a finite number") }
            date = Date(timeIntervalSince1970: seconds)
        default:
            throw schema(key, "expected a time string or number, got \(value.typeName)")
        }
        return try checked(date, key)
    }

    /// A time as seconds since 1970, a number only (OwnTracks' `tst`).
    func epochSeconds(_ key: String) throws(InboundError) -> Date? {
        guard let seconds = try number(key) else { return nil }
        return try checked(Date(timeIntervalSince1970: seconds), key)
    }

    private func checked(_ date: Date, _ key: String) throws(InboundError) -> Date {
        guard date >= Self.earliest, date <= Self.latest else {
            throw range(key, "\(date.timeIntervalSince1970) seconds since 1970 is outside the years 1–9999")
        }
        return date
    }

    // MARK: Containers

    func array(_ key: String) throws(InboundError) -> [JSONValue]? {
        guard let value = value(key) else { return nil }
        guard case .array(let array) = value else { throw schema(key, "expected an array, got \(value.typeName)") }
        return array
    }

    func strings(_ key: String) throws(InboundError) -> [String]? {
        guard let array = try array(key) else { return nil }
        var strings: [String] = []
        for (index, element) in array.enumerated() {
            guard case .string(let string) = element else {
                throw InboundError(
                    code: "schema", field: "\(field(key))[\(index)]", "expected a string, got \(element.typeName)")
            }
            strings.append(string)
        }
        return strings
    }

    /// The object at `key`, as a reader.
    func object(_ key: String) throws(InboundError) -> FieldReader? {
        guard let value = value(key) else { return nil }
        return try FieldReader(value, path: field(key))
    }

    /// A reader for each element of the array at `key`, each named `key[i]`.
    func objects(_ key: String) throws(InboundError) -> [FieldReader]? {
        guard let array = try array(key) else { return nil }
        var readers: [FieldReader] = []
        readers.reserveCapacity(array.count)
        for (index, element) in array.enumerated() {
            readers.append(try FieldReader(element, path: "\(field(key))[\(index)]"))
        }
        return readers
    }
}
