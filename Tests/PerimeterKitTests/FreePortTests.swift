import Foundation
import PerimeterKit
import Testing

@Suite("Free loopback ports")
struct FreePortTests {
    @Test("ports are chosen below the kernel's ephemeral range, differ, and can be listened on")
    func belowEphemeralRange() throws {
        let range = try String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)
        let low = try #require(range.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) })
        let ports = try (0..<20).map { _ in try MosquittoBroker.freeLoopbackPort() }
        for port in ports {
            #expect(port >= 10_000 && port < low, "\(port) is outside 10000..<\(low)")
            #expect(!MosquittoBroker.accepts(port: port), "nothing listens on \(port)")
        }
        #expect(Set(ports).count > 15, "random, not one port again and again: \(ports)")
    }
}
