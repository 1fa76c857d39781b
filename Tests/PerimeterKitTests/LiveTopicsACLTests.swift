import Foundation
import PerimeterMQTT
import PerimeterTestSupport
import Testing

/// The shipped ACL (deploy/mosquitto/acl.conf) for visits and live positions, on a real
/// mosquitto with the production configuration.
@Suite("ACL: visits and live positions")
struct LiveTopicsACLTests {
    @Test(
        "a consumer reads visits and only its own live positions; the dashboard reads visits, no live positions; only the evaluator writes them"
    )
    func liveIsPerConsumer() async throws {
        let broker = try await ProductionBroker.start()
        defer { broker.stop() }
        let consumer = try await broker.connect("consumer")
        let dashboard = try await broker.connect("dashboard")
        for client in [consumer, dashboard] {
            _ = try await client.subscribe("perimeter/v1/museum/live/+/+")
            _ = try await client.subscribe("perimeter/v1/museum/visit/+")
        }
        let evaluator = try await broker.connect("evaluator")
        // In this order: the others' live positions first, so that reading them would show first.
        for topic in [
            "perimeter/v1/museum/live/dashboard/ann", "perimeter/v1/museum/live/guide-app/ann",
            "perimeter/v1/museum/live/consumer/ann", "perimeter/v1/museum/visit/ann",
        ] {
            let refusal = await publishRefusal(evaluator, topic, topic)
            #expect(refusal == nil, "the evaluator publishing on \(topic)")
        }
        let toConsumer = try await nextMessages(consumer, count: 2).map(\.topic)
        #expect(toConsumer == ["perimeter/v1/museum/live/consumer/ann", "perimeter/v1/museum/visit/ann"])
        let toDashboard = try await nextMessages(dashboard, count: 1).map(\.topic)
        #expect(toDashboard == ["perimeter/v1/museum/visit/ann"])
        for topic in ["perimeter/v1/museum/live/consumer/ann", "perimeter/v1/museum/visit/ann"] {
            let refusal = await publishRefusal(consumer, topic, "from-consumer")
            #expect(refusal == notAuthorized, "consumer publishing on \(topic)")
        }
        for client in [consumer, dashboard, evaluator] { await client.disconnect() }
    }
}
