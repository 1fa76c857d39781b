import Foundation
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit
import PerimeterMQTT
import PerimeterNATS

/// A partition owner reduced to its publishing discipline, for the fencing test: holds
/// partition leases with ``PartitionLeaseKeeper`` and, every 50 ms, publishes one QoS 1
/// message per partition it may publish for, carrying the fencing token, on
/// `perimeter/v1/museum/fenced/{partition}`; asks the keeper right before each publish.
/// Prints `acquired P token T`, `lost P after seq S`, `resumed after D at seq S` (a gap in its own loop:
/// it was paused).
///
/// With `--unchecked` it plays an owner without the check: it publishes with the tokens it held
/// at its last round, before asking the store again, as a process paused between its check and
/// its publish would; only the consumers' rule can stop those messages.
enum LeaseHolder {
    static func run() async throws {
        guard let nats = argument("--nats"), let port = argument("--mqtt-port").flatMap(Int.init),
            let instance = argument("--instance")
        else {
            fail(
                "usage: lease-holder --nats URL,… --mqtt-port P --instance I [--partitions N] [--ttl-ms T] [--margin-ms M]"
            )
        }
        let count = argument("--partitions").flatMap(Int.init) ?? 2
        let ttl = Duration.milliseconds(argument("--ttl-ms").flatMap(Int.init) ?? 3000)
        let margin = Duration.milliseconds(argument("--margin-ms").flatMap(Int.init) ?? 500)
        let connection = try NATSConnection(servers: nats.split(separator: ",").map(String.init), timeout: .seconds(2))
        let store = try connection.keyValue(bucket: "perimeter-leases", ttl: ttl, replicas: 3)
        let keeper = PartitionLeaseKeeper(
            store: store, venue: "museum", instance: instance, partitions: try Partitioning(count: count),
            policy: PartitionLease(ttl: ttl, margin: margin),
            logger: Logger(label: "lease-holder", handler: StreamLogHandler(format: .logfmt)))
        let client = try MQTTClient(
            MQTTConfiguration(port: port, clientID: "lease-holder-\(instance)", protocolVersion: .v311))
        try await client.connect(timeout: .seconds(20))
        say("ready")
        let unchecked = CommandLine.arguments.contains("--unchecked")
        var lastTokens: [Int: UInt64] = [:]
        var seq = 0
        var lastLoop = ContinuousClock.now
        var lastStep = ContinuousClock.now - .seconds(3600)
        while true {
            let now = ContinuousClock.now
            if now - lastLoop > .seconds(1) { say("resumed after \(now - lastLoop) at seq \(seq)") }
            lastLoop = now
            if unchecked {
                for (partition, token) in lastTokens.sorted(by: { $0.key < $1.key }) {
                    seq += 1
                    try await publish(client, instance, partition, token, seq)
                }
            }
            if now - lastStep >= ttl / 6 {
                let round = await keeper.stepAsync()
                lastStep = now
                lastTokens = keeper.publishable
                for partition in round.lost { say("lost \(partition) after seq \(seq)") }
                for partition in round.acquired {
                    say("acquired \(partition) token \(keeper.token(for: partition).map(String.init) ?? "-")")
                }
            }
            for partition in 0..<count where !unchecked {
                guard let token = keeper.token(for: partition) else { continue }
                seq += 1
                try await publish(client, instance, partition, token, seq)
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    static func publish(
        _ client: MQTTClient, _ instance: String, _ partition: Int, _ token: UInt64, _ seq: Int
    )
        async throws
    {
        let payload = JSONValue.object([
            "instance": .string(instance), "partition": .number(Double(partition)),
            "token": .number(Double(token)), "seq": .number(Double(seq)),
        ])
        try await client.publish("perimeter/v1/museum/fenced/\(partition)", payload.serialized(), qos: .atLeastOnce)
    }
}
