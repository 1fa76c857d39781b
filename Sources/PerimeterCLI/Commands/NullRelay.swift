import PerimeterMQTT

/// The loop of the benches' null services (`bench null-evaluator`, the null notifier of `bench
/// notifier`): each message that arrives on `client` becomes the messages `reply` returns for
/// it, sent at once; their acknowledgements are awaited on a task of their own, so up to the
/// client's in-flight window is outstanding instead of one round trip per message. No journal,
/// no parsing, no state: the broker's ceiling for the traffic, not a model of a service.
///
/// Returns when the client's messages end (it was disconnected); what is unacknowledged then
/// no longer matters.
enum NullRelay {
    static func run(_ client: MQTTClient, reply: (MQTTMessage) -> [MQTTMessage]?) async throws {
        let (receipts, pending) = AsyncStream.makeStream(of: MQTTClient.Receipt.self)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await receipt in receipts {
                    do {
                        try await client.acknowledged(receipt)
                    } catch let error as MQTTError {
                        if case .closed = error.kind { return }
                        throw error
                    }
                }
            }
            for await message in client.messages {
                guard let batch = reply(message) else { continue }
                pending.yield(try client.send(batch: batch))
            }
            pending.finish()
            try await group.waitForAll()
        }
    }
}
