import Dispatch
import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterNATS
import Synchronization

/// Holds a venue's partition leases in a NATS JetStream key-value bucket (docs/scale.md,
/// "Leases"): one key per partition (`{venue}.p.{n}`) and one per live member
/// (`{venue}.m.{instance}`), all expiring `ttl` after their last write (the bucket's max age).
///
/// Every write to a partition key is a compare-and-set (`kvStore_Create` for a free key,
/// `kvStore_Update` at the last revision otherwise), so the store decides who holds it. The
/// revision of the write that took a partition is its fencing token: the stream's sequence,
/// which only grows. When and whether this process may publish for a partition is
/// ``PartitionLease``'s decision on the monotonic clock: an owner that could not renew stops
/// before the store lets anyone else in. Which partitions to take or give up is
/// ``PartitionAssignment``'s.
public final class PartitionLeaseKeeper: Sendable {
    /// A held partition: its token, the revision to renew at, and when that write was sent.
    public struct Holding: Sendable, Hashable {
        public var token: UInt64
        public var lease: PartitionLease.Held
        /// When the first renewal since the last one the store answered was sent, if one was
        /// not answered (a time-out): the store may have applied it all the same.
        public var unansweredSince: Duration?
    }

    public let venue: String
    public let instance: String
    public let partitions: Partitioning
    public let policy: PartitionLease
    private let store: any KeyValueBucket
    private let monotonic: @Sendable () -> Duration
    private let logger: Logger
    private let holdings = Mutex<[Int: Holding]>([:])
    private let queue: DispatchQueue
    /// Callers of ``nextRound()`` waiting for the round under way to end, by ticket.
    private let roundWaiters = Mutex<(next: Int, waiting: [Int: CheckedContinuation<Void, Never>])>((0, [:]))

    /// - Parameters:
    ///   - monotonic: the time on a monotonic clock (tests pass their own).
    ///   - Precondition: `venue` and `instance` are key-safe (``PartitionLeaseKeeper/keyProblem(_:)``).
    public init(
        store: any KeyValueBucket, venue: String, instance: String, partitions: Partitioning, policy: PartitionLease,
        logger: Logger, monotonic: @escaping @Sendable () -> Duration = PartitionLeaseKeeper.systemMonotonic
    ) {
        self.store = store
        self.venue = venue
        self.instance = instance
        self.partitions = partitions
        self.policy = policy
        self.logger = logger
        self.monotonic = monotonic
        queue = DispatchQueue(label: "perimeter.partition-leases.\(venue)")
    }

    /// The monotonic clock of the process (`ContinuousClock`, which keeps counting through a
    /// SIGSTOP and a suspend: a paused owner sees on waking that its deadline has passed).
    public static let systemMonotonic: @Sendable () -> Duration = {
        let origin = ContinuousClock.now
        return { ContinuousClock.now - origin }
    }()

    /// Why `id` cannot be part of a key (JetStream keys take `A-Z a-z 0-9 - _ =`, and `.` as
    /// the separator we add), nil when it can.
    public static func keyProblem(_ id: String) -> String? {
        let allowed = id.utf8.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == 0x2D || byte == 0x5F || byte == 0x3D
        }
        if id.isEmpty || id.utf8.count > 128 || !allowed {
            return "'\(id)' cannot name a lease: use 1 to 128 of A-Z, a-z, 0-9, '-', '_', '='"
        }
        return nil
    }

    func partitionKey(_ partition: Int) -> String { "\(venue).p.\(partition)" }
    func memberKey(_ member: String) -> String { "\(venue).m.\(member)" }

    /// The fencing token to publish `partition`'s outputs with, nil when this process must not
    /// publish for it now (not held, or past its deadline: renewals failed). Ask right before
    /// each publish.
    public func token(for partition: Int) -> UInt64? {
        guard let holding = holdings.withLock({ $0[partition] }) else { return nil }
        return policy.mayPublish(holding.lease, now: monotonic()) ? holding.token : nil
    }

    /// The partitions this process holds (whether or not it may publish for them at this
    /// moment: a renewal may be late), with their tokens.
    public var held: [Int: UInt64] { holdings.withLock { $0 }.mapValues(\.token) }

    /// The partitions this process may publish for now, with their tokens.
    public var publishable: [Int: UInt64] {
        let now = monotonic()
        return holdings.withLock { $0 }.filter { policy.mayPublish($0.value.lease, now: now) }.mapValues(\.token)
    }

    /// What changed in one round.
    public struct Round: Sendable, Hashable {
        public var acquired: [Int] = []
        public var released: [Int] = []
        public var lost: [Int] = []
    }

    /// One round (blocking; a few round trips to the store): renew the membership and the
    /// holdings that are due, then take and give up partitions as ``PartitionAssignment`` says.
    /// A failed read or write is logged and retried next round; a holding whose renewal was
    /// refused (someone else wrote: the lease had expired) is dropped at once.
    @discardableResult
    public func step() -> Round {
        var round = Round()
        let me = Array(JSONValue.object(["instance": .string(instance)]).serialized().utf8)
        do { _ = try store.put(memberKey(instance), me) } catch {
            logger.warning("partition membership not renewed", metadata: ["error": .string("\(error)")])
        }
        // Renew what is due.
        for (partition, holding) in holdings.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            let now = monotonic()
            guard now >= policy.renewAt(holding.lease) else { continue }
            do {
                let revision = try store.update(partitionKey(partition), me, last: holding.lease.revision)
                holdings.withLock {
                    $0[partition]?.lease = PartitionLease.Held(revision: revision, sentAt: now)
                    $0[partition]?.unansweredSince = nil
                }
            } catch  where error.isConflict {
                if let since = holding.unansweredSince,
                    let applied = ownWrite(partition, after: holding.lease.revision, me: me)
                {
                    // A renewal whose answer was lost had been applied: the store holds our
                    // write at a later revision. Kept, its deadline counted from the first
                    // unanswered send (the earliest the store can have started its TTL).
                    holdings.withLock {
                        $0[partition]?.lease = PartitionLease.Held(revision: applied, sentAt: since)
                        $0[partition]?.unansweredSince = nil
                    }
                    logger.notice(
                        "partition lease kept: a renewal whose answer was lost had been applied",
                        metadata: ["partition": .string("\(partition)"), "revision": .string("\(applied)")])
                    continue
                }
                holdings.withLock { _ = $0.removeValue(forKey: partition) }
                round.lost.append(partition)
                logger.warning(
                    "partition lease lost",
                    metadata: ["partition": .string("\(partition)"), "error": .string("\(error)")])
            } catch {
                holdings.withLock { $0[partition]?.unansweredSince = holding.unansweredSince ?? now }
                logger.warning(
                    "partition lease not renewed",
                    metadata: ["partition": .string("\(partition)"), "error": .string("\(error)")])
            }
        }
        // Look, then act.
        let members: [String]
        var holders: [Int: String] = [:]
        var released: [Int: UInt64] = [:]
        let mine = holdings.withLock { $0 }
        do {
            let prefix = "\(venue).m."
            members = try store.keys(prefix: prefix).map { String($0.dropFirst(prefix.count)) }
            for partition in partitions.all {
                let entry = try store.get(partitionKey(partition))
                if let held = mine[partition],
                    Self.readIsStale(entry, held: held.lease, live: policy.mayPublish(held.lease, now: monotonic()))
                {
                    holders[partition] = instance
                    continue
                }
                guard let entry else { continue }
                let json = try? JSONParser.parse(entry.value)
                if let holder = json?["instance"]?.stringValue {
                    holders[partition] = holder
                } else {
                    released[partition] = entry.revision
                }
            }
        } catch {
            logger.warning("partition leases not read", metadata: ["error": .string("\(error)")])
            return round
        }
        // A holding the store says is someone else's, or that is gone past our deadline, is
        // lost (it expired, and may have been taken).
        for partition in mine.keys where holders[partition] != instance {
            holdings.withLock { _ = $0.removeValue(forKey: partition) }
            round.lost.append(partition)
        }
        // A key the store says is ours but memory does not (a write whose answer was lost) is
        // left to expire: counted as held by someone, so it is not taken again meanwhile.
        let plan = PartitionAssignment.plan(
            me: instance, members: members, holders: holders.filter { $0.value != instance || mine[$0.key] != nil },
            count: partitions.count, seniority: mine.mapValues(\.token))
        for partition in plan.release {
            guard let holding = holdings.withLock({ $0.removeValue(forKey: partition) }) else { continue }
            // Stop publishing first (done: removed), then free the key at our revision.
            do {
                _ = try store.update(partitionKey(partition), Array("{}".utf8), last: holding.lease.revision)
                round.released.append(partition)
            } catch {
                logger.warning(
                    "partition lease not released (it will expire)",
                    metadata: ["partition": .string("\(partition)"), "error": .string("\(error)")])
                round.released.append(partition)
            }
        }
        for partition in plan.acquire where holders[partition] == nil {
            let sentAt = monotonic()
            do {
                let revision =
                    if let last = released[partition] {
                        try store.update(partitionKey(partition), me, last: last)
                    } else {
                        try store.create(partitionKey(partition), me)
                    }
                holdings.withLock {
                    $0[partition] = Holding(
                        token: revision, lease: PartitionLease.Held(revision: revision, sentAt: sentAt))
                }
                round.acquired.append(partition)
            } catch  where error.isConflict {
                continue
            } catch {
                logger.warning(
                    "partition lease not taken",
                    metadata: ["partition": .string("\(partition)"), "error": .string("\(error)")])
            }
        }
        if !round.acquired.isEmpty || !round.released.isEmpty || !round.lost.isEmpty {
            logger.notice(
                "partition leases changed",
                metadata: [
                    "venue": .string(venue), "instance": .string(instance),
                    "acquired": .string(round.acquired.map(String.init).joined(separator: ",")),
                    "released": .string(round.released.map(String.init).joined(separator: ",")),
                    "lost": .string(round.lost.map(String.init).joined(separator: ",")),
                    "held": .string(publishable.keys.sorted().map(String.init).joined(separator: ",")),
                ])
        }
        return round
    }

    /// Whether a read of a partition this process holds (at `held`, the revision of its last
    /// write that the store accepted) says nothing against the holding: the read is older than
    /// that write, or shows no key while the holding's deadline has not passed. Reads may come
    /// from a replica that is behind (``KeyValueBucket``); only the compare-and-set of the next
    /// renewal, or a newer revision, proves the holding gone. Taking a stale read for a loss
    /// made keepers drop and take again partitions nobody else wanted (a suite run under load).
    static func readIsStale(_ entry: NATSKeyValue.Entry?, held: PartitionLease.Held, live: Bool) -> Bool {
        guard let entry else { return live }
        return entry.revision < held.revision
    }

    /// The revision of this instance's own write of `partition`'s key, when the store shows one
    /// later than `revision` (our compare-and-set at `revision` was applied, its answer lost:
    /// nobody else can have written in between, or their instance would show). Nil otherwise,
    /// a read that fails or comes from a replica behind included (the holding is then lost, as
    /// before: the safe side).
    private func ownWrite(_ partition: Int, after revision: UInt64, me: [UInt8]) -> UInt64? {
        guard let entry = try? store.get(partitionKey(partition)), entry.revision > revision, entry.value == me else {
            return nil
        }
        return entry.revision
    }

    /// ``step()`` off the cooperative pool (it blocks on the store).
    public func stepAsync() async -> Round {
        let round = await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: self.step()) }
        }
        let waiting = roundWaiters.withLock { state in
            defer { state.waiting = [:] }
            return state.waiting.values
        }
        for waiter in waiting { waiter.resume() }
        return round
    }

    /// Returns when the keeper's next round has ended (or the caller is cancelled): what a
    /// publisher waiting out a late renewal waits for, instead of asking again and again.
    public func nextRound() async {
        let ticket = roundWaiters.withLock { state in
            defer { state.next += 1 }
            return state.next
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = roundWaiters.withLock { state in
                    if Task.isCancelled { return true }
                    state.waiting[ticket] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            roundWaiters.withLock { $0.waiting.removeValue(forKey: ticket) }?.resume()
        }
    }

    /// Gives every holding up (at shutdown): stop publishing, then free the keys.
    public func releaseAll() {
        let all = holdings.withLock { holdings in
            defer { holdings = [:] }
            return holdings
        }
        for (partition, holding) in all {
            _ = try? store.update(partitionKey(partition), Array("{}".utf8), last: holding.lease.revision)
        }
        try? store.delete(memberKey(instance))
    }
}

extension PartitionLeaseKeeper {
    /// The bucket that keeps every partitioned venue's leases and members.
    public static let bucket = "perimeter-leases"

    /// What the lease store says about a venue at one moment (`perimeter partitions --holders`).
    public struct View: Sendable, Hashable {
        /// A partition's lease: its holder and the revision of the holder's last write (its
        /// take or its latest renewal).
        public struct Lease: Sendable, Hashable {
            public var instance: String
            public var revision: UInt64
        }

        /// The live members, sorted.
        public var members: [String]
        /// Each held partition's lease; a partition absent is free (never taken, released, or
        /// expired).
        public var leases: [Int: Lease]
    }

    /// Reads `venue`'s members and leases from `store`. A read may come from a replica that is
    /// a moment behind (docs/scale.md, "Leases").
    public static func view(store: any KeyValueBucket, venue: String, partitions: Partitioning) throws -> View {
        let prefix = "\(venue).m."
        let members = try store.keys(prefix: prefix).map { String($0.dropFirst(prefix.count)) }.sorted()
        var leases: [Int: View.Lease] = [:]
        for partition in partitions.all {
            guard let entry = try store.get("\(venue).p.\(partition)"),
                let instance = (try? JSONParser.parse(entry.value))?["instance"]?.stringValue
            else { continue }
            leases[partition] = View.Lease(instance: instance, revision: entry.revision)
        }
        return View(members: members, leases: leases)
    }

    /// Connects to `servers`, reads `venue`'s view, and closes. Nil when no evaluator has made
    /// the lease bucket there yet.
    public static func view(servers: [String], venue: String, partitions: Partitioning) throws -> View? {
        let connection = try NATSConnection(servers: servers, timeout: .seconds(5))
        defer { connection.close() }
        guard let store = try connection.existingKeyValue(bucket: bucket) else { return nil }
        return try view(store: store, venue: venue, partitions: partitions)
    }
}
