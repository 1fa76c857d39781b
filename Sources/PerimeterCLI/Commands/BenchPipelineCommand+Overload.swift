import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT

extension BenchPipelineCommand {
    /// The load levels of the overload phase, as multiples of the peak observation rate.
    static let overloadFactors: [Double] = [2, 4]

    /// What an overload level needs from the run.
    struct OverloadContext {
        var workload: BenchPipelineWorkload
        var endpoint: (host: String, port: Int)
        var qos: QoS
        var events: EventSink
        var evaluator: EvaluatorProcess
        var watch: EvaluatorWatch
        /// Seconds of offered load.
        var seconds: Double
        /// Seconds after the offer ends within which the evaluator must have caught up.
        var catchUp: Double
        var stall: Double
        /// The broker's process, whose CPU is sampled beside the evaluator's and this process's.
        var brokerPID: Int32?
    }

    /// CPU used while the load was offered, in cores (CPU-seconds per second), by process.
    struct OverloadCPU {
        var evaluator: Double
        var broker: Double
        /// This process: the paced publishers and the event subscriber.
        var bench: Double
        /// The evaluator's CPU per observation it processed meanwhile, in µs (nil without its stats).
        var perObservation: Double?

        var summary: String {
            let per = perObservation.map { ", \(format($0)) µs per observation it processed" } ?? ""
            return
                "CPU while offered: evaluator \(format(evaluator)) cores\(per), mosquitto \(format(broker)), publishers and subscriber \(format(bench)) (of \(ProcessInfo.processInfo.activeProcessorCount))"
        }
    }

    /// One overload level's figures.
    struct OverloadFigures {
        var factor: Double
        var asked: Double
        var offered: Double
        var publishers: Int
        var observations: Int
        /// Observations per second whose events arrived while the load was offered.
        var processed: Double
        /// Seconds from the end of the offer to the last event; nil when the evaluator had not
        /// caught up within the bound.
        var caughtUpAfter: Double?
        /// Observations per second from the first send to the last event (nil: not caught up).
        var overall: Double?
        /// The longest an observation of this level waited for its event, in seconds.
        var maxLag: Double
        /// The most observations sent whose events had not arrived yet.
        var maxBacklog: Int
        /// The largest `lagSeconds` and `queueDepth` the evaluator's stats said, and how many
        /// stats messages came (it publishes them between two drains of its queue).
        var statsLag: Double?
        var statsDepth: Int?
        var statsSamples: Int
        /// Observations/s the evaluator processed while the load was offered, by its own
        /// stats (nil with fewer than two stats messages in the window): what it did, where
        /// `processed` is what reached a subscriber through the saturated broker.
        var evaluatorProcessed: Double?
        var rssMaxKB: Int
        var cpu: OverloadCPU?
        /// The level's observations and, when asked for, what the evaluator publishes for each
        /// (a null evaluator's plan for them, ``measureNullOverload``).
        var first: Int
        var messages: [(topic: String, payload: [UInt8])]
        var nullPlan: NullEvaluatorPlan?

        var summary: String {
            let stats =
                statsSamples == 0
                ? "no evaluator stats message meanwhile (it publishes them between two drains of its queue)"
                : "stats (\(statsSamples)): lagSeconds ≤ \(format(statsLag ?? .nan)), queueDepth ≤ \(statsDepth.map { "\($0)" } ?? "-"), evaluator processed \(evaluatorProcessed.map { rate($0) } ?? "-") obs/s while offered"
            let caughtUp =
                caughtUpAfter.map { after in
                    "caught up \(format(after)) s after the offer ended (\(rate(overall ?? .nan)) obs/s overall)"
                } ?? "NOT caught up"
            return
                "asked \(rate(asked)) obs/s, offered \(rate(offered)) obs/s on \(publishers) connection\(publishers == 1 ? "" : "s") (\(observations) observations); processed \(rate(processed)) obs/s while offered; \(caughtUp); max lag \(format(maxLag)) s, max backlog \(maxBacklog) observations; \(stats); evaluator RSS max \(megabytes(rssMaxKB)) MB; \(cpu?.summary ?? "CPU not sampled")"
        }
    }

    /// Offers `factor` × `peakRate` observations/s for `context.seconds`, paced, on enough
    /// connections that the publishers are not the limit (a subject's reports stay on one
    /// connection, in order), then waits (bounded) for every event. Observations `first…` are
    /// used; their events are added to `expected` and their send times to `sendTimes`, so that
    /// the run's final check covers them like every other phase's.
    static func overload(
        factor: Double, peakRate: Double, publishers: Int, first: Int, context: OverloadContext,
        oracle: inout BenchPipelineOracle, expected: inout [String: Int],
        sendTimes: inout [Int: ContinuousClock.Instant], recordingNull: Bool = false
    ) async throws -> OverloadFigures {
        let asked = factor * peakRate
        let count = max(publishers, Int(asked * context.seconds))
        let range = first..<(first + count)
        let messages = context.workload.messages(range)
        var nullPlan: NullEvaluatorPlan?
        if recordingNull {
            var plan = NullEvaluatorPlan()
            expected.merge(oracle.expect(messages, first: first, recording: &plan)) { $1 }
            nullPlan = plan
        } else {
            expected.merge(oracle.expect(messages, first: first)) { $1 }
        }
        let total = expected.count
        let before = context.events.count

        // The evaluator's RSS, and the CPU time of the evaluator, the broker and this process,
        // are sampled every 100 ms while the level runs and drains.
        let rssMax = Locked(context.evaluator.residentKB())
        let cpuSamples = Locked([CPUSample]())
        let (paced, last) = try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [evaluator = context.evaluator, broker = context.brokerPID] in
                while !Task.isCancelled {
                    let kilobytes = evaluator.residentKB()
                    rssMax.withLock { $0 = max($0, kilobytes) }
                    let sample = CPUSample(
                        at: .now, evaluator: evaluator.cpuSeconds(),
                        broker: broker.flatMap { try? ProcessCPU.seconds(of: $0) } ?? 0,
                        bench: (try? ProcessCPU.seconds(of: nil)) ?? 0)
                    cpuSamples.withLock { $0.append(sample) }
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
            let paced = try await publishPacedBySubject(
                messages, first: first, subjects: context.workload.subjects, publishers: publishers, rate: asked,
                endpoint: context.endpoint, qos: context.qos, clientID: "bench-overload")
            let offerEnd = paced.map(\.paced.finished).max()!
            let last = try await context.events.wait(
                for: total, by: offerEnd + .milliseconds(Int(context.catchUp * 1000)),
                since: paced.map(\.paced.started).min()!, evaluator: context.evaluator, stall: context.stall,
                phase: "overload \(rate(factor))×")
            group.cancelAll()
            return (paced, last)
        }
        for part in paced {
            for (index, time) in part.paced.sent.enumerated() { sendTimes[first + part.offsets[index]] = time }
        }
        let offerStart = paced.map(\.paced.started).min()!
        let offerEnd = paced.map(\.paced.finished).max()!
        let offerSeconds = seconds(offerEnd - offerStart)

        // The evaluator works in arrival order: the highest observation whose event has arrived
        // says how far it has got, and the observations sent but not that far are its backlog
        // (wherever they wait: the broker, the journal's queue).
        var processedThrough = first - 1
        var maxLag = 0.0
        var progress: [(at: ContinuousClock.Instant, through: Int)] = []
        for arrival in context.events.arrivals()[before...] {
            guard let id = eventID(arrival.payload), let index = expected[id], range.contains(index),
                let sent = sendTimes[index]
            else { continue }
            if arrival.at <= offerEnd { processedThrough = max(processedThrough, index) }
            maxLag = max(maxLag, seconds(arrival.at - sent))
            progress.append((arrival.at, max(progress.last?.through ?? first - 1, index)))
        }
        let sent = range.compactMap { sendTimes[$0] }.sorted()
        var maxBacklog = 0
        var sentBy = 0
        for step in progress {
            while sentBy < sent.count && sent[sentBy] <= step.at { sentBy += 1 }
            maxBacklog = max(maxBacklog, sentBy - (step.through - first + 1))
        }
        // No event at all in the window (everything lost or late) must not make an empty range.
        let samples = context.watch.statsSamples(in: offerStart...max(offerStart, last ?? .now))
        // The offer window on the wall clock the evaluator's stats are stamped with.
        let nowInstant = ContinuousClock.now
        let wallNow = Date()
        let offerWall =
            wallNow.addingTimeInterval(
                -seconds(nowInstant - offerStart))...wallNow.addingTimeInterval(
                -seconds(nowInstant - offerEnd))
        let inOffer = samples.filter { $0.t.map(offerWall.contains) ?? false }.filter { $0.processedTotal != nil }
        var evaluatorProcessed: Double?
        if let a = inOffer.first, let b = inOffer.last, let ta = a.t, let tb = b.t, tb > ta {
            evaluatorProcessed = Double(b.processedTotal! - a.processedTotal!) / tb.timeIntervalSince(ta)
        }
        var cpu: OverloadCPU?
        // From the last sample before the offer to the first after it (the sampler starts before
        // the publishers and runs until the level has drained).
        let all = cpuSamples.withLock { $0 }
        if let a = all.last(where: { $0.at <= offerStart }) ?? all.first,
            let b = all.first(where: { $0.at >= offerEnd }) ?? all.last, b.at > a.at
        {
            let span = seconds(b.at - a.at)
            let evaluatorCores = (b.evaluator - a.evaluator) / span
            cpu = OverloadCPU(
                evaluator: evaluatorCores, broker: (b.broker - a.broker) / span, bench: (b.bench - a.bench) / span,
                perObservation: evaluatorProcessed.map { evaluatorCores / $0 * 1e6 })
        }
        return OverloadFigures(
            factor: factor, asked: asked, offered: Double(count) / offerSeconds, publishers: paced.count,
            observations: count, processed: Double(processedThrough - first + 1) / offerSeconds,
            caughtUpAfter: last.map { seconds($0 - offerEnd) },
            overall: last.map { Double(count) / seconds($0 - offerStart) }, maxLag: maxLag, maxBacklog: maxBacklog,
            statsLag: samples.compactMap(\.lagSeconds).max(), statsDepth: samples.compactMap(\.queueDepth).max(),
            statsSamples: samples.count, evaluatorProcessed: evaluatorProcessed, rssMaxKB: rssMax.withLock { $0 },
            cpu: cpu, first: first, messages: recordingNull ? messages : [], nullPlan: nullPlan)
    }

    /// Publishes `messages` (observations `first…`; observation n is subject n mod `subjects`)
    /// at `rate` in all, on `publishers` connections at once, each paced at its share: a
    /// subject's reports go on one connection, in order. Returns each connection's offsets into
    /// `messages` and what ``publishPaced(_:rate:endpoint:qos:clientID:protocolVersion:)`` said.
    static func publishPacedBySubject(
        _ messages: [(topic: String, payload: [UInt8])], first: Int, subjects: Int, publishers: Int, rate: Double,
        endpoint: (host: String, port: Int), qos: QoS, clientID: String
    ) async throws -> [(offsets: [Int], paced: Paced)] {
        var parts = Array(repeating: [Int](), count: max(1, publishers))
        for offset in messages.indices { parts[((first + offset) % max(1, subjects)) % parts.count].append(offset) }
        return try await withThrowingTaskGroup(of: (offsets: [Int], paced: Paced).self) { group in
            for (part, offsets) in parts.enumerated() where !offsets.isEmpty {
                let slice = offsets.map { messages[$0] }
                let partRate = rate * Double(offsets.count) / Double(messages.count)
                group.addTask {
                    let paced = try await publishPaced(
                        slice, rate: partRate, endpoint: endpoint, qos: qos, clientID: "\(clientID)-\(part)-\(getpid())"
                    )
                    return (offsets, paced)
                }
            }
            var paced: [(offsets: [Int], paced: Paced)] = []
            for try await part in group { paced.append(part) }
            return paced
        }
    }

    /// CPU time (seconds) of the evaluator, the broker and this process at one instant.
    struct CPUSample: Sendable {
        var at: ContinuousClock.Instant
        var evaluator: Double
        var broker: Double
        var bench: Double
    }

    /// Enough publishing connections for `rate`: each paced at no more than half of what one
    /// connection reached unpaced in the peak phase, at most 4.
    static func publishers(for rate: Double, onePublisher: Double) -> Int {
        guard onePublisher > 0, onePublisher.isFinite else { return 1 }
        return min(4, max(1, Int((rate / (onePublisher / 2)).rounded(.up))))
    }
}
