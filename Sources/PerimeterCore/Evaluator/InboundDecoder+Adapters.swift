import Foundation

// The adapters: what OwnTracks apps and ESPresense room nodes already publish, read as they
// are so that venues running them need change nothing.
extension InboundDecoder {
    // MARK: OwnTracks

    /// `owntracks/{user}/{device}` (https://owntracks.org/booklet/tech/json/): `location` is a
    /// fix for subject `owntracks:{user}:{device}`; `waypoint` and `waypoints` define regions;
    /// `lwt` (the app's last will) is an offline status of the device; every other `_type`
    /// (transition, card, cmd, status …) says nothing the evaluator uses and decodes to nothing.
    static func ownTracks(_ json: JSONValue, user: String, device: String) throws(InboundError) -> [Inbound] {
        let reader = try FieldReader(json)
        guard let type = try reader.string("_type") else { throw reader.missing("_type") }
        switch type {
        case "location":
            guard let t = try reader.epochSeconds("tst") else { throw reader.missing("tst") }
            guard let lat = try reader.number("lat") else { throw reader.missing("lat") }
            guard let lon = try reader.number("lon") else { throw reader.missing("lon") }
            let position = try checkPosition(lat: lat, lon: lon, reader)
            let accuracy = try reader.number("acc")
            for key in ["alt", "vac", "vel", "cog"] { _ = try reader.number(key) }
            let fix = Fix(
                subject: ownTracksSubject(user: user, device: device), t: t, position: position,
                accuracy: accuracy, floor: nil, source: "owntracks")
            return [.fix(fix)]
        case "waypoint":
            return try waypoint(reader, user: user, device: device).map { [.regionUpsert($0)] } ?? []
        case "waypoints":
            guard let waypoints = try reader.objects("waypoints") else { throw reader.missing("waypoints") }
            var regions: [Inbound] = []
            for waypoint in waypoints {
                if let region = try self.waypoint(waypoint, user: user, device: device) {
                    regions.append(.regionUpsert(region))
                }
            }
            return regions
        case "lwt":
            // The app's last will: the device went away; its subject goes unknown at once.
            let t = try reader.epochSeconds("tst")
            return [
                .agentStatus(AgentStatus(agent: ownTracksSubject(user: user, device: device), online: false, t: t))
            ]
        default:
            return []
        }
    }

    /// One OwnTracks waypoint `{desc, lat, lon, rad, tst, rid?, uuid?, major?, minor?}` as a region:
    /// a beacon region when it names a `uuid` (major and minor 0 mean any), else a circle of
    /// `rad` metres. A waypoint with neither (`rad` 0, no `uuid`) is a plain point of interest
    /// in OwnTracks, not a region, and gives nil.
    ///
    /// The region is built as a GeoJSON Feature and read by ``RegionParser``, so that it is
    /// validated as a `regions/{id}` Feature would be; `properties.owntracks` keeps the user,
    /// device and `rid`, for OwnTracks transitions about it.
    static func waypoint(_ reader: FieldReader, user: String, device: String) throws(InboundError) -> Region? {
        guard let desc = try reader.string("desc") else { throw reader.missing("desc") }
        guard let tst = try reader.integer("tst") else { throw reader.missing("tst") }
        let rid = try reader.string("rid").flatMap { $0.isEmpty ? nil : $0 }
        let radius = try reader.number("rad") ?? 0
        if radius < 0 { throw reader.range("rad", "\(FieldReader.show(radius)) m is negative") }
        let uuid = try reader.string("uuid").flatMap { $0.isEmpty ? nil : $0 }
        let lat = try reader.number("lat")
        let lon = try reader.number("lon")
        let major = try reader.integer("major")
        let minor = try reader.integer("minor")

        var properties = JSONObject()
        properties["name"] = .string(desc)
        var geometry = JSONValue.null
        if let uuid {
            var beacon = JSONObject()
            beacon["uuid"] = .string(uuid)
            // 0 is OwnTracks' "any"; a minor without its major cannot be a constraint, so a
            // wildcard major drops the minor too.
            if let major, major != 0 {
                beacon["major"] = .number(Double(major))
                if let minor, minor != 0 { beacon["minor"] = .number(Double(minor)) }
            }
            properties["beacon"] = .object(beacon)
        } else if radius > 0 {
            guard let lat else { throw reader.missing("lat") }
            guard let lon else { throw reader.missing("lon") }
            geometry = ["type": "Point", "coordinates": [.number(lon), .number(lat)]]
            properties["radius"] = .number(radius)
        } else {
            return nil
        }
        var owner = JSONObject([("user", .string(user)), ("device", .string(device))])
        if let rid { owner["rid"] = .string(rid) }
        owner["tst"] = .number(Double(tst))
        properties["owntracks"] = .object(owner)

        let id = rid.map { "owntracks-\($0)" } ?? "owntracks-\(user)-\(device)-\(tst)"
        let feature: JSONValue = [
            "type": "Feature", "id": .string(id), "properties": .object(properties), "geometry": geometry,
        ]
        return try parsedRegion(feature, id: id, field: reader.path)
    }

    // MARK: ESPresense

    /// `espresense/devices/{id}/{room}`: `{id?, rssi, "rssi@1m"?, distance?, …}`, one room node
    /// (the gateway) hearing one device. The payload has no time: it is `receivedAt`.
    ///
    /// A device id of ESPresense's iBeacon form `iBeacon:{uuid}-{major}-{minor}` is that
    /// beacon, named by its canonical identity; any other id is the subject `espresense:{id}`.
    static func espresense(
        _ json: JSONValue, device: String, room: String, receivedAt: Date
    ) throws(InboundError) -> TagReport {
        let reader = try FieldReader(json)
        _ = try reader.string("id")
        guard let rssi = try reader.number("rssi", in: rssiRange, unit: " dBm") else { throw reader.missing("rssi") }
        let tx1m = try reader.number("rssi@1m", in: rssiRange, unit: " dBm")
        _ = try reader.number("distance")
        let identity = espresenseBeacon(device)
        let sighting = TagSighting(
            subject: identity?.canonical ?? "espresense:\(device)", identity: identity, rssi: rssi, tx1m: tx1m)
        return TagReport(gateway: room, t: receivedAt, sightings: [sighting])
    }

    /// The iBeacon behind an ESPresense id `iBeacon:{uuid}-{major}-{minor}`, nil for other ids.
    static func espresenseBeacon(_ device: String) -> BeaconIdentity? {
        guard device.hasPrefix("iBeacon:") else { return nil }
        let parts = device.dropFirst("iBeacon:".count).split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 7, let major = UInt16(parts[5]), let minor = UInt16(parts[6]),
            let uuid = BeaconPrefix(uuid: parts[0..<5].joined(separator: "-"))
        else { return nil }
        return .iBeacon(uuid: uuid, major: major, minor: minor)
    }
}

extension InboundDecoder {
    /// The subject an OwnTracks device is: `owntracks:{user}:{device}`, with `:` and `%` in the
    /// names percent-encoded so that the two parts read back unambiguously.
    public static func ownTracksSubject(user: String, device: String) -> String {
        func escape(_ part: String) -> String {
            part.replacingOccurrences(of: "%", with: "%25").replacingOccurrences(of: ":", with: "%3A")
        }
        return "owntracks:\(escape(user)):\(escape(device))"
    }

    /// What every subject of an OwnTracks user's devices starts with: `owntracks:{user}:`.
    public static func ownTracksSubjectPrefix(user: String) -> String {
        ownTracksSubject(user: user, device: "")
    }

    /// The (user, device) behind an OwnTracks subject, or nil for any other subject.
    public static func ownTracksDevice(of subject: String) -> (user: String, device: String)? {
        let parts = subject.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "owntracks" else { return nil }
        func unescape(_ part: Substring) -> String {
            part.replacingOccurrences(of: "%3A", with: ":").replacingOccurrences(of: "%25", with: "%")
        }
        return (unescape(parts[1]), unescape(parts[2]))
    }
}
