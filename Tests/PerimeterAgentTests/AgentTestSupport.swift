import Foundation
import PerimeterAgent
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

enum Fixtures {
    static func path(_ name: String) throws -> String {
        guard let url = Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil) else {
            throw ChildFailure(message: "fixture \(name) missing from the test bundle")
        }
        return url.path
    }

    /// gpsd's own reports for a capture (`X.log.chk`): the fixes with a time, as the agent maps them.
    static func gpsdFixes(_ name: String) throws -> [GPSReading] {
        let data = try Data(contentsOf: URL(fileURLWithPath: try path("nmea/\(name).chk")))
        // Lines by bytes: "\r\n" is one Character, which splitting on "\n" would miss.
        return try Lines(data: data).compactMap { line in
            guard line.contains(#""class":"TPV""#) else { return nil }
            if case .fix(let reading) = try GPSDReport.interpret(String(line)) { return reading }
            return nil
        }
    }
}

/// Collects what a source emits.
final class Collected: Sendable {
    private let state = Mutex<[AgentMessage]>([])
    var messages: [AgentMessage] { state.withLock { $0 } }
    var readings: [GPSReading] {
        messages.compactMap { if case .gps(_, let reading) = $0 { reading } else { nil } }
    }
    func add(_ messages: [AgentMessage]) { state.withLock { $0 += messages } }
}

/// A TCP server on loopback that sends a file's lines, paced, once told to start: what a GPS
/// receiver on a serial-over-TCP bridge looks like to gpsd (`gpsd tcp://host:port`), and what
/// `gpsfake -t` sets up.
final class NMEAFeeder: Sendable {
    let port: Int
    private let listener: Int32
    private let go = DispatchSemaphore(value: 0)
    /// The accepted connection, once there is one (stop shuts it down).
    private final class Accepted: Sendable { let fd = Atomic<Int32>(-1) }
    private let client = Accepted()

    init(lines: [String], pace: Duration = .milliseconds(3)) throws {
        let (fd, port) = try listenOnLoopback("feeder")
        self.port = port
        listener = fd
        let listener = fd
        let go = self.go
        let accepted = self.client
        let thread = Thread {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            accepted.fd.store(client, ordering: .releasing)
            go.wait()
            for line in lines {
                let bytes = Array((line + "\r\n").utf8)
                _ = bytes.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                // Sleep, not a clock: the pace of a receiver on a serial line, which gpsd (another process) reads in real time.
                Thread.sleep(forTimeInterval: Double(pace.components.attoseconds) / 1e18)
            }
            // Keep the connection until gpsd closes it or the test stops the feeder (a receiver
            // that goes quiet is not one that goes away).
            var byte: UInt8 = 0
            while recv(client, &byte, 1, 0) > 0 {}
            close(client)
        }
        thread.start()
    }

    func start() { go.signal() }

    func stop() {
        let accepted = client.fd.load(ordering: .acquiring)
        if accepted >= 0 { shutdown(accepted, Int32(SHUT_RDWR)) }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}

/// A TCP socket listening on a free loopback port, for the stand-ins of peers.
/// - Throws: `ChildFailure` naming `who` and the system's reason.
func listenOnLoopback(_ who: String) throws -> (fd: Int32, port: Int) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ok = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && listen(fd, 4) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    guard ok else { throw ChildFailure(message: "\(who): cannot listen: \(String(cString: strerror(errno)))") }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

func temporaryDirectory() throws -> URL {
    let url = TestScratch.root.appendingPathComponent("perimeter-agent-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}
