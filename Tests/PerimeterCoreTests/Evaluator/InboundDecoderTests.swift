import Foundation
import PerimeterCore
import Testing

private let venues: Set<String> = ["museum", "acme"]
private let now = Date(timeIntervalSince1970: 1_780_000_000)

private let gps = InboundRoute.gps(venue: "museum", agent: "phone-1")
private let ble = InboundRoute.ble(venue: "museum", agent: "gw-1")
private let status = InboundRoute.status(venue: "museum", agent: "gw-1")
private let region = InboundRoute.region(venue: "museum", id: "kiosk")
private let authorization = InboundRoute.authorization(venue: "museum", subject: "ann")
private let usage = InboundRoute.usage(venue: "museum", subject: "ann")
private let preferences = InboundRoute.preferences(venue: "museum", subject: "ann")
private let session = InboundRoute.session(venue: "museum", consumer: "guide-app", session: "s-1")
private let ownTracks = InboundRoute.ownTracks(user: "jane", device: "phone")
private let espresense = InboundRoute.espresense(
    device: "iBeacon:e5b9e3a6-27e2-4c36-a257-7698da5fc140-1-2", room: "kitchen")

/// The real iBeacon advert of the brief: flags, then Apple manufacturer data with UUID
/// 41414141-…, major 1, minor 1, measured power 0xf8 (−8 dBm).
private let iBeaconVector = "0201061aff4c0002154141414141414141414141414141414100010001f8"
private let uuidText = "2f234454-cf6d-4a0f-adf2-f4911ba9ffa6"

/// What a message decodes to; a part refused alone fails the test (those have their own table).
private func decode(
    _ route: InboundRoute, _ payload: String, limits: InboundDecoder.Limits = .init()
) throws(InboundError) -> [Inbound] {
    let decoded = try InboundDecoder.decode(route, payload: Array(payload.utf8), receivedAt: now, limits: limits)
    #expect(decoded.refused.isEmpty, "parts refused: \(decoded.refused)")
    return decoded.inputs
}

/// The one thing a message decodes to.
private func single(_ route: InboundRoute, _ payload: String) throws -> Inbound {
    let decoded = try decode(route, payload)
    try #require(decoded.count == 1, "\(decoded)")
    return decoded[0]
}

private func regions(_ decoded: [Inbound]) -> [Region] {
    decoded.compactMap { if case .regionUpsert(let region) = $0 { region } else { nil } }
}

// MARK: - Topics

@Suite("Inbound topics")
struct InboundTopicTests {
    @Test(
        "topics route to what they carry; ids are percent-decoded",
        arguments: [
            ("perimeter/v1/museum/obs/phone-1/gps", .gps(venue: "museum", agent: "phone-1")),
            ("perimeter/v1/museum/obs/gw%2F3/ble", .ble(venue: "museum", agent: "gw/3")),
            ("perimeter/v1/museum/agents/gw-1/status", .status(venue: "museum", agent: "gw-1")),
            ("perimeter/v1/museum/regions/Europe%2FParis", .region(venue: "museum", id: "Europe/Paris")),
            ("perimeter/v1/museum/regions/50%off", .region(venue: "museum", id: "50%off")),
            ("perimeter/v1/museum/regions/", .region(venue: "museum", id: "")),
            ("perimeter/v1/museum/subjects/a%2Bb/authorization", .authorization(venue: "museum", subject: "a+b")),
            ("perimeter/v1/museum/subjects/c%23d/usage", .usage(venue: "museum", subject: "c#d")),
            ("perimeter/v1/museum/subjects/ann/preferences", .preferences(venue: "museum", subject: "ann")),
            (
                "perimeter/v1/museum/sessions/guide-app/s%25-1",
                .session(venue: "museum", consumer: "guide-app", session: "s%-1")
            ),
            ("perimeter/v1/acme/obs/tracker/gps", .gps(venue: "acme", agent: "tracker")),
            ("owntracks/jane/phone", .ownTracks(user: "jane", device: "phone")),
            (
                "espresense/devices/iBeacon:e5b9e3a6-27e2-4c36-a257-7698da5fc140-1-2/kitchen",
                .espresense(device: "iBeacon:e5b9e3a6-27e2-4c36-a257-7698da5fc140-1-2", room: "kitchen")
            ),
            // Not ours: other prefixes and venues, outbound topics, other shapes.
            ("perimeter/v2/museum/obs/phone-1/gps", nil),
            ("perimeter/v1/zoo/obs/phone-1/gps", nil),
            ("perimeter/v1/museum/obs/phone-1/wifi", nil),
            ("perimeter/v1/museum/obs/phone-1/gps/extra", nil),
            ("perimeter/v1/museum/obs/phone-1", nil),
            ("perimeter/v1/museum/enter/kiosk/ann", nil),
            ("perimeter/v1/museum/state/kiosk/ann", nil),
            ("perimeter/v1/museum/subjects/ann/diagnostics", nil),
            ("perimeter/v1/museum/regions/kiosk/extra", nil),
            ("perimeter/v1/museum", nil),
            ("perimeter/v1", nil),
            ("owntracks/jane/phone/event", nil),
            ("owntracks/jane/phone/cmd", nil),
            ("owntracks/jane", nil),
            ("espresense/devices/abc", nil),
            ("espresense/rooms/kitchen/telemetry", nil),
            ("", nil),
        ] as [(String, InboundRoute?)])
    func routes(topic: String, expected: InboundRoute?) {
        let route = InboundDecoder.route(topic: topic, prefix: "perimeter/v1", venues: venues)
        #expect(route == expected)
    }

    @Test("a multi-level prefix routes; the default prefix then does not")
    func otherPrefix() {
        let routed = InboundDecoder.route(topic: "acme/geo/v1/acme/obs/a/gps", prefix: "acme/geo/v1", venues: venues)
        #expect(routed == .gps(venue: "acme", agent: "a"))
        let other = InboundDecoder.route(topic: "perimeter/v1/acme/obs/a/gps", prefix: "acme/geo/v1", venues: venues)
        #expect(other == nil)
    }

    @Test(
        "decodeLevel inverts Topics.level",
        arguments: ["plain", "Europe/Paris", "a+b#c", "50%", "%2F", "100%/2B", "", "é/ü%"])
    func decodeLevelRoundTrip(id: String) {
        let level = Topics.level(id)
        #expect(Topics.decodeLevel(level) == id)
    }

    @Test(
        "decodeLevel leaves a level it did not write as it is",
        arguments: [
            ("50%", "50%"), ("%41", "%41"), ("a%2", "a%2"), ("a%2Fb%", "a%2Fb%"), ("a%2fb", "a/b"),
            ("%2b%23%25", "+#%"),
        ])
    func decodeLevelRaw(level: String, expected: String) {
        #expect(Topics.decodeLevel(level) == expected)
    }
}

// MARK: - Rejections

struct Rejection: Sendable, CustomTestStringConvertible {
    var route: InboundRoute
    var payload: String
    var code: String
    var field: String
    var maxBatch = 256

    init(_ route: InboundRoute, _ payload: String, _ code: String, _ field: String, maxBatch: Int = 256) {
        self.route = route
        self.payload = payload
        self.code = code
        self.field = field
        self.maxBatch = maxBatch
    }

    var testDescription: String { "\(route) \(payload.prefix(80)) → \(code) \(field)" }
}

private func advert(_ fields: String) -> String { #"{"t":1780000000,"adverts":[{"# + fields + "}]}" }
private let fixFields = #""t":"2026-01-01T10:00:00Z","lat":48.86,"lon":2.33"#
private let iBeaconFields = #""uuid":"\#(uuidText)","major":1,"minor":2"#
private let waypointFields = #""desc":"Home","lat":52.37,"lon":4.89,"tst":1700000000"#

private let rejections: [Rejection] = [
    // obs/{agent}/gps
    Rejection(gps, "", "schema", ""),
    Rejection(gps, #"{"t":1,"lat":1,"lon":2,"accuracy":5}"#, "schema", "accuracy"),
    Rejection(gps, "{", "json", ""),
    Rejection(gps, "[1]", "schema", ""),
    Rejection(gps, #"{"lat":48.8,"lon":2.3}"#, "schema", "t"),
    Rejection(gps, #"{"t":"yesterday","lat":48.8,"lon":2.3}"#, "schema", "t"),
    Rejection(gps, #"{"t":1e300,"lat":48.8,"lon":2.3}"#, "range", "t"),
    Rejection(gps, #"{"t":1,"lat":"48.8","lon":2.3}"#, "schema", "lat"),
    Rejection(gps, #"{"t":1,"lat":48.8}"#, "schema", "lon"),
    Rejection(gps, #"{"t":1,"lat":90.5,"lon":2.3}"#, "range", "lat"),
    Rejection(gps, #"{"t":1,"lat":48.8,"lon":-180.5}"#, "range", "lon"),
    // Numbers too large for a double are refused by the JSON parser itself (naming the number).
    Rejection(gps, #"{"t":1,"lat":1e400,"lon":2.3}"#, "json", ""),
    Rejection(gps, "{\(fixFields),\"acc\":-1e999}", "json", ""),
    Rejection(gps, "{\(fixFields),\"acc\":\"5\"}", "schema", "acc"),
    Rejection(gps, "{\(fixFields),\"floor\":1.5}", "schema", "floor"),
    Rejection(gps, "{\(fixFields),\"alt\":\"high\"}", "schema", "alt"),
    Rejection(gps, "{\(fixFields),\"course\":1e999}", "json", ""),
    Rejection(gps, "{\(fixFields),\"subject\":\"a/b\"}", "schema", "subject"),
    Rejection(gps, "{\(fixFields),\"subject\":\"\"}", "schema", "subject"),
    Rejection(gps, "{\(fixFields),\"subject\":7}", "schema", "subject"),
    // obs/{agent}/ble
    Rejection(ble, #"{"adverts":[]}"#, "schema", "t"),
    Rejection(ble, #"{"t":1}"#, "schema", "adverts"),
    Rejection(ble, #"{"t":1,"adverts":{}}"#, "schema", "adverts"),
    Rejection(ble, #"{"t":1,"subject":"x#","adverts":[]}"#, "schema", "subject"),
    Rejection(ble, #"{"t":1,"adverts":[{"data":""},{},{}]}"#, "batch", "adverts", maxBatch: 2),
    // agents/{agent}/status
    Rejection(status, "", "schema", ""),
    Rejection(status, "{}", "schema", "online"),
    Rejection(status, #"{"online":"yes"}"#, "schema", "online"),
    Rejection(status, #"{"online":true,"mode":"relay"}"#, "schema", "mode"),
    Rejection(status, #"{"online":true,"caps":["gps",3]}"#, "schema", "caps[1]"),
    Rejection(status, #"{"online":true,"caps":"gps"}"#, "schema", "caps"),
    Rejection(status, #"{"online":true,"version":2}"#, "schema", "version"),
    Rejection(status, #"{"online":false,"t":"soon"}"#, "schema", "t"),
    // regions/{id}
    Rejection(region, "[]", "schema", ""),
    Rejection(region, "{\"type\":\"Feature\",\"id\":\"kiosk\"", "json", ""),
    Rejection(
        region,
        #"{"type":"Feature","id":"other","properties":{"radius":5},"geometry":{"type":"Point","coordinates":[2,48]}}"#,
        "region", "id"),
    Rejection(
        region,
        #"{"type":"Feature","properties":{"id":"other","radius":5},"geometry":{"type":"Point","coordinates":[2,48]}}"#,
        "region", "id"),
    Rejection(region, #"{"type":"Feature","geometry":{"type":"Point","coordinates":[2,48]}}"#, "region", ""),
    Rejection(
        region, #"{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}}"#,
        "region", ""),
    // subjects/{s}/authorization
    Rejection(authorization, "{}", "schema", "status"),
    Rejection(authorization, "null", "schema", ""),
    Rejection(authorization, #"{"status":"sometimes"}"#, "schema", "status"),
    Rejection(authorization, #"{"status":"always","accuracy":"precise"}"#, "schema", "accuracy"),
    Rejection(authorization, #"{"status":"always","temporary":"no"}"#, "schema", "temporary"),
    // subjects/{s}/usage
    Rejection(usage, "", "schema", ""),
    Rejection(usage, "{}", "schema", "inUse"),
    Rejection(usage, #"{"inUse":1}"#, "schema", "inUse"),
    Rejection(usage, #"{"inUse":true,"background":"x"}"#, "schema", "background"),
    // subjects/{s}/preferences
    Rejection(preferences, #"{"defaultPlace":"cafe","colour":"red"}"#, "schema", "colour"),
    Rejection(authorization, #"{"status":"always","note":"kept"}"#, "schema", "note"),
    Rejection(preferences, #"{"defaultPlace":3}"#, "schema", "defaultPlace"),
    Rejection(preferences, #"{"defaultPlace":""}"#, "schema", "defaultPlace"),
    Rejection(preferences, #"{"locale":[]}"#, "schema", "locale"),
    // sessions/{consumer}/{session}
    Rejection(session, "{}", "schema", "subjects"),
    Rejection(session, #"{"subjects":"all","level":"always"}"#, "schema", "subjects"),
    Rejection(session, #"{"subjects":["ann","b/c"],"level":"always"}"#, "schema", "subjects[1]"),
    Rejection(session, #"{"subjects":["ann",1],"level":"always"}"#, "schema", "subjects[1]"),
    Rejection(session, #"{"subjects":"*"}"#, "schema", "level"),
    Rejection(session, #"{"subjects":"*","level":"sometimes"}"#, "schema", "level"),
    Rejection(session, #"{"subjects":"*","level":"always","fullAccuracyPurpose":1}"#, "schema", "fullAccuracyPurpose"),
    Rejection(session, #"{"subjects":"*","level":"always","live":"yes"}"#, "schema", "live"),
    // OwnTracks
    Rejection(ownTracks, "", "schema", ""),
    Rejection(ownTracks, "{}", "schema", "_type"),
    Rejection(ownTracks, #"{"_type":5}"#, "schema", "_type"),
    Rejection(ownTracks, #"{"_type":"location","lat":48.8,"lon":2.3}"#, "schema", "tst"),
    Rejection(ownTracks, #"{"_type":"location","lat":48.8,"lon":2.3,"tst":"now"}"#, "schema", "tst"),
    Rejection(ownTracks, #"{"_type":"location","lat":95,"lon":2.3,"tst":1700000000}"#, "range", "lat"),
    Rejection(ownTracks, #"{"_type":"location","lat":48.8,"lon":2.3,"tst":1700000000,"acc":"x"}"#, "schema", "acc"),
    Rejection(ownTracks, #"{"_type":"waypoint","lat":52.37,"lon":4.89,"rad":50,"tst":1700000000}"#, "schema", "desc"),
    Rejection(ownTracks, "{\"_type\":\"waypoint\",\(waypointFields),\"rad\":-1}", "range", "rad"),
    Rejection(ownTracks, #"{"_type":"waypoint","desc":"Home","rad":50,"tst":1700000000}"#, "schema", "lat"),
    Rejection(
        ownTracks, #"{"_type":"waypoint","desc":"Home","lat":95,"lon":4.89,"rad":50,"tst":1700000000}"#, "region", ""),
    Rejection(ownTracks, "{\"_type\":\"waypoint\",\(waypointFields),\"uuid\":\"nope\"}", "region", ""),
    Rejection(
        ownTracks, "{\"_type\":\"waypoint\",\(waypointFields),\"uuid\":\"\(uuidText)\",\"major\":1.5}", "schema",
        "major"),
    Rejection(ownTracks, #"{"_type":"waypoints","waypoints":{}}"#, "schema", "waypoints"),
    Rejection(
        ownTracks,
        "{\"_type\":\"waypoints\",\"waypoints\":[{\(waypointFields),\"rad\":5},{\"lat\":1,\"lon\":2,\"tst\":3}]}",
        "schema", "waypoints[1].desc"),
    Rejection(
        ownTracks, #"{"_type":"waypoints","waypoints":[{"desc":"x","lat":91,"lon":0,"rad":5,"tst":1}]}"#, "region",
        "waypoints[0]"),
    // ESPresense
    Rejection(espresense, "", "schema", ""),
    Rejection(espresense, "{}", "schema", "rssi"),
    Rejection(espresense, #"{"rssi":"x"}"#, "schema", "rssi"),
    Rejection(espresense, #"{"rssi":50}"#, "range", "rssi"),
    Rejection(espresense, #"{"rssi":-70,"rssi@1m":"x"}"#, "schema", "rssi@1m"),
    Rejection(espresense, #"{"rssi":-70,"distance":"far"}"#, "schema", "distance"),
    Rejection(espresense, #"{"id":7,"rssi":-70}"#, "schema", "id"),
    // Empty ids in topics
    Rejection(.region(venue: "museum", id: ""), "", "topic", ""),
    Rejection(.gps(venue: "museum", agent: ""), "{}", "topic", ""),
    Rejection(.session(venue: "museum", consumer: "app", session: ""), "", "topic", ""),
    Rejection(.ownTracks(user: "", device: "phone"), "{}", "topic", ""),
    Rejection(.espresense(device: "x", room: ""), "{}", "topic", ""),
]

@Suite("Inbound payload rejections")
struct InboundRejectionTests {
    @Test("a bad payload is refused with its code, naming the field", arguments: rejections)
    func rejected(_ rejection: Rejection) {
        let limits = InboundDecoder.Limits(maxBatch: rejection.maxBatch)
        do {
            let decoded = try decode(rejection.route, rejection.payload, limits: limits)
            Issue.record("decoded \(decoded), expected \(rejection.code) at '\(rejection.field)'")
        } catch {
            #expect(error.code == rejection.code, "\(error)")
            #expect(error.field == rejection.field, "\(error)")
            #expect(error.description.hasPrefix(rejection.field.isEmpty ? "" : "\(rejection.field): "))
            #expect(!error.message.isEmpty)
        }
    }

    @Test(
        "messages say what is wrong",
        arguments: [
            (gps, "{", "not JSON: line 1, column 2"),
            (gps, #"{"t":1,"lat":90.5,"lon":2.3}"#, "lat: latitude 90.5 out of range [-90, 90]"),
            (gps, #"{"t":1,"lat":"48.8","lon":2.3}"#, "lat: expected a number, got a string"),
            (ble, #"{"t":1,"adverts":{}}"#, "adverts: expected an array, got an object"),
            (
                region, #"{"type":"Feature","id":"other","properties":{"radius":5},"geometry":null}"#,
                "id: the Feature's id 'other' differs from the topic's region 'kiosk'"
            ),
            (
                region,
                #"{"type":"Feature","properties":{"notifyOnEntry":"yes"},"geometry":{"type":"Point","coordinates":[2,48]}}"#,
                "region 'kiosk': a circle (Point geometry) needs properties.radius in metres; properties.notifyOnEntry"
            ),
            (status, #"{"online":true,"mode":"relay"}"#, "mode: 'relay' is not one of scanner, gateway"),
            (usage, "", "the payload is empty; this topic needs a JSON object"),
            (.region(venue: "museum", id: ""), "", "the topic's region level is empty"),
        ] as [(InboundRoute, String, String)])
    func messages(route: InboundRoute, payload: String, expected: String) {
        do {
            let decoded = try decode(route, payload)
            Issue.record("decoded \(decoded), expected \(expected)")
        } catch {
            let description = error.description
            #expect(description.hasPrefix(expected), "\(description)")
        }
    }

    @Test("an oversized payload is refused before it is read, naming both sizes")
    func tooLarge() {
        let payload = [UInt8](repeating: UInt8(ascii: " "), count: 70_000)
        do {
            let decoded = try InboundDecoder.decode(gps, payload: payload, receivedAt: now)
            Issue.record("decoded \(decoded)")
        } catch {
            #expect(error.code == "tooLarge")
            #expect(error.message.contains("70000") && error.message.contains("65536"), "\(error)")
        }
        let small = InboundDecoder.Limits(maxPayloadBytes: 15)
        let atLimit = try? decode(status, #"{"online":true}"#, limits: small)
        #expect(atLimit == [.agentStatus(AgentStatus(agent: "gw-1", online: true))])
        #expect(throws: InboundError(code: "tooLarge", "the payload is 16 bytes; the limit is 15 bytes")) {
            try decode(status, #"{"online":false}"#, limits: small)
        }
    }
}

// MARK: - One bad advert

/// One advert that cannot be read, put in a scan beside a valid one: the problem it is refused for.
struct AdvertRefusal: Sendable, CustomTestStringConvertible {
    /// The bad advert as JSON.
    var advert: String
    var code: String
    /// The field at fault, relative to the advert (`""` for the advert itself).
    var field: String
    /// The start of the problem as said (after the field), when a row pins the wording.
    var message: String

    init(_ advert: String, _ code: String, _ field: String, _ message: String = "") {
        self.advert = advert
        self.code = code
        self.field = field
        self.message = message
    }

    var testDescription: String { "\(advert.prefix(80)) → \(code) \(field)" }
}

/// The beacontools Eddystone-URL vector (MIT; `../shared/data/ble/vectors.json`,
/// `https://github.com/citruz`) with its URL scheme byte changed from 0x03 to 0x07, which no
/// Eddystone-URL scheme is: a malformed foreign beacon of the kind the issue met.
private let malformedEddystoneURL = "0303aafe1316aafe10f8076769746875620063697472757a"

private let advertRefusals: [AdvertRefusal] = [
    AdvertRefusal(
        #"{"data":"\#(malformedEddystoneURL)","rssi":-70}"#, "advert", "data",
        "at byte 10: Eddystone-URL scheme 0x07 is not 0 to 3"),
    AdvertRefusal(#"{"data":"0201061aff4c000215414141","rssi":-60}"#, "advert", "data"),
    AdvertRefusal(#"{"data":"zz","rssi":-60}"#, "advert", "data", "at byte 0: hex text: 'z' is not a hex digit"),
    AdvertRefusal(#"{"data":3,"rssi":-60}"#, "schema", "data"),
    AdvertRefusal(#"{"data":"020106","rssi":-60,"mac":false}"#, "schema", "mac"),
    AdvertRefusal(#"{"data":"020106"}"#, "schema", "rssi", "missing"),
    AdvertRefusal("7", "schema", "", "expected a JSON object, got a number"),
    AdvertRefusal("{\(iBeaconFields)}", "schema", "rssi"),
    AdvertRefusal("{\(iBeaconFields),\"rssi\":-128}", "range", "rssi", "-128 dBm out of range [-127, 20]"),
    AdvertRefusal("{\(iBeaconFields),\"rssi\":21}", "range", "rssi"),
    AdvertRefusal("{\(iBeaconFields),\"rssi\":\"-60\"}", "schema", "rssi"),
    AdvertRefusal("{\(iBeaconFields),\"rssi\":-60,\"tx\":99}", "range", "tx"),
    AdvertRefusal("{\(iBeaconFields),\"rssi\":-50,\"txPower\":-59}", "schema", "txPower", "unknown field"),
    AdvertRefusal(#"{"uuid":"not-a-uuid","major":1,"minor":2,"rssi":-60}"#, "schema", "uuid"),
    AdvertRefusal(#"{"uuid":"\#(uuidText)","major":70000,"minor":2,"rssi":-60}"#, "range", "major"),
    AdvertRefusal(#"{"uuid":"\#(uuidText)","major":1.5,"minor":2,"rssi":-60}"#, "schema", "major"),
    AdvertRefusal(#"{"uuid":"\#(uuidText)","major":1,"rssi":-60}"#, "schema", "minor"),
    AdvertRefusal(#"{"namespace":"abc","instance":"0102030405ff","rssi":-60}"#, "schema", "namespace"),
    AdvertRefusal(#"{"namespace":"edd1ebeac04e5defa017","instance":"xyz","rssi":-60}"#, "schema", "instance"),
    // UInt64(_:radix:) would take the sign: 12 characters, 11 digits.
    AdvertRefusal(#"{"namespace":"edd1ebeac04e5defa017","instance":"+0102030405f","rssi":-60}"#, "schema", "instance"),
    AdvertRefusal(#"{"id1":"nope","id2":1,"id3":2,"rssi":-60}"#, "schema", "id1"),
    AdvertRefusal(#"{"rssi":-60}"#, "schema", "", "needs uuid (iBeacon)"),
    AdvertRefusal("{\(iBeaconFields),\"data\":\"020106\",\"rssi\":-60}", "schema", "", "mixes uuid and data"),
]

/// The real iBeacon vector as the scanner heard it: the advert that must survive.
private let good = #"{"data":"\#(iBeaconVector)","rssi":-60}"#
private let goodSighting = BeaconSighting(
    identity: .iBeacon(uuid: BeaconPrefix(uuid: "41414141-4141-4141-4141-414141414141")!, major: 1, minor: 1),
    rssi: -60, tx1m: -8)

@Suite("Inbound scans: one bad advert")
struct InboundAdvertRefusalTests {
    @Test("one bad advert refuses only that advert: the scan keeps the good one", arguments: advertRefusals)
    func oneBadAdvertRefusesOnlyThatAdvert(_ refusal: AdvertRefusal) throws {
        let payload = #"{"t":1780000000,"subject":"ann","adverts":["# + good + "," + refusal.advert + "]}"
        let decoded = try InboundDecoder.decode(ble, payload: Array(payload.utf8), receivedAt: now)
        let report = BeaconReport(agent: "gw-1", subject: "ann", t: now, sightings: [goodSighting])
        #expect(decoded.inputs == [.beacons(report)])
        try #require(decoded.refused.count == 1, "\(decoded.refused)")
        let error = decoded.refused[0]
        #expect(error.code == refusal.code, "\(error)")
        #expect(error.field == (refusal.field.isEmpty ? "adverts[1]" : "adverts[1].\(refusal.field)"), "\(error)")
        #expect(error.message.hasPrefix(refusal.message), "\(error)")
        #expect(error.description.hasPrefix("adverts[1]"), "the refusal names the advert: \(error)")
    }

    @Test("each bad advert of a scan is refused with its own place, in order; a scan of only bad adverts is empty")
    func everyBadAdvertNamed() throws {
        let payload =
            #"{"t":1780000000,"adverts":[7,"# + good + #",{"data":"zz","rssi":-1},{"rssi":-60}]}"#
        let decoded = try InboundDecoder.decode(ble, payload: Array(payload.utf8), receivedAt: now)
        #expect(decoded.inputs == [.beacons(BeaconReport(agent: "gw-1", t: now, sightings: [goodSighting]))])
        #expect(decoded.refused.map(\.field) == ["adverts[0]", "adverts[2].data", "adverts[3]"])
        let allBad = try InboundDecoder.decode(
            ble, payload: Array(#"{"t":1780000000,"adverts":[{"rssi":1}]}"#.utf8), receivedAt: now)
        #expect(allBad.inputs == [.beacons(BeaconReport(agent: "gw-1", t: now, sightings: []))])
        #expect(allBad.refused.map(\.field) == ["adverts[0]"])
    }

    @Test(
        "what concerns the whole scan still refuses it whole",
        arguments: [
            (#"{"adverts":[\#(good)]}"#, "t"), (#"{"t":"soon","adverts":[\#(good)]}"#, "t"),
            (#"{"t":1780000000,"subject":"a/b","adverts":[\#(good)]}"#, "subject"),
            (#"{"t":1780000000,"adverts":{}}"#, "adverts"), (#"{"t":1780000000,"adverts":[\#(good)],"x":1}"#, "x"),
            (#"{"t":1780000000,"adverts":[\#(good),\#(good),\#(good)]}"#, "adverts"),
        ])
    func wholeScanErrors(payload: String, field: String) {
        #expect {
            try InboundDecoder.decode(
                ble, payload: Array(payload.utf8), receivedAt: now, limits: InboundDecoder.Limits(maxBatch: 2))
        } throws: { ($0 as? InboundError)?.field == field }
    }
}

// MARK: - Accepted payloads

@Suite("Inbound payloads")
struct InboundPayloadTests {
    @Test("gps: a fix for the agent, or for the subject the payload names; negative accuracy passes")
    func gpsFix() throws {
        let own = try single(gps, #"{"t":"2026-01-01T10:00:00Z","lat":48.86,"lon":2.33,"acc":5,"alt":35,"floor":2}"#)
        let expected = Fix(
            subject: "phone-1", t: Date(timeIntervalSince1970: 1_767_261_600),
            position: GeoPoint(lon: 2.33, lat: 48.86),
            accuracy: 5, floor: 2, source: "gps")
        #expect(own == .fix(expected))
        let named = try single(gps, #"{"subject":"badge-7","t":1767261600,"lat":-90,"lon":180,"acc":-1}"#)
        let badge = Fix(
            subject: "badge-7", t: Date(timeIntervalSince1970: 1_767_261_600), position: GeoPoint(lon: 180, lat: -90),
            accuracy: -1, source: "gps")
        #expect(named == .fix(badge))
    }

    @Test("ble: the three decoded formats, raw adverts, and a raw advert without identity skipped")
    func bleFormats() throws {
        let payload =
            #"{"t":"2026-01-01T10:00:00Z","subject":"ann","adverts":["#
            + #"{"uuid":"\#(uuidText)","major":1,"minor":2,"rssi":-60,"tx":-59},"#
            + #"{"namespace":"edd1ebeac04e5defa017","instance":"0102030405ff","rssi":-70},"#
            + #"{"id1":"\#(uuidText)","id2":7,"id3":8,"rssi":-80.5,"tx":-61},"#
            + #"{"data":"\#(iBeaconVector)","rssi":-65,"mac":"aa:bb:cc:dd:ee:ff"},"#
            + #"{"data":"\#(iBeaconVector)","rssi":-66,"tx":-59},"#
            + #"{"data":"020106","rssi":-50}]}"#
        let uuid = try #require(BeaconPrefix(uuid: uuidText))
        let vector = try #require(BeaconPrefix(uuid: "41414141-4141-4141-4141-414141414141"))
        let namespace = try #require(BeaconPrefix(namespace: "edd1ebeac04e5defa017"))
        let report = BeaconReport(
            agent: "gw-1", subject: "ann", t: Date(timeIntervalSince1970: 1_767_261_600),
            sightings: [
                BeaconSighting(identity: .iBeacon(uuid: uuid, major: 1, minor: 2), rssi: -60, tx1m: -59),
                BeaconSighting(identity: .eddystone(namespace: namespace, instance: 0x0102_0304_05ff), rssi: -70),
                BeaconSighting(identity: .altBeacon(id1: uuid, id2: 7, id3: 8), rssi: -80.5, tx1m: -61),
                BeaconSighting(identity: .iBeacon(uuid: vector, major: 1, minor: 1), rssi: -65, tx1m: -8),
                BeaconSighting(identity: .iBeacon(uuid: vector, major: 1, minor: 1), rssi: -66, tx1m: -59),
            ])
        let decoded = try single(ble, payload)
        #expect(decoded == .beacons(report))
    }

    @Test("ble: an empty scan is a report; a full batch is accepted")
    func bleEmptyAndFull() throws {
        let empty = try single(ble, #"{"t":1780000000,"adverts":[]}"#)
        #expect(empty == .beacons(BeaconReport(agent: "gw-1", t: now, sightings: [])))
        let adverts = Array(repeating: #"{"data":"\#(iBeaconVector)","rssi":-60}"#, count: 256)
        let full = try single(ble, #"{"t":1780000000,"adverts":["# + adverts.joined(separator: ",") + "]}")
        guard case .beacons(let report) = full else { throw Failure("not beacons: \(full)") }
        #expect(report.sightings.count == 256)
    }

    @Test(
        "status: unknown capability names are refused, naming the entry (issue 19)",
        arguments: [
            (
                #"{"online":true,"caps":["gps","wifi"]}"#,
                "caps[1]: 'wifi' is not a capability (known: gps, ble-scan, ranging)"
            ),
            (#"{"online":true,"caps":["GPS"]}"#, "caps[0]: 'GPS' is not a capability (known: gps, ble-scan, ranging)"),
            (#"{"online":true,"caps":["gps","gps","gps","gps"]}"#, "caps: 4 entries; each capability once"),
        ])
    func unknownCapabilities(payload: String, reason: String) throws {
        do {
            let decoded = try decode(status, payload)
            Issue.record("accepted: \(decoded)")
        } catch {
            #expect(error.code == "capability")
            #expect(error.description == reason)
        }
    }

    @Test(
        "authorization: allow once only with whenInUse; a temporary full-accuracy grant names a session and needs reduced (issue 19)",
        arguments: [
            (
                #"{"status":"always","temporary":true}"#,
                "temporary: allow once (temporary: true) exists only with status whenInUse; with 'always' it means nothing"
            ),
            (
                #"{"status":"always","accuracy":"full","temporaryFullAccuracy":"nav/1"}"#,
                "temporaryFullAccuracy: a temporary full-accuracy grant needs accuracy 'reduced' (full needs none)"
            ),
            (
                #"{"status":"always","accuracy":"reduced","temporaryFullAccuracy":"nav"}"#,
                "temporaryFullAccuracy: expected the session it was granted to, 'consumer/session'"
            ),
        ])
    func authorizationRefused(payload: String, reason: String) throws {
        do {
            let decoded = try decode(.authorization(venue: "museum", subject: "ann"), payload)
            Issue.record("accepted: \(decoded)")
        } catch {
            #expect(error.code == "schema")
            #expect(error.description == reason)
        }
        #expect(
            try decode(
                .authorization(venue: "museum", subject: "ann"),
                #"{"status":"whenInUse","accuracy":"reduced","temporary":true,"temporaryFullAccuracy":"nav/1"}"#
            ).count == 1)
    }

    @Test("status: online, capabilities, mode, version, time")
    func agentStatus() throws {
        let decoded = try single(
            status, #"{"online":true,"caps":["gps","ble-scan"],"mode":"gateway","version":"1.2.0","t":1780000000}"#)
        let expected = AgentStatus(
            agent: "gw-1", online: true, t: now, capabilities: ["gps", "ble-scan"], mode: "gateway", version: "1.2.0")
        #expect(decoded == .agentStatus(expected))
        let will = try single(status, #"{"online":false}"#)
        #expect(will == .agentStatus(AgentStatus(agent: "gw-1", online: false)))
    }

    @Test(
        "regions: a Feature without an id takes the topic's; the same id is fine; empty deletes",
        arguments: [
            #"{"type":"Feature","properties":{"radius":5},"geometry":{"type":"Point","coordinates":[2.3362,48.8605]}}"#,
            #"{"type":"Feature","id":"kiosk","properties":{"radius":5},"geometry":{"type":"Point","coordinates":[2.3362,48.8605]}}"#,
            #"{"type":"Feature","properties":{"id":"kiosk","radius":5},"geometry":{"type":"Point","coordinates":[2.3362,48.8605]}}"#,
        ])
    func regionUpsert(payload: String) throws {
        let decoded = try single(region, payload)
        guard case .regionUpsert(let parsed) = decoded else { throw Failure("not a region: \(decoded)") }
        #expect(parsed.id == "kiosk")
        #expect(parsed.shape == .circle(center: GeoPoint(lon: 2.3362, lat: 48.8605), radius: 5))
    }

    @Test("regions: empty payload deletes; a beacon region Feature is read")
    func regionRemoveAndBeacon() throws {
        #expect(try decode(region, "") == [.regionRemove(id: "kiosk")])
        let decoded = try single(
            region, #"{"type":"Feature","geometry":null,"properties":{"beacon":{"uuid":"\#(uuidText)","major":3}}}"#)
        guard case .regionUpsert(let parsed) = decoded, case .beacon = parsed.shape else {
            throw Failure("not a beacon region: \(decoded)")
        }
        #expect(parsed.id == "kiosk")
    }

    @Test("privacy topics: checked and passed through; empty forgets or ends")
    func privacy() throws {
        let grant = #"{"status":"whenInUse","accuracy":"reduced","temporary":true}"#
        #expect(try decode(authorization, grant) == [.authorization(subject: "ann", try JSONValue(parsing: grant))])
        #expect(try decode(authorization, "") == [.authorization(subject: "ann", nil)])
        let inUse = #"{"inUse":true,"background":false}"#
        #expect(try decode(usage, inUse) == [.usage(subject: "ann", try JSONValue(parsing: inUse))])
        for body in [
            #"{"subjects":"*","level":"always"}"#,
            #"{"subjects":["ann","badge-7"],"level":"whenInUse","fullAccuracyPurpose":"wayfinding"}"#,
        ] {
            let expected = Inbound.session(consumer: "guide-app", session: "s-1", try JSONValue(parsing: body))
            #expect(try decode(session, body) == [expected])
        }
        #expect(try decode(session, "") == [.session(consumer: "guide-app", session: "s-1", nil)])
        let chosen = try decode(preferences, #"{"defaultPlace":"cafe","locale":"fr-FR"}"#)
        #expect(chosen == [.preferences(subject: "ann", SubjectPreferences(defaultPlace: "cafe", locale: "fr-FR"))])
        #expect(try decode(preferences, "{}") == [.preferences(subject: "ann", SubjectPreferences())])
        #expect(try decode(preferences, "") == [.preferences(subject: "ann", SubjectPreferences())])
    }
}

// MARK: - Adapters

@Suite("Inbound adapters: OwnTracks and ESPresense")
struct InboundAdapterTests {
    @Test("OwnTracks location (the booklet's shape) is a fix for owntracks:{user}:{device}")
    func ownTracksLocation() throws {
        let decoded = try single(
            ownTracks,
            #"{"_type":"location","tid":"JJ","acc":12,"lat":48.8584,"lon":2.2945,"tst":1700000000,"alt":35,"vac":3}"#)
        let expected = Fix(
            subject: "owntracks:jane:phone", t: Date(timeIntervalSince1970: 1_700_000_000),
            position: GeoPoint(lon: 2.2945, lat: 48.8584), accuracy: 12, floor: nil, source: "owntracks")
        #expect(decoded == .fix(expected))
    }

    @Test(
        "OwnTracks types other than location, waypoints and lwt say nothing",
        arguments: [
            #"{"_type":"transition","event":"enter","desc":"Home","tst":1700000000,"lat":1,"lon":2,"acc":5,"wtst":1,"t":"c"}"#,
            #"{"_type":"card","name":"Jane"}"#,
            #"{"_type":"cmd","action":"reportLocation"}"#, #"{"_type":"status"}"#,
        ])
    func ownTracksIgnored(payload: String) throws {
        #expect(try decode(ownTracks, payload) == [])
    }

    @Test("OwnTracks lwt (the app's last will) is the device going offline (issue 19)")
    func ownTracksLastWill() throws {
        let decoded = try single(ownTracks, #"{"_type":"lwt","tst":1700000000}"#)
        #expect(
            decoded
                == .agentStatus(
                    AgentStatus(
                        agent: "owntracks:jane:phone", online: false, t: Date(timeIntervalSince1970: 1_700_000_000))))
    }

    @Test("OwnTracks waypoint with rid and radius is a circle region that remembers its owner")
    func ownTracksCircle() throws {
        let decoded = try single(
            ownTracks,
            #"{"_type":"waypoint","desc":"Home","lat":52.3702,"lon":4.8952,"rad":50,"tst":1700000000,"rid":"a1b2"}"#)
        guard case .regionUpsert(let circle) = decoded else { throw Failure("not a region: \(decoded)") }
        #expect(circle.id == "owntracks-a1b2")
        #expect(circle.name == "Home")
        #expect(circle.shape == .circle(center: GeoPoint(lon: 4.8952, lat: 52.3702), radius: 50))
        let owner: JSONValue = ["user": "jane", "device": "phone", "rid": "a1b2", "tst": 1_700_000_000]
        #expect(circle.properties["owntracks"] == owner)
    }

    @Test(
        "OwnTracks beacon waypoints: major and minor 0 mean any",
        arguments: [
            (#""major":0,"minor":5"#, ["uuid": .string(uuidText)]),
            (#""major":3,"minor":0"#, ["uuid": .string(uuidText), "major": 3]),
            (#""major":3,"minor":4"#, ["uuid": .string(uuidText), "major": 3, "minor": 4]),
            ("\"rad\":0", ["uuid": .string(uuidText)]),
        ] as [(String, JSONValue)])
    func ownTracksBeacon(parts: String, beacon: JSONValue) throws {
        let decoded = try single(
            ownTracks, "{\"_type\":\"waypoint\",\(waypointFields),\"uuid\":\"\(uuidText)\",\(parts)}")
        guard case .regionUpsert(let parsed) = decoded else { throw Failure("not a region: \(decoded)") }
        #expect(parsed.id == "owntracks-jane-phone-1700000000")
        #expect(parsed.shape == .beacon(beacon))
    }

    @Test("OwnTracks waypoints: each region, plain points of interest (rad 0, no uuid) skipped")
    func ownTracksWaypoints() throws {
        let payload =
            #"{"_type":"waypoints","waypoints":["#
            + #"{"_type":"waypoint","desc":"Work","lat":52.37,"lon":4.89,"rad":100,"tst":1700000001},"#
            + #"{"_type":"waypoint","desc":"Bench","lat":52.36,"lon":4.88,"rad":0,"tst":1700000002},"#
            + #"{"_type":"waypoint","desc":"Desk","lat":0,"lon":0,"rad":0,"tst":1700000003,"uuid":"\#(uuidText)","major":1,"minor":2}]}"#
        let decoded = try decode(ownTracks, payload)
        let ids = regions(decoded).map(\.id)
        #expect(ids == ["owntracks-jane-phone-1700000001", "owntracks-jane-phone-1700000003"])
        #expect(decoded.count == 2)
    }

    @Test("ESPresense: an iBeacon device id is that beacon; the receive time dates it")
    func espresenseBeacon() throws {
        let decoded = try single(
            espresense,
            #"{"id":"iBeacon:e5b9e3a6-27e2-4c36-a257-7698da5fc140-1-2","rssi":-70,"rssi@1m":-59,"distance":3.2}"#)
        let uuid = try #require(BeaconPrefix(uuid: "e5b9e3a6-27e2-4c36-a257-7698da5fc140"))
        let identity = BeaconIdentity.iBeacon(uuid: uuid, major: 1, minor: 2)
        let report = TagReport(
            gateway: "kitchen", t: now,
            sightings: [TagSighting(subject: identity.canonical, identity: identity, rssi: -70, tx1m: -59)])
        #expect(decoded == .tags(report))
        #expect(identity.canonical == "ibeacon:e5b9e3a6-27e2-4c36-a257-7698da5fc140:1:2")
    }

    @Test(
        "ESPresense: other device ids are espresense:{id}",
        arguments: [
            "apple:1005:9-26", "iBeacon:not-a-uuid-1-2", "iBeacon:e5b9e3a6-27e2-4c36-a257-7698da5fc140-1-70000",
        ])
    func espresenseOther(device: String) throws {
        let route = InboundRoute.espresense(device: device, room: "hall")
        let decoded = try single(route, #"{"rssi":-80}"#)
        let report = TagReport(
            gateway: "hall", t: now, sightings: [TagSighting(subject: "espresense:\(device)", rssi: -80)])
        #expect(decoded == .tags(report))
    }
}

private struct Failure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

// MARK: - Fuzz

/// Valid payloads per route, the starting points for mutation.
private let fuzzSeeds: [(InboundRoute, [String])] = [
    (
        gps,
        ["{\(fixFields),\"acc\":5,\"alt\":35,\"vacc\":3,\"floor\":2,\"speed\":1.2,\"course\":90,\"subject\":\"ann\"}"]
    ),
    (
        ble,
        [
            advert(iBeaconFields + #","rssi":-60,"tx":-59"#),
            #"{"t":"2026-01-01T10:00:00Z","subject":"ann","adverts":[{"namespace":"edd1ebeac04e5defa017","instance":"0102030405ff","rssi":-70},{"id1":"\#(uuidText)","id2":7,"id3":8,"rssi":-80},{"data":"\#(iBeaconVector)","rssi":-65,"mac":"aa:bb"}]}"#,
        ]
    ),
    (status, [#"{"online":true,"caps":["gps","ble-scan"],"mode":"gateway","version":"1.2.0","t":1780000000}"#]),
    (
        region,
        [
            #"{"type":"Feature","properties":{"radius":5,"name":"Kiosk","dwellAfter":60},"geometry":{"type":"Point","coordinates":[2.3362,48.8605]}}"#,
            #"{"type":"Feature","id":"kiosk","properties":{"floor":1},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}"#,
            #"{"type":"Feature","geometry":null,"properties":{"beacon":{"uuid":"\#(uuidText)","major":3,"minRssi":-80}}}"#,
        ]
    ),
    (authorization, [#"{"status":"whenInUse","accuracy":"reduced","temporary":true}"#]),
    (usage, [#"{"inUse":true,"background":false}"#]),
    (preferences, [#"{"defaultPlace":"cafe","locale":"fr-FR"}"#]),
    (session, [#"{"subjects":["ann","badge-7"],"level":"whenInUse","fullAccuracyPurpose":"wayfinding"}"#]),
    (
        ownTracks,
        [
            #"{"_type":"location","tid":"JJ","acc":12,"lat":48.8584,"lon":2.2945,"tst":1700000000,"alt":35,"vac":3}"#,
            #"{"_type":"waypoint","desc":"Home","lat":52.3702,"lon":4.8952,"rad":50,"tst":1700000000,"rid":"a1b2"}"#,
            #"{"_type":"waypoints","waypoints":[{"desc":"Work","lat":52.37,"lon":4.89,"rad":100,"tst":1},{"desc":"Desk","lat":0,"lon":0,"rad":0,"tst":2,"uuid":"\#(uuidText)","major":1,"minor":2}]}"#,
        ]
    ),
    (
        espresense,
        [#"{"id":"iBeacon:e5b9e3a6-27e2-4c36-a257-7698da5fc140-1-2","rssi":-70,"rssi@1m":-59,"distance":3.2}"#]
    ),
]

/// Mutates payloads: byte edits, JSON-aware value swaps, and plain noise, all from a fixed seed.
private struct Mutator {
    var random: SplitMix64

    static let tokens: [String] = [
        "null", "true", "0", "-0", "1e400", "-1e999", "1e-400", "9007199254740993", "-128", "21", "91", "-181",
        "65536", "1.5", "\"\"", "\"*\"", "\"a/b\"", "\"%\"", "[]", "{}", "[[[[", "}}", ",", ":", "\"\\u0000\"",
        "\"\\ud800\"", "\"2026-13-45T99:99:99Z\"", "\"020106\"", "\"0201061aff4c000215\"", "\u{FF}", "\u{0}",
    ]
    static let keys: [String] = [
        "subject", "t", "lat", "lon", "acc", "floor", "adverts", "uuid", "major", "minor", "rssi", "tx", "namespace",
        "instance", "id1", "id2", "id3", "data", "mac", "online", "caps", "mode", "type", "id", "properties",
        "geometry", "coordinates", "radius", "beacon", "status", "accuracy", "temporary", "inUse", "subjects", "level",
        "defaultPlace", "_type", "tst", "desc", "rad", "rid", "waypoints", "rssi@1m", "distance",
    ]
    static let values: [JSONValue] = [
        .null, true, false, 0, -1, 1.5, 20, -127, 65535, 65536, 91, -181, 1e300, -1e300, 1_700_000_000, "", "*", "x/y",
        "a+b", .string(uuidText), "edd1ebeac04e5defa017", "0102030405ff", .string(iBeaconVector), "0201061aff4c00",
        "2026-01-01T10:00:00Z", "gateway", "always", "location", "waypoint", "waypoints", "Feature", "Point",
        "Polygon", [], [:], [1, 2], [[0, 0], [1, 0]], ["a": 1],
    ]

    mutating func below(_ count: Int) -> Int { Int(random.next() % UInt64(max(count, 1))) }

    mutating func payload(from seed: String) -> [UInt8] {
        switch below(10) {
        case 0..<4: return edited(Array(seed.utf8))
        case 4..<8:
            guard let value = try? JSONValue(parsing: seed) else { return edited(Array(seed.utf8)) }
            let mutated = Array(mutate(value, depth: 0).serialized().utf8)
            return below(4) == 0 ? edited(mutated) : mutated
        case 8: return (0..<below(64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        default: return Array(randomValue(depth: 0).serialized().utf8)
        }
    }

    private mutating func edited(_ bytes: [UInt8]) -> [UInt8] {
        var bytes = bytes
        for _ in 0...below(4) {
            let at = below(bytes.count + 1)
            switch below(5) {
            case 0 where at < bytes.count: bytes[at] ^= UInt8(1) << UInt8(below(8))
            case 1 where at < bytes.count: bytes.remove(at: at)
            case 2: bytes.insert(contentsOf: Array(Self.tokens[below(Self.tokens.count)].utf8), at: at)
            case 3: bytes.removeSubrange(at..<bytes.count)
            default: bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: at)
            }
        }
        return bytes
    }

    private mutating func mutate(_ value: JSONValue, depth: Int) -> JSONValue {
        if depth > 6 || below(6) == 0 { return randomValue(depth: depth) }
        switch value {
        case .object(var object):
            for key in object.keys where below(3) == 0 {
                if below(4) == 0 {
                    object[key] = nil
                } else if let member = object[key] {
                    object[key] = mutate(member, depth: depth + 1)
                }
            }
            if below(4) == 0 { object[Self.keys[below(Self.keys.count)]] = randomValue(depth: depth + 1) }
            return .object(object)
        case .array(var array):
            for index in array.indices where below(3) == 0 { array[index] = mutate(array[index], depth: depth + 1) }
            if below(8) == 0, let first = array.first { array += Array(repeating: first, count: below(300)) }
            if below(8) == 0, !array.isEmpty { array.remove(at: below(array.count)) }
            return .array(array)
        default:
            return randomValue(depth: depth)
        }
    }

    private mutating func randomValue(depth: Int) -> JSONValue {
        switch below(depth > 3 ? 1 : 5) {
        case 0, 1: return Self.values[below(Self.values.count)]
        case 2: return .number(Double(bitPattern: random.next()))
        case 3: return .array((0..<below(4)).map { _ in randomValue(depth: depth + 1) })
        default:
            var object = JSONObject()
            for _ in 0..<below(4) { object[Self.keys[below(Self.keys.count)]] = randomValue(depth: depth + 1) }
            return .object(object)
        }
    }
}

@Suite("Inbound decoding survives anything")
struct InboundFuzzTests {
    static let codes: Set<String> = [
        "json", "schema", "range", "tooLarge", "batch", "topic", "region", "advert", "capability",
    ]

    @Test("20,000 mutated payloads per route: each decodes or is refused with a known code", arguments: 0..<10)
    func mutatedPayloads(routeIndex: Int) {
        let (route, seeds) = fuzzSeeds[routeIndex]
        var mutator = Mutator(random: SplitMix64(seed: 0x1B0D + UInt64(routeIndex)))
        var decoded = 0
        var refused: [String: Int] = [:]
        for round in 0..<20_000 {
            let payload = mutator.payload(from: seeds[round % seeds.count])
            do {
                _ = try InboundDecoder.decode(route, payload: payload, receivedAt: now)
                decoded += 1
            } catch {
                refused[error.code, default: 0] += 1
                if !Self.codes.contains(error.code) || error.message.isEmpty {
                    Issue.record(
                        "\(route): unexpected refusal \(error) for \(String(decoding: payload, as: UTF8.self))")
                    return
                }
            }
        }
        // Both outcomes happen: the mutations reach past the JSON parser into each route's checks.
        #expect(decoded > 0, "\(route): nothing decoded; refusals \(refused)")
        #expect(refused.values.reduce(0, +) > 0, "\(route): nothing refused")
        #expect(refused.keys.contains { $0 != "json" }, "\(route): only JSON errors \(refused)")
    }

    @Test("20,000 random topics route or are ignored")
    func randomTopics() {
        var random = SplitMix64(seed: 7)
        let parts = [
            "perimeter", "v1", "museum", "obs", "gps", "ble", "regions", "subjects", "sessions", "owntracks",
            "espresense", "devices", "%", "%2F", "%2", "", "a", "+", "#",
        ]
        var routed = 0
        for _ in 0..<20_000 {
            let count = Int(random.next() % 7)
            let topic = (0..<count).map { _ in parts[Int(random.next() % UInt64(parts.count))] }.joined(separator: "/")
            if InboundDecoder.route(topic: topic, prefix: "perimeter/v1", venues: venues) != nil { routed += 1 }
        }
        #expect(routed > 0)
    }
}

// MARK: - Message numbers

@Suite("Agents number their observations (n)")
struct SequenceNumberDecodingTests {
    @Test(
        "n is read from gps and ble; absent is nil",
        arguments: [
            (gps, #"{"t":1780000000,"lat":48.86,"lon":2.33,"n":17}"#, 17),
            (ble, #"{"t":1780000000,"adverts":[],"n":9007199254740991}"#, 9_007_199_254_740_991),
            (gps, #"{"t":1780000000,"lat":48.86,"lon":2.33}"#, nil),
        ] as [(InboundRoute, String, Int?)])
    func read(_ route: InboundRoute, _ payload: String, _ expected: Int?) throws {
        let decoded = try InboundDecoder.decode(route, payload: Array(payload.utf8), receivedAt: now)
        #expect(decoded.sequence == expected)
        #expect(decoded.inputs.count == 1)
    }

    @Test(
        "a bad n refuses the message, naming n",
        arguments: [
            #"{"t":1780000000,"lat":48.86,"lon":2.33,"n":0}"#, #"{"t":1780000000,"lat":48.86,"lon":2.33,"n":-3}"#,
            #"{"t":1780000000,"lat":48.86,"lon":2.33,"n":1.5}"#, #"{"t":1780000000,"lat":48.86,"lon":2.33,"n":"7"}"#,
            #"{"t":1780000000,"lat":48.86,"lon":2.33,"n":1e300}"#,
        ])
    func refused(_ payload: String) {
        #expect {
            try InboundDecoder.decode(gps, payload: Array(payload.utf8), receivedAt: now)
        } throws: { error in
            (error as? InboundError)?.field == "n"
        }
    }
}
