import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import Testing

/// `venues.{id}.partitions` is read and checked before anything starts (docs/scale.md, "The
/// evaluator on partitions"); a venue without it is served as before.
@Suite("Evaluator configuration: partitions")
struct PartitionConfigurationTests {
    static let nats = #"venues.museum.partitions.nats=["nats://127.0.0.1:4222"]"#

    static let cases: [([String], String)] = [
        ([], "none"),
        (["venues.museum.partitions.count=8", nats], "8 nats://127.0.0.1:4222 6.0 1.0 30.0"),
        (
            [
                "venues.museum.partitions.count=2", nats, "venues.museum.partitions.ttl=10",
                "venues.museum.partitions.margin=2",
            ],
            "2 nats://127.0.0.1:4222 10.0 2.0 30.0"
        ),
        (
            ["venues.museum.partitions.count=2", nats, "venues.museum.partitions.replay=120"],
            "2 nats://127.0.0.1:4222 6.0 1.0 120.0"
        ),
        (
            ["venues.museum.partitions.count=2", nats, "venues.museum.partitions.replay=0"],
            "refused venues.museum.partitions.replay"
        ),
        ([nats], "refused venues.museum.partitions.count: required"),
        (["venues.museum.partitions.count=0", nats], "refused venues.museum.partitions.count"),
        (["venues.museum.partitions.count=2000", nats], "refused venues.museum.partitions.count"),
        (["venues.museum.partitions.count=2"], "refused venues.museum.partitions.nats: required"),
        (
            [
                "venues.museum.partitions.count=2", nats, "venues.museum.partitions.ttl=3",
                "venues.museum.partitions.margin=3",
            ],
            "refused venues.museum.partitions.margin: must be less than ttl"
        ),
        (
            ["venues.museum.partitions.count=2", nats, #"venues.museum.reporters={"phone-*":["visitor-*"]}"#],
            "refused venues.museum.reporters: 'phone-*' is a pattern"
        ),
        (
            ["venues.museum.partitions.count=2", nats, "evaluator.instance=a.b"],
            "refused venues.museum.partitions: the venue and evaluator.instance name lease keys"
        ),
        (
            ["venues.museum.partitions.count=2", nats, "evaluator.role=standby"],
            "refused evaluator.role: standby does not apply to venue 'museum'"
        ),
        (["venues.museum.partitions.cout=2", nats], "refused venues.museum.partitions.cout"),
    ]

    @Test("venues.{id}.partitions: read and checked, naming the key and the problem", arguments: cases)
    func settings(settings: [String], expected: String) throws {
        try expectConfiguration(settings, expected) { configuration in
            guard let partitions = configuration.venues.first?.partitions else { return "none" }
            func seconds(_ duration: Duration) -> Double {
                Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
            }
            return
                "\(partitions.partitioning.count) \(partitions.servers.joined(separator: ",")) \(seconds(partitions.lease.ttl)) \(seconds(partitions.lease.margin)) \(partitions.replay)"
        }
    }
}
