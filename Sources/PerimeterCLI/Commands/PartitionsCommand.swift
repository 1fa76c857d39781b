import Foundation
import PerimeterCore
import PerimeterEvaluator

/// `perimeter partitions --venue V --count P`: the NATS mapping that splits a venue into
/// partitions; with `--holders`, who holds each partition now.
struct PartitionsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "partitions", abstract: "Print the NATS subject mapping that splits a venue into partitions.",
        discussion: """
            Writes a `mappings { … }` block for deploy/nats/partitions.conf (one line per venue;
            give several --venue to get them all): observations on {prefix}/{venue}/obs/{agent}/…
            are delivered as {prefix}/{venue}/p/{n}/obs/{agent}/…, n = FNV-1a 32 of the agent id
            modulo the count (docs/scale.md, "One venue on several evaluators"). With --id, prints
            the partition of each id instead. With --holders and --nats, prints who holds each of
            the venue's partitions now, read from the lease store (the layout is sticky: which
            evaluator holds which partition depends on the order they came in).
            """)

    @Option(help: "The venue (repeat for several).", valueName: "id")
    var venue: [String] = []

    @Option(help: "Partitions per venue, 1…1024.", valueName: "n")
    var count: Int

    @Option(help: "Topic prefix.", valueName: "prefix")
    var prefix: String = "perimeter/v1"

    @Option(help: "An agent or subject id whose partition to print (repeat for several).", valueName: "id")
    var id: [String] = []

    @Flag(help: "Print each partition's holder now, from the lease store (needs --nats).")
    var holders: Bool

    @Option(
        help: "A NATS server of the lease store, nats://host:port (repeat for several; venues.{id}.partitions.nats).",
        valueName: "url")
    var nats: [String] = []

    mutating func validate() throws {
        do { _ = try Partitioning(count: count) } catch { throw ValidationError("--count: \(error)") }
        guard !venue.isEmpty || !id.isEmpty else {
            throw ValidationError("give --venue (a mapping) or --id (partitions)")
        }
        for name in venue + id {
            if let problem = Topics.idProblem(name) { throw ValidationError("'\(name)': \(problem)") }
        }
        if holders && (venue.isEmpty || nats.isEmpty) { throw ValidationError("--holders needs --venue and --nats") }
        if !holders && !nats.isEmpty { throw ValidationError("--nats applies only with --holders") }
        for url in nats where !url.hasPrefix("nats://") || url.utf8.count > 512 {
            throw ValidationError("--nats '\(url.prefix(80))': expected nats://host:port")
        }
        for name in venue where name.contains(where: { ".* >/+#".contains($0) }) {
            throw ValidationError(
                "venue '\(name)': NATS subjects cannot hold '.', ' ', '*', '>' and a level no '/', '+', '#'")
        }
    }

    func run() async throws {
        let partitioning = try Partitioning(count: count)
        if holders {
            try printHolders(partitioning)
            return
        }
        for name in id { print("\(name)\t\(partitioning.partition(of: name))") }
        guard !venue.isEmpty else { return }
        print("mappings {")
        for name in venue {
            print("  " + partitioning.natsMapping(topics: Topics(prefix: prefix, venue: name)))
        }
        print("}")
    }

    /// For each venue: its live members, then one line per partition: its holder and the
    /// revision of the holder's last write, or `free`.
    func printHolders(_ partitioning: Partitioning) throws {
        for name in venue {
            if let problem = PartitionLeaseKeeper.keyProblem(name) { throw ExitCode(64, "venue \(problem)") }
            let view: PartitionLeaseKeeper.View?
            do {
                view = try PartitionLeaseKeeper.view(servers: nats, venue: name, partitions: partitioning)
            } catch {
                throw ExitCode(1, "cannot read the partition leases on \(nats.joined(separator: ",")): \(error)")
            }
            guard let view else {
                throw ExitCode(
                    1,
                    "no partition leases on \(nats.joined(separator: ",")): no evaluator has served a partitioned venue there"
                )
            }
            print("venue \(name): \(view.members.count) members (\(view.members.joined(separator: ", ")))")
            for partition in partitioning.all {
                if let lease = view.leases[partition] {
                    print("  \(partition)\t\(lease.instance)\trevision \(lease.revision)")
                } else {
                    print("  \(partition)\tfree")
                }
            }
        }
    }
}
