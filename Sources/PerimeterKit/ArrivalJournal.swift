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
    public let written = Atomic<Int>(0)
    public let failed = Atomic<Int>(0)
    private let turn = NSCondition()
    private var appending = false
    private var processorWaiting = 0
    private var processorHolds = false

    public init(logger: Logger, write: @escaping (MQTTMessage) throws -> Void) {
        self.write = write
        self.logger = logger
    }

    /// Only ever called from the one network thread.
    public func append(_ message: MQTTMessage) {
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
        do {
            try write(message)
            written.add(1, ordering: .relaxed)
        } catch {
            failed.add(1, ordering: .relaxed)
            logger.error(
                "journal write failed: message lost", metadata: ["topic": .string(message.topic), "error": "\(error)"])
        }
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
