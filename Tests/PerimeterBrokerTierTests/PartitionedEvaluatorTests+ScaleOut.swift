import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Testing

extension PartitionedEvaluatorTests {
    /// Scale-out under live traffic (docs/scale.md, "Leases"): the gateway venue (P = 4) on two
    /// evaluators, three rounds, then a third starts. The member with a surplus gives one
    /// partition up (a voluntary move between live evaluators); from then on rounds are
    /// published, each once the previous one's transitions of the partitions that stay put have
    /// arrived, until the newcomer has taken it over (those reach the moved partition only by
    /// the newcomer's read back), then three more. Asserted: only that one partition moved; the
    /// subscriber's transitions, deduplicated by id, are exactly those of the pure evaluator on
    /// the same scans (nothing lost or renumbered across the move); every one carries its
    /// subject's partition; the occupancy totals equal the reference's. Printed: how many rounds
    /// fell between the release and the take-over.
    @Test("scale-out under live gateway traffic: a partition handed from a live evaluator to a newcomer loses nothing")
    func scaleOutUnderTraffic() async throws {
        try await Cleanup.around { cleanup in
            let partitioning = try Partitioning(count: 4)
            let venue = GatewayVenue.venue(partitioning)
            let (cluster, inbox) = try await GatewayRun.cluster(mapping: partitioning, cleanup: cleanup)
            // a and b serve /metrics: the giver's partition metrics are checked at the end.
            let httpPorts = ["a": try MosquittoBroker.freeLoopbackPort(), "b": try MosquittoBroker.freeLoopbackPort()]
            let a = try await PartitionedTier.evaluator(
                "a", node: 0, cluster: cluster,
                path: PartitionedTier.configuration(
                    "a", cluster: cluster, node: 0, ttl: 6, venue: venue, httpPort: httpPorts["a"], cleanup: cleanup),
                cleanup: cleanup)
            let b = try await PartitionedTier.evaluator(
                "b", node: 1, cluster: cluster,
                path: PartitionedTier.configuration(
                    "b", cluster: cluster, node: 1, ttl: 6, venue: venue, httpPort: httpPorts["b"], cleanup: cleanup),
                cleanup: cleanup)
            let pair = ["a": a, "b": b]
            let settled: [String: Set<Int>]? = try await waitForValue(timeout: .seconds(60), every: .milliseconds(50)) {
                PartitionedTier.settledLayout(pair, count: 4)
            }
            guard let before = settled else {
                throw ChildFailure(
                    message: "a and b never settled: \(pair.mapValues { PartitionedTier.held($0) as Any })")
            }
            // With a third member one of them holds a partition too many: its other is the one
            // to move; the other member's partitions stay put.
            var holders: [Int: String] = [:]
            for (member, partitions) in before { for partition in partitions { holders[partition] = member } }
            let wanted = PartitionAssignment.layout(members: ["a", "b", "c"], holders: holders, count: 4)
            let giver = try #require(before.keys.first { member in wanted.values.count { $0 == member } < 2 })
            let steady = before[giver == "a" ? "b" : "a"]!
            let context: @Sendable () -> String = {
                [a, b].map { child in
                    child.output.split(separator: "\n").filter {
                        !$0.contains("msg=configuration")
                            && ($0.contains("partition") || $0.contains("level=error") || $0.contains("level=warning"))
                    }.suffix(20).joined(separator: "\n")
                }.joined(separator: "\n---\n")
            }

            let publisher = try MQTTClient(NATSClusterTests.client("agents", port: cluster.nodes[2].mqttPort))
            cleanup.add { await publisher.disconnect() }
            try await publisher.connect(timeout: .seconds(20))
            // Rounds 8 s apart (a phone's exit comes on the fourth round without its beacon),
            // 30 at most, all in the last five minutes (older reports would find their subjects
            // stale: `staleAfter`).
            let run = GatewayRun(
                partitioning: partitioning, publisher: publisher, inbox: inbox,
                t0: (Date().timeIntervalSince1970 - 260).rounded(), step: 8)

            /// Publishes round `round`, then waits for its transitions in `waitFor`'s partitions.
            func play(_ round: Int, waitFor partitions: Set<Int>) async throws {
                let wanted = try await run.publish(round, counting: partitions)
                let needed = wanted
                let byID = run.expected
                let missing: @Sendable () -> String = {
                    let seen = Set(inbox.transitions.map(\.id))
                    let absent = needed.subtracting(seen).compactMap { byID[$0] }.map {
                        "\($0.kind) \($0.subject) #\($0.seq) @p\(partitioning.partition(of: $0.subject))"
                    }
                    return "missing \(absent.sorted()) (waiting for partitions \(partitions.sorted())); \(context())"
                }
                try await inbox.waitFor("round \(round)'s transitions", timeout: .seconds(30), context: missing) {
                    needed.isSubset(of: Set($0.compactMap(Transition.init).map(\.id)))
                }
            }

            for round in 0..<3 { try await play(round, waitFor: [0, 1, 2, 3]) }
            let giving = giver == "a" ? a : b
            let offset = giving.output.count
            let c = try await PartitionedTier.evaluator("c", node: 2, cluster: cluster, venue: venue, cleanup: cleanup)
            // The giver lets its surplus go at its next round after c's membership shows; c
            // takes it at one of its own rounds (a second apart). The rounds published in that
            // gap reach the moved partition only by c's read back.
            let released: Bool? = try await waitForValue(timeout: .seconds(30), every: .milliseconds(10)) {
                giving.output.dropFirst(offset).contains("released=") ? true : nil
            }
            #expect(released != nil, "\(giver) released nothing within 30 s of c's start: \(context())")
            var round = 3
            var gapRounds = 0
            while round < 27, PartitionedTier.takenOver(c, after: 0).isEmpty {
                try await play(round, waitFor: steady)
                round += 1
                gapRounds += 1
            }
            let taken: Bool? = try await waitForValue(timeout: .seconds(30), every: .milliseconds(50)) {
                PartitionedTier.takenOver(c, after: 0).isEmpty ? nil : true
            }
            let movedAt: Int? = taken.map { _ in round }
            for _ in 0..<3 {
                try await play(round, waitFor: steady)
                round += 1
            }
            #expect(movedAt != nil, "c took nothing over: \(context())")
            let all = ["a": a, "b": b, "c": c]
            let after: [String: Set<Int>]? = try await waitForValue(timeout: .seconds(30), every: .milliseconds(50)) {
                PartitionedTier.settledLayout(all, count: 4)
            }
            let layout = try #require(after, "the three never settled: \(context())")
            // Only the giver's surplus moved.
            #expect(layout[giver == "a" ? "b" : "a"] == steady && layout[giver]!.isSubset(of: before[giver]!))
            #expect(layout["c"]!.count == 1 && before[giver]!.contains(layout["c"]!.first!), "\(before) → \(layout)")

            // The giver's metrics say what it holds and that it gave one partition up.
            let metrics = try httpGet(port: httpPorts[giver]!, path: "/metrics").body
            #expect(
                metrics.contains(#"perimeter_partitions_held{venue="test"} \#(layout[giver]!.count)"#)
                    && metrics.contains(#"perimeter_partition_moves_total{kind="released",venue="test"} 1"#),
                "\(metrics.split(separator: "\n").filter { $0.contains("partition") })")

            // `perimeter partitions --holders` reads the same layout from the lease store.
            let view = try await runProduct(
                ["partitions", "--holders", "--venue", Tier.venue, "--count", "4"]
                    + cluster.clientURLs.flatMap { ["--nats", $0] })
            #expect(view.status == .exited(0), "\(view.stderr)")
            #expect(view.stdout.contains("venue test: 3 members (a, b, c)"), "\(view.stdout)")
            for (member, partitions) in layout {
                for partition in partitions {
                    #expect(
                        view.stdout.contains("  \(partition)\t\(member)\trevision "),
                        "partition \(partition) is \(member)'s: \(view.stdout)")
                }
            }

            await run.expectFaultFree(cluster: cluster, cleanup: cleanup) {
                "the move came after round \(movedAt.map { "\($0 - 1)" } ?? "-"); \(context())\n---\n\(c.output.suffix(3000))"
            }
            print(
                "partitioned scale-out: \(run.expected.count) transitions as in the fault-free run over \(round) rounds, \(gapRounds) of them published between the release and the take-over; "
                    + "\(giver) gave partition \(layout["c"]!.sorted()) to c after round \(movedAt.map { "\($0 - 1)" } ?? "-")"
            )
        }
    }
}
