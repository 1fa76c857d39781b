import Foundation
import PerimeterMQTT
import Synchronization

/// Journals inbound messages on the MQTT client's network thread as they arrive, through a
/// database connection of the journal's own (the evaluator's), or one the processor uses only
/// within ``withProcessorTurn(_:)`` (the notifier's): libmosquitto has acknowledged a QoS 1
/// message by the time its callback runs, so this write is what makes the message survive
/// `kill -9`. The services (evaluator, notifier) pass their store's append as `write`.
///
/// The journal and the service's processing write the same SQLite file. Left to SQLite's busy
/// handler, the network thread (one short insert after another, the lock free for only a few
/// microseconds in between) starved the processor's commits: under 4× overload the evaluator
/// processed 44 observations/s while offered 7,200/s (`bench pipeline`). So the two take
/// turns in the process: ``withProcessorTurn(_:)`` lets the insert in progress finish, holds
/// the next ones back for the processor's transaction, then lets them go.
public final class ArrivalJournal: @unchecked Sendable {
    // @unchecked: `write` and its connection are used only from the client's one network
    // thread; `appending`, `processorWaiting` and `processorHolds` only under `turn`.
    private let write: (MQTTMessage) throws -> Void
    private let logger: Logger
    private let retryDelays: [Duration]
    public let written = Atomic<Int>(0)
    private let failed = Atomic<Int>(0)
    private let turn = NSCondition()
    private var appending = false
    private var processorWaiting = 0
    private var processorHolds = false

    /// - Parameter retryDelays: the waits between attempts when a write fails. QoS 1 has been
    ///   acknowledged by the time a message is here, so a failed write is a lost message: a
    ///   transient failure (the database busy beyond its timeout on a starved machine, a full
    ///   disk freed a moment later) is tried again. The network thread waits meanwhile, which
    ///   holds back the next arrivals (the broker queues them); the default waits 3.3 s in all,
    ///   well inside the keep-alive.
    public init(
        logger: Logger,
        retryDelays: [Duration] = [.milliseconds(10), .milliseconds(50), .milliseconds(250), .seconds(1), .seconds(2)],
        write: @escaping (MQTTMessage) throws -> Void
    ) {
        self.write = write
        self.logger = logger
        self.retryDelays = retryDelays
    }

    /// Messages lost because every attempt to journal them failed (each logged as an error).
    public var lost: Int { failed.load(ordering: .relaxed) }

    /// What a service's `/metrics` says of its journal (the evaluator's and the notifier's alike).
    public static func declareMetrics(in metrics: Metrics) {
        metrics.declare(
            "perimeter_journal_lost_total", .counter,
            help: "Arrivals acknowledged to the broker that the journal could not write after retries: lost.")
    }

    /// Brings `/metrics` up to date (called as it is served).
    public func updateMetrics(_ metrics: Metrics) {
        metrics.set("perimeter_journal_lost_total", Double(lost))
    }

    /// The `/healthz` `degraded` line while any arrival was lost; nil otherwise.
    public var degradation: String? {
        let lost = lost
        guard lost > 0 else { return nil }
        return "journal: \(lost) arrivals could not be written after retries and are lost (the log says which)"
    }

    /// Only ever called from the one network thread.
    public func append(_ message: MQTTMessage) {
        var attempt = 0
        while true {
            do {
                try withAppendTurn { try write(message) }
                written.add(1, ordering: .relaxed)
                if attempt > 0 {
                    logger.notice(
                        "journal write succeeded after retrying",
                        metadata: ["topic": .string(message.topic), "attempts": "\(attempt + 1)"])
                }
                return
            } catch {
                guard attempt < retryDelays.count else {
                    failed.add(1, ordering: .relaxed)
                    logger.error(
                        "journal write failed: message lost",
                        metadata: [
                            "topic": .string(message.topic), "error": "\(error)", "attempts": "\(attempt + 1)",
                        ])
                    return
                }
                if attempt == 0 {
                    logger.warning(
                        "journal write failed; trying again",
                        metadata: ["topic": .string(message.topic), "error": "\(error)"])
                }
                // Outside the turn: the processor may commit meanwhile.
                pause(retryDelays[attempt])
                attempt += 1
            }
        }
    }

    /// Runs one journal insert when the processor neither holds nor waits for its turn.
    private func withAppendTurn(_ body: () throws -> Void) throws {
        turn.lock()
        while processorWaiting > 0 || processorHolds { turn.wait() }
        appending = true
        turn.unlock()
        defer {
            turn.lock()
            appending = false
            turn.broadcast()
            turn.unlock()
        }
        try body()
    }

    /// Waits `delay` on the network thread before the next attempt: it has nothing else to do
    /// until the write succeeds (a bounded backoff, not a poll).
    private func pause(_ delay: Duration) {
        Thread.sleep(forTimeInterval: Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18)
    }

    /// Runs `body` (the processor's write transaction) while no arrival is being journalled;
    /// arrivals wait until it returns.
    /// - Important: blocks the caller for at most one journal insert; keep `body` short.
    public func withProcessorTurn<T>(_ body: () throws -> T) rethrows -> T {
        turn.lock()
        processorWaiting += 1
        while appending || processorHolds { turn.wait() }
        processorWaiting -= 1
        processorHolds = true
        turn.unlock()
        defer {
            turn.lock()
            processorHolds = false
            turn.broadcast()
            turn.unlock()
        }
        return try body()
    }
}
