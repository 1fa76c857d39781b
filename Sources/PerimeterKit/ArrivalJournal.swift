import Foundation
import PerimeterMQTT
import Synchronization

/// Journals inbound messages on the MQTT client's network thread, a burst at a time: the
/// client's `onReceive` gives each message to ``append(_:)``, its `onBurstEnd` calls
/// ``flush()``, which writes the burst in one transaction before the client writes the
/// burst's acknowledgements (``MQTTClient/init(_:onReceive:onBurstEnd:)``). So a QoS 1 message
/// is acknowledged only once it is durable, and `kill -9` at any moment, inside a group commit
/// too, loses nothing the broker does not send again. An arrival waits for its commit at most
/// one burst (``maxBatch`` messages already read from the socket). The services (evaluator,
/// notifier) pass their store's batch insert as `write`, through a database connection of the
/// journal's own (the evaluator's) or one the processor uses only within
/// ``withProcessorTurn(_:)`` (the notifier's).
///
/// One commit per message cost the evaluator's network thread a WAL write and SQLite's file
/// locks per arrival: under realistic traffic that was the evaluator's ceiling.
///
/// The journal and the service's processing write the same SQLite file. Left to SQLite's busy
/// handler, the network thread (one short insert after another, the lock free for only a few
/// microseconds in between) starved the processor's commits: under 4× overload the evaluator
/// processed 44 observations/s while offered 7,200/s (`bench pipeline`). So the two take
/// turns in the process: ``withProcessorTurn(_:)`` lets the write in progress finish, holds
/// the next ones back for the processor's transaction, then lets them go.
public final class ArrivalJournal: @unchecked Sendable {
    // @unchecked: `write`, its connection and `pending` are used only from the client's one
    // network thread; `appending`, `processorWaiting` and `processorHolds` only under `turn`.
    private let write: ([MQTTMessage]) throws -> Void
    private let logger: Logger
    private let retryDelays: [Duration]
    private let pause: @Sendable (Duration) -> Void
    private var pending: [MQTTMessage] = []
    public let written = Atomic<Int>(0)
    private let failed = Atomic<Int>(0)
    private let turn = NSCondition()
    private var appending = false
    private var processorWaiting = 0
    private var processorHolds = false

    /// Messages written in one transaction at most: ``append(_:)`` flushes when it has this
    /// many (the client's burst is bounded the same way).
    public static let maxBatch = 256

    /// - Parameter retryDelays: the waits between attempts when a write fails. A failed write
    ///   is tried again (the database busy beyond its timeout on a starved machine, a full disk
    ///   freed a moment later); the network thread waits meanwhile, which holds back the next
    ///   arrivals (the broker queues them); the default waits 3.3 s in all, well inside the
    ///   keep-alive. A burst still not written after them is counted lost: the client goes on
    ///   and acknowledges it.
    /// - Parameter pause: waits a retry delay on the network thread (it has nothing else to do
    ///   until the write succeeds: a bounded backoff, not a poll); tests pass a wait they
    ///   control.
    /// - Parameter write: writes the messages, in order, in one transaction.
    public init(
        logger: Logger,
        retryDelays: [Duration] = [.milliseconds(10), .milliseconds(50), .milliseconds(250), .seconds(1), .seconds(2)],
        pause: @escaping @Sendable (Duration) -> Void = ArrivalJournal.sleep,
        write: @escaping ([MQTTMessage]) throws -> Void
    ) {
        self.write = write
        self.logger = logger
        self.retryDelays = retryDelays
        self.pause = pause
    }

    /// Messages lost because every attempt to journal them failed (each logged as an error).
    public var lost: Int { failed.load(ordering: .relaxed) }

    /// The `/healthz` `degraded` line while any arrival was lost; nil otherwise.
    public var degradation: String? {
        let lost = lost
        guard lost > 0 else { return nil }
        return "journal: \(lost) arrivals could not be written after retries and are lost (the log says which)"
    }

    /// Takes a message into the burst being read. Only ever called from the one network thread.
    public func append(_ message: MQTTMessage) {
        pending.append(message)
        if pending.count >= Self.maxBatch { flush() }
    }

    /// Writes the burst in one transaction, trying again after a failure. Only ever called from
    /// the one network thread, after the burst's reads and before its acknowledgements.
    public func flush() {
        guard !pending.isEmpty else { return }
        defer { pending.removeAll(keepingCapacity: true) }
        var attempt = 0
        while true {
            do {
                try withAppendTurn { try write(pending) }
                written.add(pending.count, ordering: .relaxed)
                if attempt > 0 {
                    logger.notice(
                        "journal write succeeded after retrying",
                        metadata: ["messages": "\(pending.count)", "attempts": "\(attempt + 1)"])
                }
                return
            } catch {
                guard attempt < retryDelays.count else {
                    failed.add(pending.count, ordering: .relaxed)
                    logger.error(
                        "journal write failed: messages lost",
                        metadata: [
                            "messages": "\(pending.count)",
                            "topics": .string(Set(pending.map(\.topic)).sorted().prefix(10).joined(separator: ",")),
                            "error": "\(error)", "attempts": "\(attempt + 1)",
                        ])
                    return
                }
                if attempt == 0 {
                    logger.warning(
                        "journal write failed; trying again",
                        metadata: ["messages": "\(pending.count)", "error": "\(error)"])
                }
                // Outside the turn: the processor may commit meanwhile.
                pause(retryDelays[attempt])
                attempt += 1
            }
        }
    }

    /// Runs one journal write when the processor neither holds nor waits for its turn.
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

    /// The default pause: the calling thread sleeps `delay`.
    public static func sleep(_ delay: Duration) {
        Thread.sleep(forTimeInterval: Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18)
    }

    /// Runs `body` (the processor's write transaction) while no arrival is being journalled;
    /// arrivals wait until it returns.
    /// - Important: blocks the caller for at most one journal write; keep `body` short.
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

/// What a service's `/metrics` says of its journal (the evaluator's and the notifier's alike).
extension ArrivalJournal: CountedInMetrics {
    public static let counterName = "perimeter_journal_lost_total"
    public static let counterHelp =
        "Arrivals acknowledged to the broker that the journal could not write after retries: lost."
    public var counterValue: Int { lost }
}
