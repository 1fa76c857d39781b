// A process the tests start and kill at chosen moments: an MQTT client with a last will,
// a SQLite writer in the middle of a transaction, or a partition owner to pause. Not part of the product.
import Foundation
import PerimeterMQTT

func argument(_ name: String) -> String? {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("perimeter-testpeer: \(message)\n".utf8))
    exit(2)
}

/// Writes a line to standard output unbuffered, so that the test sees it at once.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

let mode = CommandLine.arguments.dropFirst().first ?? ""
switch mode {
case "mqtt-will":
    // Connects with a last will, says "ready", then waits to be killed.
    guard let port = argument("--port").flatMap(Int.init), let topic = argument("--topic") else {
        fail("usage: mqtt-will --port P --topic T [--payload X] [--protocol 5|3.1.1]")
    }
    let version: MQTTConfiguration.ProtocolVersion = argument("--protocol") == "3.1.1" ? .v311 : .v5
    let will = MQTTConfiguration.Will(
        topic: topic, payload: Array((argument("--payload") ?? "gone").utf8), qos: .atLeastOnce, retain: false)
    let client = try MQTTClient(
        MQTTConfiguration(port: port, clientID: "testpeer-\(getpid())", protocolVersion: version, will: will))
    try await client.connect(timeout: .seconds(5))
    say("ready")
    if argument("--then") == "disconnect" {
        await client.disconnect()
        say("disconnected")
        exit(0)
    }
    while true { try await Task.sleep(for: .seconds(60)) }
case "store-crash":
    try StoreCrash.run()
case "lease-holder":
    try await LeaseHolder.run()
default:
    fail("unknown mode '\(mode)'; modes: mqtt-will, store-crash, lease-holder")
}
