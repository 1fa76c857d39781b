import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

/// `perimeter bench scale`: V venues × S subjects served by E evaluator processes (venues
/// split between them, one evaluator per venue) on one broker tier, on this machine; against
/// the same venues on one evaluator, in the same run. With `--partitions P`, one venue split
/// into P partitions on 1, 2, 4 … evaluators instead (`BenchScaleCommand+Partitions.swift`).
struct BenchScaleCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scale",
        abstract:
            "Events/s, per-evaluator load and p99 for V venues on E evaluators vs one, or one venue's partitions.",
        discussion: """
            The venues are copies of `bench pipeline`'s synthetic venue (--regions 20 m circles,
            every report crosses a boundary, so every observation makes one enter or exit; the
            expected events are computed with the pure evaluator). For E = 1 and then E =
            --evaluators, on a fresh private mosquitto each time (or --broker HOST:PORT, an
            existing tier such as a bridge or an MQTT cluster): warm-up (one report per
            subject), peak (--rounds reports per subject, venues interleaved, as fast as one
            publisher goes; events/s from the first publish to the last event, and per
            evaluator from its venues' events), latency (paced at --latency-rate observations/s,
            default half of the one-evaluator peak, for --latency-seconds; p50/p99 from each
            observation's send to its event's arrival; CPU-seconds per 1,000 observations at peak
            of each evaluator and of the private mosquitto, from /proc/{pid}/stat). Ratios
            compare E evaluators with one.
            --transition-every N makes a subject change sides only every N-th report (the
            reports between change nothing, as most fixes in a real venue): observations/s is
            then the figure to read. Run on a release build.

            One venue on several evaluators (--partitions P): the venue (--subjects, each its
            own agent) is split into P partitions by the NATS subject mapping (docs/scale.md,
            "One venue on several evaluators"), on a private three-node NATS cluster (nats-server
            with deploy/nats/node.conf, or --nats-config) started afresh for each count in
            --evaluator-counts (default 1,2,4). For each count: start that many `perimeter
            evaluator` processes (on the nodes in turn, partition leases with --lease-ttl), wait
            until every partition is leased to the evaluator the assignment wants and taken
            over, then 4 s at rest (CPU with no traffic), warm-up, peak and latency as above.
            Every event is checked against the pure evaluator, deduplicated by id (a handover
            may send one twice): missing or unexpected events fail the run. Reported per count: observations/s and events/s at
            peak, p50/p99 at the paced rate (the same for every count), and CPU-seconds per
            1,000 observations, read from /proc/{pid}/stat around the peak and the paced phase,
            of each evaluator, of the three nats-server processes together (the cluster's own
            cost) and of the bench's publisher and subscriber; then ratios to the first count.
            --venues, --evaluators, --broker and --protocol do not apply.
            """)

    @Option(help: "Venues.", valueName: "n")
    var venues: Int = 8

    @Option(help: "Subjects per venue.", valueName: "n")
    var subjects: Int = 500

    @Option(help: "Evaluator processes for the sharded run.", valueName: "n")
    var evaluators: Int = 2

    @Option(help: "Reports per subject in the peak phase.", valueName: "n")
    var rounds: Int = 10

    @Option(help: "Circle regions per venue.", valueName: "n")
    var regions: Int = 50

    @Option(help: "Observations/s in the latency phase (default: half of the one-evaluator peak).", valueName: "r")
    var latencyRate: Double?

    @Option(help: "Seconds of paced load for the latency figures.", valueName: "s")
    var latencySeconds: Double = 8

    @Option(
        help: "Reports per change of side (1: every report is a transition; --rounds must be a multiple).",
        valueName: "n")
    var transitionEvery: Int = 1

    @Option(help: "An existing broker tier instead of a private mosquitto.", valueName: "host:port")
    var broker: String?

    @Option(help: "MQTT protocol: 5 (default) or 3.1.1 (a NATS cluster's MQTT).", valueName: "version")
    var `protocol`: String = "5"

    @Option(
        help: "One venue split into P partitions on a private NATS cluster, on each of --evaluator-counts.",
        valueName: "P")
    var partitions: Int?

    @Option(help: "With --partitions: the evaluator counts to run, comma-separated.", valueName: "list")
    var evaluatorCounts: String = "1,2,4"

    @Option(
        help:
            "With --partitions: the NATS node configuration (default: deploy/nats/node.conf here or above the executable).",
        valueName: "file")
    var natsConfig: String?

    @Option(help: "With --partitions: the partition leases' TTL in seconds (margin 1 s).", valueName: "s")
    var leaseTtl: Double = 6

    var protocolVersion: MQTTConfiguration.ProtocolVersion { `protocol` == "3.1.1" ? .v311 : .v5 }

    mutating func validate() throws {
        if let partitions {
            try validatePartitioned(partitions)
            return
        }
        for (slot, name) in [
            (_evaluatorCounts.slot, "--evaluator-counts"), (_natsConfig.slot, "--nats-config"),
            (_leaseTtl.slot, "--lease-ttl"),
        ] where slot.wasSet {
            throw ValidationError("\(name) applies only with --partitions")
        }
        guard (1...10_000).contains(venues) else { throw ValidationError("--venues must be 1…10,000") }
        guard (1...1_000_000).contains(subjects) else { throw ValidationError("--subjects must be 1…1,000,000") }
        guard (1...64).contains(evaluators), evaluators <= venues else {
            throw ValidationError("--evaluators must be 1…64 and at most --venues")
        }
        guard rounds >= 1 else { throw ValidationError("--rounds must be positive") }
        guard transitionEvery >= 1, rounds % transitionEvery == 0 else {
            throw ValidationError(
                "--transition-every must be positive and divide --rounds (the peak must end on a transition)")
        }
        if let latencyRate, latencyRate <= 0 { throw ValidationError("--latency-rate must be positive") }
        guard ["5", "3.1.1"].contains(`protocol`) else { throw ValidationError("--protocol must be 5 or 3.1.1") }
        if let broker, broker.split(separator: ":").count != 2 || Int(broker.split(separator: ":")[1]) == nil {
            throw ValidationError("--broker must be host:port")
        }
    }

    private func validatePartitioned(_ partitions: Int) throws {
        guard (1...Partitioning.maxCount).contains(partitions) else {
            throw ValidationError("--partitions must be 1…\(Partitioning.maxCount)")
        }
        for (slot, name) in [
            (_venues.slot, "--venues"), (_evaluators.slot, "--evaluators"), (_broker.slot, "--broker"),
            (_protocol.slot, "--protocol"),
        ] where slot.wasSet {
            throw ValidationError(
                "\(name) does not apply with --partitions (one venue on a private NATS cluster, MQTT 3.1.1)")
        }
        guard let counts = parsedEvaluatorCounts, counts.allSatisfy({ (1...64).contains($0) && $0 <= partitions })
        else {
            throw ValidationError(
                "--evaluator-counts must be comma-separated counts, each 1…64 and at most --partitions (\(partitions))")
        }
        guard (1...1_000_000).contains(subjects) else { throw ValidationError("--subjects must be 1…1,000,000") }
        guard rounds >= 1 else { throw ValidationError("--rounds must be positive") }
        guard transitionEvery >= 1, rounds % transitionEvery == 0 else {
            throw ValidationError(
                "--transition-every must be positive and divide --rounds (the peak must end on a transition)")
        }
        if let latencyRate, latencyRate <= 0 { throw ValidationError("--latency-rate must be positive") }
        guard (2...300).contains(leaseTtl) else { throw ValidationError("--lease-ttl must be 2…300 s") }
    }

    struct Figures {
        var evaluators: Int
        var peakEventRate: Double
        var peakObservationRate: Double
        var perEvaluator: [Double]
        var rssMB: [Double]
        var p50: Double
        var p99: Double
        var latencyRate: Double
        var missing: Int
        /// CPU-seconds per 1,000 observations at peak of each evaluator, and of the private
        /// mosquitto (nil on --broker: its processes are not ours to read).
        var evaluatorCost: [Double]
        var brokerCost: Double?
    }

    func run() async throws {
        if let partitions { return try await runPartitioned(partitions) }
        #if DEBUG
            Output.error("warning: this is a debug build; build with 'swift build -c release' for real figures")
        #endif
        let (directory, workload, regionsPath) = try prepareVenue()
        defer { try? FileManager.default.removeItem(at: directory) }
        print(
            "perimeter bench scale: MQTT \(`protocol`), \(venues) venues × \(subjects) subjects (\(venues * subjects) subjects), \(regions) circles + 10 beacon regions per venue, \(rounds) reports per subject at peak, \(transitionEvery == 1 ? "every report a transition" : "a transition every \(transitionEvery) reports"), broker \(broker ?? "private mosquitto per run"), \(ProcessInfo.processInfo.activeProcessorCount) cores"
        )
        let one = try await measure(evaluators: 1, workload: workload, regionsPath: regionsPath, rate: latencyRate)
        report(one)
        let many = try await measure(
            evaluators: evaluators, workload: workload, regionsPath: regionsPath, rate: one.latencyRate)
        report(many)
        print(
            "ratio \(evaluators) evaluators / 1: events/s \(String(format: "%.2f", many.peakEventRate / one.peakEventRate))×, observations/s \(String(format: "%.2f", many.peakObservationRate / one.peakObservationRate))×, p99 at \(BenchPipelineCommand.rate(one.latencyRate)) obs/s \(String(format: "%.2f", many.p99 / one.p99))×"
        )
        if one.missing + many.missing > 0 { throw ExitCode(1, "events missing (see above)") }
    }

    private func report(_ figures: Figures) {
        let loads = figures.perEvaluator.map { BenchPipelineCommand.rate($0) }.joined(separator: " / ")
        let rss = figures.rssMB.map { String(format: "%.0f", $0) }.joined(separator: " / ")
        let cost = figures.evaluatorCost.map { String(format: "%.3f", $0) }.joined(separator: " + ")
        let broker = figures.brokerCost.map { String(format: ", mosquitto %.3f", $0) } ?? ""
        print(
            "E=\(figures.evaluators): peak \(BenchPipelineCommand.rate(figures.peakEventRate)) events/s from \(BenchPipelineCommand.rate(figures.peakObservationRate)) observations/s (events per evaluator \(loads)); latency at \(BenchPipelineCommand.rate(figures.latencyRate)) obs/s p50 \(BenchPipelineCommand.format(figures.p50)) ms, p99 \(BenchPipelineCommand.format(figures.p99)) ms; RSS \(rss) MB; missing events \(figures.missing); CPU-seconds per 1,000 observations at peak: evaluators \(cost)\(broker)"
        )
    }

    /// The venue's name for venue `index`: as long as the workload's, so topics keep their size.
    /// A temporary directory holding the synthetic venue's regions file, and the workload
    /// (both modes' venues are copies of it).
    func prepareVenue() throws -> (directory: URL, workload: BenchPipelineWorkload, regionsPath: String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "perimeter-bench-scale-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let workload = BenchPipelineWorkload(
            subjects: subjects, circles: regions, beaconRegions: 10, blePercent: 20, interval: 2,
            origin: Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)),
            transitionEvery: transitionEvery)
        let regionsPath = directory.appendingPathComponent("regions.geojson").path
        try workload.regionsGeoJSON.write(toFile: regionsPath, atomically: true, encoding: .utf8)
        return (directory, workload, regionsPath)
    }

    static func venueName(_ index: Int) -> String { String(format: "v%04d", index) }

    private func measure(
        evaluators count: Int, workload: BenchPipelineWorkload, regionsPath: String, rate: Double?
    ) async throws -> Figures {
        var privateBroker: MosquittoBroker?
        var endpoint: (host: String, port: Int)
        if let broker {
            let parts = broker.split(separator: ":")
            endpoint = (String(parts[0]), Int(parts[1])!)
        } else {
            privateBroker = try await MosquittoBroker.start()
            endpoint = ("127.0.0.1", privateBroker!.port)
        }
        defer { privateBroker?.kill() }
        let run = "e\(count)-\(UUID().uuidString.prefix(4))"
        let names = (0..<venues).map(Self.venueName)
        var shards: [[String]] = Array(repeating: [], count: count)
        for (index, name) in names.enumerated() { shards[index % count].append(name) }
        let runDirectory = URL(fileURLWithPath: regionsPath).deletingLastPathComponent().appendingPathComponent(run)
        try FileManager.default.createDirectory(at: runDirectory, withIntermediateDirectories: true)
        var processes: [EvaluatorProcess] = []
        defer { for process in processes { process.stop() } }
        for (index, shard) in shards.enumerated() {
            let instance = "\(run)-\(index)"
            processes.append(
                try EvaluatorProcess.start(
                    directory: runDirectory, regionsPath: regionsPath, port: endpoint.port, instance: instance,
                    venues: shard, protocolVersion: protocolVersion))
            let watch = try await EvaluatorWatch.connect(
                endpoint: endpoint, instance: instance, protocolVersion: protocolVersion)
            try await watch.waitOnline(processes.last!, timeout: .seconds(30))
            await watch.client.disconnect()
        }
        var oracles = names.map {
            BenchPipelineOracle(
                settings: VenueSettings(
                    id: $0, beaconExitTimeout: BenchPipelineCommand.beaconExitTimeout, privacy: .open),
                regionsGeoJSON: workload.regionsGeoJSON)
        }
        let sink = try await EventSink.connect(
            endpoint: endpoint,
            filters: ["\(BenchPipelineWorkload.prefix)/+/enter/#", "\(BenchPipelineWorkload.prefix)/+/exit/#"],
            name: "scale-\(run)", protocolVersion: protocolVersion)
        var expected: [String: Int] = [:]
        var sent: [Int: ContinuousClock.Instant] = [:]
        var global = 0
        /// Report `round` of every subject of every venue, venues interleaved, with each
        /// observation's global index; expected events recorded.
        func messages(rounds: Range<Int>) -> [(topic: String, payload: [UInt8])] {
            var out: [(topic: String, payload: [UInt8])] = []
            let from = "\(BenchPipelineWorkload.prefix)/\(BenchPipelineWorkload.venue)/"
            for round in rounds {
                for subject in 0..<subjects {
                    let message = workload.message(round * subjects + subject)
                    for (venue, name) in names.enumerated() {
                        for (id, _) in oracles[venue].expect([message], first: global) { expected[id] = global }
                        out.append(
                            (
                                "\(BenchPipelineWorkload.prefix)/\(name)/" + message.topic.dropFirst(from.count),
                                message.payload
                            ))
                        global += 1
                    }
                }
            }
            return out
        }
        // Warm-up.
        let warm = messages(rounds: 0..<1)
        let warmStart = try await BenchPipelineCommand.publishAll(
            warm, endpoint: endpoint, qos: .atLeastOnce, clientID: "scale-warm-\(run)", protocolVersion: protocolVersion
        )
        _ = try await sink.wait(
            for: expected.count, since: warmStart.started, evaluator: nil, stall: 30, phase: "warm-up")
        try await Task.sleep(for: .milliseconds(500))
        // Peak.
        let before = sink.count
        let peakMessages = messages(rounds: 1..<(1 + rounds))
        func cpu() -> (evaluators: [Double], broker: Double?) {
            (processes.map { CPUMeter.seconds($0.process.pid) }, privateBroker?.pid.map { CPUMeter.seconds($0) })
        }
        let cpuBefore = cpu()
        let peak = try await BenchPipelineCommand.publishAll(
            peakMessages, endpoint: endpoint, qos: .atLeastOnce, clientID: "scale-peak-\(run)",
            protocolVersion: protocolVersion)
        let peakEnd = try await sink.wait(
            for: expected.count, since: peak.started, evaluator: nil, stall: 30, phase: "peak")
        let cpuAfter = cpu()
        let perThousand = 1000 / Double(peakMessages.count)
        let evaluatorCost = zip(cpuAfter.evaluators, cpuBefore.evaluators).map { ($0 - $1) * perThousand }
        let brokerCost = cpuAfter.broker.flatMap { after in cpuBefore.broker.map { (after - $0) * perThousand } }
        let peakSeconds = BenchPipelineCommand.seconds(peakEnd - peak.started)
        let peakEvents = sink.count - before
        let peakArrivals = sink.arrivals()[before...]
        var perVenue: [String: Int] = [:]
        for arrival in peakArrivals {
            if let venue = (try? JSONParser.parse(arrival.payload))?["venue"]?.stringValue {
                perVenue[venue, default: 0] += 1
            }
        }
        let perEvaluator = shards.map { shard in Double(shard.reduce(0) { $0 + (perVenue[$1] ?? 0) }) / peakSeconds }
        // Latency, paced.
        let latencyRate = rate ?? Double(peakMessages.count) / peakSeconds / 2
        // Whole periods of --transition-every, so that the phase ends on a transition.
        let periods = (latencyRate * latencySeconds / Double(venues * subjects * transitionEvery)).rounded(.up)
        let latencyRounds = max(1, Int(periods)) * transitionEvery
        let firstLatency = global
        let latencyMessages = messages(rounds: (1 + rounds)..<(1 + rounds + latencyRounds))
        let latencyBefore = sink.count
        let paced = try await BenchPipelineCommand.publishPaced(
            latencyMessages, rate: latencyRate, endpoint: endpoint, qos: .atLeastOnce, clientID: "scale-paced-\(run)",
            protocolVersion: protocolVersion)
        for (offset, time) in paced.sent.enumerated() { sent[firstLatency + offset] = time }
        _ = try await sink.wait(for: expected.count, since: paced.started, evaluator: nil, stall: 30, phase: "latency")
        var latencies: [Double] = []
        for arrival in sink.arrivals()[latencyBefore...] {
            guard let id = BenchPipelineCommand.eventID(arrival.payload), let index = expected[id],
                let time = sent[index]
            else { continue }
            latencies.append(BenchPipelineCommand.seconds(arrival.at - time) * 1000)
        }
        latencies.sort()
        func percentile(_ p: Double) -> Double {
            latencies.isEmpty
                ? .nan : latencies[min(latencies.count - 1, Int((p / 100 * Double(latencies.count)).rounded(.up)) - 1)]
        }
        let seen = Set(sink.arrivals().compactMap { BenchPipelineCommand.eventID($0.payload) })
        let missing = expected.keys.count { !seen.contains($0) }
        let rss = processes.map { Double($0.residentKB()) / 1024 }
        await sink.client.disconnect()
        for process in processes { _ = await process.stopGracefully() }
        return Figures(
            evaluators: count, peakEventRate: Double(peakEvents) / peakSeconds,
            peakObservationRate: Double(peakMessages.count) / peakSeconds, perEvaluator: perEvaluator, rssMB: rss,
            p50: percentile(50), p99: percentile(99), latencyRate: latencyRate, missing: missing,
            evaluatorCost: evaluatorCost, brokerCost: brokerCost)
    }
}
