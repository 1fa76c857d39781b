extension Region {
    /// The region as a GeoJSON Feature. A region read from GeoJSON exports to an equal
    /// Feature: same id placement, geometry type, coordinates (bit for bit) and properties
    /// (in their order); the typed fields are written back into the properties.
    public var feature: JSONValue {
        var object = JSONObject()
        object["type"] = "Feature"
        if idInFeature { object["id"] = .string(id) }
        switch shape {
        case .circle(let center, _):
            object["geometry"] = ["type": "Point", "coordinates": Self.position(center)]
        case .polygons(let polygons):
            let encoded = polygons.map { rings in JSONValue.array(rings.map { .array($0.map(Self.position)) }) }
            object["geometry"] =
                polygons.count == 1 && !isMultiPolygon
                ? ["type": "Polygon", "coordinates": encoded[0]]
                : ["type": "MultiPolygon", "coordinates": .array(encoded)]
        case .beacon:
            object["geometry"] = .null
        }
        object["properties"] = .object(exportedProperties)
        return .object(object)
    }

    static func position(_ point: GeoPoint) -> JSONValue { [.number(point.lon), .number(point.lat)] }

    /// ``properties`` with the typed fields written back; defaults stay absent when they were.
    var exportedProperties: JSONObject {
        var result = properties
        func set(_ key: String, _ value: JSONValue?, isDefault: Bool) {
            if isDefault && result[key] == nil { return }
            result[key] = value ?? .null
        }
        if !idInFeature { result["id"] = .string(id) }
        set("name", name.map(JSONValue.string), isDefault: name == nil)
        set("notifyOnEntry", .bool(notifyOnEntry), isDefault: notifyOnEntry)
        set("notifyOnExit", .bool(notifyOnExit), isDefault: notifyOnExit)
        set("dwellAfter", dwellAfter.map(JSONValue.number), isDefault: dwellAfter == nil)
        set("enterDelay", .number(enterDelay), isDefault: enterDelay == 0)
        set("exitDelay", .number(exitDelay), isDefault: exitDelay == 0)
        set("exitBuffer", .number(exitBuffer), isDefault: exitBuffer == 0)
        set("minAccuracy", minAccuracy.map(JSONValue.number), isDefault: minAccuracy == nil)
        set("floor", floor.map { .number(Double($0)) }, isDefault: floor == nil)
        if case .circle(_, let radius) = shape { result["radius"] = .number(radius) }
        if case .beacon(let beacon) = shape { result["beacon"] = beacon }
        if let schedule,
            properties["schedule"] == nil || WeeklySchedule.parseForComparison(properties["schedule"]!) != schedule
        {
            result["schedule"] = schedule.json
        }
        return result
    }
}

extension WeeklySchedule {
    /// The schedule as GeoJSON property value.
    public var json: JSONValue {
        .array(
            windows.map { window in
                [
                    "days": .array(window.days.sorted().map { .string($0.name) }),
                    "start": .string(Self.clock(window.start)), "end": .string(Self.clock(window.end)),
                ]
            })
    }

    static func parseForComparison(_ value: JSONValue) -> WeeklySchedule? {
        parse(value, place: "schedule").0
    }
}

/// Writes regions as one GeoJSON FeatureCollection.
public enum RegionExporter {
    public static func featureCollection(_ regions: [Region]) -> JSONValue {
        ["type": "FeatureCollection", "features": .array(regions.map(\.feature))]
    }
}
