import Foundation
import PerimeterCore
import Testing

/// The published event text is written straight to text (`RegionEvent.publishedText`); it must
/// be, byte for byte, what building the payload object, adding the venue (after `event`; last for
/// a state) and serializing it gives — the form consumers have always received.
@Suite("Published event payloads")
struct RegionEventPayloadTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_547_200.06)
    static let identity = BeaconIdentity.iBeacon(
        uuid: BeaconPrefix(high: 0xF782_6DA6_4FA2_4E98, low: 0x8024_BC5B_71E0_893E), major: 1, minor: 7)

    /// What the evaluator published before the direct writer: the payload object with the venue.
    static func reference(_ event: RegionEvent, venue: String) -> String {
        let base = event.payload.objectValue ?? JSONObject()
        var payload = JSONObject()
        if event.kind == .state {
            payload = base
            payload["venue"] = .string(venue)
        } else {
            for (key, value) in base {
                payload[key] = value
                if key == "event" { payload["venue"] = .string(venue) }
            }
        }
        return JSONValue.object(payload).serialized()
    }

    @Test(
        "the same text as the payload object with the venue",
        arguments: [
            RegionEvent(
                kind: .enter, region: "hall", subject: "visitor-42", t: t0, seq: 3, id: "5b162f76", source: "gps",
                fix: Fix(subject: "visitor-42", t: t0, position: GeoPoint(lon: 2.3363, lat: 48.8606), accuracy: 5)),
            RegionEvent(
                kind: .exit, region: "wing \"A\"/2", subject: "tag\u{7}é", t: t0, seq: 12, id: "x", source: "ble",
                fix: Fix(
                    subject: "tag", t: t0.addingTimeInterval(-0.001), position: GeoPoint(lon: -0.5, lat: -33.25),
                    floor: -2),
                refinement: identity, interpolated: true),
            RegionEvent(kind: .dwell, region: "r", subject: "s", t: t0, seq: 0, id: "y", source: "timer"),
            RegionEvent.heldEnter,
            RegionEvent(kind: .state, region: "hall", subject: "ann", t: t0, state: .inside),
            RegionEvent(kind: .state, region: "hall", subject: "ann", t: t0, state: .unknown, reason: "agentOffline"),
            RegionEvent(kind: .state, region: "hall", subject: "ann", t: t0, state: nil),
        ])
    func sameText(_ event: RegionEvent) throws {
        let text = event.publishedText(venue: "museum")
        #expect(text == Self.reference(event, venue: "museum"))
        // And it is JSON that reads back as the payload plus the venue.
        let parsed = try JSONParser.parse(Array(text.utf8))
        #expect(parsed["venue"] == "museum")
        #expect(parsed["region"]?.stringValue == event.region)
    }
}

extension RegionEvent {
    fileprivate static var heldEnter: RegionEvent {
        var event = RegionEvent(
            kind: .enter, region: "hall", subject: "ann", t: RegionEventPayloadTests.t0, seq: 1, id: "h")
        event.held = true
        return event
    }
}
