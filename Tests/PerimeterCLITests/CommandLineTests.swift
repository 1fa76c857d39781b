import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Testing

@Suite("perimeter command line")
struct CommandLineTests {
    @Test(
        "--help works at every level and exits 0",
        arguments: [
            [], ["version"], ["up"], ["regions"], ["regions", "validate"], ["regions", "export"], ["regions", "list"],
            ["regions", "get"], ["regions", "put"], ["regions", "delete"], ["rules"], ["rules", "list"],
            ["rules", "get"], ["rules", "put"], ["rules", "delete"], ["locate"],
            ["replay"], ["adv"], ["adv", "decode"],
            ["bench"], ["bench", "mqtt"], ["bench", "geo"], ["bench", "pipeline"], ["bench", "null-evaluator"],
            ["bench", "restart"], ["partitions"],
        ])
    func help(path: [String]) async throws {
        let result = try await perimeter(path + ["--help"])
        #expect(result.status == .exited(0))
        #expect(result.stdout.hasPrefix("OVERVIEW: "))
        #expect(result.stdout.contains("USAGE: perimeter"))
        let viaHelp = try await perimeter(["help"] + path)
        #expect(viaHelp.stdout == result.stdout)
    }

    @Test(
        "usage errors print the usage on stderr and exit 64",
        arguments: [
            (["frobnicate"], "error: unknown subcommand 'frobnicate'"),
            (["locate", "--frob"], "error: unknown option '--frob'"),
            (["locate"], "error: missing --regions <file>"),
            (["bench", "mqtt", "--qos", "3"], "error: --qos must be 0, 1 or 2"),
            (["bench", "mqtt", "--count", "many"], "error: --count: 'many' is not a valid <n>"),
            (["regions", "validate", "a", "b"], "error: unexpected argument 'b'"),
        ])
    func usageErrors(arguments: [String], message: String) async throws {
        let result = try await perimeter(arguments)
        #expect(result.status == .exited(64))
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stderr.contains("USAGE: perimeter"))
        #expect(result.stdout.isEmpty)
    }

    /// Regression: `perimeter regions list --help` and `perimeter rules list --help` printed a
    /// parent's help and exited 0, as if the command existed.
    @Test(
        "an unknown subcommand is a usage error naming it, with or without --help",
        arguments: [
            (["frobnicate", "--help"], "frobnicate", "perimeter"),
            (["regions", "frobnicate"], "frobnicate", "regions"),
            (["regions", "frobnicate", "--help"], "frobnicate", "regions"),
            (["regions", "frobnicate", "-h"], "frobnicate", "regions"),
            (["rules", "frobnicate", "--help"], "frobnicate", "rules"),
            (["subjects", "list", "--help"], "list", "subjects"),
            (["notifier", "replay", "--help"], "replay", "notifier"),
            (["bench", "nothing", "--count", "3", "--help"], "nothing", "bench"),
            (["adv", "encode", "--help"], "encode", "adv"),
            (["help", "regions", "frobnicate"], "frobnicate", "regions"),
        ])
    func unknownSubcommands(arguments: [String], name: String, group: String) async throws {
        let result = try await perimeter(arguments)
        #expect(result.status == .exited(64), "\(arguments)")
        #expect(result.stderr.contains("error: unknown subcommand '\(name)' of '\(group)'"), "\(result.stderr)")
        #expect(result.stderr.contains("USAGE: perimeter"))
        #expect(result.stdout.isEmpty, "no help on standard output: \(result.stdout)")
    }

    @Test("version")
    func version() async throws {
        let result = try await perimeter(["version"])
        #expect(result.status == .exited(0))
        #expect(result.stdout.hasPrefix("perimeter "))
    }

    @Test("regions validate: 0 for a good file; 1 and every problem for a bad one")
    func validate() async throws {
        let good = try await perimeter(["regions", "validate", CLIFixtures.museum])
        #expect(good.status == .exited(0))
        #expect(good.stdout.contains("7 regions valid"))
        let bad = try temporaryFile(
            "bad.geojson",
            """
            {"type":"FeatureCollection","features":[
              {"type":"Feature","id":"bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[2,2],[2,0],[0,2],[0,0]]]}},
              {"type":"Feature","id":"cafe","properties":{"radius":-4},"geometry":{"type":"Point","coordinates":[2.3,48.8]}},
              {"type":"Feature","id":"cafe","properties":{"radius":4},"geometry":{"type":"Point","coordinates":[2.3,48.8]}}
            ]}
            """)
        let result = try await perimeter(["regions", "validate", bad])
        #expect(result.status == .exited(1))
        let lines = result.stdout.split(separator: "\n")
        #expect(lines.count == 3)
        #expect(lines.contains { $0.contains("region 'bowtie' (feature 0): ring 0 self-intersects at vertex 1") })
        #expect(
            lines.contains {
                $0.contains(
                    "region 'cafe' (feature 1): properties.radius must be a finite number greater than 0 and at most 50000 (m), got -4"
                )
            })
        #expect(lines.contains { $0.contains("region 'cafe' (feature 2): duplicate id: feature 1 has the same id") })
    }

    @Test(
        "regions validate: a coordinate a hair past ±180 is clamped with a warning naming it (exit 0); farther, an error"
    )
    func coordinatesWithinToleranceAreClampedAndSaid() async throws {
        // Constructed: 180.00000000000006 is what projection round trips leave (see RegionBoundsTests).
        let fiji = try temporaryFile(
            "fiji.geojson",
            """
            {"type":"FeatureCollection","features":[
              {"type":"Feature","id":"hall","properties":{"radius":20},"geometry":{"type":"Point","coordinates":[2.3,48.8]}},
              {"type":"Feature","id":"fiji-east","geometry":{"type":"Polygon","coordinates":[[[179.9,-16.8],[180.00000000000006,-16.8],[180.00000000000006,-16.7],[179.9,-16.7],[179.9,-16.8]]]}}
            ]}
            """)
        let result = try await perimeter(["regions", "validate", fiji])
        #expect(result.status == .exited(0), "\(result.stdout)\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(
            lines.contains {
                $0.contains(
                    "warning: region 'fiji-east' (feature 1): ring 0 position 1: longitude 180.00000000000006 clamped to 180"
                )
            }, "\(lines)")
        #expect(lines.last?.contains("2 regions valid") == true, "\(lines)")
        let far = try temporaryFile(
            "far.geojson",
            #"{"type":"Feature","id":"far","properties":{"radius":20},"geometry":{"type":"Point","coordinates":[180.0001,0]}}"#
        )
        let refused = try await perimeter(["regions", "validate", far])
        #expect(refused.status == .exited(1))
        #expect(refused.stdout.contains("longitude 180.0001 out of range [-180, 180]"), "\(refused.stdout)")
    }

    @Test("locate: regions per point; bad rows reported with their line numbers, the run goes on")
    func locate() async throws {
        let input = #"""
            id,lat,lon,note
            hall,48.8608,2.3362,"in the ""grounds"""
            cafe,48.8604,2.3362,x
            broken,north,2.3,y
            short,48.86
            far,48.9,2.4,z
            """#
        let result = try await perimeter(["locate", "--regions", CLIFixtures.museum], stdin: input)
        let expected = #"""
            id,lat,lon,note,regions
            hall,48.8608,2.3362,"in the ""grounds""",museum
            cafe,48.8604,2.3362,x,cafe;museum
            far,48.9,2.4,z,

            """#
        #expect(result.status == .exited(0))
        #expect(result.stdout == expected)
        #expect(result.stderr.contains("<stdin>:4: lat 'north' is not a latitude in [-90, 90]"))
        #expect(result.stderr.contains("<stdin>:5: expected 4 fields as in the header, got 2"))
    }

    @Test("locate agrees with shapely on the parity sample (real time zones and synthetic polygons)")
    func locateParity() async throws {
        // The fixture belongs to the core tests; read it from the source tree.
        let parity = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("PerimeterCoreTests/Fixtures/parity")
        let result = try await perimeter([
            "locate", "--regions", parity.appendingPathComponent("regions.geojson").path,
            parity.appendingPathComponent("points.csv").path,
        ])
        #expect(result.status == .exited(0), "\(result.stderr)")
        let expected = try String(contentsOf: parity.appendingPathComponent("expected.csv"), encoding: .utf8)
            .split(separator: "\n").dropFirst().map {
                String($0.split(separator: ",", omittingEmptySubsequences: false).last!)
            }
        let got = result.stdout.split(separator: "\n").dropFirst().map {
            String($0.split(separator: ",", omittingEmptySubsequences: false).last!)
        }
        #expect(got.count == expected.count && got.count > 2000)
        let mismatches = zip(got, expected).enumerated().filter { $0.element.0 != $0.element.1 }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(5))")
    }

    @Test("a missing region file is named; exit 1")
    func missingFile() async throws {
        let result = try await perimeter(["locate", "--regions", "/nope/regions.geojson"], stdin: "lat,lon\n1,2\n")
        #expect(result.status == .exited(1))
        #expect(result.stderr.contains("/nope/regions.geojson does not exist"))
    }
}
