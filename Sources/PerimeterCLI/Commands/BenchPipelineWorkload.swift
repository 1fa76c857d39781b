import Foundation
import PerimeterCore

/// The synthetic venue and walk `perimeter bench pipeline` publishes, by construction.
///
/// `--regions` circles of 20 m radius on a 500 m grid (far enough apart that a subject's walk
/// only ever touches its own circle) and `--beacon-regions` iBeacon regions (one uuid, one major
/// each). Observation `k` belongs to subject `k % subjects` and is that subject's
/// `n = k / subjects`-th report, `interval` seconds (event time) after the previous one.
/// - A GPS subject alternates between 5 m from its circle's centre (inside) and 60 m from it
///   (outside, 40 m from the edge), accuracy 5 m: every fix is an enter or an exit.
/// - A BLE subject (a phone scanning for fixed beacons) alternates between a scan that hears
///   one beacon of its region and an empty scan. With `beaconExitTimeout` shorter than
///   `interval`, every hearing scan gives an enter and every empty one the exit.
///
/// With `transitionEvery` = N > 1 a subject changes sides only every N-th report; the reports
/// between repeat its side with a little variation (a GPS fix a metre further or nearer, a scan
/// hearing the beacon a few dB softer): traffic where most observations change nothing, as in
/// a real venue. Subjects change sides in different rounds (1/N of them in each, so load and
/// transitions stay even); the last subject changes in rounds that are multiples of N, so a
/// run of a multiple of N rounds ends on a transition.
struct BenchPipelineWorkload {
    static let venue = "bench"
    /// The relay baseline's venue level: as long as `venue`, so topics keep their size.
    static let relayVenue = "relay"
    static let prefix = "perimeter/v1"
    static let uuid = "F7826DA6-4FA2-4E98-8024-BC5B71E0893E"
    static let radius = 20.0

    let subjects: Int
    let circles: Int
    let beaconRegions: Int
    let blePercent: Int
    /// Event-time seconds between two reports of one subject.
    let interval: Double
    /// Event time of observation 0.
    let origin: Date
    /// Reports per change of side (1: every report is a transition).
    let transitionEvery: Int

    private let centres: [GeoPoint]
    private let topics: [String]
    private let subjectIDs: [String]
    /// Per subject: three inside and three outside positions as JSON text (`"lat":…,"lon":…`),
    /// a metre apart (the first of each is the one used when every report is a transition).
    private let positions: [(inside: [String], outside: [String])]

    init(
        subjects: Int, circles: Int, beaconRegions: Int, blePercent: Int, interval: Double, origin: Date,
        transitionEvery: Int = 1
    ) {
        self.subjects = subjects
        self.circles = circles
        self.beaconRegions = beaconRegions
        self.blePercent = blePercent
        self.interval = interval
        self.origin = origin
        self.transitionEvery = max(1, transitionEvery)
        let side = Int(Double(circles).squareRoot().rounded(.up))
        centres = (0..<circles).map { index in
            Self.offset(
                GeoPoint(lon: 2.30, lat: 48.80), east: Double(index % side) * 500, north: Double(index / side) * 500)
        }
        let root = Topics(prefix: Self.prefix, venue: Self.venue)
        var topics: [String] = []
        var ids: [String] = []
        var positions: [([String], [String])] = []
        for subject in 0..<subjects {
            let id = String(format: "s%06d", subject)
            ids.append(id)
            let ble = Self.isBLE(subject, percent: blePercent)
            topics.append(ble ? root.ble(agent: id) : root.gps(agent: id))
            // Each subject leaves its circle in a direction of its own (golden-angle spread).
            let bearing = Double(subject) * 2.399963
            let centre = centres[subject % circles]
            func at(_ meters: Double) -> String {
                let point = Self.offset(centre, east: meters * sin(bearing), north: meters * cos(bearing))
                return String(format: "\"lat\":%.7f,\"lon\":%.7f", point.lat, point.lon)
            }
            positions.append(([at(5), at(6), at(4)], [at(60), at(61), at(59)]))
        }
        self.topics = topics
        subjectIDs = ids
        self.positions = positions
    }

    /// Spreads `percent` % BLE subjects evenly over the subject numbers.
    static func isBLE(_ subject: Int, percent: Int) -> Bool {
        subject * percent / 100 != (subject + 1) * percent / 100
    }

    static func offset(_ point: GeoPoint, east: Double, north: Double) -> GeoPoint {
        let metersPerDegree = 111_320.0
        return GeoPoint(
            lon: point.lon + east / (metersPerDegree * cos(point.lat * .pi / 180)),
            lat: point.lat + north / metersPerDegree)
    }

    var bleSubjects: Int { (0..<subjects).count { Self.isBLE($0, percent: blePercent) } }

    /// The venue's regions file.
    var regionsGeoJSON: String {
        var features: [String] = []
        for (index, centre) in centres.enumerated() {
            features.append(
                #"{"type":"Feature","id":"circle-\#(index)","properties":{"radius":\#(Self.radius)},"geometry":{"type":"Point","coordinates":[\#(centre.lon),\#(centre.lat)]}}"#
            )
        }
        for major in 0..<beaconRegions {
            features.append(
                #"{"type":"Feature","id":"beacons-\#(major)","properties":{"beacon":{"uuid":"\#(Self.uuid)","major":\#(major)}},"geometry":null}"#
            )
        }
        return #"{"type":"FeatureCollection","features":[\#(features.joined(separator: ",\n"))]}"#
    }

    /// Observation `k`: its topic and payload.
    func message(_ k: Int) -> (topic: String, payload: [UInt8]) {
        let subject = k % subjects
        let round = k / subjects
        let t = origin.addingTimeInterval(Double(round) * interval + Double(subject) * interval / Double(subjects))
        let time = Timestamp.format(t)
        let shifted = round + (subjects - 1 - subject) % transitionEvery
        let inside = (shifted / transitionEvery) % 2 == 0
        let variant = shifted % transitionEvery % 3
        let payload: String
        if Self.isBLE(subject, percent: blePercent) {
            payload =
                inside
                ? #"{"t":"\#(time)","adverts":[{"uuid":"\#(Self.uuid)","major":\#(subject % beaconRegions),"minor":\#(subject % 100),"rssi":\#(-62 - 2 * variant)}]}"#
                : #"{"t":"\#(time)","adverts":[]}"#
        } else {
            let position = inside ? positions[subject].inside[variant] : positions[subject].outside[variant]
            payload = #"{"subject":"\#(subjectIDs[subject])","t":"\#(time)",\#(position),"acc":5}"#
        }
        return (topics[subject], Array(payload.utf8))
    }

    func messages(_ range: Range<Int>) -> [(topic: String, payload: [UInt8])] { range.map(message) }

    /// A subject's privacy inputs as a consenting phone sends them: its authorization record
    /// (`always`, full accuracy) and its in-use state. What the privacy gate keeps per subject.
    func consent(_ subject: Int) -> [(topic: String, payload: [UInt8])] {
        let root = Topics(prefix: Self.prefix, venue: Self.venue)
        let id = subjectIDs[subject]
        return [
            (root.authorization(subject: id), Array(#"{"status":"always","accuracy":"full"}"#.utf8)),
            (root.usage(subject: id), Array(#"{"inUse":true}"#.utf8)),
        ]
    }
}

/// The events the evaluator must publish for the workload, from the pure ``VenueEvaluator``
/// fed the same messages through the same decoder.
///
/// The service also journals clock ticks; with no delays, dwells or schedules in the venue and
/// every subject reporting well within `staleAfter`, ticks add no enter or exit (beacon exits
/// need a later report, `exitNeedsObservation`), so the expected transitions are exact.
struct BenchPipelineOracle {
    private var evaluator: VenueEvaluator
    private(set) var rejected = 0

    /// Seconds event time may run ahead of the wall clock: the workload publishes reports
    /// `interval` s apart in event time as fast as the broker takes them (the evaluator under
    /// test is configured with the same `maxClockSkew`).
    static let maxClockSkew: Double = 86_400

    init(settings: VenueSettings, regionsGeoJSON: String) {
        var settings = settings
        settings.trust.maxFutureSkew = Self.maxClockSkew
        evaluator = VenueEvaluator(settings: settings, regions: [])
        let regions = RegionParser.parse(text: regionsGeoJSON).regions
        _ = evaluator.reload(regions, previous: [], at: Date())
    }

    /// The enter and exit event ids the messages produce, each with the index (first + offset)
    /// of the observation whose processing publishes it.
    mutating func expect(
        _ messages: [(topic: String, payload: [UInt8])], first: Int
    ) -> [String: Int] {
        evaluate(messages, first: first) { _, _ in }
    }

    /// ``expect(_:first:)``, also recording in `plan` every message the evaluator publishes for
    /// each observation, as ``EvaluatorOutput/messages(topics:)`` makes them. A rejected
    /// observation is recorded as publishing nothing (the service would dead-letter it; the
    /// bench warns when there is any). Clock ticks' outputs (ranging, staleness) belong to no
    /// observation and are left out.
    mutating func expect(
        _ messages: [(topic: String, payload: [UInt8])], first: Int, recording plan: inout NullEvaluatorPlan
    ) -> [String: Int] {
        let topics = Topics(prefix: BenchPipelineWorkload.prefix, venue: BenchPipelineWorkload.venue)
        return evaluate(messages, first: first) { topic, outputs in
            plan.record(inbound: topic, published: outputs.flatMap { $0.messages(topics: topics) })
        }
    }

    private mutating func evaluate(
        _ messages: [(topic: String, payload: [UInt8])], first: Int,
        each: (_ topic: String, _ outputs: [EvaluatorOutput]) -> Void
    ) -> [String: Int] {
        var produced: [String: Int] = [:]
        let venues: Set<String> = [BenchPipelineWorkload.venue]
        let now = Date()
        for (offset, message) in messages.enumerated() {
            guard
                let route = InboundDecoder.route(
                    topic: message.topic, prefix: BenchPipelineWorkload.prefix, venues: venues),
                let inputs = try? InboundDecoder.decode(route, payload: message.payload, receivedAt: now).inputs
            else {
                rejected += 1
                each(message.topic, [])
                continue
            }
            let agent: String?
            switch route {
            case .gps(_, let name), .ble(_, let name): agent = name
            default: agent = nil
            }
            var all: [EvaluatorOutput] = []
            for input in inputs {
                guard case .success(let outputs) = evaluator.handle(input, agent: agent, receivedAt: now) else {
                    rejected += 1
                    continue
                }
                all += outputs
                for case .event(let event) in outputs where event.kind == .enter || event.kind == .exit {
                    produced[event.id] = first + offset
                }
            }
            each(message.topic, all)
        }
        return produced
    }
}
