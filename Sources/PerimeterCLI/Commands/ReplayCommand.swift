import Foundation
import PerimeterAgent
import PerimeterCore
import PerimeterEvaluator
import PerimeterKit

#if canImport(Glibc)
    import Glibc
#endif

/// `perimeter replay --regions FILE TRACK`: the events the evaluator would publish.
struct ReplayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay", abstract: "Dry-run a recorded track through the geofence state machine.",
        discussion: """
            TRACK is GPX, CSV (t,lat,lon[,acc], with or without that header), raw NMEA (RMC/GGA/GSA) or JSON lines of
            obs/{agent}/gps observations. Prints, as JSON lines, each event the evaluator
            would publish for that subject, with its topic: enter, exit, dwell and state; with
            --visits also the visits (arrival, departure) the track gives, with or without regions.
            Rejected fixes are reported on standard error with where they are. A progress bar
            is drawn on standard error when it is a terminal.

            With --config, the venue's settings come from the evaluator's configuration (the
            same keys: venues.{id}.regions, kIn, kOut, staleAfter, requireAccuracy, timeZone),
            so the events are the evaluator's, ids included; flags given override them. Events
            say source "gps", as the evaluator's do for obs/{agent}/gps.
            """)

    @Option(
        help:
            "GeoJSON FeatureCollection of regions (default with --config: the venue's regions file; optional with --visits).",
        valueName: "file")
    var regions: String?

    @Option(help: "The evaluator's configuration: the venue's regions and geofence settings.", valueName: "file")
    var config: String?

    @Flag(help: "Also print the visits (stays found with no region; topics.md, visit/{subject}).")
    var visits: Bool

    @Option(help: "Visits: how far from a stay's centre a fix still belongs to it.", valueName: "m")
    var visitRadius: Double = VisitParameters().radius

    @Option(help: "Visits: how long a stay lasts before it is a visit.", valueName: "s")
    var visitMinimumDwell: Double = VisitParameters().minimumDwell

    @Argument(help: "Track file (GPX, CSV, NMEA or JSON lines); '-' for standard input.", valueName: "track")
    var track: String

    @Option(help: "Subject id for the track (default: the file's base name).", valueName: "id")
    var subject: String?

    @Option(
        help: "Venue name, used in topics and event ids (with --config: which venue; default: its only one).",
        valueName: "name")
    var venue: String?

    @Option(help: "Track format (default: from the extension or the content).", valueName: "gpx|csv|jsonl|nmea")
    var format: TrackReader.Format?

    @Option(help: "Accuracy in metres for fixes that carry none.", valueName: "m")
    var accuracy: Double?

    @Option(help: "Seconds between points of a GPX track without times.", valueName: "s")
    var interval: Double?

    @Option(help: "Hysteresis factor: inside when d <= -acc*k-in (venues.{id}.kIn; default 1).", valueName: "k")
    var kIn: Double?

    @Option(
        help: "Hysteresis factor: outside when d >= acc*k-out + exitBuffer (venues.{id}.kOut; default 1).",
        valueName: "k")
    var kOut: Double?

    @Option(
        help: "Seconds without a fix before states become unknown (venues.{id}.staleAfter; default 300).",
        valueName: "s")
    var staleAfter: Double?

    @Option(help: "IANA time zone for region schedules (venues.{id}.timeZone; default UTC).", valueName: "zone")
    var timeZone: String?

    @Flag(help: "Use the valid regions even when others have problems.")
    var skipInvalid: Bool

    @Option(help: "Also draw the regions, the track and its events (see 'perimeter render').", valueName: "out.svg|png")
    var render: String?

    mutating func validate() throws {
        if accuracy.map({ $0 < 0 }) == true { throw ValidationError("--accuracy must not be negative") }
        if interval.map({ $0 <= 0 }) == true { throw ValidationError("--interval must be positive") }
        if (kIn ?? 0) < 0 || (kOut ?? 0) < 0 { throw ValidationError("--k-in and --k-out must not be negative") }
        if (staleAfter ?? 1) <= 0 { throw ValidationError("--stale-after must be positive") }
        if visitRadius <= 0 || visitMinimumDwell < 0 {
            throw ValidationError("--visit-radius must be positive and --visit-minimum-dwell not negative")
        }
        if let timeZone, TimeZone(identifier: timeZone) == nil {
            throw ValidationError("--time-zone: unknown time zone '\(timeZone)'")
        }
        if regions == nil && config == nil && !visits {
            throw ValidationError("--regions is required (or --visits, for visits alone, or --config FILE)")
        }
    }

    /// The geofence parameters and regions file: the evaluator's venue settings with --config,
    /// else the defaults; flags given override either.
    func settings() throws -> (parameters: GeofenceParameters, regions: String?) {
        var parameters = GeofenceParameters(venue: venue ?? "replay")
        var regionsPath = regions
        if let config {
            let configuration = try EvaluatorConfiguration.read(ConfigReader.forCommand(config: config, overrides: []))
            let ids = configuration.venues.map(\.settings.id)
            guard let chosen = venue ?? (ids.count == 1 ? ids.first : nil),
                let served = configuration.venues.first(where: { $0.settings.id == chosen })
            else {
                throw ExitCode(
                    64, "name the venue with --venue (this configuration serves \(ids.joined(separator: ", ")))")
            }
            parameters = served.settings.geofence
            regionsPath = regionsPath ?? served.regionsPath
        }
        if let kIn { parameters.kIn = kIn }
        if let kOut { parameters.kOut = kOut }
        if let staleAfter { parameters.staleAfter = staleAfter }
        if let timeZone { parameters.timeZone = TimeZone(identifier: timeZone)! }
        if regionsPath == nil && !visits {
            throw ExitCode(64, "the venue has no regions file: give --regions FILE")
        }
        return (parameters, regionsPath)
    }

    func run() async throws {
        let (parameters, regions) = try settings()
        let loaded = try regions.map { try InputFiles.usableRegions($0, skipInvalid: skipInvalid) } ?? []
        let data = try InputFiles.read(track)
        let subjectID =
            subject
            ?? (track == "-" ? "subject" : URL(fileURLWithPath: track).deletingPathExtension().lastPathComponent)
        let reader = TrackReader(subject: subjectID, defaultAccuracy: accuracy, interval: interval)
        let records = try reader.read(
            data, format: format ?? TrackReader.guessFormat(path: track, data: data), name: track)
        var engine = GeofenceEngine(regions: loaded, parameters: parameters)
        var detector = VisitDetector(
            venue: parameters.venue,
            parameters: VisitParameters(radius: visitRadius, minimumDwell: visitMinimumDwell))
        let topics = Topics(venue: parameters.venue)
        var output = LineWriter()
        var progress = ProgressBar(total: records.count)
        var rejected = 0
        var lastTime: Date?
        var drawn: (fixes: [Fix], events: [RegionEvent]) = ([], [])
        var written = 0
        var processed = 0
        for (number, record) in records.enumerated() {
            progress.update(number + 1)
            switch record.fix {
            case .failure(let error):
                progress.clear()
                Output.error("\(record.location): skipped: \(error)")
                rejected += 1
            case .success(var fix):
                // The evaluator's events for obs/{agent}/gps say "gps": the same track, the same events.
                fix.source = "gps"
                switch engine.process(fix) {
                case .success(let events):
                    for event in events { output.write(Self.line(event, topics: topics)) }
                    written += events.count
                    if visits {
                        let found = detector.process(fix)
                        for visit in found { output.write(Self.line(visit, topics: topics)) }
                        written += found.count
                    }
                    processed += 1
                    lastTime = fix.t
                    if render != nil {
                        drawn.fixes.append(fix)
                        drawn.events += events
                    }
                case .failure(let rejection):
                    progress.clear()
                    Output.error("\(record.location): rejected: \(rejection)")
                    rejected += 1
                }
            }
        }
        // Confirm what the track's own time already decided (pending delays, dwell), nothing beyond.
        if let lastTime {
            let events = engine.advance(to: lastTime)
            for event in events { output.write(Self.line(event, topics: topics)) }
            written += events.count
            if visits {
                let found = detector.advance(to: lastTime)
                for visit in found { output.write(Self.line(visit, topics: topics)) }
                written += found.count
            }
            drawn.events += events
        }
        output.flush()
        progress.finish()
        if rejected > 0 { Output.error("\(track): \(rejected) of \(records.count) record(s) skipped or rejected") }
        // Silence would look like a failure: say what was read and that nothing came of it.
        if written == 0 {
            Output.error(
                "\(track): no events: \(processed) fix(es) processed against \(loaded.count) region(s); none was entered, left or given a state\(visits ? ", and no stay lasted \(Int(visitMinimumDwell)) s within \(Int(visitRadius)) m" : "")"
            )
        }
        if let render {
            let map = VenueMap(
                title: "\(subjectID) — \(regions.map { URL(fileURLWithPath: $0).lastPathComponent } ?? "visits")",
                regions: loaded,
                track: drawn.fixes.map(\.position),
                events: VenueMap.Event.markers(for: drawn.events, track: drawn.fixes))
            try await MapWriter.write(SVGMapRenderer().render(map), to: render)
        }
    }

    static func line(_ event: RegionEvent, topics: Topics) -> String {
        var object = JSONObject()
        object["topic"] = .string(topics.topic(for: event))
        if case .object(let payload) = event.payload {
            if event.kind == .state { object["event"] = "state" }
            for (key, value) in payload { object[key] = value }
        }
        return JSONValue.object(object).serialized()
    }

    /// A visit as the evaluator would publish it on `visit/{subject}`, with its topic.
    static func line(_ visit: VisitEvent, topics: Topics) -> String {
        var object = JSONObject()
        object["topic"] = .string(topics.visit(subject: visit.subject))
        for (key, value) in visit.payload.objectValue ?? JSONObject() { object[key] = value }
        return JSONValue.object(object).serialized()
    }
}

/// A one-line progress bar on standard error, drawn only when it is a terminal.
struct ProgressBar {
    let total: Int
    let enabled = isatty(2) == 1
    private var shown = -1

    init(total: Int) { self.total = total }

    mutating func update(_ done: Int) {
        guard enabled, total > 0 else { return }
        let percent = done * 100 / total
        guard percent != shown else { return }
        shown = percent
        let width = 30
        let filled = width * done / total
        let bar = String(repeating: "=", count: filled) + String(repeating: " ", count: width - filled)
        FileHandle.standardError.write(Data("\r[\(bar)] \(percent)% \(done)/\(total)".utf8))
    }

    mutating func clear() {
        guard enabled, shown >= 0 else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
        shown = -1
    }

    mutating func finish() {
        clear()
    }
}
