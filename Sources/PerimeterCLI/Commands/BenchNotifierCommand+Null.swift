import Foundation
import PerimeterCore
import PerimeterMQTT
import PerimeterNet

/// The null notifier: the MQTT channel's ceiling on this machine. The notifier's traffic is two
/// hops through the broker (the event in, the notification out) where the raw relay is one,
/// so even a notifier that did nothing would not reach the relay's rate; the null notifier
/// measures what such a notifier gets.
extension BenchNotifierCommand {
    /// The null notifier's venue level: as long as the notifier's (`bench`), so that events and
    /// notifications keep their sizes, and apart from it.
    static let nullVenue = "bnull"

    /// The shape of the notifier's MQTT notifications, as the observer saw them.
    struct NotificationShape: Sendable {
        var bytes: Int
        var keyBytes: Int
    }

    /// Times `count` events through a null notifier: one client subscribed at QoS 1 to the
    /// events, as the notifier is, that publishes for each a notification of the notifier's
    /// size, QoS, properties and topic (`notifications/mq/{subject}`), with the notifier's
    /// in-flight window, and nothing else: no journal, no rules, no outbox. Returns the seconds
    /// from the first event published to the last notification observed.
    func runNullNotifier(
        port: Int, publisher: MQTTClient, shape: NotificationShape, inFlight: Int, t0: Date
    ) async throws -> Double {
        let root = "perimeter/v1/\(Self.nullVenue)"
        var observing = MQTTConfiguration(host: "127.0.0.1", port: port, clientID: "bench-null-observer")
        observing.inboundBufferSize = count + 64
        let observer = try MQTTClient(observing)
        try await observer.connect()
        try await observer.subscribe("\(root)/notifications/#", qos: .atLeastOnce)
        var relaying = MQTTConfiguration(host: "127.0.0.1", port: port, clientID: "bench-null-notifier")
        relaying.inboundBufferSize = count + 64
        relaying.maxInflight = inFlight
        let null = try MQTTClient(relaying)
        try await null.connect()
        try await null.subscribe("\(root)/enter/+/+", qos: .atLeastOnce)

        let payload = [UInt8](repeating: 0x30, count: shape.bytes)
        let key = String(repeating: "k", count: shape.keyBytes)
        let relay = Task {
            try await NullRelay.run(null) { event in
                let subject = event.topic.split(separator: "/").last.map(String.init) ?? "_"
                return [
                    MQTTMessage(
                        topic: "\(root)/notifications/mq/\(subject)", payload: payload, qos: .atLeastOnce,
                        properties: MQTTProperties(
                            contentType: "application/json", userProperties: [UserProperty("idempotency-key", key)]))
                ]
            }
        }
        let wanted = count
        let messages = observer.messages
        let seen = Task {
            var seen = 0
            for await _ in messages {
                seen += 1
                if seen == wanted { break }
            }
            return seen
        }
        let start = ContinuousClock.now
        try await publishEvents(publisher, venue: Self.nullVenue, prefix: "m", t0: t0)
        let observed = await seen.value
        let seconds = BenchMQTTCommand.seconds(ContinuousClock.now - start)
        await null.disconnect()
        try await relay.value
        await observer.disconnect()
        guard observed == wanted else {
            throw ExitCode(1, "the null notifier's notifications did not all arrive (\(observed) of \(wanted))")
        }
        return seconds
    }
}

/// The null webhook notifier: the webhook channel's ceiling, as the null notifier is the MQTT
/// channel's (an event in through the broker, a POST out, nothing between).
extension BenchNotifierCommand {
    /// Its venue level: as long as the notifier's, apart from it and from the null notifier's.
    static let nullHookVenue = "bnulw"

    /// Times `count` events through a null webhook notifier: a client subscribed at QoS 1 to the
    /// events, as the notifier is, that POSTs `body` (the notifier's webhook body) to `url` for
    /// each, with an idempotency key of its own and `concurrency` POSTs at a time, and nothing
    /// else: no journal, rules, outbox or signatures. Returns the seconds from the first event
    /// published to the last POST received (`receiver` counts distinct keys).
    func runNullWebhook(
        port: Int, publisher: MQTTClient, receiver: PostReceiver, url: String, body: [UInt8], t0: Date
    ) async throws -> Double {
        var configuration = MQTTConfiguration(host: "127.0.0.1", port: port, clientID: "bench-null-webhook")
        configuration.inboundBufferSize = count + 64
        let null = try MQTTClient(configuration)
        try await null.connect()
        try await null.subscribe("perimeter/v1/\(Self.nullHookVenue)/enter/+/+", qos: .atLeastOnce)
        let pool = BlockingPool(size: concurrency, name: "bench-null-webhook")
        defer { pool.stop() }
        let connections = HTTPClient.Connections(capacity: concurrency)
        let before = receiver.distinctKeys
        let messages = null.messages
        let wanted = count
        let relay = Task {
            var number = 0
            for await _ in messages {
                number += 1
                let key = "null-\(number)"
                pool.execute {
                    _ = try? HTTPClient.post(
                        url, headers: [("Content-Type", "application/json"), ("Idempotency-Key", key)], body: body,
                        options: HTTPClient.Options(), connections: connections)
                }
                if number == wanted { break }
            }
        }
        let start = ContinuousClock.now
        try await publishEvents(publisher, venue: Self.nullHookVenue, prefix: "w", t0: t0)
        try await receiver.waitForKeys(before + count, what: "the null webhook notifier's POSTs")
        let seconds = BenchMQTTCommand.seconds(ContinuousClock.now - start)
        await relay.value
        await null.disconnect()
        return seconds
    }
}
