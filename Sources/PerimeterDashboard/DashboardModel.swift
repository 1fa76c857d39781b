import Foundation
import PerimeterCore

/// What the dashboard knows about a venue, built from the messages it receives like any
/// consumer, and what it may show of it.
///
/// Privacy (topics.md, "The privacy gate"): the evaluator already withholds what no session
/// allows; the dashboard additionally honours every `subjects/{s}/authorization` record it sees.
/// A subject whose status is `denied`, `restricted` or `notDetermined` is forgotten at once and
/// never shown (not its id, place, events, ranging or held count). A subject with reduced
/// accuracy is shown only as a large circle around the centre of a `coarseMeters` grid cell:
/// its fixes, places and ranging never leave this model. Occupancy counts are aggregates and
/// are shown as published.
public struct DashboardModel: Sendable {
    /// What the page may show of a subject.
    public enum Visibility: Sendable, Equatable {
        case hidden, coarse, full
    }

    /// A change the page must hear about.
    public enum Change: Sendable, Equatable {
        /// A new line in the live feed (serialized JSON).
        case feed(String)
        /// The feed lost lines (a subject was hidden): send it again whole.
        case feedReset
        /// The state view changed.
        case state
        /// The regions changed (`regions/{id}`): the map must be drawn again.
        case map
    }

    struct Subject {
        var position: GeoPoint?
        var place: String?
        var insideRegions: Set<String> = []
        /// The latest `state` per region.
        var states: [String: String] = [:]
        var ranging: [String: JSONValue] = [:]
        var held = 0
        /// A temporary full-accuracy grant in force (its diagnostics say so).
        var fullAccuracyGrant = false
        var t: String?

        /// No longer followed: every state it has is `unknown` or `unmonitored` (stale, its agent
        /// offline, outside a schedule) and it has no place. Its last position is history, not
        /// where it is, so it is not drawn.
        var isGone: Bool {
            place == nil && !states.isEmpty && states.values.allSatisfy { $0 == "unknown" || $0 == "unmonitored" }
        }
    }

    struct FeedItem {
        var subject: String?
        var json: String
    }

    public let prefix: String
    public let venue: String
    public let renderer: SVGMapRenderer
    /// The map drawn: the regions file's regions, then as `regions/{id}` changes them.
    public private(set) var map: VenueMap
    public private(set) var projection: MapProjection
    /// Picture positions of region labels, where a subject known only by its place is drawn.
    var anchors: [String: (x: Double, y: Double)] = [:]
    public let coarseMeters: Double
    public let feedLimit: Int

    var authorization: [String: (status: String, accuracy: String?)] = [:]
    /// The session named by a subject's authorization record as holding its temporary
    /// full-accuracy grant (whether the grant is in force, its diagnostics say).
    var grantSessions: [String: String] = [:]
    var subjects: [String: Subject] = [:]
    var occupancy: [String: Int] = [:]
    var feed: [FeedItem] = []
    /// By name ("evaluator 1", "agent phone-7"), with the agent's id for agents.
    var services: [String: (online: Bool, t: String?, agent: String?)] = [:]
    public private(set) var deadletters = 0
    public private(set) var events = 0
    public private(set) var notifications = 0

    public init(
        prefix: String, venue: String, map: VenueMap, renderer: SVGMapRenderer, coarseMeters: Double = 5000,
        feedLimit: Int = 100
    ) {
        self.prefix = prefix
        self.venue = venue
        self.renderer = renderer
        self.map = map
        projection = renderer.projection(for: map)
        self.coarseMeters = coarseMeters
        self.feedLimit = feedLimit
        for region in map.regions { occupancy[region.id] = 0 }
        layOut()
    }

    /// The projection and the label anchors for the current regions.
    private mutating func layOut() {
        let projection = renderer.projection(for: map)
        self.projection = projection
        anchors = [:]
        for region in map.regions {
            let points = VenueMap.rings(of: region).flatMap { $0 }.map { projection.point($0) }
            guard !points.isEmpty else { continue }
            let xs = points.map(\.x)
            let ys = points.map(\.y)
            anchors[region.id] = ((xs.min()! + xs.max()!) / 2, (ys.min()! + ys.max()!) / 2)
        }
    }

    /// The map as SVG, as it is now.
    public var svg: String { renderer.render(map) }

    /// The topic filters the dashboard subscribes to: outputs and privacy records, never raw observations.
    public var subscriptions: [String] {
        let root = "\(prefix)/\(venue)"
        return [
            "\(root)/enter/+/+", "\(root)/exit/+/+", "\(root)/dwell/+/+", "\(root)/state/+/+", "\(root)/occupancy/+",
            "\(root)/ranging/+/+", "\(root)/place/+", "\(root)/notifications/+/+", "\(root)/deadletter/+",
            "\(root)/agents/+/status", "\(root)/subjects/+/authorization", "\(root)/diagnostics/+",
            "\(root)/regions/+", "\(root)/visit/+",
            "\(prefix)/_sys/+/+/status",
        ]
    }

    public func visibility(of subject: String) -> Visibility {
        guard let record = authorization[subject] else { return .full }
        switch record.status {
        case "denied", "restricted", "notDetermined": return .hidden
        default: return record.accuracy == "reduced" ? .coarse : .full
        }
    }

    /// Takes in one message; returns what changed for the page.
    public mutating func apply(topic: String, payload: [UInt8]) -> [Change] {
        let levels = topic.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        let prefixLevels = prefix.split(separator: "/").count
        guard levels.count > prefixLevels else { return [] }
        let rest = Array(levels[prefixLevels...])
        let json = payload.isEmpty ? nil : try? JSONValue(parsing: String(decoding: payload, as: UTF8.self))
        if rest.first == "_sys", rest.count == 4, rest[3] == "status" {
            return service("\(rest[1]) \(Topics.decodeLevel(rest[2]))", agent: nil, json)
        }
        guard rest.first == venue, rest.count >= 2 else { return [] }
        let path = Array(rest.dropFirst())
        func id(_ index: Int) -> String { Topics.decodeLevel(path[index]) }
        switch (path[0], path.count) {
        case ("subjects", 3) where path[2] == "authorization": return authorize(id(1), json)
        case ("enter", 3), ("exit", 3), ("dwell", 3): return transition(path[0], region: id(1), subject: id(2), json)
        case ("state", 3): return state(region: id(1), subject: id(2), json)
        case ("occupancy", 2):
            guard let count = json?["count"]?.intValue else { return [] }
            // A deleted region's occupancy is set to 0 after it goes: don't bring it back.
            if count == 0 && !map.regions.contains(where: { $0.id == id(1) }) { return [] }
            occupancy[id(1)] = count
            return [.state]
        case ("regions", 2): return region(id(1), json)
        case ("ranging", 3): return ranging(region: id(1), subject: id(2), json)
        case ("place", 2): return place(subject: id(1), json)
        case ("notifications", 3): return notification(channel: id(1), subject: id(2), json)
        case ("visit", 2): return visit(subject: id(1), json)
        case ("deadletter", 2):
            deadletters += 1
            var item = JSONObject()
            item["kind"] = "deadletter"
            item["component"] = .string(id(1))
            // The evaluator's records have a `code`, the notifier's a delivery `state`.
            item["code"] = json?["code"] ?? json?["state"] ?? .null
            item["reason"] = json?["reason"] ?? .null
            item["t"] = json?["t"] ?? .null
            return [.state, append(item, subject: nil)]
        case ("agents", 3) where path[2] == "status": return service("agent \(id(1))", agent: id(1), json)
        case ("diagnostics", 2):
            let subject = id(1)
            guard visibility(of: subject) != .hidden else { return [] }
            subjects[subject, default: Subject()].held = json?["heldEvents"]?.intValue ?? 0
            subjects[subject, default: Subject()].fullAccuracyGrant = json?["temporaryFullAccuracy"]?.boolValue == true
            return [.state]
        default: return []
        }
    }

    /// A region defined, replaced or deleted (empty payload) on `regions/{id}`. A definition the
    /// evaluator would refuse (invalid, or naming another region) changes nothing here either.
    private mutating func region(_ id: String, _ json: JSONValue?) -> [Change] {
        guard let json else {
            guard map.regions.contains(where: { $0.id == id }) else { return [] }
            map.regions.removeAll { $0.id == id }
            occupancy[id] = nil
            layOut()
            return [.map, .state]
        }
        guard case .object(var feature) = json else { return [] }
        let named = feature["id"]?.stringValue ?? feature["properties"]?["id"]?.stringValue
        if let named, named != id { return [] }
        if named == nil { feature["id"] = .string(id) }
        let document = RegionParser.parse(.object(feature))
        guard document.problems.isEmpty, document.regions.count == 1, let region = document.regions.first else {
            return []
        }
        if let index = map.regions.firstIndex(where: { $0.id == id }) {
            guard map.regions[index] != region else { return [] }
            map.regions[index] = region
        } else {
            map.regions.append(region)
        }
        if occupancy[id] == nil { occupancy[id] = 0 }
        layOut()
        return [.map, .state]
    }

    private mutating func authorize(_ subject: String, _ json: JSONValue?) -> [Change] {
        if let status = json?["status"]?.stringValue {
            authorization[subject] = (status, json?["accuracy"]?.stringValue)
        } else {
            authorization[subject] = nil
        }
        grantSessions[subject] = json?["temporaryFullAccuracy"]?.stringValue
        switch visibility(of: subject) {
        case .hidden:
            subjects[subject] = nil
            let before = feed.count
            feed.removeAll { $0.subject == subject }
            return feed.count == before ? [.state] : [.state, .feedReset]
        case .coarse:
            // Forget whatever precise knowledge was gathered while it was full.
            subjects[subject]?.place = nil
            subjects[subject]?.ranging = [:]
            return [.state]
        case .full:
            return [.state]
        }
    }

    private mutating func transition(_ kind: String, region: String, subject: String, _ json: JSONValue?) -> [Change] {
        guard visibility(of: subject) != .hidden, let json else { return [] }
        events += 1
        if let lat = json["fix"]?["lat"]?.doubleValue, let lon = json["fix"]?["lon"]?.doubleValue {
            subjects[subject, default: Subject()].position = GeoPoint(lon: lon, lat: lat)
        } else {
            _ = subjects[subject, default: Subject()]
        }
        // Ranging stops when the subject leaves the beacon region (its last report would linger).
        if kind == "exit" { subjects[subject]?.ranging[region] = nil }
        var item = JSONObject()
        item["kind"] = .string(kind)
        item["region"] = .string(region)
        item["subject"] = .string(subject)
        item["t"] = json["t"] ?? .null
        if json["held"]?.boolValue == true { item["held"] = true }
        return [.state, append(item, subject: subject)]
    }

    private mutating func state(region: String, subject: String, _ json: JSONValue?) -> [Change] {
        guard visibility(of: subject) != .hidden, let state = json?["state"]?.stringValue else { return [] }
        subjects[subject, default: Subject()].states[region] = state
        if state == "inside" {
            subjects[subject, default: Subject()].insideRegions.insert(region)
        } else {
            subjects[subject]?.insideRegions.remove(region)
        }
        return [.state]
    }

    private mutating func ranging(region: String, subject: String, _ json: JSONValue?) -> [Change] {
        guard visibility(of: subject) == .full, let beacons = json?["beacons"] else { return [] }
        subjects[subject, default: Subject()].ranging[region] = beacons
        return [.state]
    }

    private mutating func place(subject: String, _ json: JSONValue?) -> [Change] {
        guard visibility(of: subject) != .hidden else { return [] }
        if json == nil {
            subjects[subject] = nil  // the subject was erased
            return [.state]
        }
        guard visibility(of: subject) == .full else { return [] }
        subjects[subject, default: Subject()].place = json?["place"]?.stringValue
        return [.state]
    }

    private mutating func notification(channel: String, subject: String, _ json: JSONValue?) -> [Change] {
        guard visibility(of: subject) != .hidden else { return [] }
        notifications += 1
        var item = JSONObject()
        item["kind"] = "notification"
        item["channel"] = .string(channel)
        item["subject"] = .string(subject)
        // The notifier's record (topics.md): a title and a body in the recipient's language.
        let parts = [json?["title"]?.stringValue, json?["body"]?.stringValue].compactMap { $0 }
        item["text"] = parts.isEmpty ? .null : .string(parts.joined(separator: ": "))
        if let region = json?["region"]?.stringValue { item["region"] = .string(region) }
        item["t"] = json?["t"] ?? .null
        return [.state, append(item, subject: subject)]
    }

    /// A visit's arrival or departure, as a feed line (where, not which region: a visit has none).
    private mutating func visit(subject: String, _ json: JSONValue?) -> [Change] {
        let visibility = visibility(of: subject)
        guard visibility != .hidden, let json else { return [] }
        var item = JSONObject()
        item["kind"] = "visit"
        item["event"] = json["event"] ?? .null
        item["subject"] = .string(subject)
        item["arrival"] = json["arrival"] ?? .null
        item["departure"] = json["departure"] ?? .null
        // Reduced accuracy: the feed does not say where (the map shows the coarse position).
        item["lat"] = visibility == .full ? json["lat"] ?? .null : .null
        item["lon"] = visibility == .full ? json["lon"] ?? .null : .null
        item["t"] = json["t"] ?? .null
        return [append(item, subject: subject)]
    }

    private mutating func service(_ name: String, agent: String?, _ json: JSONValue?) -> [Change] {
        if let json {
            services[name] = (json["online"]?.boolValue ?? false, json["t"]?.stringValue, agent)
        } else {
            services[name] = nil
        }
        return [.state]
    }

    private mutating func append(_ item: JSONObject, subject: String?) -> Change {
        let line = JSONValue.object(item).serialized()
        feed.append(FeedItem(subject: subject, json: line))
        if feed.count > feedLimit { feed.removeFirst(feed.count - feedLimit) }
        return .feed(line)
    }

    /// The feed, oldest first, as serialized JSON objects.
    public var feedLines: [String] { feed.map(\.json) }

    /// The centre of the `coarseMeters` grid cell holding `point` (the same grid at every
    /// position of the cell, so a moving subject jumps from cell to cell and never reveals more).
    public func coarse(_ point: GeoPoint) -> GeoPoint {
        let dLat = Geodesy.latitudeDegrees(meters: coarseMeters)
        let row = (point.lat / dLat).rounded(.down)
        let lat = (row + 0.5) * dLat
        let dLon = min(360, dLat / max(cos(lat * .pi / 180), 1e-6))
        let column = (point.lon / dLon).rounded(.down)
        return GeoPoint(lon: (column + 0.5) * dLon, lat: lat)
    }

    /// Everything the page draws now, as one JSON object: occupancy, visible subjects (picture
    /// coordinates; coarse subjects as a circle), ranging of full-accuracy subjects, counters,
    /// services. Nothing here names a hidden subject or holds a reduced subject's exact position.
    public func view(brokerConnected: Bool) -> JSONValue {
        var root = JSONObject()
        var occupancyObject = JSONObject()
        for (region, count) in occupancy.sorted(by: { $0.key < $1.key }) {
            occupancyObject[region] = .number(Double(count))
        }
        root["occupancy"] = .object(occupancyObject)
        var list: [JSONValue] = []
        var ranging = JSONObject()
        var held = 0
        var grants: [JSONValue] = []
        for (id, subject) in subjects.sorted(by: { $0.key < $1.key }) {
            let visibility = visibility(of: id)
            guard visibility != .hidden else { continue }
            held += subject.held
            if subject.fullAccuracyGrant {
                // The grant is another consumer's: a reduced subject stays coarse on this page.
                var grant = JSONObject()
                grant["id"] = .string(id)
                grant["session"] = grantSessions[id].map(JSONValue.string) ?? .null
                grants.append(.object(grant))
            }
            guard !subject.isGone else { continue }
            var item = JSONObject()
            item["id"] = .string(id)
            if visibility == .coarse {
                item["coarse"] = true
                if let position = subject.position {
                    let p = projection.point(coarse(position))
                    item["x"] = .number(Self.round(p.x))
                    item["y"] = .number(Self.round(p.y))
                    item["r"] = .number(Self.round(coarseMeters / 2 * projection.scale))
                }
            } else {
                item["coarse"] = false
                if let place = subject.place { item["place"] = .string(place) }
                if let inside = subject.insideRegions.sorted().first { item["inside"] = .string(inside) }
                if let p = subject.position.map({ projection.point($0) })
                    ?? subject.place.flatMap({ anchors[$0] })
                    ?? subject.insideRegions.sorted().lazy.compactMap({ anchors[$0] })
                    .first
                {
                    item["x"] = .number(Self.round(p.x))
                    item["y"] = .number(Self.round(p.y))
                }
                if !subject.ranging.isEmpty {
                    var regions: [JSONValue] = []
                    for (region, beacons) in subject.ranging.sorted(by: { $0.key < $1.key }) {
                        regions.append(["region": .string(region), "beacons": beacons])
                    }
                    ranging[id] = .array(regions)
                }
            }
            list.append(.object(item))
        }
        let (subjectsLabelled, clusters) = labelled(list)
        root["subjects"] = .array(subjectsLabelled)
        root["clusters"] = .array(clusters)
        root["ranging"] = .object(ranging)
        root["grants"] = .array(grants)
        var counters = JSONObject()
        counters["events"] = .number(Double(events))
        counters["notifications"] = .number(Double(notifications))
        counters["deadletters"] = .number(Double(deadletters))
        counters["held"] = .number(Double(held))
        counters["grants"] = .number(Double(grants.count))
        root["counters"] = .object(counters)
        var serviceList: [JSONValue] = [["id": "dashboard broker connection", "online": .bool(brokerConnected)]]
        // A phone's agent id is its subject's id unless it says otherwise (topics.md): an agent
        // named like a hidden subject is not listed either.
        for (name, status) in services.sorted(by: { $0.key < $1.key })
        where status.agent.map({ visibility(of: $0) != .hidden }) ?? true {
            var item = JSONObject()
            item["id"] = .string(name)
            item["online"] = .bool(status.online)
            if let t = status.t { item["t"] = .string(t) }
            serviceList.append(.object(item))
        }
        root["services"] = .array(serviceList)
        // Picture → (lon, lat), for the region editor's clicks; and the regions as they are now
        // (their Features), for editing one.
        if let toGeo = projection.linearized.inverse {
            root["toGeo"] = .array([toGeo.a, toGeo.b, toGeo.c, toGeo.d, toGeo.e, toGeo.f].map { .number($0) })
        }
        return .object(root)
    }

    static func round(_ value: Double) -> Double { (value * 10).rounded() / 10 }

    /// The label placer for this map: subject labels stay on the picture, off the region names.
    var labelPlacer: LabelPlacement {
        LabelPlacement(bounds: .init(x: 0, y: 0, width: renderer.width, height: renderer.height))
    }

    /// The text labelling a subject on the map: its id, and its place's name when it has one.
    func labelText(_ subject: JSONValue) -> String {
        let id = subject["id"]?.stringValue ?? ""
        guard let place = subject["place"]?.stringValue else { return id }
        return id + " @ " + (map.regions.first { $0.id == place }?.name ?? place)
    }

    /// Where the labels of the drawn subjects go (``LabelPlacement``), computed from the view's subjects.
    func placement(_ subjects: [JSONValue]) -> LabelPlacement.Result {
        let items = subjects.compactMap { subject -> LabelPlacement.Item? in
            guard let id = subject["id"]?.stringValue, let x = subject["x"]?.doubleValue,
                let y = subject["y"]?.doubleValue
            else { return nil }
            return LabelPlacement.Item(id: id, x: x, y: y, text: labelText(subject))
        }
        return labelPlacer.place(items, obstacles: renderer.regionLabelBoxes(for: map))
    }

    static func json(_ placed: LabelPlacement.Placed, text: String) -> JSONValue {
        [
            "x": .number(round(placed.box.x)), "y": .number(round(placed.box.y)),
            "w": .number(round(placed.box.width)), "h": .number(round(placed.box.height)),
            "leader": .bool(placed.leader), "text": .string(text),
        ]
    }

    /// The subjects with their label boxes (`label`) or the index of the cluster that counts
    /// them (`cluster`), and the clusters' count labels.
    func labelled(_ subjects: [JSONValue]) -> (subjects: [JSONValue], clusters: [JSONValue]) {
        let result = placement(subjects)
        var clusterOf: [String: Int] = [:]
        for (index, cluster) in result.clusters.enumerated() {
            for member in cluster.members { clusterOf[member] = index }
        }
        let labelled = subjects.map { subject -> JSONValue in
            guard case .object(var item) = subject, let id = item["id"]?.stringValue else { return subject }
            if let placed = result.labels[id] {
                item["label"] = Self.json(placed, text: labelText(subject))
            } else if let index = clusterOf[id] {
                item["cluster"] = .number(Double(index))
            }
            return .object(item)
        }
        let clusters = result.clusters.map { cluster -> JSONValue in
            var item: JSONObject = [
                "x": .number(Self.round(cluster.x)), "y": .number(Self.round(cluster.y)),
                "members": .array(cluster.members.map { .string($0) }), "count": .number(Double(cluster.members.count)),
            ]
            if let placed = cluster.placed { item["label"] = Self.json(placed, text: cluster.text) }
            return .object(item)
        }
        return (labelled, clusters)
    }
}
