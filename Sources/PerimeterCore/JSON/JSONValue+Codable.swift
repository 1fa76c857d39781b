/// In a `Codable` container (the evaluator's snapshot) a JSON value or object is its own JSON
/// text, as one string, read back with ``JSONParser``.
///
/// The synthesized form it replaces (`{"object":{"_0":{"keys":[…],"storage":{…}}}}`) was about
/// three times the size and took Foundation's decoder most of a restart (8 s for 20,000
/// subjects' privacy diagnostics in `bench restart`). Snapshots written in that form are still
/// read.
extension JSONValue: Codable {
    public init(from decoder: any Decoder) throws {
        if let text = try? decoder.singleValueContainer().decode(String.self) {
            self = try Self.parse(text, at: decoder.codingPath)
        } else {
            self = try LegacyValue(from: decoder).value
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(serialized())
    }

    static func parse(_ text: String, at path: [any CodingKey]) throws -> JSONValue {
        do {
            return try JSONParser.parse(text)
        } catch {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(codingPath: path, debugDescription: "not JSON text: \(error)"))
        }
    }
}

extension JSONObject: Codable {
    public init(from decoder: any Decoder) throws {
        if let text = try? decoder.singleValueContainer().decode(String.self) {
            guard case .object(let object) = try JSONValue.parse(text, at: decoder.codingPath) else {
                throw DecodingError.dataCorrupted(
                    DecodingError.Context(codingPath: decoder.codingPath, debugDescription: "not a JSON object"))
            }
            self = object
        } else {
            self = try LegacyObject(from: decoder).object
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(JSONValue.object(self).serialized())
    }
}

/// The synthesized `Codable` form of ``JSONValue`` before it was written as text.
private enum LegacyValue: Decodable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([LegacyValue])
    case object(LegacyObject)

    var value: JSONValue {
        switch self {
        case .null: .null
        case .bool(let value): .bool(value)
        case .number(let value): .number(value)
        case .string(let value): .string(value)
        case .array(let values): .array(values.map(\.value))
        case .object(let object): .object(object.object)
        }
    }
}

/// The synthesized `Codable` form of ``JSONObject`` before it was written as text.
private struct LegacyObject: Decodable {
    var keys: [String]
    var storage: [String: LegacyValue]

    var object: JSONObject {
        JSONObject(keys.compactMap { key in storage[key].map { (key, $0.value) } })
    }
}
