import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Testing

@Suite("perimeter partitions")
struct PartitionsCommandTests {
    @Test("prints the mappings block for partitions.conf, one line per venue")
    func mappings() async throws {
        let result = try await perimeter(["partitions", "--venue", "museum", "--venue", "campus", "--count", "8"])
        #expect(result.status == .exited(0), "\(result.stderr)")
        let museum = try Partitioning(count: 8).natsMapping(topics: Topics(venue: "museum"))
        let campus = try Partitioning(count: 8).natsMapping(topics: Topics(venue: "campus"))
        #expect(result.stdout == "mappings {\n  \(museum)\n  \(campus)\n}\n")
    }

    @Test("prints the partition of each id, as the broker computes it")
    func ids() async throws {
        let result = try await perimeter(["partitions", "--count", "4", "--id", "a1", "--id", "a4"])
        #expect(result.status == .exited(0), "\(result.stderr)")
        #expect(result.stdout == "a1\t3\na4\t0\n")
    }

    @Test(
        "bad input is a usage error naming it",
        arguments: [
            (["partitions", "--venue", "museum", "--count", "0"], "partitions must be between 1 and 1024, not 0"),
            (["partitions", "--count", "4"], "give --venue"),
            (["partitions", "--venue", "mu.seum", "--count", "4"], "venue 'mu.seum'"),
            (["partitions", "--holders", "--venue", "museum", "--count", "4"], "--holders needs --venue and --nats"),
            (
                ["partitions", "--venue", "museum", "--count", "4", "--nats", "nats://127.0.0.1:4222"],
                "--nats applies only with --holders"
            ),
            (
                ["partitions", "--holders", "--venue", "museum", "--count", "4", "--nats", "http://x"],
                "--nats 'http://x': expected nats://host:port"
            ),
        ])
    func usage(arguments: [String], message: String) async throws {
        let result = try await perimeter(arguments)
        #expect(result.status == .exited(64))
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }

    @Test("--holders with no lease store answering fails naming the servers (exit 1)")
    func holdersUnreachable() async throws {
        // A free port: nothing listens there.
        let port = try MosquittoBroker.freeLoopbackPort()
        let result = try await perimeter(
            ["partitions", "--holders", "--venue", "museum", "--count", "4", "--nats", "nats://127.0.0.1:\(port)"])
        #expect(result.status == .exited(1))
        #expect(
            result.stderr.contains("cannot read the partition leases on nats://127.0.0.1:\(port)"), "\(result.stderr)")
    }
}
