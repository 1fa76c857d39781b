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
    /// What was accepted after a change (a coordinate a few units in the last place past ±180
    /// or ±90, clamped): the region is in ``regions`` as changed.
    public var warnings: [RegionProblem] = []

    public var isValid: Bool { problems.isEmpty }
}

/// Reads regions from GeoJSON (RFC 7946) and validates them, reporting every problem.
public enum RegionParser {
    /// At most this many self-intersections are listed per ring; the rest are counted.
    public static let intersectionsListedPerRing = 5

    /// How far past ±180 (longitude) or ±90 (latitude) a coordinate may lie and still be read,
    /// clamped to the bound with a warning: projection round trips in widely used datasets leave
    /// `180.00000000000006` (a few units in the last place); Shapely and GEOS accept such
    /// coordinates. 1e-9° is about 0.1 mm; anything farther is an error.
    public static let coordinateTolerance = 1e-9

    /// What one region may hold: bounds on size and on the cost of preparing and evaluating it.
    ///
    /// Circles and the timing and distance properties are bounded everywhere. The counts bound
    /// live regions (`regions/{id}` topics, OwnTracks waypoints), which anyone allowed to publish
    /// them can send, so that preparing one and evaluating a fix against it costs at most a few
    /// milliseconds; regions files are the operator's and may hold real outlines of any size
    /// (the world's time zones). The polygon index and the self-intersection check also bound
    /// their own work (``PolygonGrid``, ``RingGeometry/selfIntersections(of:limit:)``).
    public struct Limits: Sendable, Hashable {
        /// Positions over all rings and polygons of one region; nil for no bound.
        public var maxVertices: Int?
        /// Rings (exteriors and holes) over all polygons of one region; nil for no bound.
        public var maxRings: Int?

        public init(maxVertices: Int? = nil, maxRings: Int? = nil) {
            self.maxVertices = maxVertices
            self.maxRings = maxRings
        }

        /// Regions files: no bound on counts.
        public static let file = Limits()
        /// Live regions: 10,000 positions (a fix against such a polygon costs at most about
        /// 30 µs even without a grid index; `scripts/bench-regions.sh`), 100 rings (exteriors and
        /// holes: each hole is checked against its exterior, and each polygon is tried per fix).
        public static let live = Limits(maxVertices: 10_000, maxRings: 100)
    }

    /// The largest circle radius, metres: a venue's regions are rooms, buildings and grounds; a
    /// circle of 1e308 m would cover the globe and overflow the distance arithmetic.
    public static let maxRadius = 50_000.0
    /// The longest `dwellAfter`, seconds (30 days).
    public static let maxDwell = 2_592_000.0
    /// The longest `enterDelay` and `exitDelay`, seconds (one day).
    public static let maxDelay = 86_400.0
    /// The largest `exitBuffer` and `minAccuracy`, metres.
    public static let maxDistance = 50_000.0
    /// Floors: from deep basements to the tallest buildings, with room to spare.
    public static let floors = -1_000...1_000

    /// Parses a FeatureCollection, a Feature, or JSON text holding either.
    public static func parse(text: String, limits: Limits = .file) -> RegionDocument {
        do {
            return parse(try JSONValue(parsing: text), limits: limits)
        } catch {
            return RegionDocument(
                regions: [], problems: [RegionProblem(regionID: nil, feature: nil, message: "not JSON: \(error)")])
        }
    }

    public static func parse(bytes: some Collection<UInt8>, limits: Limits = .file) -> RegionDocument {
        do {
            return parse(try JSONValue(parsing: bytes), limits: limits)
        } catch {
            return RegionDocument(
                regions: [], problems: [RegionProblem(regionID: nil, feature: nil, message: "not JSON: \(error)")])
        }
    }

    public static func parse(_ document: JSONValue, limits: Limits = .file) -> RegionDocument {
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
            var warnings: [RegionProblem] = []
            var firstFeatureForID: [String: Int] = [:]
            var duplicated: Set<String> = []
            // A radius for marker Points without one, only when the file asks for it (a foreign
            // member of the FeatureCollection, RFC 7946 §6.1).
            var defaultRadius: Double?
            switch top["defaultRadius"] {
            case nil, .null?: break
            case .number(let value)? where value.isFinite && value > 0 && value <= maxRadius: defaultRadius = value
            case let other?:
                problems.append(
                    RegionProblem(
                        regionID: nil, feature: nil,
                        message:
                            "defaultRadius must be a number of metres in (0, \(Int(maxRadius))], got \(other.serialized())"
                    ))
            }
            for (index, feature) in features.enumerated() {
                let read = readFeature(
                    feature, index: index, limits: limits, defaultRadius: defaultRadius, inCollection: true)
                let (id, region, found) = (read.id, read.region, read.problems)
                problems += found
                if found.isEmpty { warnings += read.warnings }
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
            return RegionDocument(regions: regions, problems: problems, warnings: warnings)
        case "Feature":
            let read = readFeature(document, index: 0, limits: limits)
            let valid = read.problems.isEmpty
            return RegionDocument(
                regions: valid ? read.region.map { [$0] } ?? [] : [], problems: read.problems,
                warnings: valid ? read.warnings : [])
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
    public static func parseFeature(
        _ feature: JSONValue, index: Int, limits: Limits = .file
    ) -> (String?, Region?, [RegionProblem]) {
        let read = readFeature(feature, index: index, limits: limits)
        return (read.id, read.region, read.problems)
    }

    /// One Feature as read: its id (when readable), the region (when its id and shape could be
    /// read), its problems, and what was changed to accept it.
    public struct FeatureReading: Sendable {
        public var id: String?
        public var region: Region?
        public var problems: [RegionProblem]
        public var warnings: [RegionProblem]
    }

    /// What reading one Feature's geometry collects on the way.
    struct Reading {
        let limits: Limits
        var problems: [String] = []
        /// Coordinates clamped to ±180/±90.
        var normalized: [String] = []
        var vertices = 0
        var rings = 0
        /// Set once a count limit is passed: the rest of the geometry is not read.
        var overLimit = false
        /// The file's radius for Points without one (`defaultRadius`), if it gives one.
        var defaultRadius: Double?
        /// Read from a FeatureCollection (which may give a `defaultRadius`).
        var inCollection = false
        /// What was supplied to accept the Feature (a derived id, the default radius).
        var supplied: [String] = []
    }

    /// At most this many normalized coordinates are named per Feature; the rest are counted.
    static let normalizedListed = 3

    public static func readFeature(
        _ feature: JSONValue, index: Int, limits: Limits = .file, defaultRadius: Double? = nil,
        inCollection: Bool = false
    ) -> FeatureReading {
        guard case .object(let object) = feature else {
            return FeatureReading(
                id: nil, region: nil,
                problems: [
                    RegionProblem(
                        regionID: nil, feature: index, message: "expected a Feature object, got \(feature.typeName)")
                ], warnings: [])
        }
        var reading = Reading(limits: limits, defaultRadius: defaultRadius, inCollection: inCollection)
        if object["type"]?.stringValue != "Feature" {
            reading.problems.append("\"type\" must be \"Feature\", got \(object["type"]?.serialized() ?? "nothing")")
        }
        var properties = JSONObject()
        switch object["properties"] {
        case .object(let value)?: properties = value
        case .null?, nil: break
        case let other?: reading.problems.append("\"properties\" must be an object or null, got \(other.typeName)")
        }

        // The id: the Feature's own, else properties.id.
        var id: String?
        var idInFeature = true
        switch object["id"] {
        case .string(let value)?: id = value
        case .number?:
            id = object["id"]!.intValue.map(String.init)
            if id == nil { reading.problems.append("\"id\" must be a string or an integer") }
        case nil, .null?:
            idInFeature = false
            switch properties["id"] {
            case .string(let value)?: id = value
            case nil, .null?: break
            case let other?: reading.problems.append("properties.id must be a string, got \(other.typeName)")
            }
        case let other?: reading.problems.append("\"id\" must be a string, got \(other.typeName)")
        }
        if let id, let problem = Topics.idProblem(id) { reading.problems.append(problem) }
        // Files drawn in tools such as geojson.io carry no ids: one is derived, stable while the
        // name (or, without a name, the geometry) stays the same, and said.
        if id == nil && reading.problems.isEmpty {
            let derived = derivedID(properties: properties, geometry: object["geometry"])
            id = derived.id
            idInFeature = true
            reading.supplied.append(
                "no id: using '\(derived.id)', derived from \(derived.source) (set the Feature's \"id\" to choose one)")
        }

        var reader = PropertyReader(properties: properties)
        let shape = parseShape(object["geometry"], reader: &reader, reading: &reading)
        var region = Region(
            id: id ?? "", shape: shape ?? .polygons([]), properties: properties, idInFeature: idInFeature)
        region.isMultiPolygon = object["geometry"]?["type"]?.stringValue == "MultiPolygon"
        region.name = reader.string("name")
        region.notifyOnEntry = reader.bool("notifyOnEntry") ?? true
        region.notifyOnExit = reader.bool("notifyOnExit") ?? true
        region.dwellAfter = reader.number("dwellAfter", minimum: 0, maximum: maxDwell, unit: "s")
        region.enterDelay = reader.number("enterDelay", minimum: 0, maximum: maxDelay, unit: "s") ?? 0
        region.exitDelay = reader.number("exitDelay", minimum: 0, maximum: maxDelay, unit: "s") ?? 0
        region.exitBuffer = reader.number("exitBuffer", minimum: 0, maximum: maxDistance, unit: "m") ?? 0
        region.minAccuracy = reader.number(
            "minAccuracy", minimum: 0, exclusive: true, maximum: maxDistance, unit: "m")
        region.floor = reader.integer("floor", in: floors)
        region.schedule = reader.schedule("schedule")
        region.subjectPrefix = reader.string("subjectPrefix")
        reading.problems += reader.problems

        let regionProblems = reading.problems.map { RegionProblem(regionID: id, feature: index, message: $0) }
        var notes = reading.supplied + reading.normalized.prefix(normalizedListed).map { $0 }
        if reading.normalized.count > normalizedListed {
            notes.append("and \(reading.normalized.count - normalizedListed) more coordinates clamped the same way")
        }
        let warnings = notes.map { RegionProblem(regionID: id, feature: index, message: $0) }
        guard id != nil, shape != nil else {
            return FeatureReading(id: id, region: nil, problems: regionProblems, warnings: warnings)
        }
        return FeatureReading(id: id, region: region, problems: regionProblems, warnings: warnings)
    }

    /// An id for a Feature that has none: its `name` (or `title`) property made into a topic
    /// level (lowercased; runs of anything but letters and digits become one `-`; at most 64
    /// characters), else `feature-` and 8 hex digits of an FNV-1a hash of its geometry as written.
    static func derivedID(properties: JSONObject, geometry: JSONValue?) -> (id: String, source: String) {
        for key in ["name", "title"] {
            guard let text = properties[key]?.stringValue else { continue }
            var slug = ""
            for character in text.lowercased() {
                if character.isLetter || character.isNumber {
                    slug.append(character)
                } else if !slug.isEmpty && slug.last != "-" {
                    slug.append("-")
                }
            }
            while slug.last == "-" { slug.removeLast() }
            slug = String(slug.prefix(64))
            while slug.last == "-" { slug.removeLast() }
            if !slug.isEmpty, Topics.idProblem(slug) == nil { return (slug, "properties.\(key)") }
        }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in (geometry ?? .null).serialized().utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash >> 32, radix: 16)
        return ("feature-" + String(repeating: "0", count: 8 - hex.count) + hex, "its geometry")
    }

    private static func parseShape(
        _ geometry: JSONValue?, reader: inout PropertyReader, reading: inout Reading
    ) -> Region.Shape? {
        guard let geometry, geometry != .null else {
            switch reader.properties["beacon"] {
            case .object?:
                let beacon = reader.properties["beacon"]!
                if case .failure(let failure) = BeaconRegionSpec.parse(beacon) {
                    reading.problems += failure.messages
                    return nil
                }
                return .beacon(beacon)
            case nil, .null?:
                reading.problems.append("geometry is null and there is no properties.beacon object: not a region")
            case let other?:
                reading.problems.append("properties.beacon must be an object, got \(other.typeName)")
            }
            return nil
        }
        guard case .object(let object) = geometry else {
            reading.problems.append("geometry must be an object or null, got \(geometry.typeName)")
            return nil
        }
        let coordinates = object["coordinates"]
        switch object["type"]?.stringValue {
        case "Point":
            guard let center = position(coordinates, at: "geometry.coordinates", reading: &reading) else {
                return nil
            }
            guard let radius = reader.number("radius", minimum: 0, exclusive: true, maximum: maxRadius, unit: "m")
            else {
                if reader.properties["radius"] == nil {
                    if let radius = reading.defaultRadius {
                        reading.supplied.append("no properties.radius: the file's defaultRadius, \(radius) m")
                        return .circle(center: center, radius: radius)
                    }
                    reading.problems.append(
                        "a circle (Point geometry) needs properties.radius in metres"
                            + (reading.inCollection ? " (or the FeatureCollection's \"defaultRadius\")" : ""))
                }
                return nil
            }
            return .circle(center: center, radius: radius)
        case "Polygon":
            guard let rings = polygon(coordinates, at: "geometry.coordinates", label: "", reading: &reading) else {
                return nil
            }
            return .polygons([rings])
        case "MultiPolygon":
            guard case .array(let parts)? = coordinates else {
                reading.problems.append("geometry.coordinates must be an array of polygons")
                return nil
            }
            if parts.isEmpty { reading.problems.append("a MultiPolygon needs at least one polygon") }
            var polygons: [[[GeoPoint]]] = []
            var complete = true
            for (number, part) in parts.enumerated() {
                if let rings = polygon(
                    part, at: "geometry.coordinates[\(number)]", label: "polygon \(number) ", reading: &reading)
                {
                    polygons.append(rings)
                } else {
                    complete = false
                    if reading.overLimit { break }
                }
            }
            return complete ? .polygons(polygons) : nil
        case let other?:
            reading.problems.append(
                "unsupported geometry type '\(other)': use Polygon, MultiPolygon, or Point with properties.radius")
            return nil
        case nil:
            reading.problems.append("geometry has no \"type\"")
            return nil
        }
    }

    private static func position(_ value: JSONValue?, at path: String, reading: inout Reading) -> GeoPoint? {
        guard case .array(let numbers)? = value, numbers.count >= 2, numbers.count <= 3 else {
            reading.problems.append("\(path): expected a position [lon, lat], got \(value?.serialized() ?? "nothing")")
            return nil
        }
        guard let lon = numbers[0].doubleValue, let lat = numbers[1].doubleValue else {
            reading.problems.append(
                "\(path): positions hold numbers, got \(numbers.map { $0.typeName }.joined(separator: ", "))")
            return nil
        }
        guard lon.isFinite, lat.isFinite else {
            reading.problems.append("\(path): position [\(lon), \(lat)] is not finite")
            return nil
        }
        var good = true
        var point = GeoPoint(lon: lon, lat: lat)
        switch clamped(lon, bound: 180) {
        case nil:
            reading.problems.append("\(path): longitude \(lon) out of range [-180, 180]")
            good = false
        case let value? where value != lon:
            reading.normalized.append("\(path): longitude \(lon) clamped to \(Int(value)) (within 1e-9° of the bound)")
            point.lon = value
        default: break
        }
        switch clamped(lat, bound: 90) {
        case nil:
            reading.problems.append("\(path): latitude \(lat) out of range [-90, 90]")
            good = false
        case let value? where value != lat:
            reading.normalized.append("\(path): latitude \(lat) clamped to \(Int(value)) (within 1e-9° of the bound)")
            point.lat = value
        default: break
        }
        return good ? point : nil
    }

    /// `value` when within ±`bound`; the bound when past it by at most ``coordinateTolerance``;
    /// nil beyond. Callers check finiteness first.
    public static func clamped(_ value: Double, bound: Double) -> Double? {
        if abs(value) <= bound { return value }
        if abs(value) - bound <= coordinateTolerance { return value < 0 ? -bound : bound }
        return nil
    }

    /// Reads and validates one polygon: rings, closure, length, self-intersection, holes inside the shell.
    private static func polygon(
        _ value: JSONValue?, at path: String, label: String, reading: inout Reading
    ) -> [[GeoPoint]]? {
        guard case .array(let ringValues)? = value else {
            reading.problems.append("\(path): expected an array of linear rings")
            return nil
        }
        if ringValues.isEmpty {
            reading.problems.append("\(label.isEmpty ? "the polygon" : String(label.dropLast())) has no rings")
            return nil
        }
        var rings: [[GeoPoint]] = []
        var complete = true
        for (number, ringValue) in ringValues.enumerated() {
            let name = "\(label)ring \(number)"
            guard case .array(let positionValues) = ringValue else {
                reading.problems.append("\(name): expected an array of positions, got \(ringValue.typeName)")
                complete = false
                continue
            }
            // Counted before the positions are read: past a limit nothing more is worth reading.
            reading.rings += 1
            reading.vertices += positionValues.count
            if let most = reading.limits.maxRings, reading.rings > most {
                reading.problems.append("more than \(most) rings: a live region holds at most \(most)")
                reading.overLimit = true
            }
            if let most = reading.limits.maxVertices, reading.vertices > most {
                reading.problems.append("more than \(most) positions: a live region holds at most \(most)")
                reading.overLimit = true
            }
            if reading.overLimit { return nil }
            var ring: [GeoPoint] = []
            ring.reserveCapacity(positionValues.count)
            var ringComplete = true
            for (offset, positionValue) in positionValues.enumerated() {
                if let point = position(positionValue, at: "\(name) position \(offset)", reading: &reading) {
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
                reading.problems.append("\(name) has \(ring.count) positions; a linear ring needs at least 4")
                complete = false
                continue
            }
            if ring.first != ring.last {
                reading.problems.append(
                    "\(name) is not closed: the first position \(ring.first!) differs from the last \(ring.last!)")
                complete = false
                continue
            }
            for intersection in RingGeometry.selfIntersections(of: ring, limit: intersectionsListedPerRing + 1).prefix(
                intersectionsListedPerRing)
            {
                reading.problems.append("\(name) \(intersection)")
                complete = false
            }
            rings.append(ring)
        }
        guard complete else { return nil }
        for hole in 1..<max(rings.count, 1) where rings.count > 1 {
            if let outside = RingGeometry.firstVertexOutside(rings[hole], shell: rings[0]) {
                reading.problems.append(
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

    mutating func number(
        _ key: String, minimum: Double, exclusive: Bool = false, maximum: Double = .infinity, unit: String = ""
    ) -> Double? {
        switch properties[key] {
        case nil, .null?: return nil
        case .number(let value)?:
            guard value.isFinite, exclusive ? value > minimum : value >= minimum, value <= maximum else {
                var bound = exclusive ? "greater than \(Int(minimum))" : "at least \(Int(minimum))"
                if maximum.isFinite { bound += " and at most \(JSONValue.number(maximum).serialized())" }
                problems.append(
                    "properties.\(key) must be a finite number \(bound)\(unit.isEmpty ? "" : " (\(unit))"), "
                        + "got \(properties[key]!.serialized())")
                return nil
            }
            return value
        case let other?:
            problems.append("properties.\(key) must be a number, got \(other.typeName)")
            return nil
        }
    }

    mutating func integer(_ key: String, in bounds: ClosedRange<Int>) -> Int? {
        switch properties[key] {
        case nil, .null?: return nil
        case let value? where value.intValue.map(bounds.contains) == true: return value.intValue
        case let value? where value.intValue != nil:
            problems.append(
                "properties.\(key) must be an integer from \(bounds.lowerBound) to \(bounds.upperBound), got \(value.serialized())"
            )
            return nil
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
