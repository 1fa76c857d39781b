import Foundation
import PerimeterKit
import PerimeterMQTT
import PerimeterTestSupport
import Synchronization
import Testing

/// MQTT 3.1.1 has no properties: a 3.1.1 client must send none, whatever the caller passes,
/// so that the services run unchanged on a 3.1.1-only broker (a NATS cluster).
@Suite("MQTT 3.1.1: no MQTT 5 properties on the wire")
struct MQTT311Tests {
    @Test("a 3.1.1 publish with properties arrives without them; the same publish over MQTT 5 keeps them")
    func propertiesAreNotSent() async throws {
        let broker = try await TestBroker.start()
        let subscriber = try await broker.connectedClient("sub", protocolVersion: .v5)
        let inbox = Inbox(subscriber)
        try await subscriber.subscribe("t/props/#", qos: .atLeastOnce)
        let properties = MQTTProperties(
            messageExpiry: 60, contentType: "application/json", userProperties: [UserProperty("event-id", "e-1")])
        for version in [MQTTConfiguration.ProtocolVersion.v311, .v5] {
            let publisher = try await broker.connectedClient("pub", protocolVersion: version)
            try await publisher.publish("t/props/\(version)", "{}", qos: .atLeastOnce, properties: properties)
            await publisher.disconnect()
        }
        let received = try await inbox.waitFor("both messages") { $0.count == 2 }
        let old = try #require(received.first { $0.topic == "t/props/3.1.1" })
        let new = try #require(received.first { $0.topic == "t/props/5" })
        #expect(old.properties.contentType == nil)
        #expect(old.properties.userProperties.isEmpty)
        #expect(old.properties.messageExpiry == nil)
        #expect(new.properties.contentType == "application/json")
        #expect(new.properties.userProperties == [UserProperty("event-id", "e-1")])
        #expect(new.properties.messageExpiry != nil)
        inbox.stop()
        await subscriber.disconnect()
        await broker.stop()
    }
}
