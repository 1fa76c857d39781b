import Foundation
import PerimeterKit
import Testing

@Suite("Free loopback ports")
struct FreePortTests {
    @Test("ports are chosen below the kernel's ephemeral range, never twice, and can be listened on")
    func belowEphemeralRange() throws {
        let range = try String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)
        let low = try #require(range.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) })
        // 300 random picks among some 22,000 ports would repeat one more often than not.
        let ports = try (0..<300).map { _ in try MosquittoBroker.freeLoopbackPort() }
        for port in ports {
            #expect(port >= 10_000 && port < low, "\(port) is outside 10000..<\(low)")
            #expect(!MosquittoBroker.accepts(port: port), "nothing listens on \(port)")
        }
        #expect(Set(ports).count == ports.count, "a port given twice: \(ports)")
    }
}
