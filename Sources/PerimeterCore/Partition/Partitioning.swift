import Foundation

/// A venue's subjects split into `count` partitions (docs/scale.md, "One venue on several
/// evaluators"). The routing is the broker's: a NATS subject mapping rewrites
/// `{prefix}/{venue}/obs/{agent}/{kind}` to `{prefix}/{venue}/p/{n}/obs/{agent}/{kind}` with
/// `{{partition(count, agent)}}`, and an evaluator subscribes to its partitions' topics only.
/// This type computes the same number the broker does, so that an evaluator can tell which
/// subjects of a broadcast (a gateway's scan, a reporter's fix for another subject) are its own.
///
/// NATS's `partition(P, tokens…)` is FNV-1a 32 over the named tokens' bytes, concatenated
/// without a separator, modulo P (nats-server `subject_transform.go`; pinned against the real
/// server by `PartitionMappingTests`). The token is the id as a topic level
/// (``Topics/level(_:)``: `/`, `+`, `#`, `%` percent-encoded), which is what the broker sees.
public struct Partitioning: Sendable, Hashable {
    /// The most partitions a venue may have: NATS accepts any positive count, but every
    /// partition is a lease, a subscription and a retained occupancy part per region.
    public static let maxCount = 1024

    /// How many partitions the venue's subjects are split into, 1…``maxCount``.
    public let count: Int

    /// - Throws: ``PartitioningError`` when `count` is out of range.
    public init(count: Int) throws(PartitioningError) {
        guard (1...Self.maxCount).contains(count) else { throw PartitioningError(count: count) }
        self.count = count
    }

    /// FNV-1a, 32 bits (offset basis 2166136261, prime 16777619), as Go's `hash/fnv` `New32a`.
    public static func fnv1a32(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var hash: UInt32 = 2_166_136_261
        for byte in bytes {
            hash ^= UInt32(byte)
            hash = hash &* 16_777_619
        }
        return hash
    }

    /// The partition of an id (an agent's or a subject's): the one NATS routes the agent's
    /// observations to when the agent's id is the topic level.
    public func partition(of id: String) -> Int {
        Int(Self.fnv1a32(Topics.level(id).utf8) % UInt32(count))
    }

    /// Every partition number, `0..<count`.
    public var all: Range<Int> { 0..<count }

    /// The NATS account mapping that routes a venue's observations to their agent's partition,
    /// as a line of a `mappings { … }` block (`deploy/nats/partitions.conf`). NATS subjects are
    /// MQTT topics with `/` as `.`.
    public func natsMapping(topics: Topics) -> String {
        let root = topics.root.replacingOccurrences(of: "/", with: ".")
        return
            "\"\(root).obs.*.*\": \"\(root).p.{{partition(\(count),1)}}.obs.{{wildcard(1)}}.{{wildcard(2)}}\""
    }
}

/// A partition count out of range.
public struct PartitioningError: Error, Sendable, Hashable, CustomStringConvertible {
    public var count: Int
    public init(count: Int) { self.count = count }
    public var description: String {
        "partitions must be between 1 and \(Partitioning.maxCount), not \(count)"
    }
}

extension Topics {
    /// A partition's observations, as the broker's mapping delivers them: `…/p/{n}/obs/+/+`.
    public func partitionObservations(_ partition: Int) -> String { "\(root)/p/\(partition)/obs/+/+" }

    /// One agent's observations in whichever partition the broker put them (its own; a gateway
    /// or a reporter naming subjects of every partition, read from the stream by every
    /// evaluator of the venue): `…/p/+/obs/{agent}/+`.
    public func observationsInAnyPartition(agent: String) -> String { "\(root)/p/+/obs/\(Self.level(agent))/+" }
}
