import Foundation
import PerimeterMQTT
import Synchronization

/// Messages a command receives, kept by one reading task for the command's life (an MQTT
/// message stream ends when the task reading it is cancelled, so it is read in one place).
final class MessageInbox: Sendable {
    private let log = Log()
    private let reader: Task<Void, Never>

    final class Log: Sendable {
        private let messages = Mutex<[(message: MQTTMessage, at: Date)]>([])
        func append(_ message: MQTTMessage) { messages.withLock { $0.append((message, Date())) } }
        var all: [(message: MQTTMessage, at: Date)] { messages.withLock { $0 } }
    }

    /// Starts collecting what `client` receives.
    init(_ client: MQTTClient) {
        let stream = client.messages
        let log = log
        reader = Task { for await message in stream { log.append(message) } }
    }

    var all: [MQTTMessage] { log.all.map(\.message) }

    /// Every message with the time it was read off the stream.
    var timed: [(message: MQTTMessage, at: Date)] { log.all }

    func stop() { reader.cancel() }
}
