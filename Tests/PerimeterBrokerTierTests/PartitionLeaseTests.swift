import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterNATS
import PerimeterTestSupport
import Synchronization
import Testing

/// Partition leases in JetStream key-value on the three-node cluster (docs/scale.md, "Leases").
///
/// What is asserted: compare-and-set create and update as the keeper uses them (a second create
/// and a stale update are refused as conflicts); a lease renewed by its keeper outlives several
/// TTLs; two keepers split four partitions as `PartitionAssignment` says, the second's tokens
/// higher than the first's; a keeper that stops renewing (paused) loses the right to publish on
/// its own monotonic clock before the store expires its keys, the other takes them over with
/// higher tokens once they expire, and the paused one, resumed, finds them lost.
@Suite("Broker tier: partition leases in NATS JetStream KV")
struct PartitionLeaseTests {
    static let log = InMemoryLogHandler()
    static let logger = Logger(label: "leases", handler: log)

    @Test("create, renew, expire and take over on the real cluster")
    func leases() async throws {
        try await Cleanup.around { cleanup in
            let cluster = try await NATSCluster.start()
            cleanup.add { await cluster.stop() }
            // 6 s: with 3 s, renewals on a machine running the whole suite (several three-node
            // clusters on two cores) were seen to take longer than the TTL.
            let ttl = Duration.seconds(6)
            let connectionA = try NATSConnection(servers: cluster.clientURLs, timeout: .seconds(2))
            let connectionB = try NATSConnection(servers: Array(cluster.clientURLs.reversed()), timeout: .seconds(2))
            cleanup.add {
                connectionA.close()
                connectionB.close()
            }
            let storeA = try connectionA.keyValue(bucket: "perimeter-leases", ttl: ttl, replicas: 3)
            let storeB = try connectionB.keyValue(bucket: "perimeter-leases", ttl: ttl, replicas: 3)

            // The store's compare-and-set, as the keeper relies on it.
            let first = try storeA.create("cas.k", Array("a".utf8))
            #expect(throws: NATSError.self) { try storeB.create("cas.k", Array("b".utf8)) }
            do {
                _ = try storeB.create("cas.k", Array("b".utf8))
            } catch let error as NATSError {
                #expect(error.isConflict, "\(error)")
            }
            let second = try storeA.update("cas.k", Array("a2".utf8), last: first)
            #expect(second > first)
            do {
                _ = try storeB.update("cas.k", Array("b".utf8), last: first)
                Issue.record("a stale update was accepted")
            } catch let error as NATSError {
                #expect(error.isConflict, "\(error)")
            }
            // Reads may come from a replica that is behind (docs/scale.md, "Leases"): B sees A's
            // update once it has reached the replica that answers, and never B's refused write.
            try await waitUntil("B reads A's update", timeout: .seconds(10), every: .milliseconds(50)) {
                try storeB.get("cas.k")?.value == Array("a2".utf8)
            }

            // A's clock can be stopped (a SIGSTOP as far as A's deadlines go); B's is the system's.
            let policy = PartitionLease(ttl: ttl, margin: .seconds(1))
            let partitions = try Partitioning(count: 4)
            let a = PartitionLeaseKeeper(
                store: storeA, venue: "museum", instance: "a", partitions: partitions, policy: policy,
                logger: Self.logger)
            let b = PartitionLeaseKeeper(
                store: storeB, venue: "museum", instance: "b", partitions: partitions, policy: policy,
                logger: Self.logger)

            // A alone takes all four.
            #expect(a.step().acquired == [0, 1, 2, 3])
            let tokensA = a.publishable
            #expect(tokensA.keys.sorted() == [0, 1, 2, 3])
            // A renews across more than two TTLs and keeps every partition and token. The TTL
            // runs on the NATS servers' own clock, which no manual clock moves (the policy's
            // timing is pinned on a manual clock in PartitioningTests, the keeper's reading of
            // the store in PartitionLeaseKeeperTests); so the store itself says when two TTLs
            // have passed: a key written once, and again once it is gone, is gone again (and a
            // TTL has passed here too: a replica that is behind may answer "no key" early).
            var roundTimes: [Duration] = []
            for ttlNumber in 1...2 {
                let putAt = ContinuousClock.now
                _ = try storeA.put("sentinel", Array("\(ttlNumber)".utf8))
                try await waitUntil(
                    "TTL \(ttlNumber) on the store's clock", timeout: ttl * 4, every: .milliseconds(300)
                ) {
                    let started = ContinuousClock.now
                    let round = await a.stepAsync()
                    roundTimes.append(ContinuousClock.now - started)
                    #expect(round.lost.isEmpty)
                    return try storeA.get("sentinel") == nil && ContinuousClock.now - putAt > ttl
                }
            }
            #expect(a.held == tokensA)

            // B joins: it waits; A keeps the two it took first and gives up B's share; B takes
            // it with higher tokens. Reads may
            // come from a replica that is behind (docs/scale.md, "Leases"), so B may need a
            // round or two to see the keys released: it steps as its keeper would.
            #expect(b.step().acquired == [])
            #expect(a.step().released == [2, 3])
            #expect(a.publishable.keys.sorted() == [0, 1])
            var takenByB: Set<Int> = []
            // When each of B's rounds started and ended: a test process starved for longer than B's
            // renewals can bridge (the whole suite and other work on two cores) lets its keys
            // expire on the store's clock, which is a loss, not a fault of the keeper.
            var roundTimesOfB: [(start: ContinuousClock.Instant, end: ContinuousClock.Instant)] = []
            try await waitUntil("B takes 2 and 3", timeout: ttl * 2, every: .milliseconds(100)) {
                let started = ContinuousClock.now
                takenByB.formUnion(await b.stepAsync().acquired)
                roundTimesOfB.append((started, ContinuousClock.now))
                return b.publishable.keys.sorted() == [2, 3]
            }
            #expect(takenByB == [2, 3])
            let tokensB = b.publishable
            #expect(tokensB.keys.sorted() == [2, 3])
            #expect(tokensB.values.min()! > tokensA.values.max()!)

            // A pauses (stops renewing). B keeps going and takes 0 and 1 once the store expires
            // them; at that moment A's own deadline has passed already.
            let pausedAt = ContinuousClock.now
            let aStillPublishing = Mutex<[Int: UInt64]>([:])
            // B's rounds meanwhile (how long each took, what it lost): why, if it lost one.
            var roundsOfB: [String] = []
            var lostByB: Set<Int> = []
            try await waitUntil("B holds every partition", timeout: .seconds(40), every: .milliseconds(300)) {
                let started = ContinuousClock.now
                let round = await b.stepAsync()
                roundTimesOfB.append((started, ContinuousClock.now))
                lostByB.formUnion(round.lost)
                roundsOfB.append("\(ContinuousClock.now - started) lost \(round.lost) acquired \(round.acquired)")
                if !round.acquired.isEmpty { aStillPublishing.withLock { $0 = a.publishable } }
                return b.publishable.count == 4
            }
            let tookOverAfter = ContinuousClock.now - pausedAt
            #expect(aStillPublishing.withLock { $0 }.isEmpty, "A may not publish once B holds its partitions")
            let tokensAfter = b.publishable
            #expect(tokensAfter[0]! > tokensA[0]! && tokensAfter[1]! > tokensA[1]!)
            // The longest window in which B may have sent nothing: from a round's start to the
            // end of the next. Renewals are due a third of a TTL after the last: a window under
            // half a TTL leaves a sixth of it for the write to land.
            let longestPause = zip(roundTimesOfB, roundTimesOfB.dropFirst()).map { $1.end - $0.start }.max() ?? .zero
            let said =
                "B's rounds: \(roundsOfB.joined(separator: "; ")); the keepers said: \(Self.log.records.suffix(20).map { "\($0.level) \($0.message) \($0.metadata)" }.joined(separator: "; "))"
            if longestPause < ttl / 2 {
                // Renewed in time: nothing of B's changes hands.
                #expect(
                    tokensAfter[2] == tokensB[2] && tokensAfter[3] == tokensB[3] && lostByB.isEmpty,
                    "B kept 2 and 3 through the takeover (its rounds at most \(longestPause) apart): \(tokensB) → \(tokensAfter); \(said)"
                )
            } else {
                // Starved past what renewals bridge: whatever expired was said to be lost and
                // taken again under a higher token, never kept silently under the old one.
                for partition in [2, 3] where tokensAfter[partition] != tokensB[partition] {
                    #expect(
                        lostByB.contains(partition) && tokensAfter[partition]! > tokensB[partition]!,
                        "partition \(partition) changed token without a loss said (B's rounds up to \(longestPause) apart): \(tokensB) → \(tokensAfter); \(said)"
                    )
                }
                print(
                    "partition leases: the test's rounds of B were up to \(longestPause) apart (TTL \(ttl)); lost \(lostByB.sorted())"
                )
            }

            // A resumes: its renewals are refused and it publishes nothing; it is a member
            // again, so B, holding all four, keeps the two it has held longest (2 and 3: the
            // layout is sticky) and gives 0 and 1 back; A takes them with tokens higher than B's.
            let resumed = a.step()
            #expect(resumed.lost.sorted() == [0, 1])
            #expect(resumed.acquired.isEmpty)
            #expect(a.publishable.isEmpty)
            var releasedByB: Set<Int> = []
            var takenByA: Set<Int> = []
            try await waitUntil("B gives 0 and 1 back and A takes them", timeout: ttl * 2, every: .milliseconds(100)) {
                releasedByB.formUnion(await b.stepAsync().released)
                takenByA.formUnion(await a.stepAsync().acquired)
                return a.publishable.keys.sorted() == [0, 1] && b.publishable.keys.sorted() == [2, 3]
            }
            #expect(releasedByB == [0, 1])
            #expect(takenByA == [0, 1])
            let tokensBack = a.publishable
            #expect(tokensBack[0]! > tokensAfter[0]! && tokensBack[1]! > tokensAfter[1]!)
            let sortedTimes = roundTimes.sorted()
            print(
                "partition leases: taken over \(tookOverAfter) after the holder paused (TTL \(ttl)); "
                    + "a round (4 partitions) took \(sortedTimes[sortedTimes.count / 2]) median, \(sortedTimes.last!) at most, over \(sortedTimes.count) rounds"
            )
        }
    }
}
