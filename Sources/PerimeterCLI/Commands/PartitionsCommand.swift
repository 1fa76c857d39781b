import Foundation
import PerimeterCore

/// `perimeter partitions --venue V --count P`: the NATS mapping that splits a venue into partitions.
struct PartitionsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "partitions", abstract: "Print the NATS subject mapping that splits a venue into partitions.",
        discussion: """
            Writes a `mappings { … }` block for deploy/nats/partitions.conf (one line per venue;
            give several --venue to get them all): observations on {prefix}/{venue}/obs/{agent}/…
            are delivered as {prefix}/{venue}/p/{n}/obs/{agent}/…, n = FNV-1a 32 of the agent id
            modulo the count (docs/scale.md, "One venue on several evaluators"). With --id, prints
            the partition of each id instead.
            """)

    @Option(help: "The venue (repeat for several).", valueName: "id")
    var venue: [String] = []

    @Option(help: "Partitions per venue, 1…1024.", valueName: "n")
    var count: Int

    @Option(help: "Topic prefix.", valueName: "prefix")
    var prefix: String = "perimeter/v1"

    @Option(help: "An agent or subject id whose partition to print (repeat for several).", valueName: "id")
    var id: [String] = []

    mutating func validate() throws {
        do { _ = try Partitioning(count: count) } catch { throw ValidationError("--count: \(error)") }
        guard !venue.isEmpty || !id.isEmpty else {
            throw ValidationError("give --venue (a mapping) or --id (partitions)")
        }
        for name in venue + id {
            if let problem = Topics.idProblem(name) { throw ValidationError("'\(name)': \(problem)") }
        }
        for name in venue where name.contains(where: { ".* >/+#".contains($0) }) {
            throw ValidationError(
                "venue '\(name)': NATS subjects cannot hold '.', ' ', '*', '>' and a level no '/', '+', '#'")
        }
    }

    func run() async throws {
        let partitioning = try Partitioning(count: count)
        for name in id { print("\(name)\t\(partitioning.partition(of: name))") }
        guard !venue.isEmpty else { return }
        print("mappings {")
        for name in venue {
            print("  " + partitioning.natsMapping(topics: Topics(prefix: prefix, venue: name)))
        }
        print("}")
    }
}
