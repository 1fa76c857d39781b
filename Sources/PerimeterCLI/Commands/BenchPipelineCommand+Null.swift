import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

extension BenchPipelineCommand {
    /// The venue level of the null evaluator that publishes the evaluator's messages: as long as
    /// `BenchPipelineWorkload.venue`, so topics keep their size, and a topic tree of its own.
    static let nullVenue = "nulle"
    /// The venue level of the null evaluator that publishes three messages per observation.
    static let nullThreeVenue = "null3"
    /// The venue level of the null evaluator paced as the latency phase is.
    static let nullPacedVenue = "nullp"

    struct NullFigures {
        var seconds: Double
        /// Peak observations per second, first publish to last transition.
        var rate: Double
        var events: Int
        var messagesPerObservation: Double
        /// How the child process ended.
        var process: String
    }

    /// The ceiling the broker sets on the evaluator's traffic: the warm-up and peak
    /// observations, moved to the plan's venue, through a `perimeter bench null-evaluator`
    /// child process that publishes what the plan says; its transitions counted on one
    /// subscriber, as the peak phase counts the evaluator's. Counted, not checked one by one:
    /// the null evaluator's payloads are filler.
    static func measureNull(
        _ plan: NullEvaluatorPlan, warm: [(topic: String, payload: [UInt8])],
        peak: [(topic: String, payload: [UInt8])], directory: URL, endpoint: (host: String, port: Int), qos: QoS,
        stall: Double
    ) async throws -> NullFigures {
        precondition(plan.observations.count == warm.count + peak.count, "the plan covers warm-up and peak")
        let run = try await NullRun.start(plan, directory: directory, endpoint: endpoint, name: "events")
        defer { run.process.stop() }
        let (process, sink, filters, move) = (run.process, run.sink, run.filters, run.move)
        let warmEvents = plan.count(matching: filters, in: 0..<warm.count)
        let allEvents = plan.count(matching: filters, in: 0..<plan.observations.count)

        let warmed = try await publishAll(
            warm, endpoint: endpoint, qos: qos, clientID: "bench-\(plan.venue)-warm-\(getpid())", topic: move)
        _ = try await sink.wait(
            for: warmEvents, since: warmed.started, evaluator: process, stall: stall, phase: "\(plan.venue) warm-up")
        let peakPublished = try await publishAll(
            peak, endpoint: endpoint, qos: qos, clientID: "bench-\(plan.venue)-peak-\(getpid())", topic: move)
        let last = try await sink.wait(
            for: allEvents, since: peakPublished.started, evaluator: process, stall: stall, phase: "\(plan.venue) peak")
        await sink.client.disconnect()
        let stopped = await process.stopGracefully()
        let seconds = Self.seconds(last - peakPublished.started)
        let published = plan.observations[warm.count...].reduce(0) { $0 + $1.shapes.count }
        return NullFigures(
            seconds: seconds, rate: Double(peak.count) / seconds, events: allEvents - warmEvents,
            messagesPerObservation: Double(published) / Double(max(1, peak.count)), process: stopped)
    }
}

extension BenchPipelineCommand {
    /// The latency floor the broker and this harness set: the latency phase's observations,
    /// paced at the same rate, through a null evaluator; each event's payload starts with its
    /// observation's number in the plan (``NullEvaluatorPlayer``), which gives its send time.
    /// Milliseconds, sorted.
    static func measureNullLatency(
        _ plan: NullEvaluatorPlan, messages: [(topic: String, payload: [UInt8])], rate: Double, directory: URL,
        endpoint: (host: String, port: Int), qos: QoS, stall: Double
    ) async throws -> [Double] {
        precondition(plan.observations.count == messages.count, "the plan covers the paced observations")
        let run = try await NullRun.start(
            plan, directory: directory, endpoint: endpoint, keepPayloads: true, name: "latency")
        defer { run.process.stop() }
        let (process, sink, filters) = (run.process, run.sink, run.filters)
        let moved = messages.map { (topic: run.move($0.topic), payload: $0.payload) }
        let paced = try await publishPaced(
            moved, rate: rate, endpoint: endpoint, qos: qos, clientID: "bench-\(plan.venue)-paced-\(getpid())")
        _ = try await sink.wait(
            for: plan.count(matching: filters, in: 0..<plan.observations.count), since: paced.started,
            evaluator: process, stall: stall, phase: "\(plan.venue) latency")
        await sink.client.disconnect()
        _ = await process.stopGracefully()
        return sink.arrivals().compactMap { arrival -> Double? in
            let digits = arrival.payload.prefix { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
            guard let index = Int(String(decoding: digits, as: UTF8.self)), paced.sent.indices.contains(index) else {
                return nil
            }
            return seconds(arrival.at - paced.sent[index]) * 1000
        }.sorted()
    }
}

/// A null evaluator started on a plan and online, with a subscriber to its transitions.
struct NullRun {
    let process: NullEvaluatorProcess
    let sink: EventSink
    /// The plan venue's enter and exit topics.
    let filters: [String]
    private let root: String

    /// Starts `plan`'s null evaluator, waits for it to be online and subscribes to its
    /// transitions (`keepPayloads` for their payloads too); the process is stopped if that fails.
    static func start(
        _ plan: NullEvaluatorPlan, directory: URL, endpoint: (host: String, port: Int), keepPayloads: Bool = false,
        name: String
    ) async throws -> NullRun {
        let process = try NullEvaluatorProcess.start(plan: plan, directory: directory, port: endpoint.port)
        do {
            try await process.waitOnline(endpoint: endpoint)
            let root = "\(plan.prefix)/\(plan.venue)/"
            let filters = ["\(root)enter/#", "\(root)exit/#"]
            let sink = try await EventSink.connect(
                endpoint: endpoint, filters: filters, keepPayloads: keepPayloads, name: "\(plan.venue)-\(name)")
            return NullRun(process: process, sink: sink, filters: filters, root: root)
        } catch {
            process.stop()
            throw error
        }
    }

    /// A topic of the workload's venue moved to the plan's.
    func move(_ topic: String) -> String {
        let from = "\(BenchPipelineWorkload.prefix)/\(BenchPipelineWorkload.venue)/"
        return topic.hasPrefix(from) ? root + topic.dropFirst(from.count) : topic
    }
}

/// A `perimeter bench null-evaluator` child process and its plan file.
struct NullEvaluatorProcess: BenchChild {
    let process: Subprocess
    let logPath: String
    let prefix: String
    let venue: String
    var role: String { "null evaluator '\(venue)'" }

    /// Writes the plan into `directory` and starts this executable as `perimeter bench null-evaluator`.
    static func start(plan: NullEvaluatorPlan, directory: URL, port: Int) throws -> NullEvaluatorProcess {
        let planPath = directory.appendingPathComponent("null-\(plan.venue).plan").path
        let logPath = directory.appendingPathComponent("null-\(plan.venue).log").path
        try plan.serialized.write(toFile: planPath, atomically: true, encoding: .utf8)
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let process = try Subprocess.spawn(
            executable, ["bench", "null-evaluator", "--plan", planPath, "--port", "\(port)"], stdout: .null,
            stderr: .file(logPath, append: false), newProcessGroup: true)
        return NullEvaluatorProcess(process: process, logPath: logPath, prefix: plan.prefix, venue: plan.venue)
    }

    /// Waits for its retained `{"online":true}`, said once it has subscribed.
    func waitOnline(endpoint: (host: String, port: Int)) async throws {
        let status = try await EventSink.connect(
            endpoint: endpoint, filters: [NullEvaluatorPlan.statusTopic(prefix: prefix, venue: venue)],
            name: "\(venue)-status")
        _ = try await status.wait(for: 1, since: .now, evaluator: self, stall: 30, phase: "starting \(role)")
        await status.client.disconnect()
    }
}

extension BenchPipelineCommand {
    /// The venue levels of the null evaluators offered the overload levels (one fresh process
    /// each: a null evaluator plays its plan once).
    static func nullOverloadVenue(_ factor: Double) -> String { "nul\(Int(factor))x" }

    /// What a null evaluator delivered while offered `factor` × its own peak rate.
    struct NullOverloadFigures {
        var factor: Double
        var offered: Double
        /// Observations/s whose transitions arrived at a subscriber while the load was offered.
        var delivered: Double
        /// `delivered` against the null evaluator's own peak.
        var ofPeak: Double
    }

    /// One overload level offered to a null evaluator: the level's own observations (`messages`,
    /// which `plan` covers) at `factor` × the null evaluator's own peak rate, on `publishers`
    /// connections split by subject as the level's were; how many observations' transitions it
    /// delivers while the load lasts. It reads everything it is sent (no intake limit) and
    /// publishes on the same connection, so under a flood its acknowledgements most likely queue behind the
    /// observations: the naive client's collapse, which the evaluator's intake gate prevents.
    /// A comparison, not a ceiling (the CPU each process used is what bounds the evaluator).
    static func measureNullOverload(
        _ plan: NullEvaluatorPlan, messages: [(topic: String, payload: [UInt8])], first: Int, subjects: Int,
        factor: Double, peakRate: Double, publishers: Int, directory: URL, endpoint: (host: String, port: Int),
        qos: QoS, stall: Double
    ) async throws -> NullOverloadFigures {
        precondition(plan.observations.count == messages.count, "the plan covers the level's observations")
        let run = try await NullRun.start(plan, directory: directory, endpoint: endpoint, name: "events")
        defer { run.process.stop() }
        let (process, sink, filters, move) = (run.process, run.sink, run.filters, run.move)
        let allEvents = plan.count(matching: filters, in: 0..<plan.observations.count)

        let paced = try await publishPacedBySubject(
            messages.map { (move($0.topic), $0.payload) }, first: first, subjects: subjects, publishers: publishers,
            rate: factor * peakRate, endpoint: endpoint, qos: qos, clientID: "bench-\(plan.venue)"
        ).map(\.paced)
        let offerStart = paced.map(\.started).min()!
        let offerEnd = paced.map(\.finished).max()!
        _ = try await sink.wait(
            for: allEvents, since: offerStart, evaluator: process, stall: stall, phase: "\(plan.venue) overload")
        await sink.client.disconnect()
        _ = await process.stopGracefully()
        let offerSeconds = seconds(offerEnd - offerStart)
        let eventsPerObservation = Double(allEvents) / Double(max(1, messages.count))
        let inOffer = sink.arrivals().count { $0.at >= offerStart && $0.at <= offerEnd }
        // A plan without transitions in its peak (never with the bench's workloads) says nothing.
        let processed = eventsPerObservation > 0 ? Double(inOffer) / eventsPerObservation / offerSeconds : .nan
        return NullOverloadFigures(
            factor: factor, offered: Double(messages.count) / offerSeconds, delivered: processed,
            ofPeak: processed / peakRate)
    }
}
