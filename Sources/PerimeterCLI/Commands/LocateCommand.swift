import Foundation
import PerimeterCore

/// `perimeter locate --regions FILE [POINTS.csv]`: which regions contain each point.
struct LocateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "locate", abstract: "Tag each point of a CSV file with the regions containing it.",
        discussion: """
            Reads CSV (a file, or standard input) whose header has 'lat' and 'lon' columns;
            other columns are echoed. Writes CSV to standard output: the input columns plus
            'regions', the ids of every geographic region containing the point (boundary
            counts as inside), sorted and joined with ';', empty when none. A bad row is
            reported on standard error with its line number and the run goes on.
            """)

    @Option(help: "GeoJSON FeatureCollection of regions.", valueName: "file")
    var regions: String

    @Argument(help: "CSV of points; standard input when absent or '-'.", valueName: "points.csv")
    var points: String?

    @Flag(help: "Use the valid regions even when others have problems.")
    var skipInvalid: Bool

    func run() async throws {
        let loaded = try InputFiles.usableRegions(regions, skipInvalid: skipInvalid)
        let index = GeofenceIndex(loaded.filter(\.isGeographic))
        let name = points ?? "<stdin>"
        let lines = Lines(data: try InputFiles.read(points)).makeIterator()
        guard let headerLine = lines.next() else {
            throw ExitCode(1, "\(name): empty input; expected a CSV header with lat and lon")
        }
        let header = try CSV.fields(headerLine).map { $0.trimmingCharacters(in: .whitespaces) }
        let lowered = header.map { $0.lowercased() }
        guard let latColumn = lowered.firstIndex(of: "lat"), let lonColumn = lowered.firstIndex(of: "lon") else {
            throw ExitCode(
                1, "\(name): the header must have 'lat' and 'lon' columns; it has \(header.joined(separator: ", "))")
        }
        var output = LineWriter()
        output.write(CSV.line(header + ["regions"]))
        var scratch = QueryScratch()
        var ids: [String] = []
        var lineNumber = 1
        var bad = 0
        while let line = lines.next() {
            lineNumber += 1
            if line.allSatisfy(\.isWhitespace) { continue }
            let fields: [String]
            do {
                fields = try CSV.fields(line)
            } catch {
                Output.error("\(name):\(lineNumber): \(error)")
                bad += 1
                continue
            }
            guard fields.count == header.count else {
                Output.error(
                    "\(name):\(lineNumber): expected \(header.count) fields as in the header, got \(fields.count)")
                bad += 1
                continue
            }
            let latText = fields[latColumn].trimmingCharacters(in: .whitespaces)
            let lonText = fields[lonColumn].trimmingCharacters(in: .whitespaces)
            guard let lat = Double(latText), lat.isFinite, abs(lat) <= 90 else {
                Output.error("\(name):\(lineNumber): lat '\(latText)' is not a latitude in [-90, 90]")
                bad += 1
                continue
            }
            guard let lon = Double(lonText), lon.isFinite, abs(lon) <= 180 else {
                Output.error("\(name):\(lineNumber): lon '\(lonText)' is not a longitude in [-180, 180]")
                bad += 1
                continue
            }
            ids.removeAll(keepingCapacity: true)
            index.forEachRegion(containing: GeoPoint(lon: lon, lat: lat), seen: &scratch) { ids.append(index.id($0)) }
            ids.sort()
            output.write(CSV.line(fields + [ids.joined(separator: ";")]))
        }
        output.flush()
        if bad > 0 { Output.error("\(name): \(bad) row(s) skipped") }
    }
}
