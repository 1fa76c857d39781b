import Foundation
import PerimeterKit
import Testing

@Suite("perimeter bench pipeline")
struct BenchPipelineTests {
    @Test("a tiny run through a real mosquitto and evaluator reports every figure and loses no event")
    func tinyRun() async throws {
        let result = try await perimeter(
            [
                "bench", "pipeline", "--subjects", "20", "--observations", "400", "--latency-seconds", "0.5",
                "--overload-seconds", "0.5",
            ],
            timeout: .seconds(180))
        #expect(result.status == .exited(0), "\(result.stderr)")
        for line in [
            "relay baseline", "null evaluator plan (the pure evaluator's messages for the peak):",
            "null evaluator (the evaluator's messages, nothing else): 400 observations",
            "null-3 (three QoS-1 messages per observation): 400 observations", "warm-up: 20 subjects known", "peak:",
            "observations/s", "events/s", "× relay (target ≥ 0.80:", "× null, ", "× null-3 (target ≥ 1.00 × null-3:",
            "p50 ", "p90 ", "p99 ", "(target p99 < 5 ms:", "overload 2×: asked", "overload 4×: asked",
            "× peak, evaluator processed", "B/subject", "journal:", "evaluator: stopped on SIGTERM",
            "null evaluator under overload 2×: offered ", "null evaluator under overload 4×: offered ",
            "× its peak delivered ",
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
        // Each null evaluator published one transition per observation, as the evaluator does.
        for prefix in ["null evaluator (", "null-3 ("] {
            let null = try #require(lines.first { $0.hasPrefix(prefix) })
            #expect(Self.number(before: " transitions counted", in: null) == 400, "\(null)")
            #expect(null.contains("stopped on SIGTERM, exited with status 0"), "\(null)")
        }
        // Overload levels come after the latency phase and are checked with it.
        #expect(lines.filter { $0.hasPrefix("overload ") && $0.contains("caught up ") }.count == 2, "\(result.stdout)")
        // Each level says where the CPU went while it was offered (sampled every 100 ms, from the
        // last sample before the offer to the first after it).
        for line in lines where line.hasPrefix("overload ") && line.contains(": asked ") {
            #expect(
                line.contains("; CPU while offered: evaluator ") && line.contains(" cores")
                    && line.contains(", mosquitto ") && line.contains(", publishers and subscriber "),
                "\(line)")
        }
    }

    @Test(
        "bench restart: a tiny run seeds, rebuilds, is killed and restarts from its snapshot, and reports each figure")
    func restartTinyRun() async throws {
        let result = try await perimeter(["bench", "restart", "--subjects", "300"], timeout: .seconds(180))
        #expect(result.status == .exited(0), "\(result.stderr)")
        for line in [
            "empty:    online", "seed:     300 observations, authorization records and usage states journalled",
            "rebuild:  online", "restart:  online",
            // The regions file, then per subject its authorization, usage and observation.
            "(from the snapshot at journal row 901)", "restart after kill -9:",
            "× an evaluator with none", "B/subject after restart",
        ] {
            #expect(result.stdout.contains(line), "missing '\(line)' in:\n\(result.stdout)")
        }
    }

    @Test("--no-null and --no-overload leave those phases out")
    func skippedPhases() async throws {
        let result = try await perimeter(
            [
                "bench", "pipeline", "--subjects", "20", "--observations", "200", "--latency-seconds", "0.2",
                "--no-null", "--no-overload",
            ],
            timeout: .seconds(120))
        #expect(result.status == .exited(0), "\(result.stderr)")
        #expect(result.stdout.contains("peak:"))
        for absent in ["null evaluator", "null-3", "overload 2×", "overload 4×"] {
            #expect(!result.stdout.contains(absent), "'\(absent)' in:\n\(result.stdout)")
        }
    }

    @Test("--transition-every 10: most reports change nothing, the transitions that happen are all checked")
    func realisticTraffic() async throws {
        let result = try await perimeter(
            [
                "bench", "pipeline", "--subjects", "20", "--observations", "400", "--latency-seconds", "0.2",
                "--no-null", "--no-overload", "--transition-every", "10",
            ],
            timeout: .seconds(120))
        #expect(result.status == .exited(0), "\(result.stderr)")
        #expect(result.stdout.contains("a transition every 10 reports"), "\(result.stdout)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        let journal = try #require(lines.first { $0.contains("journal:") })
        let events = try #require(lines.first { $0.contains("expected,") })
        let observations = try #require(Self.number(before: " observations (", in: journal))
        let expected = try #require(Self.number(before: " expected,", in: events))
        // One side change per subject every 10 reports (the warm-up's first reports enter too).
        #expect(expected > 0 && expected * 5 < observations, "\(events) of \(observations) observations")
        #expect(Self.number(before: " received,", in: events) == expected, "\(events)")
        #expect(events.contains(" 0 missing, 0 duplicates, 0 unexpected"), "\(events)")
        let refused = try await perimeter(
            ["bench", "pipeline", "--subjects", "20", "--observations", "300", "--transition-every", "10"])
        #expect(refused.status == .exited(64))
        #expect(
            refused.stderr.contains("must be a multiple of --subjects × --transition-every (200)"), "\(refused.stderr)")
    }

    @Test("--help names every phase and its options; the null evaluator it starts is not listed under bench")
    func help() async throws {
        let pipeline = try await perimeter(["bench", "pipeline", "--help"])
        #expect(pipeline.status == .exited(0))
        for text in [
            "relay ", "null ", "null-3 ", "warm-up ", "peak ", "latency ", "overload ", "--no-null", "--no-overload",
            "--overload-seconds <s>", "--overload-catch-up <s>", "--overload-publishers <n>", "--transition-every <N>",
        ] {
            #expect(pipeline.stdout.contains(text), "missing '\(text)' in:\n\(pipeline.stdout)")
        }
        let bench = try await perimeter(["bench", "--help"])
        #expect(bench.stdout.contains("pipeline"))
        #expect(!bench.stdout.contains("null-evaluator"), "\(bench.stdout)")
        let hidden = try await perimeter(["bench", "null-evaluator", "--help"])
        #expect(hidden.status == .exited(0))
        #expect(hidden.stdout.contains("--plan <file>"))
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
