import Foundation
import PerimeterKit
import Testing

@Suite("perimeter bench pipeline")
struct BenchPipelineTests {
    @Test("a tiny run through a real mosquitto and evaluator reports every figure and loses no event")
    func tinyRun() async throws {
        let result = try await perimeter(
            ["bench", "pipeline", "--subjects", "20", "--observations", "400", "--latency-seconds", "0.5"],
            timeout: .seconds(120))
        #expect(result.status == .exited(0), "\(result.stderr)")
        for line in [
            "relay baseline", "warm-up: 20 subjects known", "peak:", "observations/s", "events/s",
            "× relay (target ≥ 0.80:",
            "p50 ", "p90 ", "p99 ", "(target p99 < 5 ms:", "B/subject", "journal:", "evaluator: stopped on SIGTERM",
        ] {
            #expect(result.stdout.contains(line), "missing '\(line)' in:\n\(result.stdout)")
        }
        // By construction every report crosses a boundary: one enter or exit per observation,
        // each one expected by the pure evaluator and received exactly once.
        let lines = result.stdout.split(separator: "\n").map(String.init)
        let journal = try #require(lines.first { $0.contains("journal:") })
        let events = try #require(lines.first { $0.contains("expected,") })
        let observations = try #require(Self.number(before: " observations (", in: journal))
        #expect(observations > 420)
        #expect(Self.number(before: " expected,", in: events) == observations, "\(events)")
        #expect(Self.number(before: " received,", in: events) == observations, "\(events)")
        #expect(events.contains(" 0 missing, 0 duplicates, 0 unexpected"), "\(events)")
    }

    /// The integer just before `marker` in `line`.
    static func number(before marker: String, in line: String) -> Int? {
        guard let range = line.range(of: marker) else { return nil }
        return Int(line[..<range.lowerBound].split(separator: " ").last ?? "")
    }

    @Test("a QoS outside 0…1 is a usage error")
    func usage() async throws {
        let result = try await perimeter(["bench", "pipeline", "--qos", "2"])
        #expect(result.status == .exited(64))
        #expect(result.stderr.contains("--qos must be 0 or 1"))
    }
}
