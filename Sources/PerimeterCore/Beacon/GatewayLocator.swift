import Foundation

/// A fixed BLE receiver registered in the venue: where it is, and the room it covers.
public struct Gateway: Sendable, Hashable, Codable {
    public var id: String
    /// Where it hangs; nil for a receiver known only by its room (an ESPresense node not
    /// placed on the map), which names rooms but does not move positions.
    public var position: GeoPoint?
    public var floor: Int?
    /// The room or zone it covers; a tag's room is the zone of its strongest gateway.
    public var zone: String?

    public init(id: String, position: GeoPoint?, floor: Int? = nil, zone: String? = nil) {
        self.id = id
        self.position = position
        self.floor = floor
        self.zone = zone
    }
}

/// Where a tag is, from the fixed gateways that hear it (gateway mode).
public struct TagLocation: Sendable, Hashable {
    public var subject: String
    public var identity: BeaconIdentity?
    public var t: Date
    /// The RSSI-weighted centroid of the placed gateways that heard the tag in the window;
    /// nil when none of them is placed.
    public var position: GeoPoint?
    /// Metres: the weighted spread of those gateways, at least the estimated distance to the strongest.
    public var accuracy: Double
    public var floor: Int?
    /// The zone of the strongest gateway (its id when it has no zone).
    public var room: String
    public var strongestGateway: String
    public var gateways: Int

    /// As a fix for the geofence engine, when the tag has a position.
    public var fix: Fix? {
        position.map {
            Fix(subject: subject, t: t, position: $0, accuracy: accuracy, floor: floor, source: "ble-gateway")
        }
    }
}

/// Gateway mode: fixed gateways hear tags; each tag is a subject. A tag's position is the
/// RSSI-weighted centroid of the placed gateways that heard it within `centroidWindow` (weights
/// in linear power, `10^(rssi/10)`, each gateway's RSSI the mean of its samples in the window),
/// and its room is the strongest gateway's zone. Gateways an adapter names that were never
/// registered (ESPresense rooms) are registered on first sight, unplaced, zone = their id.
public struct GatewayLocator: Sendable {
    public let parameters: BeaconParameters
    private var gateways: [Gateway] = []
    private var gatewayByID: [String: Int] = [:]
    /// Gateways registered by configuration (not rooms an adapter named): only their agents'
    /// BLE reports are read in gateway mode.
    private var configured: Set<String> = []
    private var tags: [Tag] = []
    private var tagBySubject: [String: Int] = [:]

    struct Hearing: Sendable, Codable {
        var gateway: Int
        var samples: [RSSISamples.Sample] = []
    }

    struct Tag: Sendable, Codable {
        var subject: String
        var identity: BeaconIdentity?
        var tx1m: Double?
        var hearings: [Hearing] = []
        var lastHeard = -Double.infinity
    }

    public init(gateways: [Gateway] = [], parameters: BeaconParameters = BeaconParameters()) {
        self.parameters = parameters
        for gateway in gateways { register(gateway) }
    }

    /// Gateways (configured and adapter-named) and tags, for a restart.
    public struct Snapshot: Sendable, Codable {
        var gateways: [Gateway]
        var configured: Set<String>
        var tags: [Tag]
    }

    public var snapshot: Snapshot { Snapshot(gateways: gateways, configured: configured, tags: tags) }

    public init(restoring snapshot: Snapshot, parameters: BeaconParameters) {
        self.parameters = parameters
        for gateway in snapshot.gateways { add(gateway) }
        configured = snapshot.configured
        tags = snapshot.tags
        for (index, tag) in tags.enumerated() { tagBySubject[tag.subject] = index }
    }

    /// Adds or moves a gateway.
    public mutating func register(_ gateway: Gateway) {
        configured.insert(gateway.id)
        add(gateway)
    }

    private mutating func add(_ gateway: Gateway) {
        if let index = gatewayByID[gateway.id] {
            gateways[index] = gateway
        } else {
            gatewayByID[gateway.id] = gateways.count
            gateways.append(gateway)
        }
    }

    /// Whether `agent` is a configured gateway (its BLE reports are about tags).
    public func isGateway(_ agent: String) -> Bool { configured.contains(agent) }

    func index(of agent: String) -> Int? {
        configured.isEmpty || !configured.contains(agent) ? nil : gatewayByID[agent]
    }

    public var tagCount: Int { tags.count }

    /// The tags heard (their subjects), in no particular order.
    public var tagSubjects: [String] { tags.map(\.subject) }

    public func gateway(_ id: String) -> Gateway? { gatewayByID[id].map { gateways[$0] } }

    /// Forgets a tag and its sightings (erasure).
    public mutating func forget(tag subject: String) {
        guard let index = tagBySubject.removeValue(forKey: subject) else { return }
        tags.remove(at: index)
        for position in index..<tags.count { tagBySubject[tags[position].subject] = position }
    }

    /// Records what one gateway heard; returns where each tag it heard is now.
    public mutating func process(_ report: TagReport) -> [TagLocation] {
        if gatewayByID[report.gateway] == nil {
            add(Gateway(id: report.gateway, position: nil, zone: report.gateway))
        }
        let gateway = gatewayByID[report.gateway]!
        let t = report.t.timeIntervalSinceReferenceDate
        let cutoff = t - parameters.centroidWindow
        var locations: [TagLocation] = []
        for sighting in report.sightings {
            let rssi = parameters.calibration.adjusted(rssi: sighting.rssi, agent: report.gateway)
            let index: Int
            if let existing = tagBySubject[sighting.subject] {
                index = existing
            } else {
                index = tags.count
                tagBySubject[sighting.subject] = index
                tags.append(Tag(subject: sighting.subject, identity: sighting.identity))
            }
            if let tx1m = sighting.tx1m { tags[index].tx1m = tx1m }
            tags[index].lastHeard = max(tags[index].lastHeard, t)
            if let hearing = tags[index].hearings.firstIndex(where: { $0.gateway == gateway }) {
                tags[index].hearings[hearing].samples.append(RSSISamples.Sample(t: t, rssi: rssi))
            } else {
                tags[index].hearings.append(Hearing(gateway: gateway, samples: [RSSISamples.Sample(t: t, rssi: rssi)]))
            }
            for hearing in tags[index].hearings.indices {
                tags[index].hearings[hearing].samples.removeAll { $0.t < cutoff }
            }
            tags[index].hearings.removeAll { $0.samples.isEmpty }
            if let location = locate(tag: index, at: report.t) { locations.append(location) }
        }
        return locations
    }

    /// The latest known location of a tag at `t`, from its sightings in the window.
    public func location(ofTag subject: String, at t: Date) -> TagLocation? {
        tagBySubject[subject].flatMap { locate(tag: $0, at: t) }
    }

    /// The tag's position and room from the gateways that heard it in the window.
    private func locate(tag index: Int, at t: Date) -> TagLocation? {
        let tag = tags[index]
        let heard = tag.hearings.map { hearing in
            (
                gateway: gateways[hearing.gateway],
                rssi: hearing.samples.reduce(0) { $0 + $1.rssi } / Double(hearing.samples.count)
            )
        }
        let strongestFirst:
            (_ left: (gateway: Gateway, rssi: Double), _ right: (gateway: Gateway, rssi: Double)) -> Bool =
                { $0.rssi != $1.rssi ? $0.rssi < $1.rssi : $0.gateway.id > $1.gateway.id }
        guard let strongest = heard.max(by: strongestFirst) else { return nil }
        let tx1m =
            tag.identity.map { parameters.calibration.tx1m(for: $0, advertised: tag.tx1m) }
            ?? tag.tx1m ?? parameters.calibration.defaultTx1m
        var position: GeoPoint?
        var accuracy = parameters.distanceModel.distance(rssi: strongest.rssi, tx1m: tx1m)
        var floor = strongest.gateway.floor
        let placed = heard.filter { $0.gateway.position != nil }
        if let anchor = placed.max(by: strongestFirst), let origin = anchor.gateway.position {
            let plane = Geodesy.LocalPlane(origin: origin)
            var x = 0.0
            var y = 0.0
            var total = 0.0
            var projected: [(x: Double, y: Double, w: Double)] = []
            for entry in placed {
                let weight = pow(10, (entry.rssi - anchor.rssi) / 10)
                let point = plane.project(entry.gateway.position!)
                projected.append((point.x, point.y, weight))
                x += weight * point.x
                y += weight * point.y
                total += weight
            }
            x /= total
            y /= total
            var spread = 0.0
            for point in projected {
                spread += point.w * ((point.x - x) * (point.x - x) + (point.y - y) * (point.y - y))
            }
            spread = (spread / total).squareRoot()
            let offset = (x * x + y * y).squareRoot()
            position =
                offset < 1e-9 ? origin : Geodesy.destination(origin, bearing: atan2(x, y), distance: offset)
            accuracy = max(spread, parameters.distanceModel.distance(rssi: anchor.rssi, tx1m: tx1m))
            floor = anchor.gateway.floor
        }
        return TagLocation(
            subject: tag.subject, identity: tag.identity, t: t, position: position, accuracy: accuracy, floor: floor,
            room: strongest.gateway.zone ?? strongest.gateway.id, strongestGateway: strongest.gateway.id,
            gateways: heard.count)
    }
}
