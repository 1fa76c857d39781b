import PerimeterKit
import Synchronization

/// Keeps log records for a test to look at.
public final class InMemoryLogHandler: LogHandler {
    private let storage = Mutex<[LogRecord]>([])

    public init() {}

    public func write(_ record: LogRecord) {
        storage.withLock { $0.append(record) }
    }

    public var records: [LogRecord] { storage.withLock { $0 } }

    /// Records whose message contains `text`.
    public func records(containing text: String) -> [LogRecord] {
        records.filter { $0.message.contains(text) }
    }

    /// A logger at `level` that writes here.
    public func logger(label: String = "test", level: Logger.Level = .trace) -> Logger {
        Logger(label: label, level: level, handler: self)
    }
}
