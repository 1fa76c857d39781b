import CMosquitto
import Dispatch
import Foundation
import Synchronization

/// An MQTT 5 (or 3.1.1) client over libmosquitto that reconnects by itself.
///
/// ```swift
/// let client = try MQTTClient(MQTTConfiguration(port: 1883, clientID: "evaluator-1"))
/// try await client.connect()
/// try await client.subscribe("perimeter/v1/museum/obs/#", qos: .atLeastOnce)
/// for await message in client.messages { … }
/// ```
///
/// The network loop runs on a thread of its own. When the connection fails or is lost it
/// reconnects after a capped exponential backoff, restores the subscriptions the broker does
/// not already hold, and resends unacknowledged QoS ≥ 1 messages. With
/// ``MQTTConfiguration/alternates`` each new attempt goes to the next broker in the list
/// (round robin); ``endpoint`` says which one is in use. ``disconnect()`` closes the
/// connection with a DISCONNECT packet, so the broker does not publish the last will.
public final class MQTTClient: Sendable {
    public let configuration: MQTTConfiguration
    /// Messages from the broker, in arrival order, through a bounded buffer.
    public let messages: MQTTMessages
    let core: ClientCore

    /// Creates the client; nothing touches the network until ``connect(timeout:)``.
    /// - Throws: ``MQTTError`` when libmosquitto rejects the configuration (e.g. an unreadable CA file).
    /// - Parameter onReceive: called on the client's network thread for every inbound message,
    ///   before it is queued on ``messages``. Keep it short: it holds up the network loop.
    /// - Parameter onBurstEnd: called on the network thread after each burst of inbound
    ///   packets (every packet already waiting on the socket, up to 256), before any of their
    ///   acknowledgements is written. A service that journals what `onReceive` gave it commits
    ///   here, once per burst: a QoS 1 message is acknowledged only once it is durable, so
    ///   `kill -9` at any moment loses nothing the broker would not send again.
    public init(
        _ configuration: MQTTConfiguration, onReceive: (@Sendable (MQTTMessage) -> Void)? = nil,
        onBurstEnd: (@Sendable () -> Void)? = nil
    )
        throws(MQTTError)
    {
        MQTTLibrary.initialize()
        self.configuration = configuration
        let (stream, continuation) = AsyncStream.makeStream(
            of: MQTTMessage.self, bufferingPolicy: .bufferingOldest(max(1, configuration.inboundBufferSize)))
        messages = MQTTMessages(stream: stream)
        core = try ClientCore(
            configuration: configuration, inbound: continuation, onReceive: onReceive, onBurstEnd: onBurstEnd)
    }

    deinit {
        core.requestStop()
    }

    /// The broker in use: the one connected to, or the one being tried next. With
    /// ``MQTTConfiguration/alternates`` this moves round the endpoints as connections fail.
    public var endpoint: MQTTConfiguration.Endpoint { core.currentEndpoint }

    /// The connection's current state.
    public var state: ConnectionState { core.state.withLock { $0.connection } }

    /// The current state, then every change, until the client is closed.
    public func connectionStates() -> AsyncStream<ConnectionState> { core.watchStates() }

    /// Inbound messages dropped because the consumer of ``messages`` fell behind.
    public var droppedMessages: Int { core.dropped.load(ordering: .relaxed) }

    /// Inbound messages handed to ``messages``.
    public var receivedMessages: Int { core.received.load(ordering: .relaxed) }

    /// Starts the network loop and waits until the broker accepts the connection.
    ///
    /// The loop keeps retrying in the background after a failure; this call only decides how
    /// long to wait for the first success.
    /// - Throws: ``MQTTError`` with kind `.connectionRefused` when the broker refuses (bad
    ///   credentials, not authorised), `.timeout` (naming the last failure) when no connection
    ///   was made in time, `.closed` after ``disconnect()``.
    public func connect(timeout: Duration = .seconds(10)) async throws {
        core.startLoop()
        try await core.waitUntilConnected(timeout: timeout)
    }

    /// Publishes a message.
    ///
    /// At QoS 0 this returns once libmosquitto has queued the message. At QoS 1 and 2 it
    /// returns only when the broker has acknowledged it (PUBACK / PUBCOMP); while the
    /// connection is down the message waits in libmosquitto and is sent after reconnecting.
    /// - Throws: ``MQTTError`` for an invalid topic, a payload over 256 MB, no connection at
    ///   QoS 0, a broker refusal (MQTT 5 reason code ≥ 0x80), or `.closed`.
    public func publish(
        _ topic: String, payload: [UInt8], qos: QoS = .atMostOnce, retain: Bool = false,
        properties: MQTTProperties = .none
    ) async throws {
        let mid = try core.sendPublish(topic, payload: payload, qos: qos, retain: retain, properties: properties)
        guard qos > .atMostOnce else { return }
        try await core.awaitCompletion(.packet(mid), topic: topic)
    }

    /// Publishes a UTF-8 string.
    public func publish(
        _ topic: String, _ text: String, qos: QoS = .atMostOnce, retain: Bool = false,
        properties: MQTTProperties = .none
    ) async throws {
        try await publish(topic, payload: Array(text.utf8), qos: qos, retain: retain, properties: properties)
    }

    /// Subscribes and waits for the SUBACK. The subscription is remembered and restored after
    /// every reconnect on which the broker did not resume the session.
    /// - Returns: the QoS the broker granted.
    /// - Throws: ``MQTTError`` for an invalid filter, a refused subscription, or `.closed`.
    /// Messages handed to the network loop; ``acknowledged(_:)`` waits for their acknowledgements.
    public struct Receipt: Sendable {
        fileprivate var pending: [(mid: Int32, topic: String)] = []
        public var count: Int { pending.count }
    }

    /// Sends every message in order and returns at once: a caller that must know when they
    /// are acknowledged awaits ``acknowledged(_:)`` (possibly elsewhere, so that sending the
    /// next messages does not wait for this batch's round trip).
    public func send(batch: [MQTTMessage]) throws -> Receipt {
        var receipt = Receipt()
        for message in batch {
            let mid = try core.sendPublish(
                message.topic, payload: message.payload, qos: message.qos, retain: message.retain,
                properties: message.properties)
            if message.qos > .atMostOnce { receipt.pending.append((mid, message.topic)) }
        }
        return receipt
    }

    /// Waits for every QoS ≥ 1 message of `receipt` and says, per message in order, how its
    /// acknowledgement went: nil when accepted, the error when refused (e.g. by the ACL).
    /// Throws only when the client closes.
    public func acknowledgements(_ receipt: Receipt) async throws -> [MQTTError?] {
        var outcomes: [MQTTError?] = []
        for (mid, topic) in receipt.pending {
            do {
                try await core.awaitCompletion(.packet(mid), topic: topic)
                outcomes.append(nil)
            } catch let error as MQTTError {
                if case .publishRefused = error.kind { outcomes.append(error) } else { throw error }
            }
        }
        return outcomes
    }

    /// Waits until every QoS ≥ 1 message of `receipt` is acknowledged (PUBACK or PUBCOMP).
    public func acknowledged(_ receipt: Receipt) async throws {
        for (mid, topic) in receipt.pending { try await core.awaitCompletion(.packet(mid), topic: topic) }
    }

    /// Sends every message in order, then waits until each QoS ≥ 1 message is acknowledged:
    /// the acknowledgements overlap instead of costing a round trip each.
    public func publish(batch: [MQTTMessage]) async throws {
        try await acknowledged(send(batch: batch))
    }

    @discardableResult
    public func subscribe(_ filter: String, qos: QoS = .atLeastOnce) async throws -> QoS {
        try MQTTTopic.validateFilter(filter)
        let pending = try core.sendSubscribe(filter, qos: qos)
        return try await core.awaitCompletion(pending, topic: filter)
    }

    /// Unsubscribes, forgets the filter and waits for the UNSUBACK.
    public func unsubscribe(_ filter: String) async throws {
        let pending = try core.sendUnsubscribe(filter)
        try await core.awaitCompletion(pending, topic: filter)
    }

    /// Closes the connection gracefully (DISCONNECT, so no last will) and stops the loop.
    /// Pending operations fail with `.closed`; ``messages`` ends. Safe to call twice.
    public func disconnect() async {
        core.requestStop()
        await core.waitForLoopExit()
    }
}

/// libmosquitto's process-wide initialisation, done once.
enum MQTTLibrary {
    private static let once: Void = { _ = mosquitto_lib_init() }()
    static func initialize() { _ = once }

    /// libmosquitto's version, e.g. "2.0.11".
    static var version: String {
        var major: Int32 = 0
        var minor: Int32 = 0
        var revision: Int32 = 0
        _ = mosquitto_lib_version(&major, &minor, &revision)
        return "\(major).\(minor).\(revision)"
    }
}

extension MQTTClient {
    /// The linked libmosquitto's version.
    public static var libraryVersion: String { MQTTLibrary.version }
}
