import Foundation
import PerimeterKit
import Testing

@Suite("perimeter bench idle")
struct BenchIdleTests {
    /// A tiny run: the burst goes through (the marker's enter and notification were seen) and
    /// every process is measured. The verdict is not asserted here: a one-second window on a
    /// loaded machine says little (`perimeter bench idle` with its 60 s default does).
    @Test("a burst, then every process's CPU over the idle window, with the 0.5 CPU-s per 60 s target")
    func tinyRun() async throws {
        let result = try await perimeter(
            [
                "bench", "idle", "--venue", CLIFixtures.venue("museum"), "--visitors", "5", "--settle", "0",
                "--seconds", "1",
            ],
            timeout: .seconds(200))
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(
            lines.contains { $0.hasPrefix("burst: 10 fixes in ") && $0.contains(" enters, ") },
            "\(result.stderr)\n\(result.stdout)")
        for process in ["up (evaluator, notifier, dashboard)", "gpsd", "agent", "mosquitto"] {
            #expect(
                lines.contains { $0.hasPrefix("  \(process) ") && $0.contains(" CPU-s in 1 s = ") },
                "\(process): \(result.stderr)\n\(result.stdout)")
        }
        #expect(lines.filter { $0.hasSuffix("under 0.5: met") || $0.hasSuffix("over 0.5: NOT met") }.count == 2)
        if result.status != .exited(0) {
            #expect(result.stderr.contains("over 0.5 CPU-s per 60 s idle: "), "\(result.stderr)")
        }
    }
}
