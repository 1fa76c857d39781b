import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

/// `perimeter bench scale --partitions P`: one venue split into P partitions (docs/scale.md, "One
/// venue on several evaluators") on a private three-node NATS cluster, served in turn by each
/// count of evaluator processes in `--evaluator-counts`.
///
/// What sizing a large venue needs is the cost per observation of each part, which the rates on
/// two shared cores hide: so besides the rates and latencies the run reads the CPU time of every
/// evaluator, of the three nats-server processes and of the bench itself (its publisher and
/// subscriber) from `/proc/{pid}/stat` around the peak and the paced phase.
extension BenchScaleCommand {
    /// CPU-seconds used so far, per part, read at `seconds` on the wall (since the bench began);
    /// the difference of two is what each part used in between, and over how long.
    struct CPUSample {
        var evaluators: [Double]
        /// Per nats-server process: the stream leaders' node works more than the others.
        var nodes: [Double]
        var bench: Double
        var seconds: Double

        var cluster: Double { nodes.reduce(0, +) }

        static func - (after: CPUSample, before: CPUSample) -> CPUSample {
            CPUSample(
                evaluators: zip(after.evaluators, before.evaluators).map { $0 - $1 },
                nodes: zip(after.nodes, before.nodes).map { $0 - $1 }, bench: after.bench - before.bench,
                seconds: after.seconds - before.seconds)
        }

        /// Per second of the interval: CPU-seconds per second (cores busy), per part.
        var rate: CPUSample {
            CPUSample(
                evaluators: evaluators.map { $0 / seconds }, nodes: nodes.map { $0 / seconds }, bench: bench / seconds,
                seconds: 1)
        }

        /// This interval's use less what `rate` (at rest) would have used in as long: the cost of
        /// the traffic alone.
        func net(of rate: CPUSample) -> CPUSample {
            CPUSample(
                evaluators: zip(evaluators, rate.evaluators).map { $0 - $1 * seconds },
                nodes: zip(nodes, rate.nodes).map { $0 - $1 * seconds }, bench: bench - rate.bench * seconds,
                seconds: seconds)
        }
    }

    /// What one evaluator count measured.
    struct PartitionedFigures {
        var evaluators: Int
        /// The partitions each evaluator held while measured.
        var held: [[Int]]
        var peakObservations: Int
        var peakEvents: Int
        var peakSeconds: Double
        /// The peak's observations in each evaluator's partitions.
        var ownObservations: [Int]
        /// CPU-seconds per second at rest (settled, before any observation): lease rounds,
        /// Raft heartbeats, stats; what a part costs whatever the traffic.
        var restCPU: CPUSample
        var peakCPU: CPUSample
        var pacedObservations: Int
        var pacedCPU: CPUSample
        var latencyRate: Double
        var p50: Double
        var p99: Double
        var expected: Int
        var duplicates: Int
        var missing: Int
        var unexpected: Int
        /// Lease changes logged by the evaluators between the settled layout and the end.
        var moves: Int
        var rssMB: [Double]

        var peakObservationRate: Double { Double(peakObservations) / peakSeconds }
        var peakEventRate: Double { Double(peakEvents) / peakSeconds }
        /// CPU-seconds per 1,000 of the venue's observations.
        func perThousand(_ seconds: Double, of observations: Int) -> Double { seconds / Double(observations) * 1000 }
        /// CPU-seconds per 1,000 observations at peak, net of the cost at rest.
        var evaluatorCost: Double {
            perThousand(peakCPU.net(of: restCPU).evaluators.reduce(0, +), of: peakObservations)
        }
        var clusterCost: Double { perThousand(peakCPU.net(of: restCPU).cluster, of: peakObservations) }
    }

    /// The evaluator counts of `--evaluator-counts`, nil when it does not parse.
    var parsedEvaluatorCounts: [Int]? {
        let counts = evaluatorCounts.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        return counts.isEmpty || counts.contains(nil) ? nil : counts.map { $0! }
    }

    /// The node configuration to run: `--nats-config`, else `deploy/nats/node.conf` in the
    /// current directory or in a directory above this executable (a build in a checkout).
    static func nodeConfiguration(_ given: String?) throws -> String {
        if let given {
            guard FileManager.default.fileExists(atPath: given) else {
                throw ExitCode(1, "--nats-config: no file at \(given)")
            }
            return given
        }
        let relative = "deploy/nats/node.conf"
        var candidates = [FileManager.default.currentDirectoryPath + "/" + relative]
        if let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            var directory = URL(fileURLWithPath: executable).deletingLastPathComponent()
            while directory.path != "/" {
                candidates.append(directory.appendingPathComponent(relative).path)
                directory.deleteLastPathComponent()
            }
        }
        guard let found = candidates.first(where: FileManager.default.fileExists(atPath:)) else {
            throw ExitCode(
                1,
                "no \(relative) in the current directory or above the executable: run from a checkout or give --nats-config"
            )
        }
        return found
    }

    func runPartitioned(_ partitions: Int) async throws {
        #if DEBUG
            Output.error("warning: this is a debug build; build with 'swift build -c release' for real figures")
        #endif
        let counts = parsedEvaluatorCounts ?? [1]
        let configuration = try Self.nodeConfiguration(natsConfig)
        let partitioning = try Partitioning(count: partitions)
        let (directory, workload, regionsPath) = try prepareVenue()
        defer { try? FileManager.default.removeItem(at: directory) }
        print(
            "perimeter bench scale: one venue × \(subjects) subjects in \(partitions) partitions, on a private three-node NATS cluster per evaluator count (MQTT 3.1.1, JetStream replicated ×3, \(configuration)), \(regions) circles + 10 beacon regions, \(rounds) reports per subject at peak, \(transitionEvery == 1 ? "every report a transition" : "a transition every \(transitionEvery) reports"), evaluators \(counts.map(String.init).joined(separator: ", ")), lease TTL \(BenchPipelineCommand.format(leaseTtl)) s, \(ProcessInfo.processInfo.activeProcessorCount) cores"
        )
        var results: [PartitionedFigures] = []
        var rate = latencyRate
        for count in counts {
            let figures = try await measurePartitioned(
                evaluators: count, partitioning: partitioning, workload: workload, configuration: configuration,
                directory: directory, regionsPath: regionsPath, rate: rate)
            reportPartitioned(figures)
            rate = rate ?? figures.latencyRate
            results.append(figures)
        }
        if let base = results.first {
            for figures in results.dropFirst() {
                func ratio(_ value: Double) -> String { String(format: "%.2f×", value) }
                print(
                    "ratio E=\(figures.evaluators)/E=\(base.evaluators): observations/s \(ratio(figures.peakObservationRate / base.peakObservationRate)), events/s \(ratio(figures.peakEventRate / base.peakEventRate)), p99 at \(BenchPipelineCommand.rate(base.latencyRate)) obs/s \(ratio(figures.p99 / base.p99)), CPU per observation at peak net of the cost at rest: evaluators \(ratio(figures.evaluatorCost / base.evaluatorCost)), cluster \(ratio(figures.clusterCost / base.clusterCost))"
                )
            }
        }
        let wrong = results.filter { $0.missing + $0.unexpected > 0 }
        if !wrong.isEmpty {
            throw ExitCode(
                1,
                "events missing or unexpected with \(wrong.map { "E=\($0.evaluators)" }.joined(separator: ", ")) (see above)"
            )
        }
    }

    private func reportPartitioned(_ figures: PartitionedFigures) {
        let layout = figures.held.map { $0.map(String.init).joined(separator: ",") }.joined(separator: " / ")
        func format(_ value: Double) -> String { String(format: "%.3f", value) }
        /// "evaluators a + b = c; NATS cluster d (n1 + n2 + n3)…" per 1,000 observations.
        func cost(_ sample: CPUSample, _ observations: Int, bench: Bool = true) -> String {
            let each = sample.evaluators.map { format(figures.perThousand($0, of: observations)) }
            let total = figures.perThousand(sample.evaluators.reduce(0, +), of: observations)
            let nodes = sample.nodes.map { format(figures.perThousand($0, of: observations)) }
            return "evaluators \(each.joined(separator: " + "))\(each.count > 1 ? " = " + format(total) : ""); "
                + "NATS cluster \(format(figures.perThousand(sample.cluster, of: observations))) (\(nodes.joined(separator: " + ")))"
                + (bench
                    ? "; bench publisher and subscriber \(format(figures.perThousand(sample.bench, of: observations)))"
                    : "")
        }
        let own = zip(figures.peakCPU.evaluators, figures.ownObservations).map {
            format($1 > 0 ? $0 / Double($1) * 1000 : .nan)
        }
        let rss = figures.rssMB.map { String(format: "%.0f", $0) }.joined(separator: " / ")
        let rest = figures.restCPU
        print(
            """
            E=\(figures.evaluators) (partitions \(layout)): peak \(BenchPipelineCommand.rate(figures.peakObservationRate)) observations/s, \(BenchPipelineCommand.rate(figures.peakEventRate)) events/s (\(figures.peakObservations) observations in \(BenchPipelineCommand.format(figures.peakSeconds)) s); latency at \(BenchPipelineCommand.rate(figures.latencyRate)) obs/s p50 \(BenchPipelineCommand.format(figures.p50)) ms, p99 \(BenchPipelineCommand.format(figures.p99)) ms
              CPU-seconds per 1,000 observations at peak: \(cost(figures.peakCPU, figures.peakObservations)); each evaluator per 1,000 of its own partitions' observations \(own.joined(separator: " / "))
              the same net of the cost at rest: \(cost(figures.peakCPU.net(of: rest), figures.peakObservations, bench: false))
              CPU-seconds per 1,000 observations paced: \(cost(figures.pacedCPU, figures.pacedObservations)); net of the cost at rest: \(cost(figures.pacedCPU.net(of: rest), figures.pacedObservations, bench: false))
              at rest (cores busy, before the warm-up): evaluators \(rest.evaluators.map(format).joined(separator: " + ")); NATS cluster \(format(rest.cluster)) (\(rest.nodes.map(format).joined(separator: " + ")))
              events: \(figures.expected) expected, \(figures.missing) missing, \(figures.unexpected) unexpected, \(figures.duplicates) duplicates by id (dropped); lease changes while measured \(figures.moves); RSS \(rss) MB
            """)
    }

    /// The partition lease lines of an evaluator's log (`partition leases changed … held=…`,
    /// `partitions taken over … partitions=…`).
    struct LeaseLog {
        var changes: [(acquired: Set<Int>, held: Set<Int>)] = []
        /// For each partition, the index in `changes` of its last acquisition and whether it
        /// was taken over (states read, stream followed) after it.
        var takenOverSinceAcquired: [Int: Bool] = [:]

        init(_ text: String) {
            func numbers(_ line: Substring, _ field: String) -> Set<Int> {
                guard let value = line.split(separator: " ").first(where: { $0.hasPrefix(field + "=") }) else {
                    return []
                }
                let list = value.dropFirst(field.count + 1).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
                return Set(list.split(separator: ",").compactMap { Int($0) })
            }
            for line in text.split(separator: "\n") {
                if line.contains("partition leases changed") {
                    let acquired = numbers(line, "acquired")
                    changes.append((acquired, numbers(line, "held")))
                    for partition in acquired { takenOverSinceAcquired[partition] = false }
                } else if line.contains("partitions taken over") {
                    for partition in numbers(line, "partitions") { takenOverSinceAcquired[partition] = true }
                }
            }
        }

        /// Holds exactly `wanted`, and has taken each of them over since it last acquired it.
        func serves(exactly wanted: Set<Int>) -> Bool {
            changes.last?.held == wanted && wanted.allSatisfy { takenOverSinceAcquired[$0] == true }
        }
    }

    /// First arrivals of the expected events, by id, as the subscriber receives them.
    final class Tally {
        let sink: EventSink
        private var cursor = 0
        private(set) var first: [String: ContinuousClock.Instant] = [:]
        private(set) var duplicates = 0
        private(set) var unexpected: Set<String> = []

        init(sink: EventSink) { self.sink = sink }

        func collect(expected: [String: Int]) {
            let new = sink.arrivals(from: cursor)
            cursor += new.count
            for arrival in new {
                guard let id = BenchPipelineCommand.eventID(arrival.payload) else { continue }
                if expected[id] == nil {
                    unexpected.insert(id)
                } else if first[id] == nil {
                    first[id] = arrival.at
                } else {
                    duplicates += 1
                }
            }
        }

        /// Waits until every id of `ids` has arrived; returns when the last of them first did.
        /// - Throws: when an evaluator ends, or no new expected event arrives for 60 s (a partition
        ///   moved under load is served again after its lease's TTL and a handover).
        func wait(
            for ids: [String], expected: [String: Int], evaluators: [EvaluatorProcess], phase: String
        ) async throws -> ContinuousClock.Instant {
            var seen = 0
            var progressAt = ContinuousClock.now
            while true {
                collect(expected: expected)
                let arrived = ids.count { first[$0] != nil }
                if arrived == ids.count { return ids.compactMap { first[$0] }.max() ?? .now }
                for evaluator in evaluators { try evaluator.checkRunning() }
                if arrived != seen {
                    seen = arrived
                    progressAt = .now
                } else if ContinuousClock.now - progressAt > .seconds(60) {
                    throw ExitCode(
                        1,
                        "\(phase): \(arrived) of \(ids.count) expected events arrived (\(unexpected.count) unexpected), then none for 60 s"
                    )
                }
                try await Task.sleep(for: .milliseconds(5))
            }
        }
    }

    static func cpu(_ evaluators: [EvaluatorProcess], _ cluster: NATSCluster) -> CPUSample {
        CPUSample(
            evaluators: evaluators.map { CPUMeter.seconds($0.process.pid) },
            nodes: cluster.nodes.indices.map { cluster.pid($0).map { CPUMeter.seconds($0) } ?? 0 },
            bench: CPUMeter.seconds(nil), seconds: BenchPipelineCommand.seconds(ContinuousClock.now - origin))
    }

    private static let origin = ContinuousClock.now

    private func measurePartitioned(
        evaluators count: Int, partitioning: Partitioning, workload: BenchPipelineWorkload, configuration: String,
        directory: URL, regionsPath: String, rate: Double?
    ) async throws -> PartitionedFigures {
        let venue = BenchPipelineWorkload.venue
        let cluster = try await NATSCluster.start(
            configuration: configuration, ackWait: "30s",
            mappings: [partitioning.natsMapping(topics: Topics(prefix: BenchPipelineWorkload.prefix, venue: venue))],
            directory: directory.appendingPathComponent("nats-e\(count)"))
        do {
            let figures = try await measurePartitioned(
                evaluators: count, on: cluster, partitioning: partitioning, workload: workload,
                directory: directory, regionsPath: regionsPath, rate: rate)
            await cluster.stop()
            return figures
        } catch {
            let diagnosis = Self.diagnosis(
                evaluatorLogs: directory.appendingPathComponent("p\(count)"), cluster: cluster)
            await cluster.stop()
            if case let exit as ExitCode = error, exit.code != 1 { throw error }
            throw ExitCode(1, "\(error)\n\(diagnosis)")
        }
    }

    /// What the evaluators and the nodes said that explains a failed run: each evaluator's last
    /// warnings and lease changes, and the nodes' warnings (timestamps left out, counted).
    static func diagnosis(evaluatorLogs directory: URL, cluster: NATSCluster) -> String {
        var lines: [String] = []
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        for name in files.sorted() where name.hasSuffix(".log") {
            let text = (try? String(contentsOfFile: directory.appendingPathComponent(name).path, encoding: .utf8)) ?? ""
            let notable = text.split(separator: "\n").filter {
                $0.contains("level=warning") || $0.contains("level=error") || $0.contains("partition leases changed")
                    || $0.contains("partitions taken over")
            }
            lines.append("--- \(name): \(notable.count) warnings and lease changes, the last:")
            lines += notable.suffix(8).map { String($0.prefix(400)) }
        }
        var warnings: [String: Int] = [:]
        for line in cluster.logs.split(separator: "\n") where line.contains("[WRN]") || line.contains("[ERR]") {
            // "[pid] date time [WRN] text": the text, its numbers kept (they name connections).
            guard let range = line.range(of: "] ", options: .backwards) else { continue }
            warnings[String(line[range.upperBound...].prefix(200)), default: 0] += 1
        }
        lines.append("--- nats-server warnings and errors:")
        lines += warnings.sorted { $0.value > $1.value }.prefix(10).map { "\($0.value)× \($0.key)" }
        return lines.joined(separator: "\n")
    }

    private func measurePartitioned(
        evaluators count: Int, on cluster: NATSCluster, partitioning: Partitioning, workload: BenchPipelineWorkload,
        directory: URL, regionsPath: String, rate: Double?
    ) async throws -> PartitionedFigures {
        func endpoint(_ node: Int) -> (host: String, port: Int) { ("127.0.0.1", cluster.nodes[node % 3].mqttPort) }
        let venue = BenchPipelineWorkload.venue
        let run = "p\(count)"
        let runDirectory = directory.appendingPathComponent(run)
        try FileManager.default.createDirectory(at: runDirectory, withIntermediateDirectories: true)
        let instances = (0..<count).map { "\(run)-" + String(format: "%02d", $0) }
        var processes: [EvaluatorProcess] = []
        defer { for process in processes { process.stop() } }
        let partitionSettings: JSONObject = [
            "partitions": [
                "count": .number(Double(partitioning.count)), "nats": .array(cluster.clientURLs.map(JSONValue.string)),
                "ttl": .number(leaseTtl),
            ]
        ]
        // Evaluators on the nodes in turn, as a deployment spreads its connections.
        for (index, instance) in instances.enumerated() {
            processes.append(
                try EvaluatorProcess.start(
                    directory: runDirectory, regionsPath: regionsPath, port: cluster.nodes[index % 3].mqttPort,
                    instance: instance, protocolVersion: .v311, venueSettings: partitionSettings))
            let watch = try await EvaluatorWatch.connect(
                endpoint: endpoint(index), instance: instance, protocolVersion: .v311)
            try await watch.waitOnline(processes.last!, timeout: .seconds(60))
            await watch.client.disconnect()
        }
        // Settled: the partitions held make a settled layout (each evaluator holds its share,
        // PartitionAssignment; which ones depends on the order they came in), and each
        // evaluator has taken over what it holds (retained states read, its stream followed).
        func logs() -> [LeaseLog] {
            processes.map { LeaseLog((try? String(contentsOfFile: $0.logPath, encoding: .utf8)) ?? "") }
        }
        func held() -> [String: Set<Int>] {
            Dictionary(uniqueKeysWithValues: zip(instances, logs().map { $0.changes.last?.held ?? [] }))
        }
        let settled = try await waitForCondition(timeout: .seconds(90), every: .milliseconds(100)) {
            for process in processes { try process.checkRunning() }
            let layout = held()
            return PartitionAssignment.isSettled(layout, count: partitioning.count)
                && zip(logs(), instances).allSatisfy { $0.serves(exactly: layout[$1] ?? []) }
        }
        guard settled else {
            let layout = held().sorted { $0.key < $1.key }.map { "\($0.key): \($0.value.sorted())" }
            throw ExitCode(1, "E=\(count): the evaluators did not settle within 90 s: \(layout)")
        }
        let changesAtStart = logs().map { $0.changes.count }
        let layout = held()
        // At rest: what each part costs with no traffic, once the start's own work (streams and
        // consumers made, Raft groups catching up) has quietened: right after the layout settled
        // the cluster used about twice as much as 2 s later.
        try await Task.sleep(for: .seconds(2))
        let restBefore = Self.cpu(processes, cluster)
        try await Task.sleep(for: .seconds(4))
        let restCPU = (Self.cpu(processes, cluster) - restBefore).rate

        var oracle = BenchPipelineOracle(
            settings: VenueSettings(
                id: venue, beaconExitTimeout: BenchPipelineCommand.beaconExitTimeout, privacy: .open),
            regionsGeoJSON: workload.regionsGeoJSON)
        let sink = try await EventSink.connect(
            endpoint: endpoint(1),
            filters: [
                "\(BenchPipelineWorkload.prefix)/\(venue)/enter/#", "\(BenchPipelineWorkload.prefix)/\(venue)/exit/#",
            ],
            name: "scale-\(run)", protocolVersion: .v311)
        let tally = Tally(sink: sink)
        var expected: [String: Int] = [:]
        var global = 0
        /// Rounds of every subject's reports, with the events they must produce (ids in order).
        func messages(rounds: Range<Int>) -> (messages: [(topic: String, payload: [UInt8])], ids: [String]) {
            let batch = workload.messages((rounds.lowerBound * subjects)..<(rounds.upperBound * subjects))
            let produced = oracle.expect(batch, first: global)
            global += batch.count
            for (id, index) in produced { expected[id] = index }
            return (batch, produced.sorted { $0.value < $1.value }.map(\.key))
        }

        // Warm-up: every subject known.
        let warm = messages(rounds: 0..<1)
        _ = try await BenchPipelineCommand.publishAll(
            warm.messages, endpoint: endpoint(0), qos: .atLeastOnce, clientID: "scale-warm-\(run)",
            protocolVersion: .v311)
        _ = try await tally.wait(for: warm.ids, expected: expected, evaluators: processes, phase: "E=\(count) warm-up")
        try await Task.sleep(for: .milliseconds(500))

        // Peak: as fast as one publisher goes.
        let peakBatch = messages(rounds: 1..<(1 + rounds))
        let peakBefore = Self.cpu(processes, cluster)
        let peak = try await BenchPipelineCommand.publishAll(
            peakBatch.messages, endpoint: endpoint(0), qos: .atLeastOnce, clientID: "scale-peak-\(run)",
            protocolVersion: .v311)
        let peakEnd = try await tally.wait(
            for: peakBatch.ids, expected: expected, evaluators: processes, phase: "E=\(count) peak")
        let peakCPU = Self.cpu(processes, cluster) - peakBefore
        let peakSeconds = BenchPipelineCommand.seconds(peakEnd - peak.started)
        var perPartition = [Int](repeating: 0, count: partitioning.count)
        for message in peakBatch.messages {
            // …/obs/{agent}/{kind}: the mapping hashes the agent level.
            let agent = message.topic.split(separator: "/").dropLast().last.map(String.init) ?? ""
            perPartition[partitioning.partition(of: agent)] += 1
        }
        let ownObservations = instances.map { (layout[$0] ?? []).reduce(0) { $0 + perPartition[$1] } }
        try await Task.sleep(for: .milliseconds(500))

        // Latency, paced: whole periods of --transition-every, so the phase ends on a transition.
        let latencyRate = rate ?? Double(peakBatch.messages.count) / peakSeconds / 2
        let periods = (latencyRate * latencySeconds / Double(subjects * transitionEvery)).rounded(.up)
        let latencyRounds = max(1, Int(periods)) * transitionEvery
        let firstLatency = global
        let latencyBatch = messages(rounds: (1 + rounds)..<(1 + rounds + latencyRounds))
        let pacedBefore = Self.cpu(processes, cluster)
        let paced = try await BenchPipelineCommand.publishPaced(
            latencyBatch.messages, rate: latencyRate, endpoint: endpoint(0), qos: .atLeastOnce,
            clientID: "scale-paced-\(run)", protocolVersion: .v311)
        _ = try await tally.wait(
            for: latencyBatch.ids, expected: expected, evaluators: processes, phase: "E=\(count) latency")
        let pacedCPU = Self.cpu(processes, cluster) - pacedBefore
        var latencies: [Double] = []
        for id in latencyBatch.ids {
            guard let index = expected[id], let arrived = tally.first[id] else { continue }
            latencies.append(BenchPipelineCommand.seconds(arrived - paced.sent[index - firstLatency]) * 1000)
        }
        latencies.sort()
        func percentile(_ p: Double) -> Double {
            latencies.isEmpty
                ? .nan : latencies[min(latencies.count - 1, Int((p / 100 * Double(latencies.count)).rounded(.up)) - 1)]
        }

        // Late duplicates and strays: a moment more for them, then count.
        try await Task.sleep(for: .milliseconds(500))
        tally.collect(expected: expected)
        let moves = zip(logs(), changesAtStart).reduce(0) { $0 + $1.0.changes.count - $1.1 }
        let rss = processes.map { Double($0.residentKB()) / 1024 }
        await sink.client.disconnect()
        for process in processes { _ = await process.stopGracefully() }
        return PartitionedFigures(
            evaluators: count, held: instances.map { (layout[$0] ?? []).sorted() },
            peakObservations: peakBatch.messages.count,
            peakEvents: peakBatch.ids.count, peakSeconds: peakSeconds, ownObservations: ownObservations,
            restCPU: restCPU, peakCPU: peakCPU, pacedObservations: latencyBatch.messages.count, pacedCPU: pacedCPU,
            latencyRate: latencyRate, p50: percentile(50), p99: percentile(99), expected: expected.count,
            duplicates: tally.duplicates, missing: expected.keys.count { tally.first[$0] == nil },
            unexpected: tally.unexpected.count, moves: moves, rssMB: rss)
    }
}
