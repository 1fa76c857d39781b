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
                name: "…and the first gives the second's share up", me: "a", members: ["a", "b"],
                holders: [0: "a", 1: "a", 2: "a", 3: "a"], count: 4, acquire: [], release: [1, 3]),
            PlanCase(
                name: "…which the second then takes", me: "b", members: ["a", "b"], holders: [0: "a", 2: "a"],
                count: 4, acquire: [1, 3], release: []),
            PlanCase(
                name: "a member died: its leases still run, nobody takes them", me: "a", members: ["a", "c"],
                holders: [0: "a", 1: "b", 2: "c"], count: 3, acquire: [], release: []),
            PlanCase(
                name: "…they expired: a survivor takes what it now wants and gives up what the other wants", me: "c",
                members: ["a", "c"], holders: [0: "a", 2: "c"], count: 3, acquire: [1], release: [2]),
            PlanCase(
                name: "three members, six partitions", me: "c", members: ["a", "b", "c"], holders: [:], count: 6,
                acquire: [2, 5], release: []),
            PlanCase(
                name: "me not yet listed counts as a member", me: "b", members: ["a"], holders: [:], count: 2,
                acquire: [1], release: []),
        ])
    func plan(row: PlanCase) {
        let plan = PartitionAssignment.plan(me: row.me, members: row.members, holders: row.holders, count: row.count)
        #expect(plan.acquire == row.acquire)
        #expect(plan.release == row.release)
    }
}
