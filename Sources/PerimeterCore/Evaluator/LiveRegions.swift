import Foundation

/// Regions as operators publish them (`perimeter regions put`, the dashboard's region editor):
/// each a GeoJSON Feature for one retained `regions/{id}` topic, checked by the evaluator's own
/// decoder before anything is published. One code path for both, so they can never disagree
/// with each other or with the evaluator.
public enum LiveRegions {
    /// One Feature of an input file, ready to publish.
    public struct Change: Sendable {
        public var id: String
        /// The Feature as it goes on the topic (its id filled in when it had none).
        public var payload: [UInt8]
        public var region: Region
    }

    /// The content type a region message carries (an MQTT 5 property).
    public static let contentType = "application/geo+json"

    /// The Features of a file (one Feature or a FeatureCollection), each decoded exactly as the
    /// evaluator decodes a `regions/{id}` message; the problems name the feature and what is
    /// wrong. Nothing is valid unless everything is.
    /// - Parameter receivedAt: the time the decoder judges the regions at (the caller's clock).
    public static func read(
        _ data: Data, venue: String, maxPayloadBytes: Int, id forcedID: String? = nil, receivedAt: Date
    ) -> (changes: [Change], problems: [String]) {
        let document: JSONValue
        do { document = try JSONParser.parse(Array(data)) } catch { return ([], ["not JSON: \(error)"]) }
        let features: [JSONValue]
        switch document["type"]?.stringValue {
        case "Feature": features = [document]
        case "FeatureCollection":
            guard case .array(let items)? = document["features"] else {
                return ([], ["a FeatureCollection needs a 'features' array"])
            }
            features = items
        default:
            return ([], ["expected a GeoJSON Feature or FeatureCollection, got \(document.typeName)"])
        }
        if forcedID != nil && features.count != 1 {
            return ([], ["--id names one region; the file holds \(features.count) features"])
        }
        if features.isEmpty { return ([], ["the FeatureCollection holds no feature"]) }
        var changes: [Change] = []
        var problems: [String] = []
        var seen: [String: Int] = [:]
        for (index, feature) in features.enumerated() {
            guard case .object(var object) = feature else {
                problems.append("feature \(index): expected a Feature object, got \(feature.typeName)")
                continue
            }
            let ownID: String? =
                switch object["id"] {
                case .string(let value)?: value
                case .number(let value)?: JSONValue.number(value).intValue.map(String.init)
                default: object["properties"]?["id"]?.stringValue
                }
            guard let id = forcedID ?? ownID else {
                problems.append(
                    "feature \(index): no id (give the Feature an \"id\", or name it with --id) — the topic "
                        + "regions/{id} needs one")
                continue
            }
            let place = "region '\(id)' (feature \(index))"
            if let problem = Topics.idProblem(id) {
                problems.append("\(place): \(problem)")
                continue
            }
            if let earlier = seen.updateValue(index, forKey: id) {
                problems.append("\(place): duplicate id: feature \(earlier) has the same id")
                continue
            }
            if object["id"] == nil || object["id"] == .null, object["properties"]?["id"] == nil {
                object["id"] = .string(id)
            }
            let payload = Array(JSONValue.object(object).serialized().utf8)
            do {
                let decoded = try InboundDecoder.decode(
                    .region(venue: venue, id: id), payload: payload, receivedAt: receivedAt,
                    limits: InboundDecoder.Limits(maxPayloadBytes: maxPayloadBytes))
                guard case .regionUpsert(let region)? = decoded.inputs.first else {
                    problems.append("\(place): not a region")
                    continue
                }
                changes.append(Change(id: id, payload: payload, region: region))
            } catch {
                // The decoder's message names the region already; the place adds the feature.
                let message =
                    error.message.hasPrefix("region '\(id)': ")
                    ? String(error.message.dropFirst("region '\(id)': ".count)) : error.message
                problems.append("\(place): \(message)")
            }
        }
        return problems.isEmpty ? (changes, []) : ([], problems)
    }

    /// A retained region payload decoded as the evaluator decodes it; nil when it is not one.
    public static func decode(_ payload: [UInt8], id: String, venue: String, receivedAt: Date) -> Region? {
        try? check(payload, id: id, venue: venue, receivedAt: receivedAt).get()
    }

    /// A retained region payload decoded as the evaluator decodes it, or why it refuses it.
    public static func check(
        _ payload: [UInt8], id: String, venue: String, receivedAt: Date
    ) -> Result<Region, InboundError> {
        do {
            let decoded = try InboundDecoder.decode(
                .region(venue: venue, id: id), payload: payload, receivedAt: receivedAt,
                limits: InboundDecoder.Limits(maxPayloadBytes: 16_777_216))
            guard case .regionUpsert(let region)? = decoded.inputs.first else {
                return .failure(InboundError(code: "region", "not a region"))
            }
            return .success(region)
        } catch {
            return .failure(error)
        }
    }
}
