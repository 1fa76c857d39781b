/// A problem found in a region definition, naming the region (or feature) and the place.
///
/// `region 'gallery-3' (feature 4): ring 0 self-intersects at vertex 14: edges 14–15 and 20–21 cross at [2.35, 48.86]`
public struct RegionProblem: Sendable, Hashable, CustomStringConvertible {
    /// The region's id when it could be read.
    public var regionID: String?
    /// The Feature's position in the collection (0-based), nil for a problem with the whole document.
    public var feature: Int?
    public var message: String

    public init(regionID: String?, feature: Int?, message: String) {
        self.regionID = regionID
        self.feature = feature
        self.message = message
    }

    public var description: String {
        switch (regionID, feature) {
        case (let id?, let index?): "region '\(id)' (feature \(index)): \(message)"
        case (let id?, nil): "region '\(id)': \(message)"
        case (nil, let index?): "feature \(index): \(message)"
        case (nil, nil): message
        }
    }
}

/// The regions of a GeoJSON document and every problem found in it.
public struct RegionDocument: Sendable {
    /// Regions without problems, in document order.
    public var regions: [Region]
    /// Every problem; a region with any problem is left out of ``regions``.
    public var problems: [RegionProblem]

    public var isValid: Bool { problems.isEmpty }
}

/// Reads regions from GeoJSON (RFC 7946) and validates them, reporting every problem.
public enum RegionParser {
    /// At most this many self-intersections are listed per ring; the rest are counted.
    public static let intersectionsListedPerRing = 5

    /// Parses a FeatureCollection, a Feature, or JSON text holding either.
    public static func parse(text: String) -> RegionDocument {
        do {
            return parse(try JSONValue(parsing: text))
        } catch {
            return RegionDocument(
                regions: [], problems: [RegionProblem(regionID: nil, feature: nil, message: "not JSON: \(error)")])
        }
    }

    public static func parse(bytes: some Collection<UInt8>) -> RegionDocument {
        do {
            return parse(try JSONValue(parsing: bytes))
        } catch {
            return RegionDocument(
                regions: [], problems: [RegionProblem(regionID: nil, feature: nil, message: "not JSON: \(error)")])
        }
    }

    public static func parse(_ document: JSONValue) -> RegionDocument {
        guard case .object(let top) = document else {
            return failure("expected a GeoJSON FeatureCollection or Feature object, got \(document.typeName)")
        }
        switch top["type"]?.stringValue {
        case "FeatureCollection":
            guard case .array(let features)? = top["features"] else {
                return failure("a FeatureCollection needs a \"features\" array")
            }
            var regions: [Region] = []
            var problems: [RegionProblem] = []
            var firstFeatureForID: [String: Int] = [:]
            var duplicated: Set<String> = []
            for (index, feature) in features.enumerated() {
                let (id, region, found) = parseFeature(feature, index: index)
                problems += found
                if let id {
                    if let first = firstFeatureForID[id] {
                        problems.append(
                            RegionProblem(
                                regionID: id, feature: index, message: "duplicate id: feature \(first) has the same id")
                        )
                        duplicated.insert(id)
                        continue
                    }
                    firstFeatureForID[id] = index
                }
                if let region, found.isEmpty { regions.append(region) }
            }
            // A duplicate invalidates every feature with that id: which one was meant is unknowable.
            regions.removeAll { duplicated.contains($0.id) }
            return RegionDocument(regions: regions, problems: problems)
        case "Feature":
            let (_, region, problems) = parseFeature(document, index: 0)
            return RegionDocument(regions: problems.isEmpty ? region.map { [$0] } ?? [] : [], problems: problems)
        case let other?:
            return failure("unsupported GeoJSON type '\(other)': expected FeatureCollection or Feature")
        case nil:
            return failure("missing \"type\": expected a GeoJSON FeatureCollection or Feature")
        }
    }

    private static func failure(_ message: String) -> RegionDocument {
        RegionDocument(regions: [], problems: [RegionProblem(regionID: nil, feature: nil, message: message)])
    }

    /// Parses one Feature; returns its id (when readable), the region (when its id and shape
    /// could be read) and its problems.
    public static func parseFeature(_ feature: JSONValue, index: Int) -> (String?, Region?, [RegionProblem]) {
        var problems: [String] = []
        guard case .object(let object) = feature else {
            return (
                nil, nil,
                [
                    RegionProblem(
                        regionID: nil, feature: index, message: "expected a Feature object, got \(feature.typeName)")
                ]
            )
        }
        if object["type"]?.stringValue != "Feature" {
            problems.append("\"type\" must be \"Feature\", got \(object["type"]?.serialized() ?? "nothing")")
        }
        var properties = JSONObject()
        switch object["properties"] {
        case .object(let value)?: properties = value
        case .null?, nil: break
        case let other?: problems.append("\"properties\" must be an object or null, got \(other.typeName)")
        }

        // The id: the Feature's own, else properties.id.
        var id: String?
        var idInFeature = true
        switch object["id"] {
        case .string(let value)?: id = value
        case .number?:
            id = object["id"]!.intValue.map(String.init)
            if id == nil { problems.append("\"id\" must be a string or an integer") }
        case nil, .null?:
            idInFeature = false
            switch properties["id"] {
            case .string(let value)?: id = value
            case nil, .null?: break
            case let other?: problems.append("properties.id must be a string, got \(other.typeName)")
            }
        case let other?: problems.append("\"id\" must be a string, got \(other.typeName)")
        }
        if let id, let problem = Topics.idProblem(id) { problems.append(problem) }
        if id == nil && problems.isEmpty {
            problems.append("no id: set the Feature's \"id\" or properties.id")
        }

        var reader = PropertyReader(properties: properties)
        let shape = parseShape(object["geometry"], reader: &reader, problems: &problems)
        var region = Region(
            id: id ?? "", shape: shape ?? .polygons([]), properties: properties, idInFeature: idInFeature)
        region.isMultiPolygon = object["geometry"]?["type"]?.stringValue == "MultiPolygon"
        region.name = reader.string("name")
        region.notifyOnEntry = reader.bool("notifyOnEntry") ?? true
        region.notifyOnExit = reader.bool("notifyOnExit") ?? true
        region.dwellAfter = reader.number("dwellAfter", minimum: 0)
        region.enterDelay = reader.number("enterDelay", minimum: 0) ?? 0
        region.exitDelay = reader.number("exitDelay", minimum: 0) ?? 0
        region.exitBuffer = reader.number("exitBuffer", minimum: 0) ?? 0
        region.minAccuracy = reader.number("minAccuracy", minimum: 0, exclusive: true)
        region.floor = reader.integer("floor")
        region.schedule = reader.schedule("schedule")
        region.subjectPrefix = reader.string("subjectPrefix")
        problems += reader.problems

        let regionProblems = problems.map { RegionProblem(regionID: id, feature: index, message: $0) }
        guard id != nil, shape != nil else { return (id, nil, regionProblems) }
        return (id, region, regionProblems)
    }

    private static func parseShape(
        _ geometry: JSONValue?, reader: inout PropertyReader, problems: inout [String]
    ) -> Region.Shape? {
        guard let geometry, geometry != .null else {
            switch reader.properties["beacon"] {
            case .object?:
                let beacon = reader.properties["beacon"]!
                if case .failure(let failure) = BeaconRegionSpec.parse(beacon) {
                    problems += failure.messages
                    return nil
                }
                return .beacon(beacon)
            case nil, .null?:
                problems.append("geometry is null and there is no properties.beacon object: not a region")
            case let other?:
                problems.append("properties.beacon must be an object, got \(other.typeName)")
            }
            return nil
        }
        guard case .object(let object) = geometry else {
            problems.append("geometry must be an object or null, got \(geometry.typeName)")
            return nil
        }
        let coordinates = object["coordinates"]
        switch object["type"]?.stringValue {
        case "Point":
            guard let center = position(coordinates, at: "geometry.coordinates", problems: &problems) else {
                return nil
            }
            guard let radius = reader.number("radius", minimum: 0, exclusive: true) else {
                if reader.properties["radius"] == nil {
                    problems.append("a circle (Point geometry) needs properties.radius in metres")
                }
                return nil
            }
            return .circle(center: center, radius: radius)
        case "Polygon":
            guard let rings = polygon(coordinates, at: "geometry.coordinates", label: "", problems: &problems) else {
                return nil
            }
            return .polygons([rings])
        case "MultiPolygon":
            guard case .array(let parts)? = coordinates else {
                problems.append("geometry.coordinates must be an array of polygons")
                return nil
            }
            if parts.isEmpty { problems.append("a MultiPolygon needs at least one polygon") }
            var polygons: [[[GeoPoint]]] = []
            var complete = true
            for (number, part) in parts.enumerated() {
                if let rings = polygon(
                    part, at: "geometry.coordinates[\(number)]", label: "polygon \(number) ", problems: &problems)
                {
                    polygons.append(rings)
                } else {
                    complete = false
                }
            }
            return complete ? .polygons(polygons) : nil
        case let other?:
            problems.append(
                "unsupported geometry type '\(other)': use Polygon, MultiPolygon, or Point with properties.radius")
            return nil
        case nil:
            problems.append("geometry has no \"type\"")
            return nil
        }
    }

    private static func position(_ value: JSONValue?, at path: String, problems: inout [String]) -> GeoPoint? {
        guard case .array(let numbers)? = value, numbers.count >= 2, numbers.count <= 3 else {
            problems.append("\(path): expected a position [lon, lat], got \(value?.serialized() ?? "nothing")")
            return nil
        }
        guard let lon = numbers[0].doubleValue, let lat = numbers[1].doubleValue else {
            problems.append(
                "\(path): positions hold numbers, got \(numbers.map { $0.typeName }.joined(separator: ", "))")
            return nil
        }
        guard lon.isFinite, lat.isFinite else {
            problems.append("\(path): position [\(lon), \(lat)] is not finite")
            return nil
        }
        var good = true
        if abs(lon) > 180 {
            problems.append("\(path): longitude \(lon) out of range [-180, 180]")
            good = false
        }
        if abs(lat) > 90 {
            problems.append("\(path): latitude \(lat) out of range [-90, 90]")
            good = false
        }
        return good ? GeoPoint(lon: lon, lat: lat) : nil
    }

    /// Reads and validates one polygon: rings, closure, length, self-intersection, holes inside the shell.
    private static func polygon(
        _ value: JSONValue?, at path: String, label: String, problems: inout [String]
    ) -> [[GeoPoint]]? {
        guard case .array(let ringValues)? = value else {
            problems.append("\(path): expected an array of linear rings")
            return nil
        }
        if ringValues.isEmpty {
            problems.append("\(label.isEmpty ? "the polygon" : String(label.dropLast())) has no rings")
            return nil
        }
        var rings: [[GeoPoint]] = []
        var complete = true
        for (number, ringValue) in ringValues.enumerated() {
            let name = "\(label)ring \(number)"
            guard case .array(let positionValues) = ringValue else {
                problems.append("\(name): expected an array of positions, got \(ringValue.typeName)")
                complete = false
                continue
            }
            var ring: [GeoPoint] = []
            ring.reserveCapacity(positionValues.count)
            var ringComplete = true
            for (offset, positionValue) in positionValues.enumerated() {
                if let point = position(positionValue, at: "\(name) position \(offset)", problems: &problems) {
                    ring.append(point)
                } else {
                    ringComplete = false
                }
            }
            guard ringComplete else {
                complete = false
                continue
            }
            if ring.count < 4 {
                problems.append("\(name) has \(ring.count) positions; a linear ring needs at least 4")
                complete = false
                continue
            }
            if ring.first != ring.last {
                problems.append(
                    "\(name) is not closed: the first position \(ring.first!) differs from the last \(ring.last!)")
                complete = false
                continue
            }
            for intersection in RingGeometry.selfIntersections(of: ring, limit: intersectionsListedPerRing + 1).prefix(
                intersectionsListedPerRing)
            {
                problems.append("\(name) \(intersection)")
                complete = false
            }
            rings.append(ring)
        }
        guard complete else { return nil }
        for hole in 1..<max(rings.count, 1) where rings.count > 1 {
            if let outside = RingGeometry.firstVertexOutside(rings[hole], shell: rings[0]) {
                problems.append(
                    "\(label)ring \(hole) (a hole) lies outside its exterior ring: vertex \(outside) \(rings[hole][outside]) is outside"
                )
                complete = false
            }
        }
        return complete ? rings : nil
    }
}

/// Typed reads of Feature properties that collect problems instead of stopping at the first.
struct PropertyReader {
    let properties: JSONObject
    var problems: [String] = []

    init(properties: JSONObject) { self.properties = properties }

    mutating func string(_ key: String) -> String? {
        switch properties[key] {
        case nil, .null?: return nil
        case .string(let value)?: return value
        case let other?:
            problems.append("properties.\(key) must be a string, got \(other.typeName)")
            return nil
        }
    }

    mutating func bool(_ key: String) -> Bool? {
        switch properties[key] {
        case nil, .null?: return nil
        case .bool(let value)?: return value
        case let other?:
            problems.append("properties.\(key) must be true or false, got \(other.serialized())")
            return nil
        }
    }

    mutating func number(_ key: String, minimum: Double, exclusive: Bool = false) -> Double? {
        switch properties[key] {
        case nil, .null?: return nil
        case .number(let value)?:
            guard value.isFinite, exclusive ? value > minimum : value >= minimum else {
                let bound = exclusive ? "greater than \(Int(minimum))" : "at least \(Int(minimum))"
                problems.append(
                    "properties.\(key) must be a finite number \(bound), got \(properties[key]!.serialized())")
                return nil
            }
            return value
        case let other?:
            problems.append("properties.\(key) must be a number, got \(other.typeName)")
            return nil
        }
    }

    mutating func integer(_ key: String) -> Int? {
        switch properties[key] {
        case nil, .null?: return nil
        case let value? where value.intValue != nil: return value.intValue
        case let other?:
            problems.append("properties.\(key) must be an integer, got \(other.serialized())")
            return nil
        }
    }

    mutating func schedule(_ key: String) -> WeeklySchedule? {
        guard let value = properties[key], value != .null else { return nil }
        let (schedule, found) = WeeklySchedule.parse(value, place: "properties.\(key)")
        problems += found
        return schedule
    }
}
