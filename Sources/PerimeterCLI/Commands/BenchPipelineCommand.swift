import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import Synchronization

/// `perimeter bench pipeline`: observations through Mosquitto and a real `perimeter evaluator`
/// process to enter/exit events, next to Mosquitto's raw relay of the same messages, in one run.
struct BenchPipelineCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipeline",
        abstract: "End-to-end events/s, latency and overload vs Mosquitto's raw relay and a null evaluator.",
        discussion: """
            Starts a private mosquitto and a 'perimeter evaluator' process (its journal in a
            temporary directory) on a synthetic venue: --regions 20 m circles and
            --beacon-regions iBeacon regions. --subjects subjects report every --interval
            seconds of event time; --ble-percent of them are phones scanning beacons, the rest
            GPS trackers. Every report crosses a boundary, so every observation makes one
            enter or exit (the expected events are computed with the pure evaluator on the
            same messages, and checked one by one against what arrives).

            Phases, in order:
              relay      the peak messages (same topics' sizes, same QoS) through mosquitto to
                         one plain subscriber: msg/s.
              null       (skip with --no-null) a 'perimeter bench null-evaluator' child process
                         subscribed like the evaluator that, for each observation, publishes the
                         messages the pure evaluator says the evaluator publishes for it (same
                         topics, sizes, QoS, retain flags, MQTT 5 properties) and does nothing
                         else: the broker's ceiling for this traffic, observations/s from the
                         first publish to the last enter/exit. Its transitions are counted.
              null-3     the same with exactly three QoS-1 messages per observation (the
                         transition and two retained: state and occupancy).
              warm-up    one report per subject; the evaluator's RSS before and after gives the
                         memory per subject.
              peak       --observations as fast as the publisher goes, until the last expected
                         event arrives.
              latency    paced at half the peak observation rate for --latency-seconds; each
                         event's arrival minus the send time of the observation that caused it.
              null pace  (not with --no-null) the latency phase's observations at the same pace
                         through a null evaluator: the floor the broker and this harness set
                         under that latency (each null event carries its observation's number).
              overload   (skip with --no-overload) paced at 2× and then 4× the peak observation
                         rate for --overload-seconds each, on as many connections as it takes:
                         offered and processed observations/s, the longest wait for an event,
                         the evaluator's stats (lagSeconds, queueDepth), its RSS and the CPU the
                         evaluator, mosquitto and the publishers used; after each level it waits
                         up to --overload-catch-up seconds for every event.
              null overload  (not with --no-null) each overload level's observations offered to a
                         fresh null evaluator at the level's factor times its own peak rate, on as
                         many connections: what a client that reads all it is sent (no intake
                         limit) and only publishes delivers meanwhile. Not a ceiling: its
                         acknowledgements most likely queue behind the flood on its one connection, the
                         collapse the evaluator's intake gate is there to prevent.
            Every event of warm-up, peak, latency and overload is checked one by one against
            the pure evaluator: none missing, none twice, none unexpected.

            Targets (the figures of DESIGN.md §9): peak observations/s ≥ 0.8 × the relay rate
            and ≥ 1.0 × the null-3 rate; p99 < 5 ms at half of peak; with --transition-every 10
            (realistic traffic, most observations change nothing) peak ≥ 0.8 × the relay rate.
            Run on a release build.
            """)

    @Option(help: "Tracked subjects.", valueName: "n")
    var subjects: Int = 2_000

    @Option(help: "Observations in the peak phase (and the relay baseline).", valueName: "n")
    var observations: Int = 100_000

    @Option(help: "Seconds of paced load at half of peak for the latency figures.", valueName: "s")
    var latencySeconds: Double = 10

    @Option(help: "QoS of the observations (and the relay baseline): 0 or 1.", valueName: "qos")
    var qos: Int = 1

    @Option(help: "Circle regions (20 m) the GPS subjects walk across.", valueName: "n")
    var regions: Int = 100

    @Option(help: "iBeacon regions the BLE subjects hear.", valueName: "n")
    var beaconRegions: Int = 10

    @Option(help: "Share of subjects that report BLE scans instead of GPS fixes, in %.", valueName: "pct")
    var blePercent: Int = 20

    @Option(help: "Event-time seconds between two reports of one subject.", valueName: "s")
    var interval: Double = 2

    @Option(
        help:
            "A subject changes sides only every N-th report, the reports between repeating its side with a little variation (most observations change nothing, as in a real venue); --observations a multiple of --subjects × N.",
        valueName: "N")
    var transitionEvery: Int = 1

    @Option(help: "Give up when no expected event arrives for this long.", valueName: "s")
    var stallSeconds: Double = 30

    @Flag(help: "Skip the null evaluator phases (null and null-3).")
    var noNull: Bool

    @Flag(help: "Skip the overload phase.")
    var noOverload: Bool

    @Option(help: "Seconds of offered load at each overload level (2× and 4× the peak rate).", valueName: "s")
    var overloadSeconds: Double = 10

    @Option(
        help: "Seconds after an overload level's offer ends within which every event must have arrived.",
        valueName: "s")
    var overloadCatchUp: Double = 120

    @Option(
        help: "Publishing connections in the overload phase (0: as many as the rate needs, up to 4).",
        valueName: "n")
    var overloadPublishers: Int = 0

    @Flag(help: "Keep the temporary directory (config, journal, logs) and print its path.")
    var keep: Bool

    @Option(
        help: "Write the latency phase's events as CSV (sent seconds since the phase began, latency ms).",
        valueName: "file")
    var latencyTrace: String?

    mutating func validate() throws {
        guard (1...10_000_000).contains(subjects) else { throw ValidationError("--subjects must be 1…10,000,000") }
        guard (1...10_000_000).contains(observations) else {
            throw ValidationError("--observations must be 1…10,000,000")
        }
        guard latencySeconds > 0, latencySeconds <= 3600 else {
            throw ValidationError("--latency-seconds must be in (0, 3600]")
        }
        guard (0...1).contains(qos) else { throw ValidationError("--qos must be 0 or 1") }
        guard (1...100_000).contains(regions) else { throw ValidationError("--regions must be 1…100,000") }
        guard (1...65_535).contains(beaconRegions) else { throw ValidationError("--beacon-regions must be 1…65,535") }
        guard (0...100).contains(blePercent) else { throw ValidationError("--ble-percent must be 0…100") }
        // Beacon exits need the 1 s exit timeout to run out between two scans; staleness
        // (300 s) must never set in between two reports.
        guard interval > 1, interval < 300 else { throw ValidationError("--interval must be in (1, 300) seconds") }
        guard (1...1_000).contains(transitionEvery) else {
            throw ValidationError("--transition-every must be 1…1,000")
        }
        // The peak's rounds are 1 … observations/subjects; the last subject changes sides in the
        // rounds that are multiples of N, so the peak's last observation is a transition and
        // "until the last expected event" times all of it.
        guard transitionEvery == 1 || observations % (subjects * transitionEvery) == 0 else {
            throw ValidationError(
                "--observations (\(observations)) must be a multiple of --subjects × --transition-every (\(subjects * transitionEvery)), so that the peak ends on a transition"
            )
        }
        guard stallSeconds > 0 else { throw ValidationError("--stall-seconds must be positive") }
        guard overloadSeconds > 0, overloadSeconds <= 3600 else {
            throw ValidationError("--overload-seconds must be in (0, 3600]")
        }
        guard overloadCatchUp > 0 else { throw ValidationError("--overload-catch-up must be positive") }
        guard (0...64).contains(overloadPublishers) else {
            throw ValidationError("--overload-publishers must be 0…64")
        }
    }

    static let beaconExitTimeout = 1.0

    func run() async throws {
        #if DEBUG
            Output.error("warning: this is a debug build; build with 'swift build -c release' for real figures")
        #endif
        let qosLevel = QoS(rawValue: Int32(qos))!
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "perimeter-bench-pipeline-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer {
            if keep {
                Output.error("kept \(directory.path)")
            } else {
                try? FileManager.default.removeItem(at: directory)
            }
        }
        let workload = BenchPipelineWorkload(
            subjects: subjects, circles: regions, beaconRegions: beaconRegions, blePercent: blePercent,
            interval: interval, origin: Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)),
            transitionEvery: transitionEvery)
        let regionsPath = directory.appendingPathComponent("regions.geojson").path
        try workload.regionsGeoJSON.write(toFile: regionsPath, atomically: true, encoding: .utf8)
        var oracle = BenchPipelineOracle(
            settings: VenueSettings(
                id: BenchPipelineWorkload.venue, beaconExitTimeout: Self.beaconExitTimeout, privacy: .open),
            regionsGeoJSON: workload.regionsGeoJSON)

        // MosquittoBroker's generated configuration already lifts max_queued_messages (to
        // 1,000,000) and max_inflight_messages (to unlimited): nothing is dropped (DESIGN.md §11).
        let broker = try await MosquittoBroker.start()
        defer { broker.kill() }
        let endpoint = (host: "127.0.0.1", port: broker.port)
        print(
            "perimeter bench pipeline: \(subjects) subjects (\(workload.bleSubjects) BLE), \(regions) circles + \(beaconRegions) beacon regions, \(observations) observations at QoS \(qos), report interval \(Self.format(interval)) s, \(transitionEvery == 1 ? "every report a transition" : "a transition every \(transitionEvery) reports"), broker 127.0.0.1:\(broker.port)"
        )

        let evaluator = try EvaluatorProcess.start(directory: directory, regionsPath: regionsPath, port: broker.port)
        defer { evaluator.stop() }
        let watch = try await EvaluatorWatch.connect(endpoint: endpoint)
        try await watch.waitOnline(evaluator, timeout: .seconds(30))

        // The expected events of warm-up and peak, and what the evaluator publishes for each
        // of those observations (the null evaluators' plan), from the pure evaluator.
        let peakRange = subjects..<(subjects + observations)
        let warmMessages = workload.messages(0..<subjects)
        let peakMessages = workload.messages(peakRange)
        var plan = NullEvaluatorPlan()
        let warmExpected =
            noNull
            ? oracle.expect(warmMessages, first: 0) : oracle.expect(warmMessages, first: 0, recording: &plan)
        let peakExpected =
            noNull
            ? oracle.expect(peakMessages, first: peakRange.lowerBound)
            : oracle.expect(peakMessages, first: peakRange.lowerBound, recording: &plan)

        // Relay baseline: the peak phase's messages, on topics of the same length, one subscriber.
        let relay = try await Self.measureRelay(peakMessages, endpoint: endpoint, qos: qosLevel)
        print(
            "relay baseline (our client → mosquitto → one subscriber): \(observations) messages in \(Self.format(relay.seconds)) s = \(Self.rate(relay.rate)) msg/s"
        )

        // Null evaluators: the broker's ceiling for the evaluator's traffic, and for three messages.
        var null: NullFigures?
        var nullThree: NullFigures?
        if !noNull {
            print(
                "null evaluator plan (the pure evaluator's messages for the peak): \(plan.summary(of: peakRange))")
            let full = try await Self.measureNull(
                plan.moved(to: Self.nullVenue), warm: warmMessages, peak: peakMessages, directory: directory,
                endpoint: endpoint, qos: qosLevel, stall: stallSeconds)
            print(
                "null evaluator (the evaluator's messages, nothing else): \(observations) observations in \(Self.format(full.seconds)) s = \(Self.rate(full.rate)) observations/s, \(full.events) transitions counted; \(full.process)"
            )
            let three = try await Self.measureNull(
                plan.threeMessages().moved(to: Self.nullThreeVenue), warm: warmMessages, peak: peakMessages,
                directory: directory, endpoint: endpoint, qos: qosLevel, stall: stallSeconds)
            print(
                "null-3 (three QoS-1 messages per observation): \(observations) observations in \(Self.format(three.seconds)) s = \(Self.rate(three.rate)) observations/s, \(three.events) transitions counted; \(three.process)"
            )
            (null, nullThree) = (full, three)
        }

        // Events arrive on one subscriber that timestamps them on the network thread.
        let events = try await EventSink.connect(endpoint: endpoint)
        var expected: [String: Int] = [:]
        var sendTimes: [Int: ContinuousClock.Instant] = [:]

        // Warm-up: one report per subject; RSS before and after.
        try await Task.sleep(for: .milliseconds(500))
        let rssIdle = evaluator.residentKB()
        expected.merge(warmExpected) { $1 }
        let warm = try await Self.publishAll(
            warmMessages, endpoint: endpoint, qos: qosLevel, clientID: "bench-warm-\(getpid())")
        _ = try await events.wait(
            for: expected.count, since: warm.started, evaluator: evaluator, stall: stallSeconds, phase: "warm-up")
        try await Task.sleep(for: .milliseconds(1500))
        let rssWarm = evaluator.residentKB()
        print(
            "warm-up: \(subjects) subjects known, \(warmExpected.count) events; evaluator RSS \(Self.megabytes(rssIdle)) → \(Self.megabytes(rssWarm)) MB"
        )

        // Peak.
        expected.merge(peakExpected) { $1 }
        let before = events.count
        let cpuBeforePeak = evaluator.cpuSeconds()
        let peak = try await Self.publishAll(
            peakMessages, endpoint: endpoint, qos: qosLevel, clientID: "bench-peak-\(getpid())")
        let peakEnd = try await events.wait(
            for: expected.count, since: peak.started, evaluator: evaluator, stall: stallSeconds, phase: "peak")
        let peakSeconds = Self.seconds(peakEnd - peak.started)
        let peakObservationRate = Double(observations) / peakSeconds
        let peakEventRate = Double(events.count - before) / peakSeconds
        let publishRate = Double(observations) / Self.seconds(peak.finished - peak.started)
        let rssPeak = evaluator.residentKB()
        // What the machine's load moves much less than a rate: the evaluator's CPU per observation.
        let peakCPU = evaluator.cpuSeconds() - cpuBeforePeak
        print(
            "peak: \(observations) observations published in \(Self.format(Self.seconds(peak.finished - peak.started))) s (\(Self.rate(publishRate)) msg/s), last of \(peakExpected.count) events after \(Self.format(peakSeconds)) s"
        )

        // Latency at half of peak, paced.
        let halfRate = peakObservationRate / 2
        let latencyCount = max(1, Int(halfRate * latencySeconds))
        let latencyRange = peakRange.upperBound..<(peakRange.upperBound + latencyCount)
        let latencyMessages = workload.messages(latencyRange)
        var latencyPlan = NullEvaluatorPlan()
        let latencyExpected =
            noNull
            ? oracle.expect(latencyMessages, first: latencyRange.lowerBound)
            : oracle.expect(latencyMessages, first: latencyRange.lowerBound, recording: &latencyPlan)
        expected.merge(latencyExpected) { $1 }
        let latencyFirstEvent = events.count
        let paced = try await Self.publishPaced(
            latencyMessages, rate: halfRate, endpoint: endpoint, qos: qosLevel, clientID: "bench-paced-\(getpid())")
        for (offset, time) in paced.sent.enumerated() { sendTimes[latencyRange.lowerBound + offset] = time }
        _ = try await events.wait(
            for: expected.count, since: paced.started, evaluator: evaluator, stall: stallSeconds, phase: "latency")
        let pacedRate = Double(latencyCount) / Self.seconds(paced.finished - paced.started)
        try await Task.sleep(for: .milliseconds(1500))
        let rssEnd = evaluator.residentKB()
        // VmHWM is updated lazily by the kernel; never show it below a sample taken earlier.
        let rssHighWater = max(evaluator.residentKB(peak: true), rssIdle, rssWarm, rssPeak, rssEnd)
        // The floor under that latency: the same observations at the same pace through a null
        // evaluator (the evaluator idle meanwhile).
        let nullLatencies =
            noNull
            ? nil
            : try await Self.measureNullLatency(
                latencyPlan.moved(to: Self.nullPacedVenue), messages: latencyMessages, rate: halfRate,
                directory: directory, endpoint: endpoint, qos: qosLevel, stall: stallSeconds)

        // Overload: 2× and 4× the peak rate, each until every event is in (bounded).
        var overloads: [OverloadFigures] = []
        var overloadObservations = 0
        if !noOverload {
            let context = OverloadContext(
                workload: workload, endpoint: endpoint, qos: qosLevel, events: events, evaluator: evaluator,
                watch: watch, seconds: overloadSeconds, catchUp: overloadCatchUp, stall: stallSeconds,
                brokerPID: broker.pid)
            for factor in Self.overloadFactors {
                let asked = factor * peakObservationRate
                let publishers =
                    overloadPublishers > 0
                    ? overloadPublishers : Self.publishers(for: asked, onePublisher: publishRate)
                let figures = try await Self.overload(
                    factor: factor, peakRate: peakObservationRate, publishers: publishers,
                    first: latencyRange.upperBound + overloadObservations, context: context, oracle: &oracle,
                    expected: &expected, sendTimes: &sendTimes, recordingNull: !noNull)
                overloadObservations += figures.observations
                overloads.append(figures)
                print("overload \(Self.rate(factor))×: \(figures.summary)")
                if figures.caughtUpAfter == nil {
                    print(
                        "overload: the evaluator had not caught up \(Self.format(overloadCatchUp)) s after the offer ended; no higher level"
                    )
                    break
                }
            }
        }
        // The same levels offered to a null evaluator, against its own peak: what a client with
        // no intake limit delivers under the same flood (a comparison, not a ceiling).
        var nullOverloads: [Double: NullOverloadFigures] = [:]
        if let null, !noNull {
            for index in overloads.indices {
                let figures = overloads[index]
                // The level's messages are not needed past this (370,000 of them at 4× by default).
                overloads[index].messages = []
                guard let levelPlan = figures.nullPlan else { continue }
                let measured = try await Self.measureNullOverload(
                    levelPlan.moved(to: Self.nullOverloadVenue(figures.factor)), messages: figures.messages,
                    first: figures.first, subjects: subjects, factor: figures.factor, peakRate: null.rate,
                    publishers: figures.publishers, directory: directory, endpoint: endpoint, qos: qosLevel,
                    stall: stallSeconds)
                nullOverloads[figures.factor] = measured
                print(
                    "null evaluator under overload \(Self.rate(figures.factor))×: offered \(Self.rate(measured.offered)) obs/s on \(figures.publishers) connection\(figures.publishers == 1 ? "" : "s"), delivered \(Self.rate(measured.delivered)) obs/s while offered = \(String(format: "%.2f", measured.ofPeak)) × its peak (no intake limit: a naive client, not a ceiling)"
                )
            }
        }
        let stats = watch.latestStats
        await watch.client.disconnect()

        // Every event checked against the expected ones.
        let arrivals = events.arrivals()
        var seen: [String: Int] = [:]
        var unexpected = 0
        var latencies: [Double] = []
        var csv = "sent_s,latency_ms\n"
        for arrival in arrivals[latencyFirstEvent...] {
            guard let id = Self.eventID(arrival.payload), let index = expected[id], latencyRange.contains(index),
                let sent = sendTimes[index]
            else {
                continue
            }
            latencies.append(Self.seconds(arrival.at - sent) * 1000)
            if latencyTrace != nil {
                csv += String(format: "%.6f,%.3f\n", Self.seconds(sent - paced.started), latencies.last!)
            }
        }
        if let latencyTrace { try csv.write(toFile: latencyTrace, atomically: true, encoding: .utf8) }
        for arrival in arrivals {
            guard let id = Self.eventID(arrival.payload), expected[id] != nil else {
                unexpected += 1
                continue
            }
            seen[id, default: 0] += 1
        }
        let missing = expected.keys.count { seen[$0] == nil }
        let duplicates = seen.values.reduce(0) { $0 + max(0, $1 - 1) }

        await events.client.disconnect()
        let stopped = await evaluator.stopGracefully()
        let journal = evaluator.journalBytes()

        latencies.sort()
        func percentile(_ p: Double) -> Double { Self.percentile(p, of: latencies) }
        let ratio = peakObservationRate / relay.rate
        let p99 = percentile(99)
        let perSubject = Double(rssWarm - rssIdle) * 1024 / Double(subjects)
        let totalObservations = subjects + observations + latencyCount + overloadObservations
        var lines = [
            "",
            "results",
            "  peak:     \(Self.rate(peakObservationRate)) observations/s, \(Self.rate(peakEventRate)) events/s (enter/exit, publish to last event)",
            "  relay:    \(Self.rate(relay.rate)) msg/s, same messages and QoS, plain subscriber",
            "  ratio:    \(String(format: "%.2f", ratio)) × relay (target ≥ 0.80: \(ratio >= 0.8 ? "met" : "NOT met"))",
            "  cpu:      evaluator \(Self.format(peakCPU)) CPU-s in the peak (\(Self.format(peakCPU / peakSeconds)) cores), \(Self.format(peakCPU / Double(observations) * 1e6)) µs per observation",
        ]
        if let null, let nullThree {
            let toNull = peakObservationRate / null.rate
            let toThree = peakObservationRate / nullThree.rate
            lines += [
                "  null:     \(Self.rate(null.rate)) observations/s, the evaluator's messages (\(String(format: "%.2f", null.messagesPerObservation)) per observation) and no other work",
                "  null-3:   \(Self.rate(nullThree.rate)) observations/s, three QoS-1 messages per observation and no other work",
                "  ratios:   Perimeter \(String(format: "%.2f", toNull)) × null, \(String(format: "%.2f", toThree)) × null-3 (target ≥ 1.00 × null-3: \(toThree >= 1 ? "met" : "NOT met"))",
            ]
        }
        lines += [
            "  latency at half of peak (\(Self.rate(halfRate)) obs/s asked, \(Self.rate(pacedRate)) sent, \(latencyCount) observations, \(latencies.count) events):",
            "            p50 \(Self.format(percentile(50))) ms, p90 \(Self.format(percentile(90))) ms, p99 \(Self.format(p99)) ms, max \(Self.format(latencies.last ?? .nan)) ms (target p99 < 5 ms: \(p99 < 5 ? "met" : "NOT met"))",
        ]
        if let nullLatencies {
            lines.append(
                "  null at the same pace (\(nullLatencies.count) events): p50 \(Self.format(Self.percentile(50, of: nullLatencies))) ms, p90 \(Self.format(Self.percentile(90, of: nullLatencies))) ms, p99 \(Self.format(Self.percentile(99, of: nullLatencies))) ms, max \(Self.format(nullLatencies.last ?? .nan)) ms (the broker's and this harness's floor)"
            )
        }
        for figures in overloads {
            lines.append(
                "  overload \(Self.rate(figures.factor))×: offered \(Self.rate(figures.offered)) obs/s, delivered \(Self.rate(figures.processed)) obs/s = \(String(format: "%.2f", figures.processed / peakObservationRate)) × peak, evaluator processed \(figures.evaluatorProcessed.map { "\(Self.rate($0)) obs/s = \(String(format: "%.2f", $0 / peakObservationRate)) × peak" } ?? "- (no stats)"), max lag \(Self.format(figures.maxLag)) s, max backlog \(figures.maxBacklog), evaluator RSS max \(Self.megabytes(figures.rssMaxKB)) MB, \(figures.caughtUpAfter.map { "caught up after \(Self.format($0)) s" } ?? "NOT caught up")\(nullOverloads[figures.factor].map { "; a null evaluator (no intake limit) offered \(Self.rate(figures.factor))× its peak delivered \(String(format: "%.2f", $0.ofPeak)) × its peak" } ?? "")"
            )
        }
        lines += [
            "  memory:   evaluator RSS idle \(Self.megabytes(rssIdle)) MB, \(subjects) subjects \(Self.megabytes(rssWarm)) MB (\(Self.rate(perSubject)) B/subject), after peak \(Self.megabytes(rssPeak)) MB, after latency \(Self.megabytes(rssEnd)) MB, high water before overload \(Self.megabytes(rssHighWater)) MB",
            "  journal:  \(Self.megabytes(journal / 1024)) MB for \(totalObservations) observations (\(Self.rate(Double(journal) / Double(totalObservations))) B/observation, SQLite file + WAL)",
            "  events:   \(expected.count) expected, \(arrivals.count) received, \(missing) missing, \(duplicates) duplicates, \(unexpected) unexpected",
            "  evaluator: \(stopped); last stats \(stats ?? "none")",
        ]
        print(lines.joined(separator: "\n"))
        if oracle.rejected > 0 {
            Output.error("warning: the pure evaluator rejected \(oracle.rejected) generated observations")
        }
        if missing > 0 || unexpected > 0 {
            let behind =
                overloads.contains { $0.caughtUpAfter == nil }
                ? " (the evaluator had not caught up after overload)" : ""
            throw ExitCode(1, "the evaluator's events differ from the expected ones\(behind) (see above)")
        }
    }

    /// The `p`th percentile of `sorted` (nearest rank); NaN when empty.
    static func percentile(_ p: Double, of sorted: [Double]) -> Double {
        sorted.isEmpty
            ? .nan : sorted[min(sorted.count - 1, max(0, Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1))]
    }

    // MARK: - Publishing

    struct Published {
        var started: ContinuousClock.Instant
        var finished: ContinuousClock.Instant
    }

    /// Publishes every message, in order, as fast as one client goes: batches of 1,000 sent
    /// back to back, each batch's acknowledgements awaited before the next (QoS 1).
    ///
    /// - Important: order matters: a subject's reports must arrive in event-time order (the
    ///   engine ignores a fix older than the last one). Publishing from concurrent child tasks,
    ///   as `bench mqtt` does, reorders neighbouring messages.
    static func publishAll(
        _ messages: [(topic: String, payload: [UInt8])], endpoint: (host: String, port: Int), qos: QoS,
        clientID: String, topic rewrite: ((String) -> String)? = nil,
        protocolVersion: MQTTConfiguration.ProtocolVersion = .v5
    ) async throws -> Published {
        let outgoing = messages.map {
            MQTTMessage(topic: rewrite?($0.topic) ?? $0.topic, payload: $0.payload, qos: qos)
        }
        var configuration = MQTTConfiguration(host: endpoint.host, port: endpoint.port, clientID: clientID)
        configuration.protocolVersion = protocolVersion
        let publisher = try MQTTClient(configuration)
        try await publisher.connect()
        let started = ContinuousClock.now
        var start = 0
        while start < outgoing.count {
            let end = min(start + 1000, outgoing.count)
            try await publisher.publish(batch: Array(outgoing[start..<end]))
            start = end
        }
        let finished = ContinuousClock.now
        await publisher.disconnect()
        return Published(started: started, finished: finished)
    }

    struct Paced {
        var started: ContinuousClock.Instant
        var finished: ContinuousClock.Instant
        /// When each message was handed to the client.
        var sent: [ContinuousClock.Instant]
    }

    /// Publishes in order at `rate` messages/s on a schedule (message `i` due at
    /// `start + i / rate`): whatever is due goes out as one batch, stamped with the time it
    /// was handed to the client.
    static func publishPaced(
        _ messages: [(topic: String, payload: [UInt8])], rate: Double, endpoint: (host: String, port: Int), qos: QoS,
        clientID: String, protocolVersion: MQTTConfiguration.ProtocolVersion = .v5
    ) async throws -> Paced {
        let outgoing = messages.map { MQTTMessage(topic: $0.topic, payload: $0.payload, qos: qos) }
        var configuration = MQTTConfiguration(host: endpoint.host, port: endpoint.port, clientID: clientID)
        configuration.protocolVersion = protocolVersion
        let publisher = try MQTTClient(configuration)
        try await publisher.connect()
        var sent: [ContinuousClock.Instant] = []
        sent.reserveCapacity(messages.count)
        let started = ContinuousClock.now
        func due(_ index: Int) -> ContinuousClock.Instant { started + .nanoseconds(Int64(Double(index) / rate * 1e9)) }
        while sent.count < outgoing.count {
            let next = sent.count
            if ContinuousClock.now < due(next) { try await Task.sleep(until: due(next), clock: .continuous) }
            let now = ContinuousClock.now
            var end = next + 1
            while end < outgoing.count && due(end) <= now { end += 1 }
            sent += repeatElement(now, count: end - next)
            try await publisher.publish(batch: Array(outgoing[next..<end]))
        }
        let finished = ContinuousClock.now
        await publisher.disconnect()
        return Paced(started: started, finished: finished, sent: sent)
    }

    /// Mosquitto's raw relay of the same messages: same client, same QoS, topics of the same
    /// length under another venue level, one subscriber that only counts.
    static func measureRelay(
        _ messages: [(topic: String, payload: [UInt8])], endpoint: (host: String, port: Int), qos: QoS
    ) async throws -> (seconds: Double, rate: Double) {
        let from = "\(BenchPipelineWorkload.prefix)/\(BenchPipelineWorkload.venue)/"
        let to = "\(BenchPipelineWorkload.prefix)/\(BenchPipelineWorkload.relayVenue)/"
        let sink = try await EventSink.connect(
            endpoint: endpoint, filters: ["\(to)obs/#"], qos: qos, keepPayloads: false, name: "relay")
        let published = try await publishAll(
            messages, endpoint: endpoint, qos: qos, clientID: "bench-relay-pub-\(getpid())",
            topic: { to + $0.dropFirst(from.count) })
        let last = try await sink.wait(
            for: messages.count, since: published.started, evaluator: nil, stall: 30, phase: "relay")
        await sink.client.disconnect()
        let seconds = Self.seconds(last - published.started)
        return (seconds, Double(messages.count) / seconds)
    }

    // MARK: - Formatting

    static func eventID(_ payload: [UInt8]) -> String? {
        (try? JSONParser.parse(payload))?["id"]?.stringValue
    }

    static func seconds(_ duration: Duration) -> Double { BenchMQTTCommand.seconds(duration) }
    static func rate(_ value: Double) -> String { value.isFinite ? String(format: "%.0f", value) : "-" }
    static func format(_ value: Double) -> String { value.isFinite ? String(format: "%.2f", value) : "-" }
    static func megabytes(_ kilobytes: Int) -> String { String(format: "%.1f", Double(kilobytes) / 1024) }
}

/// A child process of a bench: how to watch and stop it. `role` names it in errors.
protocol BenchChild: Sendable {
    var process: Subprocess { get }
    var logPath: String { get }
    var role: String { get }
}

extension BenchChild {
    /// User plus system CPU seconds of the process so far; 0 when it is gone.
    func cpuSeconds() -> Double { (try? ProcessCPU.seconds(of: process.pid)) ?? 0 }

    /// `VmRSS` (or `VmHWM`) of the process in kB; 0 when it is gone.
    func residentKB(peak: Bool = false) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(process.pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(peak ? "VmHWM:" : "VmRSS:") }),
            let kilobytes = line.split(separator: " ").compactMap({ Int($0) }).first
        else { return 0 }
        return kilobytes
    }

    var logTail: String {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(20).joined(separator: "\n")
    }

    /// Throws with the process's last log lines when it has ended.
    func checkRunning() throws {
        if let termination = process.poll() {
            throw ExitCode(1, "the \(role) \(termination); its log ends:\n\(logTail)")
        }
    }

    /// SIGTERM, then how it ended (SIGKILL after 10 s).
    func stopGracefully() async -> String {
        process.signal(SIGTERM)
        let (termination, killed) = await process.end(within: .seconds(10))
        return killed ? "did not stop within 10 s of SIGTERM: \(termination)" : "stopped on SIGTERM, \(termination)"
    }

    func stop() {
        guard process.isRunning else { return }
        process.signal(SIGKILL)
        process.waitBlocking()
    }
}

/// The `perimeter evaluator` child process under test.
struct EvaluatorProcess: BenchChild {
    let process: Subprocess
    let databasePath: String
    let logPath: String
    var role: String { "evaluator" }

    /// Writes its configuration and starts this executable as `perimeter evaluator`.
    /// - Parameter venueSettings: more settings of every venue (`partitions`).
    static func start(
        directory: URL, regionsPath: String, port: Int, instance: String = "bench",
        venues: [String] = [BenchPipelineWorkload.venue], protocolVersion: MQTTConfiguration.ProtocolVersion = .v5,
        evaluatorSettings: JSONObject = [:], venueSettings extra: JSONObject = [:]
    ) throws -> EvaluatorProcess {
        let databasePath = directory.appendingPathComponent("evaluator-\(instance).sqlite").path
        let configPath = directory.appendingPathComponent("evaluator-\(instance).json").path
        let logPath = directory.appendingPathComponent("evaluator-\(instance).log").path
        var venueSettings = JSONObject()
        for venue in venues {
            var settings: JSONObject = [
                "regions": .string(regionsPath),
                "beaconExitTimeout": .number(BenchPipelineCommand.beaconExitTimeout),
                // Synthetic subjects: everyone authorized, one session for all.
                "privacy": ["open": true],
            ]
            for (key, value) in extra { settings[key] = value }
            venueSettings[venue] = .object(settings)
        }
        var evaluator = evaluatorSettings
        let fixed: JSONObject = [
            "instance": .string(instance), "database": .string(databasePath), "statsInterval": 1, "leaseWait": 0,
            "maxClockSkew": .number(BenchPipelineOracle.maxClockSkew),
        ]
        for (key, value) in fixed { evaluator[key] = value }
        let config: JSONValue = [
            "broker": [
                "host": "127.0.0.1", "port": .number(Double(port)), "clientId": .string("perimeter-bench-\(instance)"),
                "protocol": .string("\(protocolVersion)"),
            ],
            "topics": ["prefix": .string(BenchPipelineWorkload.prefix), "natsSafe": .bool(protocolVersion == .v311)],
            // The workload compresses event time (reports `interval` s apart are published as
            // fast as the broker takes them), so its times run ahead of the wall clock.
            "evaluator": .object(evaluator),
            "venues": .object(venueSettings),
            "log": ["level": "notice"],
        ]
        try config.serialized().write(toFile: configPath, atomically: true, encoding: .utf8)
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        // Our own PERIMETER_* settings are not the evaluator's.
        let environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("PERIMETER_") }
        let process = try Subprocess.spawn(
            executable, ["evaluator", "--config", configPath], environment: environment, stdout: .null,
            stderr: .file(logPath, append: false), newProcessGroup: true)
        return EvaluatorProcess(process: process, databasePath: databasePath, logPath: logPath)
    }

    /// The journal's size on disk: the SQLite file and its WAL.
    func journalBytes() -> Int {
        ["", "-wal"].reduce(0) { total, suffix in
            let size = (try? FileManager.default.attributesOfItem(atPath: databasePath + suffix)[.size]) as? NSNumber
            return total + (size?.intValue ?? 0)
        }
    }
}

/// A subscriber that timestamps every message on the client's network thread, as it arrives.
final class EventSink: Sendable {
    struct Arrival {
        var at: ContinuousClock.Instant
        var payload: [UInt8]
    }

    let client: MQTTClient
    private let state: Locked<[Arrival]>
    private let name: String

    private init(client: MQTTClient, state: Locked<[Arrival]>, name: String) {
        self.client = client
        self.state = state
        self.name = name
    }

    /// Subscribes to the venue's enter and exit topics (or `filters`).
    static func connect(
        endpoint: (host: String, port: Int), filters: [String]? = nil, qos: QoS = .atLeastOnce,
        keepPayloads: Bool = true, name: String = "events",
        protocolVersion: MQTTConfiguration.ProtocolVersion = .v5
    ) async throws -> EventSink {
        let topics = Topics(prefix: BenchPipelineWorkload.prefix, venue: BenchPipelineWorkload.venue)
        let state = Locked<[Arrival]>([])
        var configuration = MQTTConfiguration(
            host: endpoint.host, port: endpoint.port, clientID: "bench-\(name)-\(getpid())")
        configuration.protocolVersion = protocolVersion
        // Arrivals are recorded in the callback; the message stream is not read.
        configuration.inboundBufferSize = 1
        let client = try MQTTClient(configuration) { message in
            let now = ContinuousClock.now
            let payload = keepPayloads ? message.payload : []
            state.withLock { $0.append(Arrival(at: now, payload: payload)) }
        }
        let sink = EventSink(client: client, state: state, name: name)
        try await client.connect()
        for filter in filters ?? ["\(topics.root)/enter/#", "\(topics.root)/exit/#"] {
            try await client.subscribe(filter, qos: qos)
        }
        return sink
    }

    var count: Int { state.withLock { $0.count } }

    func arrivals() -> [Arrival] { state.withLock { $0 } }

    /// The arrivals from the `start`-th on (the caller's cursor: fewer copies than ``arrivals()``).
    func arrivals(from start: Int) -> [Arrival] { state.withLock { start < $0.count ? Array($0[start...]) : [] } }

    /// Waits until `total` messages have arrived; returns when the last of them did.
    /// - Throws: when the evaluator ends, or nothing new arrives for `stall` seconds.
    func wait(
        for total: Int, since started: ContinuousClock.Instant, evaluator: (any BenchChild)?, stall: Double,
        phase: String
    ) async throws -> ContinuousClock.Instant {
        try await wait(for: total, by: nil, since: started, evaluator: evaluator, stall: stall, phase: phase)!
    }

    /// Waits until `total` messages have arrived or `deadline` (if any) passes; returns when
    /// the last of them arrived, or nil at the deadline.
    /// - Throws: when the evaluator ends, or nothing new arrives for `stall` seconds.
    func wait(
        for total: Int, by deadline: ContinuousClock.Instant?, since started: ContinuousClock.Instant,
        evaluator: (any BenchChild)?, stall: Double, phase: String
    ) async throws -> ContinuousClock.Instant? {
        var last = count
        var progressAt = ContinuousClock.now
        while true {
            let (now, at) = state.withLock { ($0.count, $0.count >= total ? $0[total - 1].at : nil) }
            if let at { return at }
            try evaluator?.checkRunning()
            if let deadline, ContinuousClock.now >= deadline { return nil }
            if now != last {
                last = now
                progressAt = .now
            } else if ContinuousClock.now - progressAt > .milliseconds(Int(stall * 1000)) {
                throw ExitCode(
                    1,
                    "\(phase): \(now) of \(total) \(name) arrived, then nothing for \(Int(stall)) s (\(BenchPipelineCommand.format(BenchPipelineCommand.seconds(ContinuousClock.now - started))) s since the phase began)"
                )
            }
            try await Task.sleep(for: .milliseconds(1))
        }
    }
}

/// Watches the evaluator's retained status and its stats.
final class EvaluatorWatch: Sendable {
    /// One stats message: when it arrived and the figures the overload phase reports.
    struct StatsSample {
        var at: ContinuousClock.Instant
        var lagSeconds: Double?
        var queueDepth: Int?
        /// The evaluator's own time of the message, and the inbound messages it had processed by
        /// then (the sum of `observationsIn`): its processing rate, whatever the broker delays.
        var t: Date?
        var processedTotal: Int?
    }

    let client: MQTTClient
    private let status: Locked<String?>
    private let stats: Locked<String?>
    private let samples: Locked<[StatsSample]>

    private init(
        client: MQTTClient, status: Locked<String?>, stats: Locked<String?>, samples: Locked<[StatsSample]>
    ) {
        self.client = client
        self.status = status
        self.stats = stats
        self.samples = samples
    }

    static func connect(
        endpoint: (host: String, port: Int), instance: String = "bench",
        protocolVersion: MQTTConfiguration.ProtocolVersion = .v5
    ) async throws -> EvaluatorWatch {
        let statusTopic = "\(BenchPipelineWorkload.prefix)/_sys/evaluator/\(instance)/status"
        let statsTopic = Topics.stats(prefix: BenchPipelineWorkload.prefix, component: "evaluator", instance: instance)
        let status = Locked<String?>(nil)
        let stats = Locked<String?>(nil)
        let samples = Locked<[StatsSample]>([])
        var configuration = MQTTConfiguration(
            host: endpoint.host, port: endpoint.port, clientID: "bench-watch-\(instance)-\(getpid())")
        configuration.protocolVersion = protocolVersion
        configuration.inboundBufferSize = 1
        let client = try MQTTClient(configuration) { message in
            if message.topic == statusTopic { status.withLock { $0 = message.payloadString } }
            if message.topic == statsTopic {
                let now = ContinuousClock.now
                let fields = try? JSONParser.parse(message.payload)
                let processed = fields?["observationsIn"]?.objectValue.map { counts in
                    counts.reduce(0) { $0 + ($1.value.intValue ?? 0) }
                }
                let sample = StatsSample(
                    at: now, lagSeconds: fields?["lagSeconds"]?.doubleValue,
                    queueDepth: fields?["queueDepth"]?.intValue,
                    t: fields?["t"]?.stringValue.flatMap(Timestamp.parse), processedTotal: processed)
                stats.withLock { $0 = message.payloadString }
                samples.withLock { $0.append(sample) }
            }
        }
        let watch = EvaluatorWatch(client: client, status: status, stats: stats, samples: samples)
        try await client.connect()
        try await client.subscribe(statusTopic, qos: .atLeastOnce)
        try await client.subscribe(statsTopic, qos: .atMostOnce)
        return watch
    }

    var latestStats: String? { stats.withLock { $0 } }

    /// The evaluator's status as last published (a last will included).
    var latestStatus: String? { status.withLock { $0 } }

    /// The stats messages that arrived in `interval`, oldest first.
    func statsSamples(in interval: ClosedRange<ContinuousClock.Instant>) -> [StatsSample] {
        samples.withLock { $0.filter { interval.contains($0.at) } }
    }

    /// Waits for the evaluator's retained `{"online":true}`, or its first stats message (live,
    /// every second): on a starved NATS node a subscription made just after the evaluator
    /// connected was once not given the retained status for 60 s, while the evaluator served.
    func waitOnline(_ evaluator: EvaluatorProcess, timeout: Duration) async throws {
        let online = try await waitForCondition(timeout: timeout) {
            try evaluator.checkRunning()
            return status.withLock({ $0 })?.contains("\"online\":true") == true || stats.withLock({ $0 }) != nil
        }
        if online { return }
        throw ExitCode(1, "the evaluator did not come online within \(timeout); its log ends:\n\(evaluator.logTail)")
    }
}

/// A value behind a lock that escaping closures (MQTT callbacks, child tasks) can share.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) { mutex = Mutex(value) }

    func withLock<Result>(_ body: (inout Value) -> Result) -> Result { mutex.withLock { body(&$0) } }
}
