import PerimeterKit
import PerimeterMQTT
import Testing

/// `broker.hosts`: several brokers for failover, as a comma-separated string or a JSON array.
@Suite("Configuration: broker.hosts")
struct BrokerHostsTests {
    struct Case: Sendable, CustomStringConvertible {
        var settings: [String]
        /// The endpoints expected, as `host:port`; nil when the configuration must be refused.
        var endpoints: [String]?
        /// A fragment of the error message when refused.
        var error: String = ""
        var description: String { settings.joined(separator: " ") }
    }

    static let cases: [Case] = [
        Case(
            settings: ["broker.hosts=127.0.0.1:4222,127.0.0.1:4223"], endpoints: ["127.0.0.1:4222", "127.0.0.1:4223"]),
        Case(settings: [#"broker.hosts=["a:1883", "b:1884", "c:1885"]"#], endpoints: ["a:1883", "b:1884", "c:1885"]),
        Case(settings: ["broker.hosts= a:1 , b:2 "], endpoints: ["a:1", "b:2"]),
        Case(settings: ["broker.hosts=[::1]:1883,10.0.0.2:1883"], endpoints: ["::1:1883", "10.0.0.2:1883"]),
        Case(settings: ["broker.hosts=only:1883"], endpoints: ["only:1883"]),
        Case(settings: ["broker.host=h", "broker.port=1999"], endpoints: ["h:1999"]),
        Case(settings: ["broker.hosts=a:1883,b"], endpoints: nil, error: "entry 2 'b' is not host:port"),
        Case(settings: ["broker.hosts=a:70000"], endpoints: nil, error: "entry 1 'a:70000' is not host:port"),
        Case(settings: ["broker.hosts=::1:1883"], endpoints: nil, error: "is not host:port"),
        Case(settings: ["broker.hosts=,"], endpoints: nil, error: "the list is empty"),
        Case(settings: ["broker.hosts=[1, 2]"], endpoints: nil, error: "expected a JSON array of strings"),
        Case(settings: ["broker.hosts=[a:1"], endpoints: nil, error: "entry 1 '[a:1' is not host:port"),
        Case(settings: ["broker.hosts=a:1,b:2", "broker.host=c"], endpoints: nil, error: "not both"),
        Case(settings: ["broker.hosts=a:1,b:2", "broker.port=1883"], endpoints: nil, error: "not both"),
    ]

    @Test("broker.hosts is read into the MQTT configuration's endpoints", arguments: cases)
    func hosts(_ testCase: Case) throws {
        let reader = try ConfigReader(environment: [:], overrides: testCase.settings)
        let broker = BrokerSettings.read(from: reader, defaultClientID: "x")
        do {
            try reader.finish()
            let endpoints = broker.mqttConfiguration().endpoints.map(\.description)
            #expect(endpoints == testCase.endpoints)
        } catch {
            #expect(testCase.endpoints == nil, "refused: \(error)")
            let message = "\(error)"
            #expect(message.contains(testCase.error) && message.contains("broker.host"), "\(message)")
        }
    }

    @Test("broker.hosts from the environment, and `perimeter up` counts it as a configured broker")
    func environment() throws {
        let reader = try ConfigReader(environment: ["PERIMETER_BROKER_HOSTS": "n1:1883,n2:1883"])
        #expect(BrokerSettings.isConfigured(in: reader))
        let broker = BrokerSettings.read(from: reader, defaultClientID: "x")
        try reader.finish()
        #expect(broker.host == "n1" && broker.port == 1883)
        #expect(broker.alternates == [MQTTConfiguration.Endpoint(host: "n2", port: 1883)])
        let unset = try ConfigReader(environment: [:])
        #expect(!BrokerSettings.isConfigured(in: unset))
    }
}
