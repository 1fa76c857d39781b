import Foundation
import PerimeterMQTT
import Synchronization

/// Journals inbound messages on the MQTT client's network thread as they arrive, through a
/// database connection of the journal's own: libmosquitto has acknowledged a QoS 1 message by
/// the time its callback runs, so this write is what makes the message survive `kill -9`.
/// The services (evaluator, notifier) pass their store's insert as `write` and its transaction
/// as `transaction`.
///
/// Group commit: the client hands over each turn of its network loop at once (everything it
/// read in that turn, as many packets as are waiting under load), and the batch is written in
/// one transaction — one lock, one WAL append — instead of a commit per message. A message
/// waits for its commit at most one loop turn. A batch that cannot be committed is written
/// again message by message, so that one bad row costs only itself.
///
/// The journal and the service's processing write the same SQLite file. Left to SQLite's busy
/// handler, the network thread (one short insert after another, the lock free for only a few
/// microseconds in between) starved the processor's commits: under 4× overload the evaluator
/// processed 44 observations/s while offered 7,200/s (`bench pipeline`). So the two take
/// turns in the process: ``withProcessorTurn(_:)`` lets the insert in progress finish, holds
/// the next ones back for the processor's transaction, then lets them go.
public final class ArrivalJournal: @unchecked Sendable {
    // @unchecked: `write`, `transaction` and their connection are used only from the client's
    // one network thread; `appending`, `processorWaiting` and `processorHolds` only under `turn`.
    private let write: (MQTTMessage) throws -> Void
    private let transaction: (() throws -> Void) throws -> Void
    private let journalled: () -> Void
    private let logger: Logger
    public let written = Atomic<Int>(0)
    public let failed = Atomic<Int>(0)
    private let turn = NSCondition()
    private var appending = false
    private var processorWaiting = 0
    private var processorHolds = false

    /// - Parameters:
    ///   - transaction: runs its argument in one write transaction of the journal's connection.
    ///   - journalled: called after each batch is committed (wakes the processor).
    ///   - write: journals one message (inside the transaction).
    public init(
        logger: Logger, transaction: @escaping (() throws -> Void) throws -> Void,
        journalled: @escaping () -> Void = {}, write: @escaping (MQTTMessage) throws -> Void
    ) {
        self.write = write
        self.transaction = transaction
        self.journalled = journalled
        self.logger = logger
    }

    /// One turn of the network loop's messages. Only ever called from the one network thread.
    public func append(_ messages: [MQTTMessage]) {
        guard !messages.isEmpty else { return }
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
            try transaction { for message in messages { try write(message) } }
            written.add(messages.count, ordering: .relaxed)
        } catch {
            // Rolled back: each on its own, so that only what cannot be written is lost.
            for message in messages {
                do {
                    try transaction { try write(message) }
                    written.add(1, ordering: .relaxed)
                } catch {
                    failed.add(1, ordering: .relaxed)
                    logger.error(
                        "journal write failed: message lost",
                        metadata: ["topic": .string(message.topic), "error": "\(error)"])
                }
            }
        }
        journalled()
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
