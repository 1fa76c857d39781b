import Foundation
import PerimeterCore
import Testing

@Suite("Partitions: hash, lease deadlines, fencing, assignment")
struct PartitioningTests {
    // FNV-1a 32 reference values (the algorithm's published test vectors).
    @Test(
        "FNV-1a 32 matches the reference vectors",
        arguments: [("", 0x811C_9DC5 as UInt32), ("a", 0xE40C_292C), ("foobar", 0xBF9C_F968)])
    func fnv(input: String, expected: UInt32) {
        #expect(Partitioning.fnv1a32(input.utf8) == expected)
    }

    @Test(
        "an id's partition is FNV-1a of its topic level, modulo the count",
        arguments: [
            // The first four were seen from nats-server 2.9.10 with `partition(4,…)` by hand;
            // PartitionMappingTests checks many more against the running cluster.
            ("a1", 4, 3), ("a2", 4, 2), ("a3", 4, 1), ("a4", 4, 0), ("anything", 1, 0),
            // A `/` in an id is `%2F` in the topic level, and that is what the broker hashes.
            ("x/y", 7, Int(Partitioning.fnv1a32("x%2Fy".utf8) % 7)),
        ])
    func partition(id: String, count: Int, expected: Int) throws {
        #expect(try Partitioning(count: count).partition(of: id) == expected)
    }

    @Test("a partition count out of 1…1024 is refused, naming the count", arguments: [0, -1, 1025])
    func badCount(count: Int) {
        #expect(throws: PartitioningError(count: count)) { try Partitioning(count: count) }
        #expect("\(PartitioningError(count: count))".contains("not \(count)"))
    }

    @Test("the NATS mapping line routes a venue's observations by agent")
    func mapping() throws {
        let line = try Partitioning(count: 8).natsMapping(topics: Topics(venue: "museum"))
        #expect(
            line
                == "\"perimeter.v1.museum.obs.*.*\": \"perimeter.v1.museum.p.{{partition(8,1)}}.obs.{{wildcard(1)}}.{{wildcard(2)}}\""
        )
        #expect(Topics(venue: "museum").partitionObservations(3) == "perimeter/v1/museum/p/3/obs/+/+")
        #expect(
            Topics(venue: "museum").observationsInAnyPartition(agent: "gw/1") == "perimeter/v1/museum/p/+/obs/gw%2F1/+")
    }

    struct LeaseCase: Sendable, CustomTestStringConvertible {
        var name: String
        var sentAt: Double?
        var now: Double
        var mayPublish: Bool
        var testDescription: String { name }
    }

    // TTL 6 s, margin 1 s: a holder whose last good write was sent at t may publish until t + 5.
    @Test(
        "the holder publishes until its deadline (sent + TTL − margin), counted from when the write was sent",
        arguments: [
            LeaseCase(name: "no lease", sentAt: nil, now: 0, mayPublish: false),
            LeaseCase(name: "just written", sentAt: 10, now: 10, mayPublish: true),
            LeaseCase(name: "before the deadline", sentAt: 10, now: 14.999, mayPublish: true),
            LeaseCase(name: "at the deadline", sentAt: 10, now: 15, mayPublish: false),
            LeaseCase(name: "paused past the TTL", sentAt: 10, now: 40, mayPublish: false),
        ])
    func lease(row: LeaseCase) {
        let policy = PartitionLease(ttl: .seconds(6), margin: .seconds(1))
        let held = row.sentAt.map { PartitionLease.Held(revision: 7, sentAt: .milliseconds(Int64($0 * 1000))) }
        #expect(policy.mayPublish(held, now: .milliseconds(Int64(row.now * 1000))) == row.mayPublish)
        if let held {
            #expect(policy.renewAt(held) == held.sentAt + .seconds(2))
            // Renewals at TTL/3 leave two more tries before the deadline.
            #expect(policy.renewAt(held) + .seconds(2) < policy.deadline(held))
        }
    }

    @Test("consumers drop an output whose token is below the highest seen for its partition")
    func fencing() {
        var watch = FencingWatch()
        let rows: [(venue: String, partition: Int, token: UInt64, accepted: Bool)] = [
            ("v", 0, 5, true),
            ("v", 0, 5, true),  // the same owner again
            ("v", 1, 3, true),  // another partition has its own highest
            ("v", 0, 9, true),  // a new owner
            ("v", 0, 5, false),  // the old owner, late
            ("w", 0, 1, true),  // another venue
            ("v", 1, 2, false),
        ]
        for row in rows {
            #expect(
                watch.accept(venue: row.venue, partition: row.partition, token: row.token) == row.accepted,
                "\(row)")
        }
        #expect(watch.highest == ["v": [0: 9, 1: 3], "w": [0: 1]])
    }

    struct PlanCase: Sendable, CustomTestStringConvertible {
        var name: String
        var me: String
        var members: [String]
        var holders: [Int: String]
        var count: Int
        var seniority: [Int: UInt64] = [:]
        var acquire: [Int]
        var release: [Int]
        var testDescription: String { name }
    }

    @Test(
        "which partitions to take and give up",
        arguments: [
            PlanCase(
                name: "alone: take everything free", me: "a", members: [], holders: [:], count: 4,
                acquire: [0, 1, 2, 3], release: []),
            PlanCase(
                name: "a second member arrives: it waits while the first holds its share", me: "b",
                members: ["a", "b"], holders: [0: "a", 1: "a", 2: "a", 3: "a"], count: 4, acquire: [], release: []),
            PlanCase(
                name: "…and the first keeps its lowest two and gives the second's share up", me: "a",
                members: ["a", "b"], holders: [0: "a", 1: "a", 2: "a", 3: "a"], count: 4, acquire: [],
                release: [2, 3]),
            PlanCase(
                name: "…which the second then takes", me: "b", members: ["a", "b"], holders: [0: "a", 1: "a"],
                count: 4, acquire: [2, 3], release: []),
            PlanCase(
                name: "a member died: its leases still run, nobody takes them", me: "a", members: ["a", "c"],
                holders: [0: "a", 1: "b", 2: "c"], count: 3, acquire: [], release: []),
            PlanCase(
                name: "…they expired: the survivor with the larger share (a tie, by name) takes the free one",
                me: "a", members: ["a", "c"], holders: [0: "a", 2: "c"], count: 3, acquire: [1], release: []),
            PlanCase(
                name: "…and the other survivor keeps what it holds (no swap between live members)", me: "c",
                members: ["a", "c"], holders: [0: "a", 2: "c"], count: 3, acquire: [], release: []),
            PlanCase(
                name: "three members, six partitions, none held", me: "c", members: ["a", "b", "c"], holders: [:],
                count: 6, acquire: [2, 5], release: []),
            PlanCase(
                name: "a kill among three: a survivor takes one of the dead member's two", me: "b",
                members: ["b", "c"], holders: [1: "b", 4: "b", 2: "c", 5: "c"], count: 6, acquire: [0], release: []),
            PlanCase(
                name: "…and the other survivor the other", me: "c", members: ["b", "c"],
                holders: [1: "b", 4: "b", 2: "c", 5: "c"], count: 6, acquire: [3], release: []),
            PlanCase(
                name: "a third member joins two: each gives up only its surplus", me: "b", members: ["a", "b", "c"],
                holders: [0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"], count: 6, acquire: [], release: [5]),
            PlanCase(
                name: "an uneven share stays with the members that hold it (not the first by name)", me: "c",
                members: ["a", "b", "c"], holders: [0: "a", 1: "a", 2: "b", 3: "c", 4: "c"], count: 5, acquire: [],
                release: []),
            PlanCase(
                name: "back from a pause: the holder of all keeps those it has held longest and gives the newest up",
                me: "b", members: ["a", "b"], holders: [0: "b", 1: "b", 2: "b", 3: "b"], count: 4,
                seniority: [0: 40, 1: 41, 2: 12, 3: 13], acquire: [], release: [0, 1]),
            PlanCase(
                name: "me not yet listed counts as a member", me: "b", members: ["a"], holders: [:], count: 2,
                acquire: [1], release: []),
        ])
    func plan(row: PlanCase) {
        let plan = PartitionAssignment.plan(
            me: row.me, members: row.members, holders: row.holders, count: row.count, seniority: row.seniority)
        #expect(plan.acquire == row.acquire)
        #expect(plan.release == row.release)
    }

    @Test(
        "the layout is balanced, stays as it is once in place, and a member's death or arrival moves only what it must"
    )
    func layoutProperties() {
        var generator = SplitMix64(seed: 7)
        for _ in 0..<400 {
            let count = Int.random(in: 1...12, using: &generator)
            let pool = ["a", "b", "c", "d", "e"]
            let members = pool.filter { _ in Bool.random(using: &generator) }
            guard !members.isEmpty else { continue }
            // Any view: partitions held by members, by a departed "z", or free.
            var holders: [Int: String] = [:]
            for partition in 0..<count {
                switch Int.random(in: 0..<4, using: &generator) {
                case 0: break
                case 1: holders[partition] = "z"
                default: holders[partition] = members.randomElement(using: &generator)!
                }
            }
            let layout = PartitionAssignment.layout(members: members, holders: holders, count: count)
            // How long each was held (known to its holder only) changes which partitions a
            // member over its share keeps, never who is given a free one.
            var seniority: [Int: UInt64] = [:]
            for partition in holders.keys { seniority[partition] = UInt64.random(in: 0..<100, using: &generator) }
            let senior = PartitionAssignment.layout(
                members: members, holders: holders, count: count, seniority: seniority)
            for partition in 0..<count where !members.contains(holders[partition] ?? "") {
                #expect(senior[partition] == layout[partition], "free \(partition) given by seniority: \(holders)")
            }
            #expect(Set(layout.keys) == Set(0..<count))
            var shares: [String: Int] = [:]
            for member in layout.values { shares[member, default: 0] += 1 }
            let sizes = members.map { shares[$0] ?? 0 }
            #expect(sizes.max()! - sizes.min()! <= 1, "unbalanced: \(layout) from \(holders)")
            // In place, it is its own layout.
            #expect(PartitionAssignment.layout(members: members, holders: layout, count: count) == layout)
            // A member dies: only its partitions change hands.
            if members.count > 1 {
                let dead = members.randomElement(using: &generator)!
                let after = PartitionAssignment.layout(
                    members: members.filter { $0 != dead }, holders: layout.filter { $0.value != dead }, count: count)
                for (partition, member) in layout where member != dead {
                    #expect(after[partition] == member, "\(partition) moved from \(member) when \(dead) died")
                }
            }
            // A member joins: nobody gains a partition but the newcomer.
            let joined = PartitionAssignment.layout(members: members + ["n"], holders: layout, count: count)
            for (partition, member) in joined where member != "n" {
                #expect(layout[partition] == member, "\(partition) moved to \(member) when n joined")
            }
        }
    }
}
