import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterNATS
import PerimeterTestSupport
import Synchronization
import Testing

/// The lease keeper's reading of the store, on an in-memory bucket and a manual monotonic
/// clock (the real cluster is `PartitionLeaseTests`'). A JetStream bucket answers reads from
/// any replica, and one that is behind may show an older revision, or no key at all (it
/// expired the old write on its own clock before the renewal reached it). Such a read must not
/// cost a holding: only a newer revision or a refused compare-and-set proves it gone, or no
/// key once the holding's own deadline has passed.
@Suite("Partition lease keeper: a stale read costs no holding")
struct PartitionLeaseKeeperTests {
    /// What the replica answering the next round's read of partition 0 shows.
    enum Read: Sendable, CustomStringConvertible {
        case current
        case nothing
        case earlierHolder
        case newerHolder

        var description: String {
            switch self {
            case .current: "the current write"
            case .nothing: "no key"
            case .earlierHolder: "an earlier holder (older revision)"
            case .newerHolder: "another holder (newer revision)"
            }
        }
    }

    /// Instance "a" of venue "museum" on an empty bucket, TTL 6 s and margin 1 s, its
    /// monotonic clock at zero until the test moves it.
    static func keeper(partitions: Int) throws -> (MemoryBucket, ManualMonotonic, PartitionLeaseKeeper) {
        let bucket = MemoryBucket()
        let clock = ManualMonotonic()
        let keeper = PartitionLeaseKeeper(
            store: bucket, venue: "museum", instance: "a", partitions: try Partitioning(count: partitions),
            policy: PartitionLease(ttl: .seconds(6), margin: .seconds(1)),
            logger: Logger(label: "keeper", handler: InMemoryLogHandler()), monotonic: { clock.now })
        return (bucket, clock, keeper)
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var read: Read
        /// Seconds on the keeper's clock before the round (TTL 6 s, margin 1 s: renewals at
        /// 2 s, deadline at 5 s).
        var after: Double
        /// Whether the store refuses every write meanwhile with a time-out (not a conflict).
        var writesFail: Bool
        var lost: Bool
        var testDescription: String {
            "\(read) after \(after) s\(writesFail ? ", writes timing out" : ""): \(lost ? "lost" : "kept")"
        }
    }

    @Test(
        "which reads of a held partition lose it",
        arguments: [
            Case(read: .current, after: 0, writesFail: false, lost: false),
            Case(read: .nothing, after: 0, writesFail: false, lost: false),
            Case(read: .nothing, after: 2, writesFail: false, lost: false),
            Case(read: .nothing, after: 4, writesFail: true, lost: false),
            Case(read: .nothing, after: 5, writesFail: true, lost: true),
            Case(read: .earlierHolder, after: 0, writesFail: false, lost: false),
            Case(read: .earlierHolder, after: 2, writesFail: false, lost: false),
            Case(read: .newerHolder, after: 0, writesFail: false, lost: true),
        ])
    func reads(_ row: Case) throws {
        let (bucket, clock, keeper) = try Self.keeper(partitions: 2)
        #expect(keeper.step().acquired == [0, 1])
        let token = try #require(keeper.held[0])

        let key = "museum.p.0"
        switch row.read {
        case .current: break
        case .nothing: bucket.replica(key, shows: nil)
        case .earlierHolder:
            bucket.replica(key, shows: .init(value: Array(#"{"instance":"b"}"#.utf8), revision: token - 1))
        case .newerHolder:
            let revision = bucket.write(key, #"{"instance":"b"}"#)
            bucket.replica(key, shows: .init(value: Array(#"{"instance":"b"}"#.utf8), revision: revision))
        }
        bucket.writesFail(row.writesFail)
        clock.advance(.seconds(row.after))

        let round = keeper.step()
        #expect(round.lost.contains(0) == row.lost, "\(round)")
        #expect((keeper.publishable[0] != nil) == !row.lost)
        #expect(!round.lost.contains(1), "partition 1 was read right: \(round)")
        if !row.lost {
            #expect(keeper.held[0] == token, "a kept holding keeps its token")
        }
    }

    @Test("a kept holding renews at the store: the next read of the leader shows the keeper's write")
    func keptRenews() throws {
        let (bucket, clock, keeper) = try Self.keeper(partitions: 1)
        keeper.step()
        let first = try #require(bucket.leader("museum.p.0"))
        bucket.replica("museum.p.0", shows: nil)
        clock.advance(.seconds(2))
        #expect(keeper.step().lost.isEmpty)
        let renewed = try #require(bucket.leader("museum.p.0"))
        #expect(renewed.revision > first.revision)
        #expect(String(decoding: renewed.value, as: UTF8.self).contains(#""instance":"a""#))
        // Four more renewal periods with the replica still showing nothing: never lost.
        for _ in 0..<4 {
            clock.advance(.seconds(2))
            #expect(keeper.step().lost.isEmpty)
        }
        #expect(keeper.publishable.keys.sorted() == [0])
    }
}

extension PartitionLeaseKeeperTests {
    /// A renewal the store applies and whose answer is lost (a time-out), then the next
    /// renewal's compare-and-set at the old revision is refused. The store holds our own write:
    /// the holding is kept (with its token); had another holder written since, it is lost.
    @Test(
        "a renewal applied but unanswered does not lose the holding; another holder's write does",
        arguments: [false, true])
    func unansweredRenewal(otherWroteSince: Bool) throws {
        let (bucket, clock, keeper) = try Self.keeper(partitions: 1)
        #expect(keeper.step().acquired == [0])
        let token = try #require(keeper.held[0])
        bucket.writesApplyButTimeOut(true)
        clock.advance(.seconds(2))
        #expect(keeper.step().lost.isEmpty)
        let applied = try #require(bucket.leader("museum.p.0"))
        #expect(applied.revision > token, "the store applied the renewal")
        bucket.writesApplyButTimeOut(false)
        if otherWroteSince { bucket.write("museum.p.0", #"{"instance":"b"}"#) }
        clock.advance(.seconds(2))
        let round = keeper.step()
        #expect(round.lost == (otherWroteSince ? [0] : []), "\(round)")
        if !otherWroteSince {
            #expect(keeper.held[0] == token, "kept with its token")
            // Its deadline counts from the unanswered send (2 s): 2 + 6 − 1 = 7 s.
            #expect(keeper.publishable[0] == token)
            clock.advance(.seconds(2))
            #expect(keeper.step().lost.isEmpty, "the next renewal, at the applied revision, succeeds")
            #expect(try #require(bucket.leader("museum.p.0")).revision > applied.revision)
        }
    }
}

/// A monotonic clock that moves only when the test says.
final class ManualMonotonic: Sendable {
    private let time = Mutex(Duration.zero)
    var now: Duration { time.withLock { $0 } }
    func advance(_ by: Duration) { time.withLock { $0 += by } }
}

/// A key-value bucket in memory: a leader that does the compare-and-set, and a replica view
/// that reads may be pointed at per key (to answer stale).
final class MemoryBucket: KeyValueBucket {
    private struct State {
        var sequence: UInt64 = 0
        var leader: [String: NATSKeyValue.Entry] = [:]
        var replica: [String: NATSKeyValue.Entry?] = [:]
        var writesFail = false
        var writesApplyButTimeOut = false
    }

    private let state = Mutex(State())

    func replica(_ key: String, shows entry: NATSKeyValue.Entry?) { state.withLock { $0.replica[key] = .some(entry) } }
    func writesFail(_ fail: Bool) { state.withLock { $0.writesFail = fail } }
    /// Writes are applied, then answered with a time-out (the answer lost on the way).
    func writesApplyButTimeOut(_ on: Bool) { state.withLock { $0.writesApplyButTimeOut = on } }
    func leader(_ key: String) -> NATSKeyValue.Entry? { state.withLock { $0.leader[key] } }

    /// Someone else's unconditional write; returns its revision.
    @discardableResult
    func write(_ key: String, _ value: String) -> UInt64 {
        state.withLock { state in
            state.sequence += 1
            state.leader[key] = .init(value: Array(value.utf8), revision: state.sequence)
            return state.sequence
        }
    }

    private func write(
        _ key: String, _ value: [UInt8], _ function: String, allowed: (NATSKeyValue.Entry?) -> Bool
    ) throws(NATSError) -> UInt64 {
        try state.withLock { state throws(NATSError) in
            if state.writesFail {
                throw NATSError(code: 26, function: function, context: key, text: "Timeout")
            }
            guard allowed(state.leader[key]) else {
                throw NATSError(code: 14, function: function, context: key, text: "wrong last sequence")
            }
            state.sequence += 1
            state.leader[key] = .init(value: value, revision: state.sequence)
            if state.writesApplyButTimeOut {
                throw NATSError(code: 26, function: function, context: key, text: "Timeout")
            }
            return state.sequence
        }
    }

    func create(_ key: String, _ value: [UInt8]) throws(NATSError) -> UInt64 {
        try write(key, value, "create") { $0 == nil }
    }

    func update(_ key: String, _ value: [UInt8], last: UInt64) throws(NATSError) -> UInt64 {
        try write(key, value, "update") { $0?.revision == last }
    }

    func put(_ key: String, _ value: [UInt8]) throws(NATSError) -> UInt64 {
        try write(key, value, "put") { _ in true }
    }

    func get(_ key: String) throws(NATSError) -> NATSKeyValue.Entry? {
        state.withLock { state in
            if let shown = state.replica[key] { return shown }
            return state.leader[key]
        }
    }

    func keys(prefix: String) throws(NATSError) -> [String] {
        state.withLock { $0.leader.keys.filter { $0.hasPrefix(prefix) }.sorted() }
    }

    func delete(_ key: String) throws(NATSError) {
        state.withLock { _ = $0.leader.removeValue(forKey: key) }
    }
}
