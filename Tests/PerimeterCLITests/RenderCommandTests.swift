import Foundation
import PerimeterCore
import PerimeterKit
import PerimeterTestSupport
import Testing

@Suite("perimeter render and replay --render")
struct RenderCommandTests {
    static var regions: String { CLIFixtures.path("render/visnjan-regions.geojson") }
    static var track: String { CLIFixtures.path("gpx/around-visnjan-with-car.gpx") }

    /// Width and height from a PNG's IHDR chunk, after checking the signature.
    static func pngSize(_ path: String) throws -> (width: Int, height: Int) {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        guard data.count > 24, Array(data.prefix(8)) == signature,
            String(decoding: data[12..<16], as: UTF8.self) == "IHDR"
        else { throw ChildFailure(message: "\(path) is not a PNG (\(data.count) bytes)") }
        func be32(_ at: Int) -> Int { data[at..<(at + 4)].reduce(0) { $0 << 8 | Int($1) } }
        return (be32(16), be32(20))
    }

    @Test("a real GPX track against a region file, as PNG through rsvg-convert")
    func png() async throws {
        #expect(Subprocess.find("rsvg-convert") != nil, "rsvg-convert is missing: apt-get install librsvg2-bin")
        let out = try temporaryFile("map.png", "").replacingOccurrences(of: "map.png", with: "visnjan.png")
        let result = try await perimeter([
            "render", "--regions", Self.regions, "--track", Self.track, "-o", out, "--width", "640", "--height", "480",
        ])
        #expect(result.status == .exited(0), "\(result.stderr)")
        let size = try Self.pngSize(out)
        #expect(size.width == 640 && size.height == 480)
    }

    @Test("SVG: every region, the track, the events replay finds, escaped labels, scale bar, north arrow")
    func svg() async throws {
        let out = try temporaryFile("map.svg", "")
        let result = try await perimeter(["render", "--regions", Self.regions, "--track", Self.track, "--output", out])
        #expect(result.status == .exited(0), "\(result.stderr)")
        let svg = try String(contentsOfFile: out, encoding: .utf8)
        for id in ["home", "bend", "ridge", "farm-beacons"] { #expect(svg.contains("id=\"region-\(id)\""), "\(id)") }
        #expect(svg.contains("<polyline id=\"track\""))
        #expect(svg.contains("The bend &lt;viewpoint&gt;"))
        #expect(svg.contains("Home &amp; car park"))
        #expect(svg.contains("id=\"scale-bar\"") && svg.contains("id=\"north-arrow\""))
        // The same events as `perimeter replay` prints (enter/exit/dwell, not states).
        let replayed = try await perimeter(["replay", "--regions", Self.regions, Self.track])
        let transitions = replayed.stdout.split(separator: "\n").filter { !$0.contains("\"event\":\"state\"") }
        #expect(transitions.count >= 6)
        let markers = svg.components(separatedBy: "<g class=\"event ").count - 1
        #expect(markers == transitions.count)
    }

    @Test("replay --render draws the dry run; --venue DIR reads DIR/regions.geojson")
    func replayRenderAndVenue() async throws {
        let out = try temporaryFile("dry.svg", "")
        let result = try await perimeter(["replay", "--regions", Self.regions, Self.track, "--render", out])
        #expect(result.status == .exited(0), "\(result.stderr)")
        let svg = try String(contentsOfFile: out, encoding: .utf8)
        #expect(svg.contains("<g class=\"event enter\" data-region=\"ridge\""))

        let venue = URL(
            fileURLWithPath: try temporaryFile(
                "regions.geojson", try String(contentsOfFile: Self.regions, encoding: .utf8))
        )
        .deletingLastPathComponent().path
        let venueOut = venue + "/venue.svg"
        let fromVenue = try await perimeter(["render", "--venue", venue, "-o", venueOut])
        #expect(fromVenue.status == .exited(0), "\(fromVenue.stderr)")
        #expect(FileManager.default.fileExists(atPath: venueOut))
    }

    @Test("--events draws the lines of a replay output; a line that is not JSON is refused with its number")
    func eventsFile() async throws {
        let replayed = try await perimeter(["replay", "--regions", Self.regions, Self.track])
        // Keep only the ridge's events: the picture must show exactly those.
        let ridge = replayed.stdout.split(separator: "\n").filter { $0.contains(#""region":"ridge""#) }
        let events = try temporaryFile("events.jsonl", ridge.joined(separator: "\n") + "\n")
        let out = try temporaryFile("events.svg", "")
        let result = try await perimeter([
            "render", "--regions", Self.regions, "--track", Self.track, "--events", events, "-o", out,
        ])
        #expect(result.status == .exited(0), "\(result.stderr)")
        let svg = try String(contentsOfFile: out, encoding: .utf8)
        let transitions = ridge.filter { !$0.contains(#""event":"state""#) }.count
        #expect(transitions == 2)
        #expect(svg.components(separatedBy: "<g class=\"event ").count - 1 == transitions)
        #expect(!svg.contains("data-region=\"home\"><circle"))
        let broken = try temporaryFile("events.jsonl", ridge.first.map(String.init)! + "\n{not json\n")
        let refused = try await perimeter([
            "render", "--regions", Self.regions, "--track", Self.track, "--events", broken, "-o", out,
        ])
        #expect(refused.status != .exited(0))
        #expect(refused.stderr.contains("events.jsonl:2: not a JSON event"), "\(refused.stderr)")
    }

    @Test("a GPX route without times is drawn (1 s apart, said once); bad records are listed five at most")
    func untimedAndBadRecords() async throws {
        let points = (0..<8).map { #"<trkpt lat="45.27\#($0)" lon="13.71\#($0)"></trkpt>"# }.joined()
        let route = try temporaryFile("route.gpx", #"<gpx><trk><trkseg>\#(points)</trkseg></trk></gpx>"#)
        let out = try temporaryFile("route.svg", "")
        let drawn = try await perimeter(["render", "--regions", Self.regions, "--track", route, "-o", out])
        #expect(drawn.status == .exited(0), "\(drawn.stderr)")
        #expect(drawn.stderr.contains("8 point(s) without <time>: drawn 1 s apart"))
        #expect(drawn.stderr.split(separator: "\n").count == 1, "\(drawn.stderr)")
        let svg = try String(contentsOfFile: out, encoding: .utf8)
        let polyline = try #require(svg.split(separator: "\n").first { $0.hasPrefix("<polyline id=\"track\"") })
        #expect(polyline.split(separator: " ").filter { $0.contains(",") }.count == 8)

        let lines = ["t,lat,lon"] + (0..<9).map { "2026-12-01T00:00:0\($0)Z,x,13.71" }
        let csv = try temporaryFile("bad.csv", lines.joined(separator: "\n") + "\n")
        let bad = try await perimeter(["render", "--regions", Self.regions, "--track", csv, "-o", out])
        #expect(bad.stderr.components(separatedBy: "skipped: ").count - 1 == 5)
        #expect(bad.stderr.contains("… 4 more record(s) skipped"), "\(bad.stderr)")
    }

    @Test("gateways are drawn as labelled squares; a malformed gateway is refused with its index")
    func gateways() async throws {
        let good = try temporaryFile("gw.json", #"{"gateways":[{"id":"gw-hall","lat":45.2740,"lon":13.7150}]}"#)
        let out = try temporaryFile("gw.svg", "")
        let result = try await perimeter(["render", "--regions", Self.regions, "--gateways", good, "-o", out])
        #expect(result.status == .exited(0), "\(result.stderr)")
        let svg = try String(contentsOfFile: out, encoding: .utf8)
        #expect(svg.contains("data-gateway=\"gw-hall\"") && svg.contains(">gw-hall</text>"))
        let bad = try temporaryFile("gw.json", #"[{"id":"a","lat":45.27,"lon":13.71},{"id":"b","lat":95}]"#)
        let refused = try await perimeter(["render", "--regions", Self.regions, "--gateways", bad, "-o", out])
        #expect(refused.status != .exited(0))
        #expect(refused.stderr.contains("gateways[1]"), "\(refused.stderr)")
    }

    @Test(
        "bad input is refused with a message naming it",
        arguments: [
            (["render", "-o", "/tmp/x.svg"], "exactly one of --regions"),
            (
                ["render", "--regions", "/nonexistent/r.geojson", "-o", "/tmp/x.svg"],
                "/nonexistent/r.geojson does not exist"
            ),
            (["render", "--venue", "/nonexistent", "-o", "/tmp/x.svg"], "/nonexistent/regions.geojson does not exist"),
            (["render", "--regions", "R", "--events", "e.jsonl", "-o", "/tmp/x.svg"], "--events needs --track"),
        ])
    func refusals(arguments: [String], message: String) async throws {
        let resolved = arguments.map { $0 == "R" ? Self.regions : $0 }
        let result = try await perimeter(resolved)
        #expect(result.status != .exited(0))
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }
}
