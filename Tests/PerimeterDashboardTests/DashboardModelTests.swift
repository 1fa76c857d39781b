import Foundation
import PerimeterCore
import PerimeterDashboard
import Testing

@Suite("Dashboard model: what the page may show")
struct DashboardModelTests {
    static let root = "perimeter/v1/test"

    static func model(coarseMeters: Double = 5000) -> DashboardModel {
        DashboardModel(
            prefix: "perimeter/v1", venue: "test", map: VenueMap(regions: DashboardFixtures.regions),
            renderer: SVGMapRenderer(), coarseMeters: coarseMeters)
    }

    static func apply(_ model: inout DashboardModel, _ topic: String, _ payload: String) -> [DashboardModel.Change] {
        model.apply(topic: "\(root)/\(topic)", payload: Array(payload.utf8))
    }

    static func subjects(_ model: DashboardModel) -> [JSONValue] {
        model.view(brokerConnected: true)["subjects"]?.arrayValue ?? []
    }

    @Test(
        "Visibility follows the authorization record",
        arguments: [
            (#"{"status":"denied"}"#, DashboardModel.Visibility.hidden),
            (#"{"status":"restricted"}"#, .hidden),
            (#"{"status":"notDetermined"}"#, .hidden),
            (#"{"status":"whenInUse","accuracy":"full"}"#, .full),
            (#"{"status":"always"}"#, .full),
            (#"{"status":"provisionalAlways","accuracy":"reduced"}"#, .coarse),
            (#"{"status":"always","accuracy":"reduced"}"#, .coarse),
            ("", .full),  // the record forgotten: the evaluator's gate decides alone
        ])
    func visibility(record: String, expected: DashboardModel.Visibility) {
        var model = Self.model()
        _ = Self.apply(&model, "subjects/ann/authorization", #"{"status":"denied"}"#)
        _ = Self.apply(&model, "subjects/ann/authorization", record)
        #expect(model.visibility(of: "ann") == expected)
    }

    @Test("A denied subject is never shown: not in the view, the feed, the ranging or the held count")
    func deniedSubjectNeverShown() {
        var model = Self.model()
        _ = Self.apply(&model, "subjects/bob/authorization", #"{"status":"denied"}"#)
        let changes =
            Self.apply(
                &model, "enter/gallery-1/bob", DashboardFixtures.enter("bob", "gallery-1", lat: 48.8606, lon: 2.3354))
            + Self.apply(&model, "state/gallery-1/bob", #"{"state":"inside","region":"gallery-1","subject":"bob"}"#)
            + Self.apply(&model, "place/bob", #"{"place":"gallery-1","source":"gps"}"#)
            + Self.apply(
                &model, "ranging/gallery-1/bob", #"{"beacons":[{"type":"ibeacon","uuid":"x","major":1,"minor":2}]}"#)
            + Self.apply(&model, "diagnostics/bob", #"{"heldEvents":3}"#)
            + Self.apply(&model, "notifications/push/bob", #"{"title":"Welcome"}"#)
        #expect(changes.isEmpty)
        // Bob's phone, whose agent id is his subject id (the default), is not listed either.
        _ = Self.apply(&model, "agents/bob/status", #"{"online":true}"#)
        // Occupancy is an aggregate and is shown as published.
        _ = Self.apply(&model, "occupancy/gallery-1", #"{"count":1,"t":"2026-12-01T00:10:59.000Z"}"#)
        let view = model.view(brokerConnected: true).serialized()
        #expect(!view.contains("bob"))
        #expect(view.contains(#""gallery-1":1"#))
        #expect(model.feedLines.isEmpty)
        #expect(model.events == 0)
    }

    @Test(
        "A temporary full-accuracy grant in force is listed with its session; the subject stays coarse; a hidden subject's is not"
    )
    func fullAccuracyGrants() {
        var model = Self.model()
        _ = Self.apply(
            &model, "subjects/eve/authorization",
            #"{"status":"always","accuracy":"reduced","temporaryFullAccuracy":"nav/1"}"#)
        _ = Self.apply(
            &model, "enter/cafe/eve", DashboardFixtures.enter("eve", "cafe", lat: 48.86044, lon: 2.3362))
        #expect(
            Self.apply(&model, "diagnostics/eve", #"{"heldEvents":0,"temporaryFullAccuracy":true}"#) == [.state])
        _ = Self.apply(&model, "subjects/bob/authorization", #"{"status":"denied","temporaryFullAccuracy":"nav/1"}"#)
        _ = Self.apply(&model, "diagnostics/bob", #"{"heldEvents":0,"temporaryFullAccuracy":true}"#)
        var view = model.view(brokerConnected: true)
        #expect(view["grants"] == [["id": "eve", "session": "nav/1"]])
        #expect(view["counters"]?["grants"] == 1)
        #expect(Self.subjects(model).first { $0["id"] == "eve" }?["coarse"] == true, "the grant is nav/1's, not ours")
        #expect(!view.serialized().contains("bob"))
        // The grant ends (the session ended): no longer listed.
        _ = Self.apply(&model, "diagnostics/eve", #"{"heldEvents":0,"temporaryFullAccuracy":false}"#)
        view = model.view(brokerConnected: true)
        #expect(view["grants"] == [])
        #expect(view["counters"]?["grants"] == 0)
    }

    @Test("A subject denied after being shown is forgotten, and its feed lines are taken back")
    func deniedLaterIsForgotten() {
        var model = Self.model()
        _ = Self.apply(
            &model, "enter/gallery-1/bob", DashboardFixtures.enter("bob", "gallery-1", lat: 48.8606, lon: 2.3354))
        _ = Self.apply(&model, "enter/cafe/eve", DashboardFixtures.enter("eve", "cafe", lat: 48.86044, lon: 2.3362))
        #expect(Self.subjects(model).count == 2)
        let changes = Self.apply(&model, "subjects/bob/authorization", #"{"status":"denied"}"#)
        #expect(changes.contains(.feedReset))
        #expect(!model.view(brokerConnected: true).serialized().contains("bob"))
        #expect(model.feedLines.count == 1)
        #expect(!model.feedLines.joined().contains("bob"))
    }

    @Test("A reduced-accuracy subject is drawn as a large circle on a grid cell; no fix, place or ranging")
    func reducedAccuracyIsCoarse() throws {
        var model = Self.model(coarseMeters: 5000)
        _ = Self.apply(&model, "subjects/cat/authorization", #"{"status":"always","accuracy":"reduced"}"#)
        let exact = GeoPoint(lon: 2.3354, lat: 48.8606)
        _ = Self.apply(
            &model, "enter/gallery-1/cat", DashboardFixtures.enter("cat", "gallery-1", lat: exact.lat, lon: exact.lon))
        _ = Self.apply(&model, "place/cat", #"{"place":"gallery-1","source":"gps"}"#)
        _ = Self.apply(
            &model, "ranging/gallery-1/cat", #"{"beacons":[{"type":"ibeacon","uuid":"x","major":1,"minor":2}]}"#)
        let subject = try #require(Self.subjects(model).first)
        #expect(subject["coarse"]?.boolValue == true)
        #expect(subject["place"] == nil)
        #expect(model.view(brokerConnected: true)["ranging"]?["cat"] == nil)
        // The circle is centred on the grid cell, not on the fix, and is as wide as the cell.
        let cell = model.coarse(exact)
        let centre = model.projection.point(cell)
        let x = try #require(subject["x"]?.doubleValue)
        let y = try #require(subject["y"]?.doubleValue)
        #expect(abs(x - centre.x) < 0.1 && abs(y - centre.y) < 0.1)
        let r = try #require(subject["r"]?.doubleValue)
        #expect(abs(r - 2500 * model.projection.scale) < 0.1)
        let fix = model.projection.point(exact)
        #expect(abs(x - fix.x) > 1 || abs(y - fix.y) > 1, "the drawn centre must not be the fix")
        // No coordinate of the fix appears anywhere in what is sent.
        let view = model.view(brokerConnected: true).serialized() + model.feedLines.joined()
        #expect(!view.contains("48.8606") && !view.contains("2.3354"))
    }

    @Test(
        "Every position in a grid cell gives the same coarse point",
        arguments: [
            (GeoPoint(lon: 2.3354, lat: 48.8606), GeoPoint(lon: 2.3378, lat: 48.8614)),
            (GeoPoint(lon: -0.1276, lat: 51.5072), GeoPoint(lon: -0.1270, lat: 51.5075)),
        ])
    func coarseGrid(a: GeoPoint, b: GeoPoint) {
        let model = Self.model(coarseMeters: 5000)
        #expect(model.coarse(a) == model.coarse(b))
        #expect(Geodesy.distance(a, model.coarse(a)) < 5000)
    }

    @Test("Occupancy, the feed, counters and services follow the messages")
    func liveState() throws {
        var model = Self.model()
        _ = Self.apply(&model, "occupancy/cafe", #"{"count":2,"t":"2026-12-01T00:10:59.000Z"}"#)
        let feed = Self.apply(
            &model, "enter/cafe/eve", DashboardFixtures.enter("eve", "cafe", lat: 48.86044, lon: 2.3362))
        #expect(feed.contains { if case .feed = $0 { true } else { false } })
        _ = Self.apply(&model, "deadletter/evaluator", #"{"topic":"x","reason":"lat: out of range","code":"range"}"#)
        // A notification record as the notifier publishes it (topics.md), and one that failed.
        _ = Self.apply(
            &model, "notifications/app/eve",
            #"{"id":"k","rule":"hello","channel":"app","subject":"eve","region":"cafe","title":"Bienvenue","body":"Café ouvert"}"#
        )
        _ = Self.apply(&model, "deadletter/notifier", #"{"key":"k2","state":"dead","reason":"HTTP 503"}"#)
        _ = model.apply(topic: "perimeter/v1/_sys/evaluator/1/status", payload: Array(#"{"online":true}"#.utf8))
        _ = Self.apply(&model, "agents/phone-7/status", #"{"online":false}"#)
        _ = Self.apply(&model, "place/eve", #"{"place":"cafe","source":"gps"}"#)
        _ = Self.apply(&model, "ranging/cafe/eve", #"{"beacons":[{"type":"ibeacon","uuid":"u","major":1,"minor":7}]}"#)
        let view = model.view(brokerConnected: true)
        #expect(view["occupancy"]?["cafe"]?.intValue == 2)
        #expect(view["counters"]?["deadletters"]?.intValue == 2)
        #expect(view["counters"]?["notifications"]?.intValue == 1)
        #expect(model.feedLines.contains { $0.contains(#""text":"Bienvenue: Café ouvert""#) })
        #expect(model.feedLines.contains { $0.contains(#""component":"notifier""#) && $0.contains(#""code":"dead""#) })
        #expect(view["counters"]?["events"]?.intValue == 1)
        #expect(view["ranging"]?["eve"]?.arrayValue?.count == 1)
        let services = view["services"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
        #expect(services.contains("evaluator 1") && services.contains("agent phone-7"))
        let eve = try #require(Self.subjects(model).first)
        #expect(eve["place"]?.stringValue == "cafe" && eve["x"] != nil)
        #expect(model.feedLines.count == 4)
        // Leaving the region ends its ranging list.
        _ = Self.apply(&model, "exit/cafe/eve", #"{"event":"exit","region":"cafe","subject":"eve"}"#)
        #expect(model.view(brokerConnected: true)["ranging"]?["eve"] == nil)
    }

    @Test("Regions published on regions/{id} are drawn; deleted ones go; refused ones change nothing")
    func liveRegions() {
        var model = Self.model()
        let kiosk =
            #"{"type":"Feature","properties":{"name":"Kiosk","radius":5},"geometry":{"type":"Point","coordinates":[2.3362,48.8605]}}"#
        #expect(Self.apply(&model, "regions/kiosk", kiosk) == [.map, .state])
        #expect(model.svg.contains("id=\"region-kiosk\""))
        #expect(model.view(brokerConnected: true)["occupancy"]?["kiosk"]?.intValue == 0)
        // The same definition again (a retained copy) redraws nothing.
        #expect(Self.apply(&model, "regions/kiosk", kiosk).isEmpty)
        // Refused as the evaluator refuses them: another region's id, an invalid shape.
        let other =
            #"{"type":"Feature","id":"other","properties":{"radius":5},"geometry":{"type":"Point","coordinates":[2.3362,48.8605]}}"#
        #expect(Self.apply(&model, "regions/kiosk2", other).isEmpty)
        let invalid =
            #"{"type":"Feature","properties":{"radius":-5},"geometry":{"type":"Point","coordinates":[2.3362,48.8605]}}"#
        #expect(Self.apply(&model, "regions/kiosk3", invalid).isEmpty)
        #expect(!model.svg.contains("region-kiosk2") && !model.svg.contains("region-kiosk3"))
        // Deleted (empty retained payload): gone from the map and the occupancy table, and the
        // evaluator's closing count of 0 does not bring it back.
        #expect(Self.apply(&model, "regions/kiosk", "") == [.map, .state])
        #expect(!model.svg.contains("region-kiosk"))
        #expect(Self.apply(&model, "occupancy/kiosk", #"{"count":0}"#).isEmpty)
        #expect(model.view(brokerConnected: true)["occupancy"]?["kiosk"] == nil)
    }

    @Test("A subject whose states all went unknown (stale, agent offline) and has no place is no longer drawn")
    func staleSubjectsLeaveTheMap() {
        var model = Self.model()
        _ = Self.apply(&model, "enter/cafe/eve", DashboardFixtures.enter("eve", "cafe", lat: 48.86044, lon: 2.3362))
        _ = Self.apply(&model, "state/cafe/eve", #"{"state":"inside","region":"cafe","subject":"eve"}"#)
        _ = Self.apply(&model, "state/gallery-1/eve", #"{"state":"outside","region":"gallery-1","subject":"eve"}"#)
        #expect(Self.subjects(model).count == 1)
        _ = Self.apply(&model, "state/cafe/eve", #"{"state":"unknown","reason":"stale"}"#)
        #expect(Self.subjects(model).count == 1, "still outside gallery 1: followed")
        _ = Self.apply(&model, "state/gallery-1/eve", #"{"state":"unknown","reason":"stale"}"#)
        #expect(Self.subjects(model).isEmpty)
        // Heard from again.
        _ = Self.apply(&model, "state/cafe/eve", #"{"state":"inside"}"#)
        #expect(Self.subjects(model).count == 1)
    }

    @Test("Raw observations are not among the subscriptions")
    func subscriptions() {
        let filters = Self.model().subscriptions
        #expect(!filters.contains { $0.contains("/obs/") || $0.hasSuffix("/#") })
        #expect(filters.contains("perimeter/v1/test/subjects/+/authorization"))
    }
}
