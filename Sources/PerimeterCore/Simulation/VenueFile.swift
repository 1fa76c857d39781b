import Foundation

/// A sample venue's description (`config/{venue}/venue.json`): who it is, where its beacons
/// and gateways hang, and how the simulator walks visitors through it.
///
/// ```json
/// {"name": "museum", "timeZone": "Europe/Paris", "locale": "fr_FR", "currency": "EUR",
///  "regions": "regions.geojson", "pathLossExponent": 2.2,
///  "beacons": [{"id": "g1-e1", "uuid": "…", "major": 1, "minor": 1, "lat": 48.86, "lon": 2.33, "tx": -59}],
///  "gateways": [{"id": "gw-hall", "lat": 48.86, "lon": 2.33, "zone": "hall"}],
///  "simulator": {"visitors": 8, "topology": "scanner", "waypoints": {"door": [2.33, 48.86]},
///                "paths": [["door", "hall"]]}}
/// ```
public struct VenueFile: Sendable {
    public struct Beacon: Sendable, Hashable {
        public var id: String
        public var uuid: String
        public var major: Int
        public var minor: Int
        public var position: GeoPoint
        public var floor: Int?
        /// Expected RSSI at 1 m (the iBeacon measured power).
        public var tx: Int
    }

    public var name: String
    public var displayName: String?
    public var timeZone: String
    public var locale: String
    public var currency: String
    /// Relative to the venue file's directory.
    public var regions: String
    public var pathLossExponent: Double
    public var beacons: [Beacon]
    public var gateways: [Gateway]
    public var simulator: SimulatorSettings

    public struct Error: Swift.Error, Sendable, CustomStringConvertible {
        public var problems: [String]
        public var description: String { problems.joined(separator: "; ") }
    }

    /// Reads a venue file's JSON.
    /// - Throws: ``Error`` listing every problem, each naming its field.
    public static func parse(_ value: JSONValue) throws(Error) -> VenueFile {
        var problems: [String] = []
        guard case .object(let object) = value else {
            throw Error(problems: ["the venue file must hold a JSON object"])
        }
        func string(_ key: String, _ fallback: String?) -> String {
            if let member = object[key], member != .null {
                if let text = member.stringValue, !text.isEmpty { return text }
                problems.append("\(key): expected a non-empty string")
            } else if fallback == nil {
                problems.append("\(key): missing")
            }
            return fallback ?? ""
        }
        let name = string("name", nil)
        if Topics.separator(in: name) != nil || name.hasPrefix("_") {
            problems.append("name '\(name)': must be one topic level (no '/', '+', '#', not starting with '_')")
        }
        let timeZone = string("timeZone", "UTC")
        if TimeZone(identifier: timeZone) == nil { problems.append("timeZone '\(timeZone)': not an IANA time zone") }
        let currency = string("currency", "USD")
        if currency.count != 3 || !currency.allSatisfy({ $0.isASCII && $0.isUppercase }) {
            problems.append("currency '\(currency)': expected an ISO 4217 code like EUR")
        }
        let exponent = object["pathLossExponent"]?.doubleValue ?? 2
        if !(1...6).contains(exponent) { problems.append("pathLossExponent \(exponent): expected 1…6") }

        var beacons: [Beacon] = []
        for (index, item) in (object["beacons"]?.arrayValue ?? []).enumerated() {
            let at = "beacons[\(index)]"
            guard case .object(let b) = item, let id = b["id"]?.stringValue, let uuid = b["uuid"]?.stringValue,
                BeaconPrefix(uuid: uuid) != nil, let major = b["major"]?.intValue, let minor = b["minor"]?.intValue,
                (0...65535).contains(major), (0...65535).contains(minor), let position = point(b)
            else {
                problems.append("\(at): expected {id, uuid (a UUID), major, minor (0…65535), lat, lon, floor?, tx?}")
                continue
            }
            beacons.append(
                Beacon(
                    id: id, uuid: uuid.uppercased(), major: major, minor: minor, position: position,
                    floor: b["floor"]?.intValue, tx: b["tx"]?.intValue ?? -59))
        }
        var gateways: [Gateway] = []
        for (index, item) in (object["gateways"]?.arrayValue ?? []).enumerated() {
            guard case .object(let g) = item, let id = g["id"]?.stringValue, !id.isEmpty, let position = point(g) else {
                problems.append("gateways[\(index)]: expected {id, lat, lon, floor?, zone?}")
                continue
            }
            gateways.append(
                Gateway(id: id, position: position, floor: g["floor"]?.intValue, zone: g["zone"]?.stringValue))
        }
        var simulator = SimulatorSettings()
        if let settings = object["simulator"], settings != .null {
            simulator = SimulatorSettings.parse(settings, problems: &problems)
        }
        let locale = string("locale", "en_US")
        let regions = string("regions", "regions.geojson")
        if !problems.isEmpty { throw Error(problems: problems) }
        return VenueFile(
            name: name, displayName: object["displayName"]?.stringValue, timeZone: timeZone, locale: locale,
            currency: currency, regions: regions, pathLossExponent: exponent, beacons: beacons, gateways: gateways,
            simulator: simulator)
    }

    static func point(_ object: JSONObject) -> GeoPoint? {
        guard let lat = object["lat"]?.doubleValue, let lon = object["lon"]?.doubleValue, abs(lat) <= 90,
            abs(lon) <= 180
        else { return nil }
        return GeoPoint(lon: lon, lat: lat)
    }
}

/// How the simulator populates a venue.
public struct SimulatorSettings: Sendable, Hashable {
    public enum Topology: String, Sendable, Hashable, CaseIterable {
        /// Each visitor's phone scans for the venue's beacons (and reports GPS).
        case scanner
        /// Visitors carry tags; the venue's gateways hear them.
        case gateway
    }

    public var visitors = 6
    public var topology = Topology.scanner
    public var seed: UInt64 = 1
    /// Walking speed range, m/s.
    public var speed: ClosedRange<Double> = 1.2...1.4
    /// Pause at each waypoint, seconds.
    public var pause: ClosedRange<Double> = 3...15
    /// GPS horizontal accuracy range outdoors, metres.
    public var gpsAccuracy: ClosedRange<Double> = 4...12
    /// Seconds between GPS readings and between BLE scans.
    public var interval: Double = 1
    /// Standard deviation of the RSSI noise, dB.
    public var rssiNoise: Double = 3
    /// Probability that an advert is missed in one scan.
    public var dropout: Double = 0.15
    /// Weakest RSSI a receiver still hears, dBm.
    public var sensitivity: Double = -95
    /// Named points, `[lon, lat]`.
    public var waypoints: [String: GeoPoint] = [:]
    /// Routes through waypoints; each visitor walks one, there and back, again and again.
    public var paths: [[String]] = []
    /// Shares of authorization statuses among visitors.
    public var authorization: [(status: String, share: Double)] = [
        ("always", 0.4), ("whenInUse", 0.3), ("provisionalAlways", 0.2), ("denied", 0.1),
    ]
    public var locales: [String] = ["en_US", "de_DE", "fr_FR", "ja_JP"]
    /// Default places visitors may choose (region ids); about half choose one.
    public var defaultPlaces: [String] = []
    /// The iBeacon UUID of the visitors' tags in gateway topology.
    public var tagUUID = "E2C56DB5-DFFB-48D2-B060-D0F5A71096E0"

    public init() {}

    public static func == (left: SimulatorSettings, right: SimulatorSettings) -> Bool {
        left.visitors == right.visitors && left.topology == right.topology && left.seed == right.seed
            && left.waypoints == right.waypoints && left.paths == right.paths
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(visitors)
        hasher.combine(seed)
    }

    static let statuses = ["always", "whenInUse", "provisionalAlways", "denied", "notDetermined", "restricted"]

    static func parse(_ value: JSONValue, problems: inout [String]) -> SimulatorSettings {
        var settings = SimulatorSettings()
        guard case .object(let object) = value else {
            problems.append("simulator: expected an object")
            return settings
        }
        func range(_ key: String, _ bounds: ClosedRange<Double>) -> ClosedRange<Double>? {
            guard let member = object[key], member != .null else { return nil }
            let values = member.arrayValue?.compactMap(\.doubleValue) ?? member.doubleValue.map { [$0, $0] } ?? []
            guard values.count == 2, values[0] <= values[1], bounds.contains(values[0]), bounds.contains(values[1])
            else {
                problems.append("simulator.\(key): expected [low, high] within \(bounds)")
                return nil
            }
            return values[0]...values[1]
        }
        if let visitors = object["visitors"] {
            if let count = visitors.intValue, (0...10_000).contains(count) {
                settings.visitors = count
            } else {
                problems.append("simulator.visitors: expected an integer 0…10000")
            }
        }
        if let topology = object["topology"]?.stringValue {
            if let value = Topology(rawValue: topology) {
                settings.topology = value
            } else {
                problems.append("simulator.topology '\(topology)': expected scanner or gateway")
            }
        }
        if let seed = object["seed"]?.doubleValue, seed >= 0 { settings.seed = UInt64(seed) }
        settings.speed = range("speed", 0.1...10) ?? settings.speed
        settings.pause = range("pause", 0...3600) ?? settings.pause
        settings.gpsAccuracy = range("gpsAccuracy", 0...1000) ?? settings.gpsAccuracy
        if let interval = object["interval"]?.doubleValue {
            if interval >= 0.1 && interval <= 60 {
                settings.interval = interval
            } else {
                problems.append("simulator.interval: expected 0.1…60 seconds")
            }
        }
        settings.rssiNoise = object["rssiNoise"]?.doubleValue ?? settings.rssiNoise
        settings.dropout = object["dropout"]?.doubleValue ?? settings.dropout
        if !(0..<1).contains(settings.dropout) { problems.append("simulator.dropout: expected 0 ≤ p < 1") }
        settings.sensitivity = object["sensitivity"]?.doubleValue ?? settings.sensitivity
        if let waypoints = object["waypoints"]?.objectValue {
            for (name, position) in waypoints {
                guard let pair = position.arrayValue?.compactMap(\.doubleValue), pair.count == 2,
                    abs(pair[0]) <= 180, abs(pair[1]) <= 90
                else {
                    problems.append("simulator.waypoints.\(name): expected [lon, lat]")
                    continue
                }
                settings.waypoints[name] = GeoPoint(lon: pair[0], lat: pair[1])
            }
        }
        if let paths = object["paths"]?.arrayValue {
            for (index, path) in paths.enumerated() {
                let names = path.arrayValue?.compactMap(\.stringValue) ?? []
                guard names.count >= 2 else {
                    problems.append("simulator.paths[\(index)]: expected at least two waypoint names")
                    continue
                }
                for name in names where settings.waypoints[name] == nil {
                    problems.append("simulator.paths[\(index)]: unknown waypoint '\(name)'")
                }
                settings.paths.append(names)
            }
        }
        if settings.visitors > 0 && settings.paths.isEmpty {
            problems.append("simulator.paths: visitors need at least one path")
        }
        if let shares = object["authorization"]?.objectValue {
            settings.authorization = []
            for (status, share) in shares {
                guard statuses.contains(status), let value = share.doubleValue, value >= 0 else {
                    problems.append(
                        "simulator.authorization.\(status): expected one of \(statuses.joined(separator: ", ")) "
                            + "with a share ≥ 0")
                    continue
                }
                settings.authorization.append((status, value))
            }
        }
        if let locales = object["locales"]?.arrayValue {
            settings.locales = locales.compactMap(\.stringValue)
        }
        if let places = object["defaultPlaces"]?.arrayValue {
            settings.defaultPlaces = places.compactMap(\.stringValue)
        }
        if let uuid = object["tagUUID"]?.stringValue {
            if BeaconPrefix(uuid: uuid) == nil { problems.append("simulator.tagUUID: not a UUID") }
            settings.tagUUID = uuid.uppercased()
        }
        return settings
    }
}

extension VenueFile {
    /// The regions with each beacon region's known beacons added as `properties.beacons`
    /// (`[{id, lat, lon}]`, the beacons of this file its constraint matches), so that maps draw
    /// beacon regions around their beacons. Regions that already list beacons are left alone.
    public func placingBeacons(in regions: [Region]) -> [Region] {
        regions.map { region in
            guard case .beacon(let json) = region.shape, region.properties["beacons"] == nil,
                case .success(let spec) = BeaconRegionSpec.parse(json)
            else { return region }
            let placed = beacons.filter { beacon in
                BeaconIdentity(canonical: "ibeacon:\(beacon.uuid.lowercased()):\(beacon.major):\(beacon.minor)").map(
                    spec.constraint.matches) ?? false
            }
            guard !placed.isEmpty else { return region }
            var copy = region
            copy.properties["beacons"] = .array(
                placed.map {
                    ["id": .string($0.id), "lat": .number($0.position.lat), "lon": .number($0.position.lon)]
                })
            return copy
        }
    }
}
