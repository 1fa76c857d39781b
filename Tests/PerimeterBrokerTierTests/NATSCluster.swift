import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Synchronization

/// Three Debian `nats-server` processes on loopback forming a cluster with JetStream and MQTT,
/// each run with the repository's `deploy/nats/node.conf` and its own free ports and directory.
final class NATSCluster: Sendable {
    struct Node: Sendable {
        var name: String
        var clientPort: Int
        var clusterPort: Int
        var httpPort: Int
        var mqttPort: Int
        var directory: URL
    }

    let nodes: [Node]
    /// The NATS client URLs of the nodes (JetStream key-value goes through these, not MQTT).
    var clientURLs: [String] { nodes.map { "nats://127.0.0.1:\($0.clientPort)" } }
    let directory: URL
    private let processes: Mutex<[Subprocess?]>

    private init(nodes: [Node], directory: URL, processes: [Subprocess]) {
        self.nodes = nodes
        self.directory = directory
        self.processes = Mutex(processes)
    }

    /// The repository's node configuration.
    static var configurationPath: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("deploy/nats/node.conf").path
    }

    /// Starts `count` nodes and waits until the cluster has formed and JetStream has a meta leader.
    /// - Parameter mappings: lines of a `mappings { … }` block: the nodes then run a copy of
    ///   node.conf whose `partitions.conf` holds them (else the repository's, which maps nothing).
    static func start(count: Int = 3, ackWait: String = "5s", mappings: [String] = []) async throws -> NATSCluster {
        guard let executable = Subprocess.find("nats-server") else {
            throw ChildFailure(
                message: "nats-server is not installed (looked in \(Subprocess.searchPath.joined(separator: ", "))); "
                    + "install it with: apt-get install -y nats-server (scripts/setup.sh does)")
        }
        let directory = try Tier.directory("nats")
        var ports = Set<Int>()
        func port() throws -> Int {
            while true {
                let candidate = try MosquittoBroker.freeLoopbackPort()
                if ports.insert(candidate).inserted { return candidate }
            }
        }
        var nodes: [Node] = []
        for index in 1...count {
            let nodeDirectory = directory.appendingPathComponent("n\(index)")
            try FileManager.default.createDirectory(at: nodeDirectory, withIntermediateDirectories: true)
            nodes.append(
                Node(
                    name: "n\(index)", clientPort: try port(), clusterPort: try port(), httpPort: try port(),
                    mqttPort: try port(), directory: nodeDirectory))
        }
        var configuration = configurationPath
        if !mappings.isEmpty {
            configuration = directory.appendingPathComponent("node.conf").path
            try FileManager.default.copyItem(atPath: configurationPath, toPath: configuration)
            try ("mappings {\n" + mappings.map { "  \($0)\n" }.joined() + "}\n").write(
                to: directory.appendingPathComponent("partitions.conf"), atomically: true, encoding: .utf8)
        }
        var processes: [Subprocess] = []
        for node in nodes {
            let routes = nodes.filter { $0.name != node.name }.map { "nats://127.0.0.1:\($0.clusterPort)" }
            let environment = ProcessInfo.processInfo.environment.merging([
                "PERIMETER_NATS_NAME": node.name, "PERIMETER_NATS_LISTEN": "127.0.0.1:\(node.clientPort)",
                "PERIMETER_NATS_HTTP": "127.0.0.1:\(node.httpPort)", "PERIMETER_NATS_STORE": node.directory.path,
                "PERIMETER_NATS_CLUSTER": "127.0.0.1:\(node.clusterPort)", "PERIMETER_NATS_ROUTE_1": routes[0],
                "PERIMETER_NATS_ROUTE_2": routes[1], "PERIMETER_NATS_MQTT": "127.0.0.1:\(node.mqttPort)",
                "PERIMETER_NATS_ACK_WAIT": ackWait,
            ]) { $1 }
            let log = node.directory.appendingPathComponent("nats.log").path
            processes.append(
                try Subprocess.spawn(
                    executable, ["-c", configuration], environment: environment, stdout: .file(log, append: false),
                    stderr: .file(log, append: true)))
        }
        let cluster = NATSCluster(nodes: nodes, directory: directory, processes: processes)
        do {
            try await cluster.waitUntilFormed()
        } catch {
            let logs = cluster.logs
            await cluster.stop()
            throw ChildFailure(message: "\(error); logs: \(logs.suffix(4000))")
        }
        return cluster
    }

    /// Polls every node's `/jsz` until each knows the same JetStream meta leader and every MQTT
    /// port accepts connections.
    func waitUntilFormed(timeout: Duration = .seconds(60)) async throws {
        var last = ""
        try await waitUntil(
            "a NATS cluster with one JetStream meta leader", timeout: timeout, every: .milliseconds(200),
            context: { "last seen: \(last)" }
        ) {
            // Each node's meta leader, or what its monitor said instead (kept for the failure message).
            let views = nodes.map { node -> (leader: String?, said: String) in
                let response: (status: Int, body: String)
                do { response = try httpGet(port: node.httpPort, path: "/jsz") } catch {
                    return (nil, "\(node.name): \(error)")
                }
                guard let json = try? JSONParser.parse(Array(response.body.utf8)).objectValue else {
                    return (nil, "\(node.name): HTTP \(response.status), not JSON: \(response.body.prefix(200))")
                }
                let meta = json["meta_cluster"]?.objectValue
                guard let leader = meta?["leader"]?.stringValue, !leader.isEmpty else {
                    return (
                        nil, "\(node.name): no leader in \(meta.map { "\(JSONValue.object($0))" } ?? "no meta_cluster")"
                    )
                }
                return (leader, "\(node.name): \(leader)")
            }
            let leaders = views.map(\.leader)
            last = views.map(\.said).joined(separator: "; ")
            return leaders.allSatisfy({ $0 != nil }) && Set(leaders).count == 1
                && nodes.allSatisfy({ MosquittoBroker.accepts(port: $0.mqttPort) })
        }
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
            for node in nodes where MosquittoBroker.accepts(port: node.httpPort) {
                guard
                    let response = try? httpGet(
                        port: node.httpPort, path: "/jsz?accounts=true&streams=true&consumers=true"),
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
        guard let response = try? httpGet(port: nodes[index].httpPort, path: "/connz?limit=1000"),
            let json = try? JSONParser.parse(Array(response.body.utf8)).objectValue
        else { return [] }
        return (json["connections"]?.arrayValue ?? []).compactMap { $0.objectValue?["mqtt_client"]?.stringValue }
    }

    /// The index of the node `clientID` is connected to, if any.
    func node(of clientID: String) -> Int? {
        nodes.indices.first { isRunning($0) && mqttClients(on: $0).contains(clientID) }
    }

    func isRunning(_ index: Int) -> Bool { processes.withLock { $0[index]?.isRunning ?? false } }

    /// `kill -9` node `index`.
    func kill(_ index: Int) {
        guard let process = processes.withLock({ $0[index] }) else { return }
        process.signal(SIGKILL)
        process.waitBlocking()
        processes.withLock { $0[index] = nil }
    }

    var logs: String {
        nodes.map { node in
            "== \(node.name)\n"
                + ((try? String(contentsOfFile: node.directory.appendingPathComponent("nats.log").path, encoding: .utf8))
                    ?? "")
        }.joined(separator: "\n")
    }

    func stop() async {
        let running = processes.withLock { processes in
            defer { processes = processes.map { _ in nil } }
            return processes.compactMap { $0 }
        }
        for process in running { process.signal(SIGTERM) }
        for process in running { await process.wait() }
        try? FileManager.default.removeItem(at: directory)
    }
}
