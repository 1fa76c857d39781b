/// The messages the broker delivers to a client, in arrival order.
///
/// Backed by a bounded buffer: when the consumer falls behind by more than
/// ``MQTTConfiguration/inboundBufferSize`` messages, newer messages are dropped and counted
/// in ``MQTTClient/droppedMessages``. The sequence ends when the client is closed.
///
/// - Important: One consumer. Iterating it from two tasks splits the messages between them.
public struct MQTTMessages: AsyncSequence, Sendable {
    public typealias Element = MQTTMessage
    let stream: AsyncStream<MQTTMessage>

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<MQTTMessage>.AsyncIterator
        public mutating func next() async -> MQTTMessage? { await base.next() }
        public mutating func next(isolation actor: isolated (any Actor)?) async -> MQTTMessage? {
            await base.next(isolation: actor)
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: stream.makeAsyncIterator()) }
}
