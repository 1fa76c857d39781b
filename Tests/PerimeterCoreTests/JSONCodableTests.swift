import Foundation
import Testing

@testable import PerimeterCore

/// How JSON values are held in the evaluator's snapshot: as their own text; the synthesized
/// form of earlier snapshots is still read.
@Suite("JSON values in snapshots")
struct JSONCodableTests {
    struct Holder: Codable, Equatable {
        var value: JSONValue
        var object: JSONObject
    }

    static let values: [JSONValue] = [
        .null, true, false, 0, -12.5, 48.858_370_1, 1e300, "", "tab\tquote\"slash\\ é 🚀",
        [], [1, "two", nil, [3]], ["a": 1, "b": ["c": [true, nil]], "z": "last"],
    ]

    @Test("round trip through the snapshot coder, one string per value", arguments: values)
    func roundTrip(_ value: JSONValue) throws {
        let holder = Holder(value: value, object: ["k": value, "a": 1])
        let data = try VenueEvaluator.snapshotEncoder().encode(holder)
        let back = try VenueEvaluator.snapshotDecoder().decode(Holder.self, from: data)
        #expect(back == holder)
        #expect(Array(back.object.keys) == ["k", "a"], "members keep their order")
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.hasPrefix(#"{"value":""#) || text.hasPrefix(#"{"object":""#), "\(text)")
    }

    @Test("a snapshot written in the synthesized form is still read")
    func legacy() throws {
        let legacy = #"""
            {"value":{"object":{"_0":{"keys":["b","a"],"storage":{"a":{"number":{"_0":1}},
             "b":{"array":{"_0":[{"null":{}},{"string":{"_0":"x"}},{"bool":{"_0":true}}]}}}}}},
             "object":{"keys":["z"],"storage":{"z":{"string":{"_0":"y"}}}}}
            """#
        let holder = try VenueEvaluator.snapshotDecoder().decode(Holder.self, from: Data(legacy.utf8))
        #expect(holder.value == ["b": [nil, "x", true], "a": 1])
        #expect(Array(holder.value.objectValue?.keys ?? []) == ["b", "a"])
        #expect(holder.object == ["z": "y"])
    }

    @Test("text that is not JSON, or not an object where one is expected, is a decoding error naming the path")
    func badText() {
        for text in [#"{"value":"{nope","object":"{}"}"#, #"{"value":"1","object":"[1]"}"#] {
            #expect(throws: DecodingError.self) {
                try VenueEvaluator.snapshotDecoder().decode(Holder.self, from: Data(text.utf8))
            }
        }
    }
}
