import Foundation

/// Reads inbound MQTT messages: the topic into an ``InboundRoute``, the payload into what the
/// evaluator was told. Pure: no I/O, no clock (the receive time is passed in).
///
/// Every rejection is an ``InboundError`` whose `code` counts it (`json`, `schema`, `range`,
/// `tooLarge`, `batch`, `topic`, `region`, `advert`) and whose `field` names the member at fault.
/// Nothing a publisher sends can crash the decoder.
public enum InboundDecoder {
    public struct Limits: Sendable, Hashable {
        /// A larger payload is refused unread (`tooLarge`).
        public var maxPayloadBytes: Int = 65_536
        /// More adverts in one `obs/{agent}/ble` message are refused (`batch`).
        public var maxBatch: Int = 256

        public init(maxPayloadBytes: Int = 65_536, maxBatch: Int = 256) {
            self.maxPayloadBytes = maxPayloadBytes
            self.maxBatch = maxBatch
        }
    }

    // MARK: Topics

    /// Routes a topic.
    ///
    /// Handles `{prefix}/{venue}/obs/{agent}/gps`, `…/obs/{agent}/ble`, `…/agents/{agent}/status`,
    /// `…/regions/{id}`, `…/subjects/{s}/authorization`, `…/subjects/{s}/usage`,
    /// `…/subjects/{s}/preferences`, `…/sessions/{consumer}/{session}`, `owntracks/{user}/{device}`
    /// (exactly three levels: `owntracks/{user}/{device}/event` and the like are not locations)
    /// and `espresense/devices/{id}/{room}`. Id levels are percent-decoded with
    /// ``Topics/decodeLevel(_:)``; venue levels are compared as they are, as ``Topics`` writes them.
    ///
    /// An empty id level still routes, so that ``decode(_:payload:receivedAt:limits:)`` can
    /// refuse it with a `topic` error that reaches the dead letters.
    /// - Parameters:
    ///   - prefix: the contract's root, like `perimeter/v1`.
    ///   - venues: the venue ids served.
    /// - Returns: nil when the topic is not one the evaluator reads (ignored, not an error).
    public static func route(topic: String, prefix: String, venues: Set<String>) -> InboundRoute? {
        let levels = Self.levels(of: topic)
        let root = Self.levels(of: prefix)
        if levels.count > root.count, levels.starts(with: root), !prefix.isEmpty {
            return venueRoute(levels.dropFirst(root.count), venues: venues)
        }
        switch (levels.first, levels.count) {
        case ("owntracks", 3):
            return .ownTracks(user: id(levels[1]), device: id(levels[2]))
        case ("espresense", 4) where levels[1] == "devices":
            return .espresense(device: id(levels[2]), room: id(levels[3]))
        default:
            return nil
        }
    }

    private static func venueRoute(_ levels: ArraySlice<Substring>, venues: Set<String>) -> InboundRoute? {
        let levels = Array(levels)
        guard levels.count >= 3, venues.contains(String(levels[0])) else { return nil }
        let venue = String(levels[0])
        switch (levels[1], levels.count) {
        case ("obs", 4) where levels[3] == "gps": return .gps(venue: venue, agent: id(levels[2]))
        case ("obs", 4) where levels[3] == "ble": return .ble(venue: venue, agent: id(levels[2]))
        case ("agents", 4) where levels[3] == "status": return .status(venue: venue, agent: id(levels[2]))
        case ("regions", 3): return .region(venue: venue, id: id(levels[2]))
        case ("subjects", 4):
            let subject = id(levels[2])
            switch levels[3] {
            case "authorization": return .authorization(venue: venue, subject: subject)
            case "usage": return .usage(venue: venue, subject: subject)
            case "preferences": return .preferences(venue: venue, subject: subject)
            case "prompt": return .echo(venue: venue)
            default: return nil
            }
        case ("sessions", 4): return .session(venue: venue, consumer: id(levels[2]), session: id(levels[3]))
        case ("admin", 4) where levels[2] == "erase" || levels[2] == "show":
            return .admin(venue: venue, command: String(levels[2]), subject: id(levels[3]))
        case ("admin", 4) where levels[2] == "erased" || levels[2] == "shown":
            return .echo(venue: venue)
        default: return nil
        }
    }

    private static func id(_ level: Substring) -> String { Topics.decodeLevel(String(level)) }

    /// A topic's levels, split on the byte `/`: a `/` next to a combining mark is one Swift
    /// `Character` but still a separator to the broker (found by fuzzing).
    static func levels(of topic: String) -> [Substring] {
        let bytes = topic.utf8
        var levels: [Substring] = []
        var start = bytes.startIndex
        var index = start
        while index != bytes.endIndex {
            if bytes[index] == 0x2F {
                levels.append(Substring(bytes[start..<index]))
                start = bytes.index(after: index)
            }
            index = bytes.index(after: index)
        }
        levels.append(Substring(bytes[start..<bytes.endIndex]))
        return levels
    }

    // MARK: Payloads

    /// Decodes one message.
    ///
    /// The checks run in order: size (`tooLarge`, before anything is read), the topic's ids
    /// (`topic`: none may be empty), the empty payload (meaningful only for `regions/{id}`
    /// (delete), `subjects/{s}/authorization` (forget) and `sessions/{c}/{id}` (end)), JSON
    /// (`json`, with the parser's line and column), then the route's own payload.
    /// - Parameters:
    ///   - receivedAt: when the message arrived: the time of payloads that carry none (ESPresense).
    /// A message is refused whole when what is wrong with it concerns all of it (not JSON, no
    /// `t`, too many adverts); a part that stands on its own (one advert of a scan) is refused
    /// alone: the rest is used, and the refusal is returned in ``Decoded/refused`` for the
    /// caller to report.
    /// - Returns: what the message says (empty for messages that say nothing the evaluator uses:
    ///   an OwnTracks `transition`, `card`, `lwt` …) and the parts refused.
    /// - Throws: ``InboundError`` naming the problem and the field.
    public static func decode(
        _ route: InboundRoute, payload: [UInt8], receivedAt: Date, limits: Limits = Limits()
    ) throws(InboundError) -> Decoded {
        var refused: [InboundError] = []
        var sequence: Int?
        let inputs = try decode(
            route, payload: payload, receivedAt: receivedAt, limits: limits, refused: &refused, sequence: &sequence)
        return Decoded(inputs: inputs, refused: refused, sequence: sequence)
    }

    /// The largest message number an agent may give (`n`): integers up to it are exact in JSON
    /// numbers (doubles).
    public static let maxSequenceNumber = 9_007_199_254_740_991

    /// An agent's number for its message (`n`, from 1), if it numbers them.
    static func sequenceNumber(_ json: JSONValue) throws(InboundError) -> Int? {
        try FieldReader(json).integer("n", in: 1...maxSequenceNumber)
    }

    /// What one message said, and the parts of it refused on their own.
    public struct Decoded: Sendable, Hashable {
        public var inputs: [Inbound]
        /// Parts refused alone, each naming its place (`adverts[3].data`) and problem; the
        /// inputs hold the rest of the message. Empty when the whole message was read.
        public var refused: [InboundError]
        /// The agent's number for this message (`n` on `gps` and `ble`), when it numbers them:
        /// gaps are messages lost on the way (``SequenceWatch``).
        public var sequence: Int?

        public init(inputs: [Inbound], refused: [InboundError] = [], sequence: Int? = nil) {
            self.inputs = inputs
            self.refused = refused
            self.sequence = sequence
        }
    }

    private static func decode(
        _ route: InboundRoute, payload: [UInt8], receivedAt: Date, limits: Limits, refused: inout [InboundError],
        sequence: inout Int?
    ) throws(InboundError) -> [Inbound] {
        guard payload.count <= limits.maxPayloadBytes else {
            throw InboundError(
                code: "tooLarge",
                "the payload is \(payload.count) bytes; the limit is \(limits.maxPayloadBytes) bytes")
        }
        try checkTopicIDs(route)
        switch route {
        case .echo: return []
        case .admin(_, let command, let subject): return [.admin(command: command, subject: subject)]
        default: break
        }
        if payload.isEmpty {
            switch route {
            case .region(_, let id): return [.regionRemove(id: id)]
            case .authorization(_, let subject): return [.authorization(subject: subject, nil)]
            case .session(_, let consumer, let session): return [.session(consumer: consumer, session: session, nil)]
            case .preferences(_, let subject): return [.preferences(subject: subject, SubjectPreferences())]
            default:
                throw InboundError(code: "schema", "the payload is empty; this topic needs a JSON object")
            }
        }
        let json: JSONValue
        do {
            json = try JSONParser.parse(payload)
        } catch {
            throw InboundError(code: "json", "not JSON: \(error)")
        }
        switch route {
        case .gps(_, let agent):
            let fix = try fix(json, agent: agent)
            sequence = try sequenceNumber(json)
            return [.fix(fix)]
        case .ble(_, let agent):
            let report = try beacons(json, agent: agent, limits: limits, refused: &refused)
            sequence = try sequenceNumber(json)
            return [.beacons(report)]
        case .status(_, let agent): return [.agentStatus(try agentStatus(json, agent: agent))]
        case .region(_, let id): return [.regionUpsert(try region(json, id: id))]
        case .authorization(_, let subject): return [.authorization(subject: subject, try authorization(json))]
        case .usage(_, let subject): return [.usage(subject: subject, try usage(json))]
        case .preferences(_, let subject): return [.preferences(subject: subject, try preferences(json))]
        case .session(_, let consumer, let session):
            return [.session(consumer: consumer, session: session, try self.session(json))]
        case .ownTracks(let user, let device): return try ownTracks(json, user: user, device: device)
        case .espresense(let device, let room):
            return [.tags(try espresense(json, device: device, room: room, receivedAt: receivedAt))]
        case .admin, .echo:
            return []  // answered above, before the payload
        }
    }

    private static func checkTopicIDs(_ route: InboundRoute) throws(InboundError) {
        let ids: [(String, String)]
        switch route {
        case .gps(_, let agent), .ble(_, let agent), .status(_, let agent): ids = [("agent", agent)]
        case .region(_, let id): ids = [("region", id)]
        case .authorization(_, let subject), .usage(_, let subject), .preferences(_, let subject):
            ids = [("subject", subject)]
        case .session(_, let consumer, let session): ids = [("consumer", consumer), ("session", session)]
        case .ownTracks(let user, let device): ids = [("user", user), ("device", device)]
        case .espresense(let device, let room): ids = [("device", device), ("room", room)]
        case .admin(_, _, let subject): ids = [("subject", subject)]
        case .echo: ids = []
        }
        for (name, id) in ids {
            if id.isEmpty { throw InboundError(code: "topic", "the topic's \(name) level is empty") }
            if let problem = Topics.idProblem(id) {
                throw InboundError(code: "id", field: name, "the topic's \(name) level: \(problem)")
            }
        }
    }

    // MARK: obs/{agent}/gps

    /// RSSI and power at 1 m, dBm: what a BLE receiver can report.
    static let rssiRange: ClosedRange<Double> = -127...20

    static func fix(_ json: JSONValue, agent: String) throws(InboundError) -> Fix {
        let reader = try FieldReader(json)
        try reader.onlyKnown(["subject", "t", "lat", "lon", "acc", "alt", "vacc", "floor", "speed", "course", "n"])
        _ = try reader.topicSafeID("subject")
        var fix = try GPSObservation.read(reader, defaultSubject: agent, source: "gps")
        fix.position = try checkPosition(lat: fix.position.lat, lon: fix.position.lon, reader)
        return fix
    }

    /// Refuses a position off the globe (`range`); one within
    /// ``RegionParser/coordinateTolerance`` of ±90/±180 (a projection round trip's
    /// `180.00000000000006`) is clamped to the bound. Negative accuracy passes: it is Core
    /// Location's "invalid" mark, which the engine rejects with its own reason.
    /// - Returns: the position, clamped.
    static func checkPosition(lat: Double, lon: Double, _ reader: FieldReader) throws(InboundError) -> GeoPoint {
        guard let clampedLat = RegionParser.clamped(lat, bound: 90) else {
            throw reader.range("lat", "latitude \(FieldReader.show(lat)) out of range [-90, 90]")
        }
        guard let clampedLon = RegionParser.clamped(lon, bound: 180) else {
            throw reader.range("lon", "longitude \(FieldReader.show(lon)) out of range [-180, 180]")
        }
        return GeoPoint(lon: clampedLon, lat: clampedLat)
    }

    // MARK: obs/{agent}/ble

    /// A scan. What concerns the whole message (`t`, `subject`, the `adverts` array and its
    /// length) refuses it; a bad advert is refused alone and appended to `refused`, so that one
    /// broken foreign beacon beside ours cannot hide ours (a scan without our beacon in it
    /// would, after `beaconExitTimeout`, be a false exit).
    static func beacons(
        _ json: JSONValue, agent: String, limits: Limits, refused: inout [InboundError]
    ) throws(InboundError) -> BeaconReport {
        let reader = try FieldReader(json)
        try reader.onlyKnown(["t", "subject", "adverts", "n"])
        guard let t = try reader.time("t") else { throw reader.missing("t") }
        let subject = try reader.topicSafeID("subject")
        guard let adverts = try reader.array("adverts") else { throw reader.missing("adverts") }
        guard adverts.count <= limits.maxBatch else {
            throw InboundError(
                code: "batch", field: "adverts",
                "\(adverts.count) adverts in one message; at most \(limits.maxBatch) are read")
        }
        var sightings: [BeaconSighting] = []
        sightings.reserveCapacity(adverts.count)
        for (index, advert) in adverts.enumerated() {
            do {
                if let sighting = try self.sighting(FieldReader(advert, path: "adverts[\(index)]")) {
                    sightings.append(sighting)
                }
            } catch {
                refused.append(error)
            }
        }
        return BeaconReport(agent: agent, subject: subject, t: t, sightings: sightings)
    }

    /// One advert: decoded fields of one of the three formats, or raw advertising data. Nil for
    /// raw data that carries no beacon identity (a URL, telemetry, another device).
    private static func sighting(_ advert: FieldReader) throws(InboundError) -> BeaconSighting? {
        guard let rssi = try advert.number("rssi", in: rssiRange, unit: " dBm") else { throw advert.missing("rssi") }
        let tx = try advert.number("tx", in: rssiRange, unit: " dBm")
        let kinds = ["uuid", "namespace", "id1", "data"].filter { advert.object[$0] != nil }
        let fields: [String: [String]] = [
            "uuid": ["uuid", "major", "minor"], "namespace": ["namespace", "instance"], "id1": ["id1", "id2", "id3"],
            "data": ["data", "mac"],
        ]
        if kinds.count == 1, let own = fields[kinds[0]] { try advert.onlyKnown(own + ["rssi", "tx"]) }
        guard kinds.count == 1, let kind = kinds.first else {
            throw InboundError(
                code: "schema", field: advert.path,
                kinds.isEmpty
                    ? "needs uuid (iBeacon), namespace (Eddystone-UID), id1 (AltBeacon) or data (raw advertising data)"
                    : "mixes \(kinds.joined(separator: " and ")): one format per advert")
        }
        let identity: BeaconIdentity
        switch kind {
        case "uuid":
            identity = .iBeacon(
                uuid: try uuid(advert, "uuid"), major: try part(advert, "major"), minor: try part(advert, "minor"))
        case "id1":
            identity = .altBeacon(
                id1: try uuid(advert, "id1"), id2: try part(advert, "id2"), id3: try part(advert, "id3"))
        case "namespace":
            guard let text = try advert.string("namespace") else { throw advert.missing("namespace") }
            guard let namespace = BeaconPrefix(namespace: text) else {
                throw advert.schema("namespace", "expected 20 hex digits, got '\(text)'")
            }
            guard let instanceText = try advert.string("instance") else { throw advert.missing("instance") }
            guard instanceText.utf8.count == 12, let bytes = Hex.decode(Array(instanceText.utf8)) else {
                throw advert.schema("instance", "expected 12 hex digits, got '\(instanceText)'")
            }
            identity = .eddystone(namespace: namespace, instance: bytes.reduce(0) { $0 << 8 | UInt64($1) })
        default:
            guard let data = try advert.string("data") else { throw advert.missing("data") }
            _ = try advert.string("mac")
            let decoded: Advertisement
            do {
                decoded = try AdvertisementDecoder.decode(hex: data)
            } catch {
                throw InboundError(code: "advert", field: advert.field("data"), "\(error)")
            }
            guard let beacon = decoded.beacon else { return nil }
            return BeaconSighting(identity: beacon.identity, rssi: rssi, tx1m: tx ?? beacon.tx1m)
        }
        return BeaconSighting(identity: identity, rssi: rssi, tx1m: tx)
    }

    private static func uuid(_ advert: FieldReader, _ key: String) throws(InboundError) -> BeaconPrefix {
        guard let text = try advert.string(key) else { throw advert.missing(key) }
        guard let prefix = BeaconPrefix(uuid: text) else {
            throw advert.schema(key, "expected a UUID like 2f234454-cf6d-4a0f-adf2-f4911ba9ffa6, got '\(text)'")
        }
        return prefix
    }

    private static func part(_ advert: FieldReader, _ key: String) throws(InboundError) -> UInt16 {
        guard let value = try advert.integer(key, in: 0...65535) else { throw advert.missing(key) }
        return UInt16(value)
    }

    // MARK: agents/{agent}/status

    static func agentStatus(_ json: JSONValue, agent: String) throws(InboundError) -> AgentStatus {
        let reader = try FieldReader(json)
        try reader.onlyKnown(["online", "caps", "mode", "version", "t"])
        guard let online = try reader.bool("online") else { throw reader.missing("online") }
        let caps = try reader.strings("caps")
        for (index, name) in (caps ?? []).enumerated() where !AgentStatus.knownCapabilities.contains(name) {
            throw InboundError(
                code: "capability", field: "caps[\(index)]",
                "'\(name.prefix(40))' is not a capability (known: \(AgentStatus.knownCapabilities.joined(separator: ", ")))"
            )
        }
        if let caps, caps.count > AgentStatus.knownCapabilities.count {
            throw InboundError(code: "capability", field: "caps", "\(caps.count) entries; each capability once")
        }
        return AgentStatus(
            agent: agent, online: online, t: try reader.time("t"), capabilities: caps,
            mode: try reader.choice("mode", ["scanner", "gateway"]), version: try reader.string("version"))
    }

    // MARK: regions/{id}

    /// A GeoJSON Feature for the region the topic names. A Feature without an id takes the
    /// topic's; one naming another region is refused, since the retained topic would then
    /// hold a region under the wrong name.
    static func region(_ json: JSONValue, id: String) throws(InboundError) -> Region {
        guard case .object(var feature) = json else {
            throw InboundError(code: "schema", "expected a GeoJSON Feature object, got \(json.typeName)")
        }
        let ownID: String?
        switch feature["id"] {
        case .string(let value)?: ownID = value
        case .number(let value)?: ownID = JSONValue.number(value).intValue.map(String.init) ?? FieldReader.show(value)
        case nil, .null?: ownID = feature["properties"]?["id"]?.stringValue
        case .some: ownID = nil  // RegionParser names the wrong type.
        }
        if let ownID, ownID != id {
            throw InboundError(
                code: "region", field: "id", "the Feature's id '\(ownID)' differs from the topic's region '\(id)'")
        }
        if feature["id"] == nil || feature["id"] == .null, ownID == nil { feature["id"] = .string(id) }
        return try parsedRegion(.object(feature), id: id)
    }

    /// Runs a Feature through ``RegionParser`` so that topics and files share one validation,
    /// with the bounds of a live region (``RegionParser/Limits/live``).
    static func parsedRegion(_ feature: JSONValue, id: String, field: String = "") throws(InboundError) -> Region {
        let (_, region, problems) = RegionParser.parseFeature(feature, index: 0, limits: .live)
        guard problems.isEmpty, let region else {
            let messages = problems.isEmpty ? ["not a region"] : problems.map(\.message)
            throw InboundError(code: "region", field: field, "region '\(id)': \(messages.joined(separator: "; "))")
        }
        return region
    }

    // MARK: subjects/{s}/… and sessions/{c}/{id}

    static let authorizationStatuses = [
        "notDetermined", "denied", "restricted", "whenInUse", "always", "provisionalAlways",
    ]

    /// `{status, accuracy?, temporary?, temporaryFullAccuracy?}`, checked and passed through as it is.
    /// Allow once (`temporary: true`) exists only with `whenInUse`; a temporary full-accuracy
    /// grant names the session (`consumer/session`) it was granted to and needs `accuracy: reduced`.
    static func authorization(_ json: JSONValue) throws(InboundError) -> JSONValue {
        let reader = try FieldReader(json)
        try reader.onlyKnown(["status", "accuracy", "temporary", "temporaryFullAccuracy"])
        guard let status = try reader.choice("status", authorizationStatuses) else { throw reader.missing("status") }
        let accuracy = try reader.choice("accuracy", ["full", "reduced"])
        if try reader.bool("temporary") == true, status != "whenInUse" {
            throw reader.schema(
                "temporary",
                "allow once (temporary: true) exists only with status whenInUse; with '\(status)' it means nothing")
        }
        if let session = try reader.string("temporaryFullAccuracy") {
            let levels = session.split(separator: "/", omittingEmptySubsequences: false)
            guard levels.count == 2, levels.allSatisfy({ FieldReader.topicSafetyProblem(String($0)) == nil }) else {
                throw reader.schema(
                    "temporaryFullAccuracy", "expected the session it was granted to, 'consumer/session'")
            }
            guard accuracy == "reduced" else {
                throw reader.schema(
                    "temporaryFullAccuracy",
                    "a temporary full-accuracy grant needs accuracy 'reduced' (full needs none)")
            }
        }
        return json
    }

    /// `{inUse, background?}`, checked and passed through.
    static func usage(_ json: JSONValue) throws(InboundError) -> JSONValue {
        let reader = try FieldReader(json)
        try reader.onlyKnown(["inUse", "background"])
        guard try reader.bool("inUse") != nil else { throw reader.missing("inUse") }
        _ = try reader.bool("background")
        return json
    }

    /// `{subjects: "*" | [subject], level, fullAccuracyPurpose?, live?}`, checked and passed through.
    static func session(_ json: JSONValue) throws(InboundError) -> JSONValue {
        let reader = try FieldReader(json)
        try reader.onlyKnown(["subjects", "level", "fullAccuracyPurpose", "live"])
        switch reader.value("subjects") {
        case .string("*")?: break
        case .array?:
            for (index, subject) in (try reader.strings("subjects") ?? []).enumerated() {
                if let problem = FieldReader.topicSafetyProblem(subject) {
                    throw InboundError(code: "schema", field: "subjects[\(index)]", problem)
                }
            }
        case nil: throw reader.missing("subjects")
        case let other?:
            throw reader.schema("subjects", "expected \"*\" or an array of subject ids, got \(other.serialized())")
        }
        guard try reader.choice("level", ["whenInUse", "always"]) != nil else { throw reader.missing("level") }
        _ = try reader.string("fullAccuracyPurpose")
        _ = try reader.bool("live")
        return json
    }

    static func preferences(_ json: JSONValue) throws(InboundError) -> SubjectPreferences {
        let reader = try FieldReader(json)
        try reader.onlyKnown(["defaultPlace", "locale"])
        let place = try reader.string("defaultPlace")
        if let place, let problem = Topics.idProblem(place) { throw reader.schema("defaultPlace", problem) }
        return SubjectPreferences(defaultPlace: place, locale: try reader.string("locale"))
    }
}
