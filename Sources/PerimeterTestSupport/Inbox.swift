import PerimeterKit
import PerimeterMQTT
import Synchronization

/// Everything a client receives, collected by one task (an `AsyncStream` ends for good when a
/// task waiting on it is cancelled, so tests poll this instead of timing out on the stream).
public final class Inbox: Sendable {
    private final class Storage: Sendable {
        let messages = Mutex<[MQTTMessage]>([])
    }
    private let storage = Storage()
    private let task: Task<Void, Never>

    public init(_ client: MQTTClient) {
        let storage = self.storage
        let messages = client.messages
        task = Task {
            for await message in messages { storage.messages.withLock { $0.append(message) } }
        }
    }

    public var messages: [MQTTMessage] { storage.messages.withLock { $0 } }

    /// Waits until `condition` holds for everything received so far; returns it. On timeout the
    /// error names `what`, adds `context` (e.g. what the process under test said) and the last
    /// messages received.
    @discardableResult
    public func waitFor(
        _ what: String, timeout: Duration = .seconds(30), context: @Sendable () -> String = { "" },
        _ condition: @escaping @Sendable ([MQTTMessage]) -> Bool
    ) async throws -> [MQTTMessage] {
        let messages: [MQTTMessage]? = try await waitForValue(timeout: timeout) {
            let current = self.messages
            return condition(current) ? current : nil
        }
        if let messages { return messages }
        let said = context()
        let received = self.messages
        throw TimeoutError(
            what:
                "\(what)\(said.isEmpty ? "" : "; \(said)"); received \(received.count) messages, the last: \(received.suffix(20).map { "\($0.topic) \($0.payloadString)" })",
            timeout: timeout)
    }

    public func stop() { task.cancel() }
}
