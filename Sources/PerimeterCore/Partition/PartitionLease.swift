import Foundation

/// When the holder of a partition lease may publish (docs/scale.md, "Leases"). Pure: the
/// lease keeper feeds it what the consensus store said and when, on a monotonic clock, and
/// asks it before every publish.
///
/// The store (NATS JetStream KV) keeps the lease key for `ttl` after its last write, then drops
/// it, and anyone may create it again. The store's timer starts when a write *arrives*, which
/// is after this process *sent* it; so the holder counts its deadline from the moment it sent
/// the write that succeeded, minus a `margin` for the clocks' drift and a publish already on
/// its way. Past the deadline it stops publishing, before the store lets anyone else in.
///
/// The fencing token is the write's revision in the store (the stream's sequence): it only
/// grows, across every key of the bucket, so a later holder of a partition always has a
/// higher token than any earlier one.
public struct PartitionLease: Sendable, Hashable {
    /// How long the store keeps a lease after its last write.
    public var ttl: Duration
    /// How much before the store's expiry the holder stops publishing.
    public var margin: Duration

    /// The lease as held: its revision (the fencing token) and the monotonic time the write
    /// that made it was sent.
    public struct Held: Sendable, Hashable {
        public var revision: UInt64
        public var sentAt: Duration

        public init(revision: UInt64, sentAt: Duration) {
            self.revision = revision
            self.sentAt = sentAt
        }
    }

    /// - Precondition: `ttl` > 0, 0 ≤ `margin` < `ttl` (checked by the configuration).
    public init(ttl: Duration, margin: Duration) {
        self.ttl = ttl
        self.margin = margin
    }

    /// The last moment (monotonic) the holder of `held` may publish.
    public func deadline(_ held: Held) -> Duration { held.sentAt + ttl - margin }

    /// Whether the holder may publish at `now`: strictly before the deadline.
    public func mayPublish(_ held: Held?, now: Duration) -> Bool {
        guard let held else { return false }
        return now < deadline(held)
    }

    /// When to renew: a third of the TTL after the last successful write, so two renewals may
    /// fail (a node lost, an election) before the deadline.
    public func renewAt(_ held: Held) -> Duration { held.sentAt + ttl / 3 }
}

/// The consumers' rule against a stale owner (topics.md, "Fencing"): per partition, drop an
/// output whose token is lower than the highest seen for that partition. Pure.
public struct FencingWatch: Sendable, Hashable {
    /// The highest token seen per (venue, partition).
    public private(set) var highest: [String: [Int: UInt64]] = [:]

    public init() {}

    /// Whether to take an output of `venue`'s `partition` carrying `token`, remembering it.
    public mutating func accept(venue: String, partition: Int, token: UInt64) -> Bool {
        let seen = highest[venue]?[partition] ?? 0
        guard token >= seen else { return false }
        highest[venue, default: [:]][partition] = token
        return true
    }
}
