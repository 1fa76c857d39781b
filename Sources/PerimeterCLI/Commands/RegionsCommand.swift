import Foundation
import PerimeterCore

/// `perimeter regions …`: check and convert region files; list, get, put and delete the live
/// regions of a running deployment.
struct RegionsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "regions",
        abstract: "Validate and export region files (GeoJSON); manage a deployment's live regions.",
        subcommands: [
            RegionsValidateCommand.self, RegionsExportCommand.self, RegionsListCommand.self, RegionsGetCommand.self,
            RegionsPutCommand.self, RegionsDeleteCommand.self,
        ])
}

/// `perimeter regions validate FILE`: every problem, each naming the region and the place.
struct RegionsValidateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate", abstract: "Check a GeoJSON region file and print every problem.",
        discussion: """
            Prints one line per problem (unclosed or short rings, self-intersections with the
            vertex, holes outside their shell, coordinates out of range, radii over 50 km,
            duplicate ids, unsupported geometries, wrongly typed or absurd properties) and exits
            1 if there is any. A coordinate a hair past ±180 or ±90 (within 1e-9°, as projection
            round trips leave them) is clamped and said in a 'warning:' line naming the region
            and the coordinate; warnings alone exit 0. With no problem it prints a summary.
            With --live, also the bounds of a region published on a regions/{id} topic
            (10,000 positions, 100 rings).
            """)

    @Argument(help: "GeoJSON FeatureCollection or Feature ('-' for standard input).", valueName: "file")
    var file: String

    @Flag(help: "Check each region against the bounds of a live region (a regions/{id} topic).")
    var live: Bool

    func run() async throws {
        let document = try InputFiles.regions(file, limits: live ? .live : .file)
        for warning in document.warnings { print("\(file): warning: \(warning)") }
        for problem in document.problems { print("\(file): \(problem)") }
        if !document.problems.isEmpty {
            throw ExitCode(1, "\(file): \(document.problems.count) problem(s)")
        }
        var circles = 0
        var polygons = 0
        var beacons = 0
        var vertices = 0
        for region in document.regions {
            switch region.shape {
            case .circle: circles += 1
            case .polygons(let parts):
                polygons += 1
                vertices += parts.reduce(0) { $0 + $1.reduce(0) { $0 + $1.count } }
            case .beacon: beacons += 1
            }
        }
        print(
            "\(file): \(document.regions.count) regions valid (\(polygons) polygonal with \(vertices) positions, "
                + "\(circles) circles, \(beacons) beacon regions)")
    }
}

/// `perimeter regions export FILE`: the regions as Perimeter reads them, as GeoJSON.
struct RegionsExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export", abstract: "Read a region file and write it back as one FeatureCollection.",
        discussion: "Round-trips losslessly: ids, geometry types, coordinates and properties are kept.")

    @Argument(help: "GeoJSON FeatureCollection or Feature ('-' for standard input).", valueName: "file")
    var file: String

    @Flag(help: "Write the valid regions even when others have problems.")
    var skipInvalid: Bool

    func run() async throws {
        let regions = try InputFiles.usableRegions(file, skipInvalid: skipInvalid)
        print(RegionExporter.featureCollection(regions).serialized())
    }
}
