/// A JSON document kept as its text: for values that are stored and shown, rarely read.
///
/// A parsed ``JSONValue`` object is a dictionary and an array of keys on the heap: the evaluator
/// kept every subject's authorization record and in-use state that way, ~500 B a subject (most of
/// the privacy gate's share of `bench restart`'s memory). As text the same record is one string
/// (`{"inUse":true}` fits in a string's inline storage, no allocation at all). Its `Codable` form
/// is the one of ``JSONValue`` (the document's text), so snapshots read either.
public struct JSONText: Sendable, Hashable {
    public let text: String

    public init(_ value: JSONValue) { text = value.serialized() }

    init(text: String) { self.text = text }

    /// The document; `.null` for text that is not JSON (only a damaged snapshot can hold that).
    public var value: JSONValue { (try? JSONParser.parse(text)) ?? .null }
}

extension JSONText: Codable {
    public init(from decoder: any Decoder) throws {
        if let text = try? decoder.singleValueContainer().decode(String.self) {
            self.init(text: text)
        } else {
            // A snapshot written before JSON values were kept as text.
            self.init(try JSONValue(from: decoder))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(text)
    }
}
