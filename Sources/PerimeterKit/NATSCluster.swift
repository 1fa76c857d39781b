import Foundation
import PerimeterCore
import PerimeterNet
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Three Debian `nats-server` processes on loopback forming a cluster with JetStream and MQTT,
/// each run with one node configuration (the repository's `deploy/nats/node.conf`) and its own
/// free ports and directory.
///
/// The broker-tier tests run one per test; `perimeter bench scale --partitions` runs one per
/// measured evaluator count. The configuration file is the deployed one, so what is tested and
/// measured is what an operator runs; the differences between nodes come from the environment,
/// as node.conf documents.
public final class NATSCluster: Sendable {
    public struct Node: Sendable {
        public var name: String
        public var clientPort: Int
        public var clusterPort: Int
        public var httpPort: Int
        public var mqttPort: Int
        public var directory: URL
    }

    public enum Failure: Error, CustomStringConvertible, Sendable {
        case notInstalled(searched: [String])
        case startFailed(String)

        public var description: String {
            switch self {
            case .notInstalled(let searched):
                "nats-server is not installed (looked in \(searched.joined(separator: ", "))); "
                    + "install it with: apt-get install -y nats-server (scripts/setup.sh does)"
            case .startFailed(let reason): "the NATS cluster did not start: \(reason)"
            }
        }
    }

    public let nodes: [Node]
    /// The NATS client URLs of the nodes (JetStream key-value goes through these, not MQTT).
    public var clientURLs: [String] { nodes.map { "nats://127.0.0.1:\($0.clientPort)" } }
    /// Where the nodes' JetStream files, logs and (with mappings) configuration live; removed by
    /// ``stop()``.
    public let directory: URL
    private let processes: Mutex<[Subprocess?]>
    /// How each node is spawned (the same executable, configuration, environment and ports
    /// every time, its log appended to).
    private let spawners: [@Sendable () throws -> Subprocess]

    private init(
        nodes: [Node], directory: URL, processes: [Subprocess], spawners: [@Sendable () throws -> Subprocess]
    ) {
        self.nodes = nodes
        self.directory = directory
        self.processes = Mutex(processes)
        self.spawners = spawners
    }

    /// Starts three nodes and waits until the cluster has formed: every node names the same
    /// JetStream meta leader and every MQTT port accepts connections.
    ///
    /// The ports are chosen free a moment before the nodes bind them, so another process can take
    /// one meanwhile (seen with tests in parallel: a node ended with "bind: address already in
    /// use"); a node that ends while the cluster forms is a failure at once, and the cluster is
    /// started again on other ports, three times at most.
    /// - Parameters:
    ///   - configuration: the node configuration (`deploy/nats/node.conf`): it names two routes,
    ///     so the cluster has three nodes.
    ///   - ackWait: `mqtt.ack_wait` (how long a QoS 1 message may stay unacknowledged).
    ///   - mappings: lines of a `mappings { … }` block: the nodes then run a copy of the
    ///     configuration next to a `partitions.conf` holding them (else the file's own, which
    ///     maps nothing).
    ///   - directory: where the nodes' files go (nil: a fresh temporary directory).
    /// - Throws: ``Failure`` when nats-server is missing or the cluster does not form within
    ///   `timeout`, with the nodes' last log lines.
    public static func start(
        configuration: String, ackWait: String = "5s", mappings: [String] = [], directory: URL? = nil,
        timeout: Duration = .seconds(60)
    ) async throws -> NATSCluster {
        guard let executable = Subprocess.find("nats-server") else {
            throw Failure.notInstalled(searched: Subprocess.searchPath)
        }
        guard FileManager.default.fileExists(atPath: configuration) else {
            throw Failure.startFailed("no node configuration at \(configuration) (deploy/nats/node.conf)")
        }
        let directory =
            directory
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("perimeter-nats-\(UUID().uuidString)")
        var failure = Failure.startFailed("not tried")
        for _ in 0..<3 {
            let cluster = try launch(
                executable: executable, configuration: configuration, ackWait: ackWait, mappings: mappings,
                directory: directory)
            do {
                try await cluster.waitUntilFormed(timeout: timeout)
                return cluster
            } catch {
                let logs = cluster.logs
                let ended = cluster.endedNode != nil
                await cluster.stop()
                let reason = if case .startFailed(let reason) = error as? Failure { reason } else { "\(error)" }
                failure = .startFailed("\(reason); logs: \(logs.suffix(4000))")
                // Only a node that ended (a port taken) is worth another try on other ports.
                if !ended { break }
            }
        }
        throw failure
    }

    /// Writes the nodes' directories (and with mappings, their configuration) and spawns them.
    private static func launch(
        executable: String, configuration: String, ackWait: String, mappings: [String], directory: URL
    ) throws -> NATSCluster {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var ports = Set<Int>()
        func port() throws -> Int {
            while true {
                let candidate = try MosquittoBroker.freeLoopbackPort()
                if ports.insert(candidate).inserted { return candidate }
            }
        }
        var nodes: [Node] = []
        for index in 1...3 {
            let nodeDirectory = directory.appendingPathComponent("n\(index)")
            try FileManager.default.createDirectory(at: nodeDirectory, withIntermediateDirectories: true)
            nodes.append(
                Node(
                    name: "n\(index)", clientPort: try port(), clusterPort: try port(), httpPort: try port(),
                    mqttPort: try port(), directory: nodeDirectory))
        }
        var configurationPath = configuration
        if !mappings.isEmpty {
            // node.conf includes ./partitions.conf, relative to itself.
            configurationPath = directory.appendingPathComponent("node.conf").path
            try FileManager.default.copyItem(atPath: configuration, toPath: configurationPath)
            try ("mappings {\n" + mappings.map { "  \($0)\n" }.joined() + "}\n").write(
                to: directory.appendingPathComponent("partitions.conf"), atomically: true, encoding: .utf8)
        }
        var spawners: [@Sendable () throws -> Subprocess] = []
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
            let path = configurationPath
            spawners.append {
                try Subprocess.spawn(
                    executable, ["-c", path], environment: environment, stdout: .file(log, append: true),
                    stderr: .file(log, append: true))
            }
        }
        return NATSCluster(
            nodes: nodes, directory: directory, processes: try spawners.map { try $0() }, spawners: spawners)
    }

    /// A node that ended by itself (not by ``kill(_:)`` or ``stop()``), with how, if any.
    private var endedNode: (name: String, termination: Subprocess.Termination)? {
        processes.withLock { processes in
            for (index, process) in processes.enumerated() {
                if let termination = process?.poll() { return (nodes[index].name, termination) }
            }
            return nil
        }
    }

    /// Polls every node's `/jsz` until each knows the same JetStream meta leader and every MQTT
    /// port accepts connections.
    /// - Throws: ``Failure/startFailed(_:)`` after `timeout`, with what each node said last.
    public func waitUntilFormed(timeout: Duration = .seconds(60)) async throws {
        var last = ""
        let formed = try await waitForCondition(timeout: timeout, every: .milliseconds(200)) {
            if let ended = endedNode {
                throw Failure.startFailed("node \(ended.name) \(ended.termination)")
            }
            // Each node's meta leader, or what its monitor said instead (kept for the failure message).
            let views = nodes.indices.map { index -> (leader: String?, said: String) in
                let node = nodes[index]
                let response: (status: Int, body: String)
                do { response = try monitor(index, path: "/jsz") } catch {
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
        if !formed {
            throw Failure.startFailed("no single JetStream meta leader within \(timeout); last seen: \(last)")
        }
    }

    /// `GET path` on node `index`'s monitoring port (`/jsz`, `/connz`, `/varz`): the status and
    /// the body. A node that does not answer within 5 s is an error.
    public func monitor(_ index: Int, path: String) throws -> (status: Int, body: String) {
        do {
            let response = try HTTPClient.get(
                "http://127.0.0.1:\(nodes[index].httpPort)\(path)",
                options: HTTPClient.Options(connectTimeout: 5, timeout: 5, maxResponseBytes: 16 << 20))
            return (response.status, String(decoding: response.body, as: UTF8.self))
        } catch {
            throw Failure.startFailed("\(nodes[index].name): its monitor port: \(error)")
        }
    }

    /// The process id of node `index`, nil when it is not running (killed or stopped).
    public func pid(_ index: Int) -> pid_t? {
        processes.withLock { $0[index]?.isRunning == true ? $0[index]?.pid : nil }
    }

    public func isRunning(_ index: Int) -> Bool { processes.withLock { $0[index]?.isRunning ?? false } }

    /// `kill -9` node `index`.
    public func kill(_ index: Int) {
        guard let process = processes.withLock({ $0[index] }) else { return }
        process.signal(SIGKILL)
        process.waitBlocking()
        processes.withLock { $0[index] = nil }
    }

    /// Restarts node `index` on its ports and files: SIGTERM (SIGKILL after 10 s) if it runs,
    /// then the same command again. Its MQTT clients lose their connections and come back to
    /// it; what JetStream keeps (sessions, retained messages, streams) survives on its replicas.
    public func restart(_ index: Int) async throws {
        if let process = processes.withLock({ $0[index] }) {
            process.signal(SIGTERM)
            await process.end(within: .seconds(10))
        }
        let process = try spawners[index]()
        processes.withLock { $0[index] = process }
    }

    /// Every node's log, each under its name.
    public var logs: String {
        nodes.map { node in
            "== \(node.name)\n"
                + ((try? String(contentsOfFile: node.directory.appendingPathComponent("nats.log").path, encoding: .utf8))
                    ?? "")
        }.joined(separator: "\n")
    }

    /// Stops every node with SIGTERM, waits for them, and removes ``directory``.
    public func stop() async {
        let running = processes.withLock { processes in
            defer { processes = processes.map { _ in nil } }
            return processes.compactMap { $0 }
        }
        for process in running { process.signal(SIGTERM) }
        for process in running { await process.wait() }
        try? FileManager.default.removeItem(at: directory)
    }

    deinit {
        // A caller that did not stop the cluster (an error half-way) leaves no node behind.
        for process in processes.withLock({ $0.compactMap { $0 } }) where process.isRunning {
            process.signal(SIGTERM)
        }
    }
}
