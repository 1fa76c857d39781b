import Foundation
import PerimeterKit
import Testing

@Suite("perimeter bench scale")
struct BenchScaleTests {
    /// The repository's NATS node configuration.
    static var nodeConfiguration: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("deploy/nats/node.conf").path
    }

    @Test("--partitions: one venue on 1 and 2 evaluators on a private NATS cluster, every event once, every figure")
    func partitionedTinyRun() async throws {
        let result = try await perimeter(
            [
                "bench", "scale", "--partitions", "4", "--evaluator-counts", "1,2", "--subjects", "40", "--rounds",
                "2", "--latency-rate", "40", "--latency-seconds", "1", "--nats-config", Self.nodeConfiguration,
            ],
            timeout: .seconds(150))
        #expect(result.status == .exited(0), "\(result.stderr)\n\(result.stdout)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        // The layout each count settled on: one holds all four; two hold two each (which two
        // depends on whether the second came in before the first had taken everything).
        let one = try #require(lines.first { $0.hasPrefix("E=1 (partitions 0,1,2,3): peak ") }, "\(result.stdout)")
        let two = try #require(lines.first { $0.hasPrefix("E=2 (partitions ") }, "\(result.stdout)")
        let halves = two.dropFirst("E=2 (partitions ".count).prefix { $0 != ")" }.split(separator: " / ").map {
            Set($0.split(separator: ",").compactMap { Int($0) })
        }
        #expect(
            halves.count == 2 && halves.allSatisfy { $0.count == 2 } && halves[0].union(halves[1]) == [0, 1, 2, 3],
            "\(two)")
        for line in [one, two] {
            #expect(line.contains(" observations/s, ") && line.contains(" events/s (80 observations in "), "\(line)")
            #expect(line.contains("latency at 40 obs/s p50 ") && line.contains(" ms, p99 "), "\(line)")
            #expect(!line.contains("p99 - ms"), "no latency measured: \(line)")
        }
        // Every report crosses a boundary: one event per observation (warm-up 40, peak 80, one
        // paced round of 40), each received, none unexpected.
        let events = lines.filter { $0.contains(" expected, ") }
        #expect(events.count == 2, "\(result.stdout)")
        for line in events {
            #expect(line.contains("events: 160 expected, 0 missing, 0 unexpected, "), "\(line)")
        }
        // The costs are read from /proc: every part used some CPU in the peak.
        let costs = lines.filter { $0.contains("CPU-seconds per 1,000 observations at peak: evaluators ") }
        #expect(costs.count == 2, "\(result.stdout)")
        for line in costs {
            let cluster = try #require(Self.number(after: "NATS cluster ", in: line), "\(line)")
            #expect(cluster > 0, "\(line)")
            let evaluators = try #require(Self.number(after: "at peak: evaluators ", in: line), "\(line)")
            #expect(evaluators > 0, "\(line)")
        }
        #expect(costs.last?.contains(" + ") == true, "one figure per evaluator: \(costs.last ?? "")")
        #expect(lines.count { $0.contains("CPU-seconds per 1,000 observations paced: evaluators ") } == 2)
        #expect(lines.count { $0.contains("the same net of the cost at rest: evaluators ") } == 2)
        #expect(lines.count { $0.contains("at rest (cores busy, before the warm-up): evaluators ") } == 2)
        #expect(lines.contains { $0.hasPrefix("ratio E=2/E=1: observations/s ") }, "\(result.stdout)")
    }

    @Test("--partitions refuses options of the sharded run and evaluator counts above the partitions")
    func partitionedUsage() async throws {
        for (arguments, message) in [
            (["--partitions", "4", "--broker", "127.0.0.1:1883"], "--broker does not apply with --partitions"),
            (["--partitions", "4", "--evaluator-counts", "1,8"], "at most --partitions (4)"),
            (["--partitions", "4", "--evaluator-counts", "1,x"], "--evaluator-counts must be"),
            (["--evaluator-counts", "1,2"], "--evaluator-counts applies only with --partitions"),
            (["--partitions", "4", "--lease-ttl", "1"], "--lease-ttl must be 2…300 s"),
        ] {
            let result = try await perimeter(["bench", "scale"] + arguments)
            #expect(result.status == .exited(64), "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
    }

    /// The decimal number right after `marker` in `line`.
    static func number(after marker: String, in line: String) -> Double? {
        guard let range = line.range(of: marker) else { return nil }
        return Double(line[range.upperBound...].prefix { $0.isNumber || $0 == "." })
    }
}
