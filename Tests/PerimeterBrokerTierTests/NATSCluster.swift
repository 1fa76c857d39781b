import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport

/// The tests' view of `PerimeterKit.NATSCluster`: three nodes run with the repository's
/// `deploy/nats/node.conf`, and what the tests read from them (replication, connections).
extension NATSCluster {
    /// The repository's node configuration.
    static var configurationPath: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("deploy/nats/node.conf").path
    }

    /// Starts three nodes with the repository's node.conf and waits until the cluster has formed
    /// and JetStream has a meta leader.
    /// - Parameter mappings: lines of a `mappings { … }` block: the nodes then run a copy of
    ///   node.conf whose `partitions.conf` holds them (else the repository's, which maps nothing).
    static func start(ackWait: String = "5s", mappings: [String] = []) async throws -> NATSCluster {
        try await start(configuration: configurationPath, ackWait: ackWait, mappings: mappings)
    }

    /// Waits until every JetStream stream and consumer (the MQTT sessions, retained messages and
    /// QoS 1 queues) has a leader that sees all its followers current. Killing a node before the
    /// Raft groups of freshly made streams have caught up can leave a stream without quorum
    /// (seen here on a loaded machine: `$MQTT_rmsgs` "has NO quorum, stalled"). A follower's
    /// view of a group is unreliable, so each group is judged from its leader's `/jsz`.
    func waitUntilReplicated(timeout: Duration = .seconds(30)) async throws {
        var last = "no answer"
        try await waitUntil(
            "JetStream replicas in step", timeout: timeout, every: .milliseconds(200), context: { last }
        ) {
            // Group name → (leader, whether the leader sees every follower current), per node.
            var views: [String: [String: (leader: String, current: Bool)]] = [:]
            var raw: [String: String] = [:]
            for (index, node) in nodes.enumerated() where MosquittoBroker.accepts(port: node.httpPort) {
                guard
                    let response = try? monitor(index, path: "/jsz?accounts=true&streams=true&consumers=true"),
                    let json = try? JSONParser.parse(Array(response.body.utf8)).objectValue
                else { continue }
                var groups: [String: (String, Bool)] = [:]
                func add(_ name: String, _ cluster: JSONObject?) {
                    raw[node.name + " " + name] = cluster.map { JSONValue.object($0).serialized() } ?? "nil"
                    let replicas = cluster?["replicas"]?.arrayValue ?? []
                    groups[name] = (
                        cluster?["leader"]?.stringValue ?? "",
                        replicas.count == nodes.count - 1
                            && replicas.allSatisfy { $0.objectValue?["current"]?.boolValue == true }
                    )
                }
                for account in json["account_details"]?.arrayValue ?? [] {
                    for stream in account.objectValue?["stream_detail"]?.arrayValue ?? [] {
                        let name = stream.objectValue?["name"]?.stringValue ?? "?"
                        add(name, stream.objectValue?["cluster"]?.objectValue)
                        for consumer in stream.objectValue?["consumer_detail"]?.arrayValue ?? [] {
                            add(
                                "\(name) > \(consumer.objectValue?["name"]?.stringValue ?? "?")",
                                consumer.objectValue?["cluster"]?.objectValue)
                        }
                    }
                }
                views[node.name] = groups
            }
            let names = Set(views.values.flatMap(\.keys))
            let lagging = names.filter { name in
                if views.count < nodes.count { return true }
                guard let leader = views.values.compactMap({ $0[name]?.leader }).first(where: { !$0.isEmpty }),
                    let view = views[leader]?[name]
                else { return true }
                return view.leader != leader || !view.current
            }
            last =
                "\(names.count) groups, lagging: \(lagging.sorted()) "
                + lagging.sorted().prefix(3).map { name in raw.filter { $0.key.hasSuffix(" " + name) }.description }
                .joined(separator: "; ")
            return !names.isEmpty && lagging.isEmpty
        }
    }

    /// The MQTT client ids connected to node `index`, from its `/connz`.
    func mqttClients(on index: Int) -> [String] {
        guard let response = try? monitor(index, path: "/connz?limit=1000"),
            let json = try? JSONParser.parse(Array(response.body.utf8)).objectValue
        else { return [] }
        return (json["connections"]?.arrayValue ?? []).compactMap { $0.objectValue?["mqtt_client"]?.stringValue }
    }

    /// The index of the node `clientID` is connected to, if any.
    func node(of clientID: String) -> Int? {
        nodes.indices.first { isRunning($0) && mqttClients(on: $0).contains(clientID) }
    }
}
