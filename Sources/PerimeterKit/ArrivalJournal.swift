import PerimeterMQTT
import Synchronization

/// Journals inbound messages on the MQTT client's network thread as they arrive, through a
/// database connection of the journal's own: libmosquitto has acknowledged a QoS 1 message by
/// the time its callback runs, so this write is what makes the message survive `kill -9`.
/// The services (evaluator, notifier) pass their store's append as `write`.
public final class ArrivalJournal: @unchecked Sendable {
    // @unchecked: `write` and its connection are used only from the client's one network thread.
    private let write: (MQTTMessage) throws -> Void
    private let logger: Logger
    public let written = Atomic<Int>(0)
    public let failed = Atomic<Int>(0)

    public init(logger: Logger, write: @escaping (MQTTMessage) throws -> Void) {
        self.write = write
        self.logger = logger
    }

    /// Only ever called from the one network thread.
    public func append(_ message: MQTTMessage) {
        do {
            try write(message)
            written.add(1, ordering: .relaxed)
        } catch {
            failed.add(1, ordering: .relaxed)
            logger.error(
                "journal write failed: message lost", metadata: ["topic": .string(message.topic), "error": "\(error)"])
        }
    }
}
