// `scripts/bench-regions.sh`: what one crafted or ordinary region costs to read, prepare and
// evaluate — the bound behind RegionParser.Limits.live, PolygonGrid.workPerEdge and
// RingGeometry.workPerEdge. Built from PerimeterCore's sources plus this file with
// `swiftc -O` (no SwiftPM release build needed). Arguments: positions per shape (default
// 3000), fixes per shape (default 2000).
import Foundation

@main
struct BenchRegions {
    static func seconds() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    static func feature(_ coordinates: String, type: String = "Polygon") -> String {
        #"{"type":"Feature","id":"x","properties":{},"geometry":{"type":"\#(type)","coordinates":\#(coordinates)}}"#
    }

    static func ring(_ points: [(Double, Double)]) -> String {
        "[" + (points + [points[0]]).map { "[\($0.0),\($0.1)]" }.joined(separator: ",") + "]"
    }

    /// Shapes of about `n` positions: crafted ones (long teeth, a fan through one point, many
    /// holes, many parts, a spiral) and an ordinary regular polygon.
    static func shapes(_ n: Int) -> [(String, String)] {
        var comb: [(Double, Double)] = [(0, 0)]
        for tooth in 0..<(n / 4) {
            let x = Double(tooth) * 1e-4
            comb += [(x, 1), (x + 0.5e-4, 1), (x + 0.5e-4, 0.01), (x + 1e-4, 0.01)]
        }
        comb.append((Double(n / 4) * 1e-4, 0))
        let star = (0..<n).map { index -> (Double, Double) in
            let angle = Double(index) / Double(n) * 2 * .pi
            let radius = index % 2 == 0 ? 1.0 : 1e-4
            return (radius * cos(angle), radius * sin(angle))
        }
        let gon = (0..<n).map { (cos(Double($0) / Double(n) * 2 * .pi), sin(Double($0) / Double(n) * 2 * .pi)) }
        var holes = [ring([(0, 0), (10, 0), (10, 10), (0, 10)])]
        let count = n / 4
        let side = Int(Double(count).squareRoot()) + 1
        for hole in 0..<count {
            let x = Double(hole % side) * 9 / Double(side) + 0.5, y = Double(hole / side) * 9 / Double(side) + 0.5
            let d = 2 / Double(side)
            holes.append(ring([(x, y), (x, y + d), (x + d, y + d), (x + d, y)]))
        }
        var parts: [String] = []
        for part in 0..<(n / 4) {
            let x = Double(part % 60) * 0.01, y = Double(part / 60) * 0.01
            parts.append("[" + ring([(x, y), (x + 0.005, y), (x + 0.005, y + 0.005), (x, y + 0.005)]) + "]")
        }
        var outer: [(Double, Double)] = [], inner: [(Double, Double)] = []
        for step in 0..<(n / 2) {
            let angle = Double(step) / 50, radius = 0.001 + angle * 0.01
            outer.append((radius * cos(angle), radius * sin(angle)))
            inner.append(((radius + 0.004) * cos(angle), (radius + 0.004) * sin(angle)))
        }
        return [
            ("comb", feature("[" + ring(comb) + "]")), ("star", feature("[" + ring(star) + "]")),
            ("n-gon", feature("[" + ring(gon) + "]")), ("holes", feature("[" + holes.joined(separator: ",") + "]")),
            ("parts", feature("[" + parts.joined(separator: ",") + "]", type: "MultiPolygon")),
            ("spiral", feature("[" + ring(outer + inner.reversed()) + "]")),
        ]
    }

    static func main() {
        let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
        let n = arguments.first ?? 3000
        let fixes = arguments.dropFirst().first ?? 2000
        print("shape     bytes   parse ms  (live)   prepare ms  engine ms  µs/fix  result")
        for (name, text) in shapes(n) {
            let t0 = seconds()
            let document = RegionParser.parse(text: text)
            let t1 = seconds()
            let live = RegionParser.parse(text: text, limits: .live)
            let t2 = seconds()
            let liveNote = live.regions.isEmpty ? "live: refused (\(live.problems.first?.message.prefix(60) ?? ""))" : "live: ok"
            guard let region = document.regions.first else {
                print(
                    String(format: "%-7@ %7d %9.2f %9.2f", name as NSString, text.utf8.count, (t1 - t0) * 1000, (t2 - t1) * 1000),
                    " file: refused (\(document.problems.first?.message.prefix(70) ?? ""))")
                continue
            }
            let prepared = PreparedRegion(region)
            let t3 = seconds()
            var engine = GeofenceEngine(regions: [region])
            let t4 = seconds()
            let box = prepared.indexBoxes[0].box
            var random = SplitMix64(seed: 1)
            let start = Date(timeIntervalSince1970: 1_767_268_800)
            var events = 0
            for index in 0..<fixes {
                let point = GeoPoint(
                    lon: box.minLon + Double(random.next() % 1_000_000) / 1e6 * box.width,
                    lat: box.minLat + Double(random.next() % 1_000_000) / 1e6 * box.height)
                let fix = Fix(subject: "s\(index % 10)", t: start.addingTimeInterval(Double(index)), position: point, accuracy: 5)
                if case .success(let produced) = engine.process(fix) { events += produced.count }
            }
            let t5 = seconds()
            print(
                String(
                    format: "%-7@ %7d %9.2f %9.2f %11.2f %10.2f %7.1f", name as NSString, text.utf8.count, (t1 - t0) * 1000,
                    (t2 - t1) * 1000, (t3 - t2) * 1000, (t4 - t3) * 1000, (t5 - t4) / Double(fixes) * 1e6),
                " \(events) events; \(liveNote)")
        }
    }
}
