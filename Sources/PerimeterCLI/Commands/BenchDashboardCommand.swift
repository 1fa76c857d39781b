import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterMQTT
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `perimeter bench dashboard`: the dashboard under many slow viewers while its health is
/// polled: the worst `/healthz` latency and the dashboard's peak memory, against targets.
struct BenchDashboardCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dashboard", abstract: "Slow dashboard readers against /healthz latency and memory.",
        discussion: """
            Starts a private mosquitto and `perimeter dashboard` as a process of its own (signed
            in with a generated password), then for --seconds: publishes the venue's outputs
            as the evaluator would (enter events and occupancy for --subjects subjects, --rate
            events/s, so every state frame is large and changes ten times a second), keeps
            --readers Server-Sent Event readers open, each from a loopback address of its own
            (127.0.0.2, 127.0.0.3, …: distinct viewers for the per-address limit) reading at
            most --read-bytes bytes a second and reconnecting like a browser's EventSource when
            dropped, and polls /healthz once a second on a new connection. Reports the worst
            and median /healthz latency (target < 100 ms), the dashboard's peak RSS (VmHWM,
            target < 200 MB), what the readers received and how often they were dropped.
            """)

    @Option(help: "Concurrent slow readers of /events (default 200).", valueName: "n")
    var readers: Int = 200

    @Option(help: "Duration in seconds (default 60).", valueName: "s")
    var seconds: Int = 60

    @Option(help: "Bytes each reader reads per second (default 2048).", valueName: "n")
    var readBytes: Int = 2048

    @Option(help: "Subjects in the venue (default 300).", valueName: "n")
    var subjects: Int = 300

    @Option(help: "Events published per second (default 200).", valueName: "n")
    var rate: Int = 200

    @Option(help: "Regions file drawn (default config/museum/regions.geojson).", valueName: "file")
    var regions: String = "config/museum/regions.geojson"

    mutating func validate() throws {
        if readers < 1 || readers > 60_000 { throw ValidationError("--readers must be 1 to 60000, got \(readers)") }
        if seconds < 1 { throw ValidationError("--seconds must be positive, got \(seconds)") }
        if readBytes < 1 { throw ValidationError("--read-bytes must be positive, got \(readBytes)") }
        if subjects < 1 { throw ValidationError("--subjects must be positive, got \(subjects)") }
        if rate < 1 { throw ValidationError("--rate must be positive, got \(rate)") }
        if !FileManager.default.fileExists(atPath: regions) {
            throw ValidationError("--regions: cannot read \(regions) (run from the repository, or name a GeoJSON file)")
        }
    }

    /// The bench could not run (not a usage error: exit 1).
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Set once the run is over: every reader closes and returns.
    final class Stop: Sendable {
        private let flag = Atomic<Bool>(false)
        var isSet: Bool { flag.load(ordering: .relaxed) }
        func set() { flag.store(true, ordering: .relaxed) }
    }

    /// One reader's tallies.
    final class Reader: Sendable {
        let bytes = Atomic<Int>(0)
        let connections = Atomic<Int>(0)
        let refused = Atomic<Int>(0)
    }

    func run() async throws {
        let text = try String(contentsOfFile: regions, encoding: .utf8)
        let drawn = RegionParser.parse(text: text).regions.filter {
            if case .beacon = $0.shape { return false }
            return true
        }
        guard !drawn.isEmpty else { throw Failure(description: "--regions: no region with a shape in \(regions)") }
        let broker = try await MosquittoBroker.start()
        defer { broker.kill() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "perimeter-bench-dashboard-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let password = UUID().uuidString
        let passwordPath = directory.appendingPathComponent("password").path
        guard
            FileManager.default.createFile(
                atPath: passwordPath, contents: Data(password.utf8), attributes: [.posixPermissions: 0o600])
        else { throw ValidationError("cannot write the dashboard's password file \(passwordPath)") }
        let config: JSONValue = [
            "broker": ["host": "127.0.0.1", "port": .number(Double(broker.port))],
            "dashboard": [
                "venue": "bench", "regions": .string(regions), "http": "127.0.0.1:0",
                "passwordFile": .string(passwordPath),
            ],
            "log": ["level": "warning"],
        ]
        let configPath = directory.appendingPathComponent("dashboard.json").path
        try config.serialized().write(toFile: configPath, atomically: true, encoding: .utf8)
        let outPath = directory.appendingPathComponent("dashboard.out").path
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let dashboard = try Subprocess.spawn(
            executable, ["dashboard", "--config", configPath], stdout: .file(outPath, append: false),
            stderr: .file(directory.appendingPathComponent("dashboard.err").path, append: false),
            newProcessGroup: true)
        defer {
            dashboard.signal(SIGTERM)
            _ = dashboard.waitBlocking()
        }
        var port = 0
        for _ in 0..<600 where port == 0 {
            let out = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
            if let line = out.split(separator: "\n").first(where: { $0.hasPrefix("perimeter dashboard: http://") }) {
                port = URLComponents(string: String(line.split(separator: " ").last ?? ""))?.port ?? 0
            }
            if port == 0 { try await Task.sleep(for: .milliseconds(50)) }
        }
        guard port > 0 else {
            let errors =
                (try? String(contentsOfFile: directory.appendingPathComponent("dashboard.err").path, encoding: .utf8))
                ?? ""
            throw Failure(description: "the dashboard never said where it listens: \(errors.suffix(1000))")
        }
        let cookie = try Self.signIn(port: port, password: password)
        let listening = port

        print(
            "perimeter bench dashboard: \(readers) readers at \(readBytes) B/s, \(subjects) subjects, \(rate) events/s, \(seconds) s"
        )
        let stop = Stop()
        let tallies = (0..<readers).map { _ in Reader() }
        let threads = tallies.enumerated().map { index, tally in
            let source = "127.0.\(2 + index / 250).\(2 + index % 250)"
            let thread = Thread { [readBytes] in
                Self.read(
                    port: listening, from: source, cookie: cookie, bytesPerSecond: readBytes, tally: tally, stop: stop)
            }
            thread.stackSize = 256 * 1024
            thread.start()
            return thread
        }
        _ = threads

        let publisher = try MQTTClient(
            MQTTConfiguration(host: "127.0.0.1", port: broker.port, clientID: "bench-dashboard-publisher"))
        try await publisher.connect()
        let (rate, subjects) = (rate, subjects)
        let load = Task { try await Self.publish(publisher, regions: drawn, rate: rate, subjects: subjects) }

        var latencies: [Double] = []
        var failures = 0
        var rss: [Int] = []
        let end = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < end {
            let started = ContinuousClock.now
            let healthy = Self.health(port: port)
            let elapsed = ContinuousClock.now - started
            let milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
            latencies.append(milliseconds)
            if !healthy { failures += 1 }
            rss.append(Self.memory(pid: dashboard.pid, "VmRSS"))
            try await Task.sleep(until: started + .seconds(1), clock: .continuous)
        }
        let peak = Self.memory(pid: dashboard.pid, "VmHWM")
        stop.set()
        load.cancel()
        await publisher.disconnect()
        for _ in 0..<100 where threads.contains(where: { !$0.isFinished }) {
            try await Task.sleep(for: .milliseconds(50))
        }

        let sorted = latencies.sorted()
        let worst = sorted.last ?? 0
        let median = sorted.isEmpty ? 0 : sorted[sorted.count / 2]
        let received = tallies.reduce(0) { $0 + $1.bytes.load(ordering: .relaxed) }
        let connections = tallies.reduce(0) { $0 + $1.connections.load(ordering: .relaxed) }
        let refused = tallies.reduce(0) { $0 + $1.refused.load(ordering: .relaxed) }
        print(
            String(
                format: "healthz  %d polls, worst %.1f ms, median %.1f ms, %d failed   target worst < 100 ms: %@",
                latencies.count, worst, median, failures, worst < 100 && failures == 0 ? "met" : "MISSED"))
        print(
            String(
                format: "memory   dashboard peak RSS %.1f MB (VmHWM), last %.1f MB   target < 200 MB: %@",
                Double(peak) / 1024, Double(rss.last ?? 0) / 1024, peak < 200 * 1024 ? "met" : "MISSED"))
        print(
            "readers  \(received / 1024) KiB received in all, \(connections) connections for \(readers) readers (\(connections - readers) reconnects after a drop), \(refused) refused"
        )
    }

    /// The evaluator's outputs for the venue: enter events (a feed line each) and occupancy.
    static func publish(_ publisher: MQTTClient, regions: [Region], rate: Int, subjects: Int) async throws {
        let points = regions.map(point)
        var n = 0
        let interval = Duration.seconds(1) / rate
        var next = ContinuousClock.now
        while !Task.isCancelled {
            let region = regions[n % regions.count]
            let (lat, lon) = points[n % points.count]
            let subject = "visitor-\(n % subjects)"
            let jitter = Double(n % 97) * 0.000_002
            let t = Timestamp.format(Date())
            let event =
                #"{"id":"\#(String(format: "%032x", n))","event":"enter","venue":"bench","region":"\#(region.id)","subject":"\#(subject)","t":"\#(t)","seq":\#(n),"source":"gps","fix":{"t":"\#(t)","lat":\#(lat + jitter),"lon":\#(lon + jitter),"acc":5}}"#
            try await publisher.publish(
                "perimeter/v1/bench/enter/\(region.id)/\(subject)", event, qos: .atMostOnce)
            if n % 10 == 0 {
                try await publisher.publish(
                    "perimeter/v1/bench/occupancy/\(region.id)", #"{"count":\#(n % 50),"t":"\#(t)"}"#,
                    qos: .atMostOnce)
            }
            n += 1
            next += interval
            try await Task.sleep(until: next, clock: .continuous)
        }
    }

    /// A point inside (or on) the region, for the subject's fix.
    static func point(_ region: Region) -> (Double, Double) {
        switch region.shape {
        case .circle(let center, _): return (center.lat, center.lon)
        case .polygons(let polygons):
            let ring = polygons.first?.first ?? []
            guard !ring.isEmpty else { return (0, 0) }
            return (
                ring.map(\.lat).reduce(0, +) / Double(ring.count),
                ring.map(\.lon).reduce(0, +) / Double(ring.count)
            )
        case .beacon: return (0, 0)
        }
    }

    /// `VmRSS` or `VmHWM` of `pid` in KiB (0 when unknown).
    static func memory(pid: pid_t, _ field: String) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("\(field):") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// Opens a connection from `source` (a loopback address), sends `request`, returns the socket.
    static func connect(port: Int, from source: String?, request: String) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            _ = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        let bytes = Array(request.utf8)
        guard connected,
            bytes.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == bytes.count
        else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Reads one whole response (the peer closes: `Connection: close`).
    static func readAll(_ fd: Int32) -> String {
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            response += buffer[0..<count]
        }
        return String(decoding: response, as: UTF8.self)
    }

    static func signIn(port: Int, password: String) throws -> String {
        let body = "password=\(password)&next=%2F"
        let request =
            "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        guard let fd = connect(port: port, from: nil, request: request) else {
            throw Failure(description: "cannot reach the dashboard on 127.0.0.1:\(port)")
        }
        defer { close(fd) }
        let response = readAll(fd)
        guard let line = response.split(separator: "\r\n").first(where: { $0.hasPrefix("Set-Cookie: ") }),
            let cookie = line.dropFirst("Set-Cookie: ".count).split(separator: ";").first
        else { throw Failure(description: "the dashboard refused the bench's sign-in: \(response.prefix(200))") }
        return String(cookie)
    }

    /// GET /healthz on a new connection; true for a 200.
    static func health(port: Int) -> Bool {
        guard
            let fd = connect(
                port: port, from: nil, request: "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        else { return false }
        defer { close(fd) }
        return readAll(fd).hasPrefix("HTTP/1.1 200")
    }

    /// One slow viewer: reads at most `bytesPerSecond`, reconnects a second after a drop (as an
    /// EventSource does), until `stop`.
    static func read(
        port: Int, from source: String, cookie: String, bytesPerSecond: Int, tally: Reader, stop: Stop
    ) {
        let request =
            "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nCookie: \(cookie)\r\n\r\n"
        let slice = max(1, bytesPerSecond / 4)
        var buffer = [UInt8](repeating: 0, count: slice)
        while !stop.isSet {
            guard let fd = connect(port: port, from: source, request: request) else {
                tally.refused.add(1, ordering: .relaxed)
                Thread.sleep(forTimeInterval: 1)
                continue
            }
            tally.connections.add(1, ordering: .relaxed)
            var timeout = timeval(tv_sec: 0, tv_usec: 250_000)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            while !stop.isSet {
                let count = recv(fd, &buffer, buffer.count, 0)
                if count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK) { break }
                if count > 0 { tally.bytes.add(count, ordering: .relaxed) }
                Thread.sleep(forTimeInterval: 0.25)
            }
            close(fd)
            if !stop.isSet { Thread.sleep(forTimeInterval: 1) }
        }
    }
}
