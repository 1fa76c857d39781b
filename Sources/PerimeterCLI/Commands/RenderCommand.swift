import Foundation
import PerimeterAgent
import PerimeterCore

/// `perimeter render --regions FILE [--track FILE] [--events FILE] -o OUT.svg|OUT.png`.
struct RenderCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "render", abstract: "Draw a venue's regions, a track and its events as SVG or PNG.",
        discussion: """
            Draws the regions (polygons with their holes, circles drawn geodesically, beacon
            regions around the beacons their Feature places with properties.beacons
            [{"lat","lon","radius"?}]), gateways, an optional track (GPX, CSV or JSON lines, as
            'perimeter replay' reads them) with its enter/exit/dwell events at the fixes that
            caused them, labels, a scale bar and a north arrow, in a local azimuthal projection
            (metres, north up). Without --events the track is run through the geofence engine
            as 'perimeter replay' does. OUT ending in .png is converted by rsvg-convert (Debian
            package librsvg2-bin); anything else is written as SVG.
            """)

    @Option(help: "GeoJSON FeatureCollection of regions.", valueName: "file")
    var regions: String?

    @Option(help: "Venue directory: its regions.geojson is drawn (instead of --regions).", valueName: "dir")
    var venue: String?

    @Option(help: "Track file (GPX, CSV or JSON lines).", valueName: "file")
    var track: String?

    @Option(help: "Events as JSON lines ('perimeter replay' output) instead of replaying the track.", valueName: "file")
    var events: String?

    @Option(help: "Gateways: a JSON array of {id, lat, lon} (or an object with a 'gateways' array).", valueName: "file")
    var gateways: String?

    @Option(name: "-o,--output", help: "Output file: .svg or .png.", valueName: "file")
    var output: String

    @Option(help: "Title drawn at the top (default: the regions file's name).", valueName: "text")
    var title: String?

    @Option(help: "Picture width in pixels.", valueName: "px")
    var width: Double = 960

    @Option(help: "Picture height in pixels.", valueName: "px")
    var height: Double = 720

    @Option(help: "Track format (default: from the extension or the content).", valueName: "gpx|csv|jsonl")
    var format: TrackReader.Format?

    @Option(help: "Accuracy in metres for fixes that carry none.", valueName: "m")
    var accuracy: Double?

    @Option(help: "Seconds between points of a GPX track without times.", valueName: "s")
    var interval: Double?

    @Flag(help: "Draw the valid regions even when others have problems.")
    var skipInvalid: Bool

    mutating func validate() throws {
        if (regions == nil) == (venue == nil) {
            throw ValidationError("give exactly one of --regions FILE or --venue DIR")
        }
        if events != nil && track == nil { throw ValidationError("--events needs --track (events are drawn on it)") }
        if !(width >= 64 && width <= 20000) || !(height >= 64 && height <= 20000) {
            throw ValidationError("--width and --height must be between 64 and 20000 pixels")
        }
        if accuracy.map({ $0 < 0 }) == true { throw ValidationError("--accuracy must not be negative") }
        if interval.map({ $0 <= 0 }) == true { throw ValidationError("--interval must be positive") }
    }

    var regionsPath: String {
        regions ?? URL(fileURLWithPath: venue!).appendingPathComponent("regions.geojson").path
    }

    func run() async throws {
        let path = regionsPath
        var loaded = try InputFiles.usableRegions(path, skipInvalid: skipInvalid)
        var venueGateways: [VenueMap.Marker] = []
        // A venue directory's venue.json places its beacons and gateways on the map.
        if let venue, FileManager.default.fileExists(atPath: venue + "/venue.json") {
            let file = try SimulatorSource.loadVenue(venue + "/venue.json")
            loaded = file.placingBeacons(in: loaded)
            venueGateways = file.gateways.compactMap { gateway in
                gateway.position.map { VenueMap.Marker(id: gateway.id, position: $0) }
            }
        }
        var map = VenueMap(
            title: title ?? URL(fileURLWithPath: venue ?? path).deletingPathExtension().lastPathComponent,
            regions: loaded)
        map.gateways = venueGateways
        if let gateways { map.gateways = try Self.readGateways(gateways) }
        if let track {
            let fixes = try Self.readTrack(track, format: format, accuracy: accuracy, interval: interval)
            map.track = fixes.map(\.position)
            if let events {
                map.events = try Self.readEvents(events, track: fixes)
            } else {
                map.events = VenueMap.Event.markers(for: Self.replay(fixes, regions: loaded), track: fixes)
            }
        }
        try await MapWriter.write(SVGMapRenderer(width: width, height: height).render(map), to: output)
    }

    /// The fixes of a track; unreadable records are reported on standard error (the first five,
    /// then a count) and left out. A GPX route without times is still drawn: without
    /// `--interval` its points are taken 1 s apart, and the command says so.
    static func readTrack(
        _ path: String, format: TrackReader.Format?, accuracy: Double?, interval: Double?
    ) throws
        -> [Fix]
    {
        let data = try InputFiles.read(path)
        let subject = URL(fileURLWithPath: path).deletingPathExtension().lastPathComponent
        let format = format ?? TrackReader.guessFormat(path: path, data: data)
        var records = try TrackReader(subject: subject, defaultAccuracy: accuracy, interval: interval)
            .read(data, format: format, name: path)
        let untimed = records.filter {
            if case .failure(let error) = $0.fix { return error.message.hasPrefix("no <time>") }
            return false
        }
        if interval == nil, !untimed.isEmpty {
            Output.error(
                "\(path): \(untimed.count) point(s) without <time>: drawn 1 s apart (pass --interval SECONDS to say otherwise)"
            )
            records = try TrackReader(subject: subject, defaultAccuracy: accuracy, interval: 1)
                .read(data, format: format, name: path)
        }
        var fixes: [Fix] = []
        var skipped = 0
        for record in records {
            switch record.fix {
            case .success(let fix): fixes.append(fix)
            case .failure(let error):
                skipped += 1
                if skipped <= 5 { Output.error("\(record.location): skipped: \(error)") }
            }
        }
        if skipped > 5 { Output.error("\(path): … \(skipped - 5) more record(s) skipped") }
        return fixes
    }

    /// The events the evaluator would publish for the track (as `perimeter replay` computes them).
    static func replay(_ fixes: [Fix], regions: [Region]) -> [RegionEvent] {
        var engine = GeofenceEngine(regions: regions, parameters: GeofenceParameters(venue: "render"))
        var events: [RegionEvent] = []
        for fix in fixes {
            if case .success(let produced) = engine.process(fix) { events += produced }
        }
        if let last = fixes.last { events += engine.advance(to: last.t) }
        return events
    }

    static func readEvents(_ path: String, track: [Fix]) throws -> [VenueMap.Event] {
        let data = try InputFiles.read(path)
        var markers: [VenueMap.Event] = []
        for (offset, line) in Lines(data: data).enumerated() where !line.allSatisfy(\.isWhitespace) {
            let value: JSONValue
            do {
                value = try JSONValue(parsing: String(line))
            } catch {
                throw ExitCode(1, "\(path):\(offset + 1): not a JSON event: \(error)")
            }
            if let marker = VenueMap.Event.marker(json: value, track: track) { markers.append(marker) }
        }
        return markers
    }

    static func readGateways(_ path: String) throws -> [VenueMap.Marker] {
        let data = try InputFiles.read(path)
        let value: JSONValue
        do {
            value = try JSONValue(parsing: String(decoding: data, as: UTF8.self))
        } catch {
            throw ExitCode(1, "\(path): not JSON: \(error)")
        }
        guard let list = value.arrayValue ?? value["gateways"]?.arrayValue else {
            throw ExitCode(1, "\(path): expected an array of gateways {id, lat, lon} or an object with 'gateways'")
        }
        return try list.enumerated().map { index, item in
            guard let id = item["id"]?.stringValue, let lat = item["lat"]?.doubleValue,
                let lon = item["lon"]?.doubleValue, GeoPoint(lon: lon, lat: lat).isValid
            else { throw ExitCode(1, "\(path): gateways[\(index)]: needs a string id and valid lat and lon") }
            return VenueMap.Marker(id: id, position: GeoPoint(lon: lon, lat: lat))
        }
    }
}
