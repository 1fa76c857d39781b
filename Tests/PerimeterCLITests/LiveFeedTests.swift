import Foundation
import PerimeterCore
import Testing

@testable import PerimeterCLI

@Suite("perimeter up's live feed")
struct LiveFeedTests {
    static func feed() throws -> LiveFeed {
        let regions = RegionParser.parse(
            bytes: Array(
                #"{"type":"FeatureCollection","features":[{"type":"Feature","id":"gallery-1","properties":{"name":"Antiquities","radius":10},"geometry":{"type":"Point","coordinates":[2.3,48.8]}}]}"#
                    .utf8)
        ).regions
        #expect(regions.count == 1)
        return LiveFeed(
            topics: Topics(venue: "museum"), regions: regions, timeZone: TimeZone(identifier: "Europe/Paris")!)
    }

    static let cases: [(topic: String, payload: String, line: String?)] = [
        (
            "perimeter/v1/museum/visit/visitor-1",
            #"{"id":"x","event":"arrival","venue":"museum","subject":"visitor-1","arrival":"2026-12-01T10:00:00.000Z","departure":null,"lat":48.86061,"lon":2.33632,"acc":12.4,"fixes":11,"seq":1,"t":"2026-12-01T10:10:00.000Z","source":"gps"}"#,
            "11:10:00  visitor-1   ◎ staying   48.86061, 2.33632 ±12 m since 11:00:00"
        ),
        (
            "perimeter/v1/museum/visit/visitor-1",
            #"{"id":"y","event":"departure","venue":"museum","subject":"visitor-1","arrival":"2026-12-01T10:00:00.000Z","departure":"2026-12-01T10:20:00.000Z","lat":48.86061,"lon":2.33632,"acc":12.4,"fixes":21,"seq":1,"t":"2026-12-01T10:22:00.000Z","source":"gps"}"#,
            "11:22:00  visitor-1   ◎ visited   48.86061, 2.33632 ±12 m from 11:00:00 to 11:20:00"
        ),
        (
            "perimeter/v1/museum/enter/gallery-1/visitor-1",
            #"{"id":"x","event":"enter","region":"gallery-1","subject":"visitor-1","t":"2026-12-01T10:00:00.000Z","seq":1,"source":"gps"}"#,
            "11:00:00  visitor-1   → entered  gallery-1 (Antiquities)  [gps]"
        ),
        (
            "perimeter/v1/museum/exit/gallery-1/visitor-1",
            #"{"event":"exit","region":"gallery-1","subject":"visitor-1","t":"2026-12-01T10:00:05.000Z","source":"ble","refinement":{"type":"ibeacon","major":1,"minor":3},"held":true}"#,
            "11:00:05  visitor-1   ← left     gallery-1 (Antiquities)  [ble]  beacon 1/3  (held by the privacy gate, delivered late)"
        ),
        (
            "perimeter/v1/museum/ranging/gallery-1-beacons/visitor-1",
            #"{"t":"2026-12-01T10:00:06.000Z","beacons":[{"major":1,"minor":9,"proximity":"unknown","accuracy":-1},{"major":1,"minor":2,"proximity":"near","accuracy":1.84}]}"#,
            "11:00:06  visitor-1   ≈ ranging   gallery-1-beacons: nearest 1/2 near 1.8 m, 2 beacons"
        ),
        (
            "perimeter/v1/museum/notifications/app/visitor-1",
            #"{"id":"x:arrival","rule":"arrival","t":"2026-12-01T10:00:00.000Z","title":"Bienvenue","body":"Bienvenue au musée !"}"#,
            "11:00:00  visitor-1   ✉ app  Bienvenue — Bienvenue au musée !"
        ),
        (
            "perimeter/v1/museum/notifications/staff/visitor-1",
            #"{"id":"x:staff","rule":"staff","t":"2026-12-01T10:00:00.000Z","body":"visitor-1 entered Antiquities at 11:00"}"#,
            "11:00:00  visitor-1   ✉ staff  visitor-1 entered Antiquities at 11:00"
        ),
        ("perimeter/v1/museum/obs/phone-1/gps", #"{"t":1,"lat":1,"lon":1}"#, nil),
        ("perimeter/v1/museum/state/gallery-1/visitor-1", #"{"state":"inside","t":"2026-12-01T10:00:00Z"}"#, nil),
        ("perimeter/v1/other/enter/gallery-1/visitor-1", #"{"event":"enter"}"#, nil),
        ("perimeter/v1/museum/enter/gallery-1/visitor-1", "not json", nil),
    ]

    @Test("one readable line per event; raw topics and other venues stay out", arguments: cases)
    func lines(_ example: (topic: String, payload: String, line: String?)) throws {
        var feed = try Self.feed()
        #expect(feed.line(topic: example.topic, payload: Array(example.payload.utf8)) == example.line)
    }

    @Test("ranging is summarised: again only after 10 s or when the nearest beacon changes")
    func rangingThrottled() throws {
        var feed = try Self.feed()
        func ranging(_ seconds: Int, minor: Int) -> String? {
            let t = Timestamp.format(Date(timeIntervalSince1970: 1_796_119_200 + Double(seconds)))
            return feed.line(
                topic: "perimeter/v1/museum/ranging/g/visitor-1",
                payload: Array(
                    #"{"t":"\#(t)","beacons":[{"major":1,"minor":\#(minor),"proximity":"far","accuracy":5}]}"#.utf8))
        }
        let shown = [(0, 1), (1, 1), (5, 1), (6, 2), (7, 2), (17, 2)].map { ranging($0.0, minor: $0.1) != nil }
        #expect(shown == [true, false, false, true, false, true])
    }

    @Test("privacy diagnostics: a line when what the gate does changes, not on every update")
    func diagnostics() throws {
        var feed = try Self.feed()
        let topic = "perimeter/v1/museum/diagnostics/visitor-4"
        func line(_ json: String) -> String? { feed.line(topic: topic, payload: Array(json.utf8)) }
        let held = #"{"status":"provisionalAlways","insufficientlyInUse":true,"heldEvents":1}"#
        #expect(line(held)?.hasSuffix("⊘ privacy   provisionalAlways: insufficientlyInUse, 1 event held") == true)
        #expect(line(held) == nil)
        #expect(line(#"{"status":"always","heldEvents":0}"#)?.hasSuffix("always: delivering") == true)
    }
}
