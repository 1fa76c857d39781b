import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A private Debian `mosquitto` process on a loopback port, with a generated configuration.
///
/// `perimeter up` runs one as the embedded default; tests run one each, on a free port, so
/// that they can run in parallel. Its files (configuration, persistence, log) live in one
/// directory; a temporary one (no ``Options/directory`` given) is removed when the broker
/// value goes away after the process has ended, and kept while it still runs.
public final class MosquittoBroker: Sendable {
    public struct Options: Sendable {
        /// The port to listen on; nil picks a free one.
        public var port: Int?
        /// Keep sessions and retained messages across restarts (saved on SIGTERM and every
        /// `autosaveSeconds`).
        public var persistence: Bool
        public var autosaveSeconds: Int
        /// Where config, data and log go; nil makes a temporary directory.
        public var directory: URL?
        /// Extra lines appended to the generated configuration.
        public var extraConfiguration: [String]

        public init(
            port: Int? = nil, persistence: Bool = false, autosaveSeconds: Int = 1800, directory: URL? = nil,
            extraConfiguration: [String] = []
        ) {
            self.port = port
            self.persistence = persistence
            self.autosaveSeconds = autosaveSeconds
            self.directory = directory
            self.extraConfiguration = extraConfiguration
        }
    }

    public enum Failure: Error, CustomStringConvertible, Sendable {
        case notInstalled(searched: [String])
        case startFailed(String)

        public var description: String {
            switch self {
            case .notInstalled(let searched):
                "mosquitto is not installed (looked in \(searched.joined(separator: ", "))); "
                    + "install it with: apt-get install -y mosquitto mosquitto-clients"
            case .startFailed(let reason): "mosquitto did not start: \(reason)"
            }
        }
    }

    public let port: Int
    public let directory: URL
    public let executable: String
    private let process = Mutex<Subprocess?>(nil)

    public var configurationPath: String { directory.appendingPathComponent("mosquitto.conf").path }
    public var logPath: String { directory.appendingPathComponent("mosquitto.log").path }

    /// The broker's log so far.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The running process's id, or nil when stopped.
    public var pid: Int32? { process.withLock { $0?.isRunning == true ? $0?.pid : nil } }

    /// Whether `directory` was made for this broker (and is removed with it).
    private let ownsDirectory: Bool

    private init(port: Int, directory: URL, executable: String, ownsDirectory: Bool) {
        self.port = port
        self.directory = directory
        self.executable = executable
        self.ownsDirectory = ownsDirectory
    }

    /// Writes a configuration, starts `mosquitto` and waits until it accepts connections.
    /// - Throws: ``Failure`` when mosquitto is missing, exits, or does not listen within 30 s (a
    ///   loaded machine can be slow to start it).
    public static func start(_ options: Options = Options()) async throws -> MosquittoBroker {
        let executable = try locate()
        var lastError: (any Error)?
        // A free port can be taken between choosing and binding; choose again a few times.
        for _ in 0..<(options.port == nil ? 5 : 1) {
            let directory =
                options.directory
                ?? FileManager.default.temporaryDirectory.appendingPathComponent(
                    "perimeter-broker-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let port = try options.port ?? freeLoopbackPort()
            let broker = MosquittoBroker(
                port: port, directory: directory, executable: executable, ownsDirectory: options.directory == nil)
            try broker.writeConfiguration(options)
            do {
                try await broker.launch()
                return broker
            } catch {
                lastError = error
            }
        }
        throw lastError ?? Failure.startFailed("unknown reason")
    }

    /// `mosquitto` on PATH, or in Debian's /usr/sbin.
    public static func locate() throws -> String {
        guard let path = Subprocess.find("mosquitto") else {
            throw Failure.notInstalled(searched: Subprocess.searchPath)
        }
        return path
    }

    private func writeConfiguration(_ options: Options) throws {
        let user = String(cString: getpwuid(geteuid())?.pointee.pw_name ?? strdup("root"))
        var lines = [
            "# Written by perimeter for a private broker; regenerated on every start.",
            "listener \(port) 127.0.0.1",
            "allow_anonymous true",
            // mosquitto drops privileges to this user when started as root; keep the user that
            // owns the directory so that persistence and the log stay writable.
            "user \(user)",
            "persistence \(options.persistence)",
            "persistence_location \(directory.path)/",
            "autosave_interval \(options.autosaveSeconds)",
            // The default of 1,000 silently drops QoS 1 messages for a subscriber that falls
            // behind (DESIGN.md §11); a pipeline under load needs far more headroom.
            "max_queued_messages 1000000",
            // Bounded in bytes too (deploy/mosquitto.conf says why), and no packet over 1 MiB.
            "max_queued_bytes 268435456",
            "max_packet_size 1048576",
            "persistent_client_expiration 7d",
            "sys_interval 10",
            "max_inflight_messages 0",
            "set_tcp_nodelay true",
            "log_dest file \(logPath)",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            "log_timestamp_format %Y-%m-%dT%H:%M:%S",
        ]
        lines += options.extraConfiguration
        try (lines.joined(separator: "\n") + "\n").write(toFile: configurationPath, atomically: true, encoding: .utf8)
    }

    private func launch() async throws {
        let errorLog = directory.appendingPathComponent("mosquitto.stderr").path
        // Its own process group: a Ctrl-C at the terminal reaches `perimeter up`, which stops
        // the services first and the broker last.
        let child = try Subprocess.spawn(
            executable, ["-c", configurationPath], stdout: .null, stderr: .file(errorLog, append: false),
            newProcessGroup: true)
        process.withLock { $0 = child }
        let listening = try await waitForCondition(timeout: .seconds(30)) {
            if let termination = child.poll() {
                let stderr = (try? String(contentsOfFile: errorLog, encoding: .utf8)) ?? ""
                process.withLock { $0 = nil }
                throw Failure.startFailed(
                    "\(termination) on port \(port): "
                        + (stderr + log).trimmingCharacters(in: .whitespacesAndNewlines))
            }
            return Self.accepts(port: port)
        }
        if listening { return }
        kill()
        throw Failure.startFailed("no connection on 127.0.0.1:\(port) within 30 s")
    }

    /// Stops the broker with SIGTERM (it saves persistence) and waits for it to exit.
    public func stop() async {
        guard let child = process.withLock({ $0 }) else { return }
        // mosquitto loses a SIGTERM that arrives after its handler is installed but before its
        // main loop starts (the loop sets its run flag again): a stop right after a start hung
        // a test run for good. So it is said again every second, and SIGKILL ends it after 10 s.
        for _ in 0..<10 {
            child.signal(SIGTERM)
            if await child.wait(timeout: .seconds(1)) != nil { break }
        }
        await child.end(within: .zero)
        process.withLock { $0 = nil }
    }

    /// Returns when the broker process ends (at once if none runs); woken by the kernel.
    /// Cancellation does not end the wait: ``stop()`` does.
    public func exited() async {
        guard let child = process.withLock({ $0 }) else { return }
        await child.wait()
    }

    /// Kills the broker with SIGKILL: no goodbye to clients, no persistence save.
    public func kill() {
        guard let child = process.withLock({ $0 }) else { return }
        child.signal(SIGKILL)
        child.waitBlocking()
        process.withLock { $0 = nil }
    }

    /// Starts the broker again on the same port with the same configuration.
    public func restart() async throws {
        await stop()
        // The old process may hold the port for a moment; retry briefly.
        var attempts = 0
        while true {
            do {
                try await launch()
                return
            } catch {
                attempts += 1
                if attempts >= 5 { throw error }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    deinit {
        if let child = process.withLock({ $0 }), child.isRunning {
            child.signal(SIGTERM)
        } else if ownsDirectory {
            try? FileManager.default.removeItem(at: directory)
        }
    }

    /// A port on 127.0.0.1 that was free a moment ago, chosen at random below the kernel's
    /// ephemeral range: a port the kernel picked (bind to 0) can be handed to some outgoing
    /// connection before the broker binds it (seen when tests ran in parallel: gpsd's "Address
    /// already in use"). Falls back to the kernel's choice when there is no room below.
    ///
    /// A process never gets the same port twice: two brokers started at once (tests in
    /// parallel) could otherwise both be given a port neither has bound yet.
    public static func freeLoopbackPort() throws -> Int {
        let ephemeralLow =
            (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))
            .flatMap { $0.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } } ?? 32768
        if ephemeralLow > 12_000 {
            for _ in 0..<200 {
                let port = Int.random(in: 10_000..<ephemeralLow)
                guard handedOut.withLock({ $0.insert(port).inserted }) else { continue }
                if (try? bindLoopback(port: port)) == port { return port }
            }
        }
        return try bindLoopback(port: 0)
    }

    /// The ports ``freeLoopbackPort()`` has given (or found taken) in this process.
    private static let handedOut = Mutex<Set<Int>>([])

    /// Binds a socket to 127.0.0.1:`port` (0: the kernel chooses), closes it, returns the port.
    private static func bindLoopback(port: Int) throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure.startFailed("socket(): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw Failure.startFailed("bind(): \(String(cString: strerror(errno)))") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// True when something accepts TCP connections on 127.0.0.1:`port`.
    public static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}
