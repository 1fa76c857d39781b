import Foundation
import PerimeterCore
import Testing

/// A tiny language for state-machine cases: a circle `c` of 100 m around a fixed centre and
/// fixes given as (seconds, metres north of the centre, accuracy). Events print as
/// `kind:region@seconds` (`state:inside:c@10`, `enter:c@10`).
struct Scenario {
    static let center = GeoPoint(lon: 2.35, lat: 48.85)
    static let epoch = Date(timeIntervalSince1970: 1_780_000_000)

    var regions: [Region]
    var parameters = GeofenceParameters(venue: "test", staleAfter: 300)

    static func circle(_ id: String = "c", radius: Double = 100, configure: (inout Region) -> Void = { _ in }) -> Region
    {
        var region = Region(id: id, shape: .circle(center: center, radius: radius))
        configure(&region)
        return region
    }

    static func point(north: Double, east: Double = 0) -> GeoPoint {
        let p = Geodesy.destination(center, bearing: 0, distance: north)
        return east == 0 ? p : Geodesy.destination(p, bearing: .pi / 2, distance: east)
    }

    static func fix(_ t: Double, north: Double, east: Double = 0, acc: Double? = 0, floor: Int? = nil) -> Fix {
        Fix(
            subject: "s", t: epoch.addingTimeInterval(t), position: point(north: north, east: east), accuracy: acc,
            floor: floor)
    }

    static func describe(_ event: RegionEvent) -> String {
        let seconds = event.t.timeIntervalSince(epoch)
        let time = seconds.rounded() == seconds ? "\(Int(seconds))" : String(format: "%.1f", seconds)
        if event.kind == .state {
            return "state:\(event.state!.rawValue):\(event.region)@\(time)" + (event.reason.map { "(\($0))" } ?? "")
        }
        return "\(event.kind.rawValue):\(event.region)@\(time)" + (event.interpolated ? "~" : "")
    }

    /// Runs the fixes (and a final advance) and returns the events described.
    func run(_ fixes: [Fix], advanceTo: Double? = nil) -> [String] {
        var engine = GeofenceEngine(regions: regions, parameters: parameters)
        var out: [String] = []
        for fix in fixes {
            switch engine.process(fix) {
            case .success(let events): out += events.map(Self.describe)
            case .failure(let rejection): out.append("rejected:\(rejection.code)")
            }
        }
        if let advanceTo {
            out += engine.advance(to: Self.epoch.addingTimeInterval(advanceTo)).map(Self.describe)
        }
        return out
    }
}

@Suite("Geofence state machine")
struct GeofenceEngineTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var regions: [Region]
        var fixes: [Fix]
        var advanceTo: Double?
        var expected: [String]
        var testDescription: String { name }
    }

    static let c = Scenario.circle()
    static func fix(_ t: Double, _ north: Double, acc: Double? = 0, east: Double = 0, floor: Int? = nil) -> Fix {
        Scenario.fix(t, north: north, east: east, acc: acc, floor: floor)
    }

    static let cases: [Case] = [
        Case(
            name: "outside, inside, outside: state, enter, exit", regions: [c],
            fixes: [fix(0, -100.5, acc: nil), fix(10, 0), fix(20, 150)],
            expected: ["state:outside:c@0", "state:inside:c@10", "enter:c@10", "state:outside:c@20", "exit:c@20"]),
        Case(
            name: "the first fix inside enters (never known before)", regions: [c],
            fixes: [fix(0, 0)], expected: ["state:inside:c@0", "enter:c@0"]),
        Case(
            name: "the first fix outside only states, no exit", regions: [c],
            fixes: [fix(0, 110, acc: 5)], expected: ["state:outside:c@0"]),
        Case(
            name: "a fix far from a region gives it no state at all", regions: [c],
            fixes: [fix(0, 160, acc: 5)], expected: []),
        Case(
            name: "accuracy hysteresis: an ambiguous fix changes nothing", regions: [c],
            fixes: [fix(0, -160, acc: 50), fix(10, -80, acc: 50), fix(20, -120, acc: 50), fix(30, 0, acc: 50)],
            expected: ["state:outside:c@0", "state:inside:c@30", "enter:c@30"]),
        Case(
            name: "inside needs d <= -acc*kIn: 60 m deep with 50 m accuracy is enough", regions: [c],
            fixes: [fix(0, -160, acc: 50), fix(10, -40, acc: 50)],
            expected: ["state:outside:c@0", "state:inside:c@10", "enter:c@10"]),
        Case(
            name: "exit buffer: outside only beyond acc*kOut + exitBuffer",
            regions: [Scenario.circle { $0.exitBuffer = 30 }],
            fixes: [fix(0, 0), fix(10, 120), fix(20, 125), fix(30, 135)],
            expected: ["state:inside:c@0", "enter:c@0", "state:outside:c@30", "exit:c@30"]),
        Case(
            name: "enter delay: confirmed when the delay has run out",
            regions: [Scenario.circle { $0.enterDelay = 30 }],
            fixes: [fix(0, -120, acc: 10), fix(10, 0), fix(20, 0), fix(45, 0)],
            expected: ["state:outside:c@0", "state:inside:c@40", "enter:c@40"]),
        Case(
            name: "enter delay: a contrary fix cancels, the clock restarts",
            regions: [Scenario.circle { $0.enterDelay = 30 }],
            fixes: [fix(0, -120, acc: 10), fix(10, 0), fix(20, -120, acc: 10), fix(30, 0), fix(50, 0)], advanceTo: 70,
            expected: ["state:outside:c@0", "state:inside:c@60", "enter:c@60"]),
        Case(
            name: "exit delay", regions: [Scenario.circle { $0.exitDelay = 20 }],
            fixes: [fix(0, 0), fix(10, 200), fix(40, 200)],
            expected: ["state:inside:c@0", "enter:c@0", "state:outside:c@30", "exit:c@30"]),
        Case(
            name: "dwell once per stay, again after a new entry", regions: [Scenario.circle { $0.dwellAfter = 60 }],
            fixes: [fix(0, 0), fix(30, 0), fix(70, 0), fix(200, 0), fix(300, 200), fix(400, 0), fix(470, 0)],
            expected: [
                "state:inside:c@0", "enter:c@0", "dwell:c@60", "state:outside:c@300", "exit:c@300",
                "state:inside:c@400", "enter:c@400", "dwell:c@460",
            ]),
        Case(
            name: "crossing between sparse fixes: interpolated enter and exit", regions: [c],
            fixes: [fix(0, -500), fix(100, 500)],
            expected: ["state:inside:c@40(crossing)", "enter:c@40~", "state:outside:c@60(crossing)", "exit:c@60~"]),
        Case(
            name: "crossing that only grazes within the accuracy is ignored", regions: [c],
            fixes: [fix(0, -500, acc: 20, east: 90), fix(100, 500, acc: 20, east: 90)],
            expected: []),
        Case(
            name: "crossing: fixes too far apart in time are not joined", regions: [c],
            fixes: [fix(0, -500), fix(5000, 500)], expected: []),
        Case(
            name: "an out-of-order fix is ignored", regions: [c],
            fixes: [fix(10, 0), fix(5, 300), fix(20, 0)],
            expected: ["state:inside:c@10", "enter:c@10", "rejected:outOfOrder"]),
        Case(
            name: "negative accuracy is Core Location's invalid: rejected", regions: [c],
            fixes: [fix(0, 0, acc: -1)], expected: ["rejected:negativeAccuracy"]),
        Case(
            name: "staleness goes to unknown, never outside; coming back is the same stay", regions: [c],
            fixes: [fix(0, 0), fix(500, 0), fix(600, 300)],
            expected: [
                "state:inside:c@0", "enter:c@0", "state:unknown:c@300(stale)", "state:inside:c@500",
                "state:outside:c@600", "exit:c@600",
            ]),
        Case(
            name: "after a stale spell, evidence of outside exits", regions: [c],
            fixes: [fix(0, 0)], advanceTo: 400,
            expected: ["state:inside:c@0", "enter:c@0", "state:unknown:c@300(stale)"]),
        Case(
            name: "notifyOnEntry false: state but no enter", regions: [Scenario.circle { $0.notifyOnEntry = false }],
            fixes: [fix(0, 0), fix(10, 300)], expected: ["state:inside:c@0", "state:outside:c@10", "exit:c@10"]),
        Case(
            name: "notifyOnExit false: state but no exit", regions: [Scenario.circle { $0.notifyOnExit = false }],
            fixes: [fix(0, 0), fix(10, 300)], expected: ["state:inside:c@0", "enter:c@0", "state:outside:c@10"]),
        Case(
            name: "a fix on another floor is outside a floor's region", regions: [Scenario.circle { $0.floor = 1 }],
            fixes: [fix(0, 0, floor: 2), fix(10, 0, floor: 1), fix(20, 0)],
            expected: ["state:outside:c@0", "state:inside:c@10", "enter:c@10"]),
        Case(
            name: "minAccuracy: worse fixes are ignored for the region",
            regions: [Scenario.circle { $0.minAccuracy = 20 }],
            fixes: [fix(0, 0, acc: 50), fix(10, 0, acc: nil), fix(20, 0, acc: 10)],
            expected: ["state:inside:c@20", "enter:c@20"]),
        Case(
            name: "events of several regions come out in time order",
            regions: [c, Scenario.circle("big", radius: 400)],
            fixes: [fix(0, -130, acc: 20), fix(100, 0)],
            expected: ["state:inside:big@0", "enter:big@0", "state:outside:c@0", "state:inside:c@100", "enter:c@100"]),
    ]

    @Test("table of rules", arguments: cases)
    func rules(_ testCase: Case) {
        let scenario = Scenario(regions: testCase.regions)
        #expect(scenario.run(testCase.fixes, advanceTo: testCase.advanceTo) == testCase.expected)
    }

    @Test(
        "rejections name the problem",
        arguments: [
            (Fix(subject: "s", t: Scenario.epoch, position: GeoPoint(lon: 0, lat: .nan)), "notFinite"),
            (Fix(subject: "s", t: Scenario.epoch, position: GeoPoint(lon: 0, lat: 91)), "latitudeOutOfRange"),
            (Fix(subject: "s", t: Scenario.epoch, position: GeoPoint(lon: -181, lat: 0)), "longitudeOutOfRange"),
            (
                Fix(subject: "s", t: Scenario.epoch, position: GeoPoint(lon: 0, lat: 0), accuracy: .infinity),
                "accuracyNotFinite"
            ),
            (Fix(subject: "", t: Scenario.epoch, position: GeoPoint(lon: 0, lat: 0)), "emptySubject"),
        ])
    func rejections(fix: Fix, code: String) {
        var engine = GeofenceEngine(regions: [Scenario.circle()])
        guard case .failure(let rejection) = engine.process(fix) else {
            Issue.record("accepted \(fix)")
            return
        }
        #expect(rejection.code == code)
        #expect(!rejection.description.isEmpty)
    }

    @Test("a venue may require accuracy")
    func accuracyRequired() {
        var parameters = GeofenceParameters()
        parameters.requireAccuracy = true
        var engine = GeofenceEngine(regions: [Scenario.circle()], parameters: parameters)
        guard case .failure(.accuracyRequired) = engine.process(Scenario.fix(0, north: 0, acc: nil)) else {
            Issue.record("a fix without accuracy was accepted")
            return
        }
    }

    @Test("same inputs, same ids; ids differ per transition")
    func deterministicIDs() {
        let fixes = [Scenario.fix(0, north: 0), Scenario.fix(10, north: 300), Scenario.fix(20, north: 0)]
        func ids() -> [String] {
            var engine = GeofenceEngine(regions: [Scenario.circle()], parameters: GeofenceParameters(venue: "museum"))
            return fixes.flatMap { (try? engine.process($0).get()) ?? [] }.filter { $0.kind != .state }.map(\.id)
        }
        let first = ids()
        #expect(first.count == 3)
        #expect(first == ids())
        #expect(Set(first).count == 3)
        #expect(first[0] == RegionEvent.makeID(venue: "museum", region: "c", subject: "s", kind: .enter, seq: 1))
    }

    @Test("a schedule: unmonitored outside its windows, unknown then evaluated inside them")
    func schedule() {
        // 2026-06-01 is a Monday.
        let monday = Date(timeIntervalSince1970: 1_780_272_000)
        let region = Scenario.circle {
            $0.schedule = WeeklySchedule(windows: [.init(days: [.mon], start: 9 * 60, end: 17 * 60)])
        }
        var engine = GeofenceEngine(
            regions: [region], parameters: GeofenceParameters(timeZone: TimeZone(identifier: "UTC")!))
        func run(_ hour: Double) -> [String] {
            let fix = Fix(
                subject: "s", t: monday.addingTimeInterval(hour * 3600), position: Scenario.center, accuracy: 0)
            return ((try? engine.process(fix).get()) ?? []).map { "\($0.kind.rawValue):\($0.state?.rawValue ?? "")" }
        }
        #expect(run(8) == ["state:unmonitored"])
        #expect(run(10) == ["state:unknown", "state:inside", "enter:"])
        #expect(run(18) == ["state:unmonitored"])
    }

    @Test("an agent going offline makes states unknown without an exit")
    func markUnknown() {
        var engine = GeofenceEngine(regions: [Scenario.circle()])
        _ = engine.process(Scenario.fix(0, north: 0))
        let events = engine.markUnknown(subject: "s", at: Scenario.epoch.addingTimeInterval(5), reason: "agentOffline")
        #expect(events.map(\.kind) == [.state])
        #expect(events.first?.state == .unknown && events.first?.reason == "agentOffline")
        #expect(engine.state(subject: "s", region: "c") == .unknown)
    }

    @Test("removing a region makes it unmonitored for every subject that had a state")
    func removeRegion() {
        var engine = GeofenceEngine(regions: [Scenario.circle()])
        _ = engine.process(Scenario.fix(0, north: 0))
        let events = engine.remove(regionID: "c", at: Scenario.epoch.addingTimeInterval(1))
        #expect(events.map { $0.state } == [.unmonitored])
        #expect(engine.process(Scenario.fix(2, north: 0)).map { $0.count } == .success(0))
    }

    @Test("a region added later is evaluated from the next fix")
    func upsertRegion() {
        var engine = GeofenceEngine(regions: [])
        _ = engine.process(Scenario.fix(0, north: 0))
        engine.upsert(Scenario.circle("late"))
        let events = (try? engine.process(Scenario.fix(1, north: 0)).get()) ?? []
        #expect(events.map(\.kind) == [.state, .enter])
    }
}
