import Foundation
import Testing

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
