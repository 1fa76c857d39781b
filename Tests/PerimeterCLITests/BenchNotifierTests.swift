import Foundation
import Testing

@testable import PerimeterCLI

@Suite("perimeter bench notifier")
struct BenchNotifierTests {
    /// A tiny run: every phase completes and reports. The ratios are not asserted (a few hundred
    /// messages on a shared machine say nothing about them); that every notification of each
    /// phase arrived is: the bench waits for all of them and fails otherwise.
    @Test(
        "the notifier, the null notifier and the relay over MQTT; the notifier, the null webhook notifier and raw POSTs over HTTP"
    )
    func tinyRun() async throws {
        let result = try await perimeter(["bench", "notifier", "--count", "300"], timeout: .seconds(200))
        let context = "\(result.stderr)\n\(result.stdout)"
        #expect(result.status == .exited(0), "\(context)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(
            lines.contains {
                $0.hasPrefix("mqtt     notifier ") && $0.contains(" notifications/s   raw QoS 1 relay of ")
            }, "\(context)")
        #expect(
            lines.contains {
                $0.hasPrefix("         null notifier ") && $0.contains(" of the relay; the notifier is ")
                    && $0.hasSuffix("× the null notifier")
            }, "\(context)")
        #expect(lines.contains { $0.contains("null notifier: ") && $0.contains(" µs (broker ") }, "\(context)")
        #expect(lines.contains { $0.hasPrefix("webhook  notifier ") && $0.contains(" raw POSTs of ") }, "\(context)")
        #expect(
            lines.contains {
                $0.hasPrefix("         null webhook notifier ") && $0.hasSuffix("× the null webhook notifier")
            }, "\(context)")
        #expect(lines.contains { $0.contains("null webhook notifier: ") && $0.contains(" µs (broker ") }, "\(context)")
        #expect(lines.contains("duplicates seen by the receiver: 0"), "\(context)")
    }
}

@Suite("The bench's webhook receiver reads heads as bytes")
struct PostReceiverHeadTests {
    @Test(
        "Content-Length and Idempotency-Key in any case, values trimmed; the end of the head found across reads",
        arguments: [
            ("POST /hook HTTP/1.1\r\nContent-Length: 12\r\nIdempotency-Key: abc-1\r\n\r\n", 12, "abc-1"),
            ("POST /h HTTP/1.1\r\ncontent-length:7\r\nIDEMPOTENCY-KEY:\t k2 \r\nHost: x\r\n\r\n", 7, "k2"),
            ("POST /h HTTP/1.1\r\nHost: x\r\nX-Content-Length: 9\r\n\r\n", 0, nil),
            ("POST /h HTTP/1.1\r\nContent-Length: lots\r\nIdempotency-Keys: no\r\n\r\n", 0, nil),
        ] as [(String, Int, String?)])
    func head(text: String, length: Int, key: String?) throws {
        let bytes = Array(text.utf8) + Array("body".utf8)
        // Found whether the scan starts at the beginning or three bytes before the blank line.
        let end = try #require(PostReceiver.headEnd(bytes, from: 0))
        #expect(end == text.utf8.count)
        #expect(PostReceiver.headEnd(bytes, from: end - 4) == end)
        #expect(PostReceiver.headEnd(Array(bytes[..<(end - 1)]), from: 0) == nil, "no blank line yet")
        let fields = PostReceiver.fields(bytes[..<end])
        #expect(fields.end == end)
        #expect(fields.length == length)
        #expect(fields.key == key)
    }
}
