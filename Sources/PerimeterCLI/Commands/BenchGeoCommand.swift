import Foundation
import PerimeterCore
import PerimeterKit

/// `perimeter bench geo`: points per second through the geofence index, next to shapely's
/// STRtree (GEOS) and timezonefinder on the same data in the same run.
struct BenchGeoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "geo", abstract: "Point-in-region throughput vs shapely (GEOS) and timezonefinder.",
        discussion: """
            (a) Synthetic fences: --fences fences (half geodesic circles, half convex or
            concave polygons of 4–32 vertices, 20–200 m across) in a 10 km and a 100 km box,
            and --points uniform points in the same box. (b) With --regions FILE (e.g. the
            world's time-zone polygons), --tz-points uniform points over the globe.
            The same files go through bench/python/geo_baseline.py in a virtual environment
            (created at --venv with bench/python/requirements.txt when missing). Single
            thread on both sides; only the queries are timed. Containment is compared point
            by point with shapely: polygons must agree except within 1e-9° of an edge;
            circles differ from shapely's 64-gon stand-in only in the sliver between them.
            Build in release mode first: swift build -c release.
            """)

    @Option(help: "Fences per synthetic box.", valueName: "n")
    var fences: Int = 100_000

    @Option(help: "Points per synthetic box.", valueName: "n")
    var points: Int = 1_000_000

    @Option(help: "Synthetic box sizes in km, comma-separated ('' for none).", valueName: "km,km")
    var boxes: String = "10,100"

    @Option(help: "A GeoJSON file of real regions (e.g. time zones) to bench as well.", valueName: "file")
    var regions: String?

    @Option(help: "Uniform global points for --regions.", valueName: "n")
    var tzPoints: Int = 1_000_000

    @Option(help: "Points for the slow baselines (shapely without prepared polygons on --regions).", valueName: "n")
    var slowBaselinePoints: Int = 20_000

    @Option(
        help: "shapely modes for the synthetic boxes, comma-separated (query-predicate, prepared-pairs, points-tree).",
        valueName: "modes")
    var shapelyModes: String = "query-predicate,points-tree"

    @Option(help: "Python virtual environment for the baselines.", valueName: "dir")
    var venv: String = ".build/bench-venv"

    @Option(help: "Directory of geo_baseline.py and requirements.txt.", valueName: "dir")
    var scripts: String = "bench/python"

    @Option(help: "Random seed for fences and points.", valueName: "n")
    var seed: Int = 1

    @Flag(help: "Measure Perimeter only (no Python baselines).")
    var noBaseline: Bool

    mutating func validate() throws {
        guard fences > 0, points > 0, tzPoints > 0, slowBaselinePoints > 0 else {
            throw ValidationError("counts must be positive")
        }
        _ = try boxSizes()
    }

    func boxSizes() throws -> [Double] {
        try boxes.split(separator: ",").map {
            guard let km = Double($0.trimmingCharacters(in: .whitespaces)), km > 0, km <= 2000 else {
                throw ValidationError("--boxes: '\($0)' is not a size in km (0–2000)")
            }
            return km
        }
    }

    func run() async throws {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent(
            "perimeter-bench-geo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        #if DEBUG
            Output.error("warning: this is a debug build; build with 'swift build -c release' for real figures")
        #endif
        let python = noBaseline ? nil : try BaselineRunner.prepare(venv: venv, scripts: scripts)
        if let python { print("baseline: \(python.versions)") }
        var rng = SplitMix64(seed: UInt64(seed))
        var summary: [String] = []

        for km in try boxSizes() {
            print("\n== \(fences) fences in a \(Int(km)) km box, \(points) points ==")
            let fencePath = work.appendingPathComponent("fences-\(Int(km)).geojson").path
            let pointPath = work.appendingPathComponent("points-\(Int(km)).f64").path
            let box = SyntheticFences.box(km: km)
            try SyntheticFences.write(count: fences, in: box, rng: &rng, to: fencePath)
            let queries = SyntheticFences.uniformPoints(points, in: box, rng: &rng)
            try SyntheticFences.writePoints(queries, to: pointPath)
            let ours = try measure(regionsPath: fencePath, points: queries)
            print(ours.report)
            if let python {
                for (number, mode) in shapelyModes.split(separator: ",").enumerated() {
                    let shapely = try python.run(
                        ["--engine", "shapely", "--mode", String(mode), "--regions", fencePath, "--points", pointPath],
                        hits: number == 0, work: work)
                    print(shapely.report)
                    let ratio = ours.pointsPerSecond / shapely.pointsPerSecond
                    print(String(format: "ratio perimeter / %@: %.2f×", shapely.label, ratio))
                    var line = String(
                        format: "%d km box: perimeter %.2f M pts/s, %@ %.2f M pts/s, ratio %.2f×", Int(km),
                        ours.pointsPerSecond / 1e6, shapely.label, shapely.pointsPerSecond / 1e6, ratio)
                    if let hits = shapely.hits {
                        let parity = Parity.compare(
                            ours: ours.hitsPerPoint, theirs: hits, points: queries, index: ours.index)
                        print(parity.report)
                        line += "; " + parity.summary
                    }
                    summary.append(line)
                }
            }
        }

        if let regions {
            print("\n== \(regions), \(tzPoints) uniform points over the globe ==")
            let pointPath = work.appendingPathComponent("points-globe.f64").path
            let globe = BoundingBox(minLon: -180, minLat: -90, maxLon: 180, maxLat: 90)
            let queries = SyntheticFences.uniformPoints(tzPoints, in: globe, rng: &rng)
            try SyntheticFences.writePoints(queries, to: pointPath)
            let ours = try measure(regionsPath: regions, points: queries)
            print(ours.report)
            if let python {
                let slowPath = work.appendingPathComponent("points-globe-slow.f64").path
                try SyntheticFences.writePoints(Array(queries.prefix(slowBaselinePoints)), to: slowPath)
                let prepared = try python.run(
                    ["--engine", "shapely", "--mode", "prepared-pairs", "--regions", regions, "--points", pointPath],
                    hits: true, work: work)
                print(prepared.report)
                let plain = try python.run(
                    ["--engine", "shapely", "--regions", regions, "--points", slowPath], hits: false, work: work)
                print(plain.report)
                let loop = try python.run(
                    ["--engine", "timezonefinder", "--points", pointPath], hits: false, work: work)
                print(loop.report)
                let batch = try python.run(
                    ["--engine", "timezonefinder", "--mode", "batch", "--points", pointPath], hits: false, work: work)
                print(batch.report)
                let parity = Parity.compare(
                    ours: ours.hitsPerPoint, theirs: prepared.hits!, points: queries, index: ours.index)
                print(parity.report)
                for baseline in [plain, prepared, loop, batch] {
                    print(
                        String(
                            format: "ratio perimeter / %@: %.2f×", baseline.label,
                            ours.pointsPerSecond / baseline.pointsPerSecond))
                }
                summary.append(
                    String(
                        format: "regions: perimeter %.2f M pts/s; vs %@ %.1f×, %@ %.1f×, %@ %.1f×, %@ %.1f×; %@",
                        ours.pointsPerSecond / 1e6, plain.label, ours.pointsPerSecond / plain.pointsPerSecond,
                        prepared.label, ours.pointsPerSecond / prepared.pointsPerSecond, loop.label,
                        ours.pointsPerSecond / loop.pointsPerSecond, batch.label,
                        ours.pointsPerSecond / batch.pointsPerSecond,
                        parity.summary))
            }
        }
        if !summary.isEmpty {
            print("\nsummary:")
            for line in summary { print("  " + line) }
        }
    }

    struct Measurement {
        var index: GeofenceIndex
        var regionCount: Int
        var parseSeconds: Double
        var buildSeconds: Double
        var querySeconds: Double
        var hits: Int
        var pointsPerSecond: Double
        var memoryMB: Double
        var hitsPerPoint: [[String]]

        var report: String {
            String(
                format:
                    "perimeter: %d regions, parse+validate %.2f s, build %.2f s, query %.3f s: %.0f points/s, %d hits (%.2f per point); peak RSS %.0f MB",
                regionCount, parseSeconds, buildSeconds, querySeconds, pointsPerSecond, hits,
                Double(hits) / Double(max(hitsPerPoint.count, 1)), memoryMB)
        }
    }

    func measure(regionsPath: String, points: [GeoPoint]) throws -> Measurement {
        var started = ContinuousClock.now
        let document = try InputFiles.regions(regionsPath)
        let parseSeconds = BenchMQTTCommand.seconds(ContinuousClock.now - started)
        if !document.problems.isEmpty {
            Output.error(
                "\(regionsPath): \(document.problems.count) problem(s), first: \(document.problems[0]); benchmarking the valid regions"
            )
        }
        started = ContinuousClock.now
        let index = GeofenceIndex(document.regions.filter(\.isGeographic))
        let buildSeconds = BenchMQTTCommand.seconds(ContinuousClock.now - started)
        let memory = ProcessMemory.residentMB(peak: true)

        var scratch = QueryScratch()
        var hits = 0
        started = ContinuousClock.now
        for point in points {
            index.forEachRegion(containing: point, seen: &scratch) { _ in hits &+= 1 }
        }
        let querySeconds = BenchMQTTCommand.seconds(ContinuousClock.now - started)
        // Untimed: the answers, for the comparison with shapely.
        var perPoint: [[String]] = []
        perPoint.reserveCapacity(points.count)
        for point in points {
            var ids: [String] = []
            index.forEachRegion(containing: point, seen: &scratch) { ids.append(index.id($0)) }
            perPoint.append(ids.sorted())
        }
        return Measurement(
            index: index, regionCount: index.count, parseSeconds: parseSeconds, buildSeconds: buildSeconds,
            querySeconds: querySeconds, hits: hits, pointsPerSecond: Double(points.count) / querySeconds,
            memoryMB: memory,
            hitsPerPoint: perPoint)
    }
}

/// The Python side of the benchmark: a virtual environment with shapely and timezonefinder.
struct BaselineRunner {
    let python: String
    let script: String
    let versions: String

    struct Result {
        var label: String
        var pointsPerSecond: Double
        var report: String
        var hits: [[String]]?
    }

    /// The geometry baseline (shapely, timezonefinder).
    static func prepare(venv: String, scripts: String) throws -> BaselineRunner {
        try prepare(
            venv: venv, scripts: scripts, script: "geo_baseline.py",
            versionProbe:
                "import shapely, timezonefinder, importlib.metadata as m; print('shapely', shapely.__version__, 'GEOS', shapely.geos_version_string, 'timezonefinder', m.version('timezonefinder'))"
        )
    }

    /// A baseline script in `scripts`, run with the virtual environment at `venv` (created from
    /// requirements.txt when missing); `versionProbe` is Python that prints what is measured.
    static func prepare(
        venv: String, scripts: String, script name: String, versionProbe: String
    ) throws
        -> BaselineRunner
    {
        let script = "\(scripts)/\(name)"
        guard FileManager.default.fileExists(atPath: script) else {
            throw ExitCode(
                1, "\(script) not found: run from the repository root or pass --scripts DIR (or --no-baseline)")
        }
        let python = "\(venv)/bin/python"
        if !FileManager.default.isExecutableFile(atPath: python) {
            Output.error(
                "creating the baseline environment in \(venv) (python3 -m venv; pip install -r \(scripts)/requirements.txt)"
            )
            try runChecked("/usr/bin/env", ["python3", "-m", "venv", venv])
            try runChecked(python, ["-m", "pip", "install", "--quiet", "-r", "\(scripts)/requirements.txt"])
        }
        let versions: String
        if let probed = try? capture(python, ["-c", versionProbe], quiet: true) {
            versions = probed
        } else {
            // An environment made for another baseline: bring it up to requirements.txt.
            Output.error("installing \(scripts)/requirements.txt into \(venv)")
            try runChecked(python, ["-m", "pip", "install", "--quiet", "-r", "\(scripts)/requirements.txt"])
            versions = try capture(python, ["-c", versionProbe])
        }
        return BaselineRunner(
            python: python, script: script, versions: versions.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Runs the script; its last line of output is a JSON object.
    func runJSON(_ arguments: [String]) throws -> JSONObject {
        let output = try Self.capture(python, [script] + arguments)
        guard let line = output.split(separator: "\n").last,
            case .object(let result) = try JSONValue(parsing: String(line))
        else {
            throw ExitCode(1, "\(script) printed no result: \(output)")
        }
        return result
    }

    func run(_ arguments: [String], hits: Bool, work: URL) throws -> Result {
        var arguments = arguments
        let hitsPath = work.appendingPathComponent("hits-\(UUID().uuidString).txt").path
        if hits { arguments += ["--hits-out", hitsPath] }
        let result = try runJSON(arguments)
        let engine = result["engine"]?.stringValue ?? "?"
        let mode = result["mode"]?.stringValue ?? "?"
        let rate = result["points_per_s"]?.doubleValue ?? 0
        let label = "\(engine) (\(mode))"
        let report = String(
            format: "%@: build %.2f s, query %.3f s: %.0f points/s, %d hits",
            label, result["build_seconds"]?.doubleValue ?? 0, result["query_seconds"]?.doubleValue ?? 0, rate,
            result["hits"]?.intValue ?? 0)
        var perPoint: [[String]]?
        if hits {
            let data = try InputFiles.read(hitsPath)
            perPoint = Lines(data: data).map { line in line.isEmpty ? [] : line.split(separator: ";").map(String.init) }
        }
        return Result(label: label, pointsPerSecond: rate, report: report, hits: perPoint)
    }

    static func runChecked(_ executable: String, _ arguments: [String]) throws {
        let child = try Subprocess.spawn(executable, arguments)
        let termination = child.waitBlocking()
        guard termination == .exited(0) else {
            throw ExitCode(1, "\(executable) \(arguments.joined(separator: " ")): \(termination)")
        }
    }

    static func capture(_ executable: String, _ arguments: [String], quiet: Bool = false) throws -> String {
        let pipe = Pipe()
        let child = try Subprocess.spawn(
            executable, arguments, stdout: .descriptor(pipe.fileHandleForWriting.fileDescriptor),
            stderr: quiet ? .null : .inherit)
        try pipe.fileHandleForWriting.close()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        let termination = child.waitBlocking()
        guard termination == .exited(0) else {
            throw ExitCode(1, "\(executable) \(arguments.prefix(3).joined(separator: " ")) …: \(termination)")
        }
        return String(decoding: data, as: UTF8.self)
    }
}

/// Point-by-point agreement with shapely.
enum Parity {
    struct Outcome {
        var report: String
        var summary: String
    }

    static func compare(ours: [[String]], theirs: [[String]], points: [GeoPoint], index: GeofenceIndex) -> Outcome {
        var polygonDisagreements = 0
        var polygonNearEdge = 0
        var circleDisagreements = 0
        var examples: [String] = []
        for (number, point) in points.enumerated() where number < theirs.count {
            let a = Set(ours[number])
            let b = Set(theirs[number])
            guard a != b else { continue }
            for id in a.symmetricDifference(b) {
                guard let region = index[id] else { continue }
                if case .circle = region.region.shape {
                    circleDisagreements += 1
                    continue
                }
                if nearEdge(point, region) {
                    polygonNearEdge += 1
                } else {
                    polygonDisagreements += 1
                    if examples.count < 5 {
                        examples.append("\(point) \(id): perimeter \(a.contains(id)), shapely \(b.contains(id))")
                    }
                }
            }
        }
        var report =
            "parity with shapely over \(min(points.count, theirs.count)) points: polygons \(polygonDisagreements) disagreement(s) beyond 1e-9° of an edge, \(polygonNearEdge) within it; circles \(circleDisagreements) in the sliver between the circle and shapely's 64-gon"
        if !examples.isEmpty { report += "\n  e.g. " + examples.joined(separator: "\n  e.g. ") }
        let summary =
            polygonDisagreements == 0
            ? "polygon containment identical to shapely" : "\(polygonDisagreements) polygon disagreements"
        return Outcome(report: report, summary: summary)
    }

    /// Whether the point lies within 1e-9 degrees of one of the region's edges (brute force;
    /// only for the few points that disagree).
    static func nearEdge(_ point: GeoPoint, _ region: PreparedRegion) -> Bool {
        guard case .polygons(let parts) = region.region.shape else { return false }
        for rings in parts {
            for ring in rings {
                for index in 0..<(ring.count - 1) where planarDistance(point, ring[index], ring[index + 1]) <= 1e-9 {
                    return true
                }
            }
        }
        return false
    }

    static func planarDistance(_ p: GeoPoint, _ a: GeoPoint, _ b: GeoPoint) -> Double {
        let dx = b.lon - a.lon
        let dy = b.lat - a.lat
        let length2 = dx * dx + dy * dy
        let t = length2 > 0 ? max(0, min(1, ((p.lon - a.lon) * dx + (p.lat - a.lat) * dy) / length2)) : 0
        let x = a.lon + t * dx - p.lon
        let y = a.lat + t * dy - p.lat
        return (x * x + y * y).squareRoot()
    }
}

/// Deterministic fences and points for the benchmark.
enum SyntheticFences {
    static let center = GeoPoint(lon: 2.35, lat: 48.85)

    static func box(km: Double) -> BoundingBox {
        let halfLat = Geodesy.latitudeDegrees(meters: km * 500)
        let halfLon = halfLat / cos(center.lat * .pi / 180)
        return BoundingBox(
            minLon: center.lon - halfLon, minLat: center.lat - halfLat, maxLon: center.lon + halfLon,
            maxLat: center.lat + halfLat)
    }

    /// Half circles (`c…`), half polygons (`p…`, alternately convex and star-shaped), sizes
    /// (diameters) log-uniform in 20–200 m.
    static func write(count: Int, in box: BoundingBox, rng: inout SplitMix64, to path: String) throws {
        var text = "{\"type\":\"FeatureCollection\",\"features\":[\n"
        let metresPerDegree = Geodesy.earthRadius * .pi / 180
        for index in 0..<count {
            let lon = rng.uniform(box.minLon, box.maxLon)
            let lat = rng.uniform(box.minLat, box.maxLat)
            let diameter = exp(rng.uniform(log(20), log(200)))
            let radius = diameter / 2
            if index > 0 { text += ",\n" }
            if index % 2 == 0 {
                text +=
                    "{\"type\":\"Feature\",\"id\":\"c\(index)\",\"properties\":{\"radius\":\(radius)},\"geometry\":{\"type\":\"Point\",\"coordinates\":[\(lon),\(lat)]}}"
                continue
            }
            let vertices = 4 + Int(rng.next() % 29)
            // Jittered even angles keep every gap under 180°, so the star stays a simple polygon.
            let step = 2 * Double.pi / Double(vertices)
            let angles = (0..<vertices).map { (Double($0) + rng.uniform(0, 0.8)) * step }
            let star = (index / 2) % 2 == 1
            var ring: [String] = []
            for (number, angle) in angles.enumerated() {
                let r = star && number > 0 ? radius * rng.uniform(0.35, 1) : radius
                let x = lon + r * cos(angle) / (metresPerDegree * cos(lat * .pi / 180))
                let y = lat + r * sin(angle) / metresPerDegree
                ring.append("[\(x),\(y)]")
            }
            ring.append(ring[0])
            text +=
                "{\"type\":\"Feature\",\"id\":\"p\(index)\",\"properties\":{},\"geometry\":{\"type\":\"Polygon\",\"coordinates\":[[\(ring.joined(separator: ","))]]}}"
        }
        text += "\n]}\n"
        try text.write(toFile: path, atomically: false, encoding: .utf8)
    }

    static func uniformPoints(_ count: Int, in box: BoundingBox, rng: inout SplitMix64) -> [GeoPoint] {
        (0..<count).map { _ in
            GeoPoint(lon: rng.uniform(box.minLon, box.maxLon), lat: rng.uniform(box.minLat, box.maxLat))
        }
    }

    /// Little-endian float64 (lon, lat) pairs, as geo_baseline.py reads them.
    static func writePoints(_ points: [GeoPoint], to path: String) throws {
        var data = Data(capacity: points.count * 16)
        for point in points {
            withUnsafeBytes(of: point.lon.bitPattern.littleEndian) { data.append(contentsOf: $0) }
            withUnsafeBytes(of: point.lat.bitPattern.littleEndian) { data.append(contentsOf: $0) }
        }
        try data.write(to: URL(fileURLWithPath: path))
    }
}

/// Resident memory of this process, from /proc.
enum ProcessMemory {
    /// Resident memory now (`VmRSS`), or the peak so far (`VmHWM`).
    static func residentMB(peak: Bool = false) -> Double {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(peak ? "VmHWM:" : "VmRSS:") }),
            let kilobytes = line.split(separator: " ").compactMap({ Double($0) }).first
        else { return 0 }
        return kilobytes / 1024
    }
}
