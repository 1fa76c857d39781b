import Foundation

/// What an evaluator serving some partitions of a venue keeps and publishes (docs/scale.md,
/// "The evaluator on partitions"). Pure: the service asks it which inputs are its own, which
/// partition's lease an output needs, and how the token goes into the payload.
extension Partitioning {
    /// The partition of an id as it appears in a topic level (already percent-encoded, as the
    /// broker hashes it): `partition(of: id) == partition(ofLevel: Topics.level(id))`.
    public func partition(ofLevel level: some StringProtocol) -> Int {
        Int(Self.fnv1a32(level.utf8) % UInt32(count))
    }

    /// The original topic of an observation the broker's mapping delivered under its partition:
    /// `{root}/p/{n}/obs/{agent}/{kind}` → (`n`, `{root}/obs/{agent}/{kind}`), where `root` is
    /// `{prefix}/{venue}` for one of `venues`; nil for any other topic.
    public static func unpartitioned(
        _ topic: String, prefix: String, venues: Set<String>
    ) -> (partition: Int, topic: String)? {
        guard topic.hasPrefix(prefix + "/") else { return nil }
        let rest = topic.dropFirst(prefix.count + 1)
        let levels = rest.split(separator: "/", omittingEmptySubsequences: false)
        guard levels.count == 6, venues.contains(String(levels[0])), levels[1] == "p", levels[3] == "obs",
            let partition = Int(levels[2]), partition >= 0, String(partition) == levels[2]
        else { return nil }
        return (partition, "\(prefix)/\(levels[0])/obs/\(levels[4])/\(levels[5])")
    }

    /// The input restricted to subjects of `held` partitions; nil when nothing of it is left.
    /// Observations name their subjects (a fix's subject, a scanner's subject or agent, a
    /// gateway's sightings, tags); everything else (regions, agent statuses, privacy records,
    /// preferences, operator requests) is venue-wide and kept by every evaluator of the venue.
    /// - Parameter isGateway: whether an agent is a registered gateway (its scan names tags).
    public func restrict(_ input: Inbound, to held: Set<Int>, isGateway: (String) -> Bool) -> Inbound? {
        func mine(_ subject: String) -> Bool { held.contains(partition(of: subject)) }
        switch input {
        case .fix(let fix):
            return mine(fix.subject) ? input : nil
        case .beacons(var report):
            if isGateway(report.agent) {
                let before = report.sightings.count
                report.sightings = report.sightings.filter { mine($0.identity.canonical) }
                // An empty scan from a gateway says "nothing heard": every holder takes it.
                return report.sightings.isEmpty && before > 0 ? nil : .beacons(report)
            }
            return mine(report.subject ?? report.agent) ? input : nil
        case .tags(var report):
            let before = report.sightings.count
            report.sightings = report.sightings.filter { mine($0.subject) }
            return report.sightings.isEmpty && before > 0 ? nil : .tags(report)
        case .agentStatus, .regionUpsert, .regionRemove, .preferences, .authorization, .usage, .session, .admin:
            return input
        }
    }

    /// The partition whose lease a message of the venue at `root` (`{prefix}/{venue}`) needs:
    /// the partition of the subject its topic names (transitions, states, ranging, place,
    /// visits, live positions, diagnostics, prompts, operator answers), or the one named by an
    /// occupancy part (`occupancy/{region}/p/{n}`); partition 0 for the venue-wide occupancy
    /// total (`occupancy/{region}`), which the holder of partition 0 publishes. Nil for what
    /// names no subject (dead letters, discovery configs, waypoints): not fenced.
    public func partition(ofOutput topic: String, root: String) -> Int? {
        guard topic.hasPrefix(root + "/") else { return nil }
        let levels = topic.dropFirst(root.count + 1).split(separator: "/", omittingEmptySubsequences: false)
        switch (levels.first, levels.count) {
        case ("enter", 3), ("exit", 3), ("dwell", 3), ("state", 3), ("ranging", 3), ("live", 3):
            return partition(ofLevel: levels[2])
        case ("self", 4):
            return partition(ofLevel: levels[3])
        case ("place", 2), ("visit", 2), ("diagnostics", 2):
            return partition(ofLevel: levels[1])
        case ("subjects", 3):
            return partition(ofLevel: levels[1])
        case ("admin", 3) where levels[1] == "erased" || levels[1] == "shown":
            return partition(ofLevel: levels[2])
        case ("occupancy", 2):
            return 0
        case ("occupancy", 4) where levels[2] == "p":
            guard let n = Int(levels[3]), all.contains(n) else { return nil }
            return n
        default:
            return nil
        }
    }

    /// A JSON object payload with `"partition":n,"token":t` as its first members (MQTT 3.1.1
    /// has no user properties; topics.md, "Fencing"). An empty payload (a retained topic being
    /// cleared) or one that is not an object is returned as it is.
    public static func stamp(_ payload: [UInt8], partition: Int, token: UInt64) -> [UInt8] {
        guard payload.first == UInt8(ascii: "{") else { return payload }
        var out = Array("{\"partition\":\(partition),\"token\":\(token)".utf8)
        out.reserveCapacity(payload.count + out.count + 1)
        let rest = payload.dropFirst()
        // `{}` (possibly with blanks) has no member to separate from.
        if rest.first(where: { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }) != UInt8(ascii: "}") {
            out.append(UInt8(ascii: ","))
        }
        out += rest
        return out
    }
}

/// A venue's occupancy from its partitions' parts (docs/scale.md, "Occupancy"): each holder
/// publishes `occupancy/{region}/p/{n}` (retained, with its token); the holder of partition 0
/// sums the latest accepted part of every partition into `occupancy/{region}`. Parts pass the
/// consumers' fencing rule: a part with a token lower than the highest seen for its partition
/// (a stale owner's) is ignored. Pure.
public struct OccupancyParts: Sendable, Hashable {
    public struct Part: Sendable, Hashable {
        public var count: Int
        public var t: Date
        public var token: UInt64
        /// Where the holder was in its journal when it counted (`n`): within one token, a later
        /// part has a higher number. Nil in a part that does not carry one.
        public var position: Int64?
        public init(count: Int, t: Date, token: UInt64, position: Int64? = nil) {
            self.count = count
            self.t = t
            self.token = token
            self.position = position
        }
    }

    /// region → partition → the latest accepted part.
    public private(set) var parts: [String: [Int: Part]] = [:]
    private var fencing = FencingWatch()

    public init() {}

    /// Takes a part unless its token is below the highest seen for its partition (any region:
    /// a token belongs to a holding of the partition, not to a region).
    /// - Returns: whether the part was taken.
    /// Within one token, a part numbered no later than the one kept is ignored too: a QoS 1
    /// message sent again by the broker (its acknowledgement came after the broker's
    /// `ack_wait`) arrives after newer ones, and would take the total back to an older count.
    @discardableResult
    public mutating func note(venue: String, region: String, partition: Int, _ part: Part) -> Bool {
        if let kept = parts[region]?[partition], kept.token == part.token, let before = kept.position,
            let now = part.position, now <= before
        {
            return false
        }
        guard fencing.accept(venue: venue, partition: partition, token: part.token) else { return false }
        parts[region, default: [:]][partition] = part
        return true
    }

    /// Forgets a region's parts (its part topics were cleared).
    public mutating func clear(region: String, partition: Int) {
        parts[region]?[partition] = nil
        if parts[region]?.isEmpty == true { parts[region] = nil }
    }

    /// The total for a region (the sum of its parts) and the latest time among them; nil
    /// when no part is known.
    public func total(of region: String) -> (count: Int, t: Date)? {
        guard let byPartition = parts[region], !byPartition.isEmpty else { return nil }
        let count = byPartition.values.reduce(0) { $0 + $1.count }
        let t = byPartition.values.map(\.t).max()!
        return (count, t)
    }

    /// The totals to publish, given the count last published for each region (`published`):
    /// every region whose parts add up to another count, or that was never published, sorted by
    /// region. A region with no part left has no total and is left as it was. Looking at every
    /// region, not only those a part came in for, is what puts a missed change right (the
    /// reconciliation each stats interval).
    public func totalsChanged(since published: [String: Int]) -> [(region: String, count: Int, t: Date)] {
        parts.keys.sorted().compactMap { region in
            guard let total = total(of: region), published[region] != total.count else { return nil }
            return (region, total.count, total.t)
        }
    }

    /// Reads a part's payload, `{partition, token, count, t, n}` as the evaluator publishes it.
    public static func part(from payload: [UInt8]) -> (partition: Int, part: Part)? {
        guard let json = try? JSONParser.parse(payload), let partition = json["partition"]?.intValue,
            let token = json["token"]?.intValue, token >= 0, let count = json["count"]?.intValue, count >= 0,
            let t = json["t"]?.stringValue.flatMap(Timestamp.parse)
        else { return nil }
        let position = json["n"]?.intValue.flatMap { $0 >= 0 ? Int64($0) : nil }
        return (partition, Part(count: count, t: t, token: UInt64(token), position: position))
    }
}

extension Topics {
    /// One partition's part of a region's occupancy: `occupancy/{region}/p/{n}` (retained).
    public func occupancyPart(region: String, partition: Int) -> String {
        "\(root)/occupancy/\(Self.level(region))/p/\(partition)"
    }

    /// Every region's parts: `occupancy/+/p/+`.
    public var allOccupancyParts: String { "\(root)/occupancy/+/p/+" }

    /// The region of an occupancy part's topic, nil for any other topic.
    public func regionOfOccupancyPart(_ topic: String) -> String? {
        guard topic.hasPrefix(root + "/occupancy/") else { return nil }
        let levels = topic.dropFirst(root.count + 1).split(separator: "/", omittingEmptySubsequences: false)
        guard levels.count == 4, levels[2] == "p", Int(levels[3]) != nil else { return nil }
        return Topics.decodeLevel(String(levels[1]))
    }
}
