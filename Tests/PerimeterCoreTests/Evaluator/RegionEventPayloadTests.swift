import Foundation
import PerimeterCore
import Testing

/// The published event text is written straight to text (`RegionEvent.publishedText`); it must
/// be, byte for byte, what building the payload object member by member, adding the venue (after
/// `event`; last for a state) and serializing it gives — the form consumers have always received.
@Suite("Published event payloads")
struct RegionEventPayloadTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_547_200.06)
    static let identity = BeaconIdentity.iBeacon(
        uuid: BeaconPrefix(high: 0xF782_6DA6_4FA2_4E98, low: 0x8024_BC5B_71E0_893E), major: 1, minor: 7)

    /// What the evaluator published before the direct writer, built as it was then: the payload
    /// object member by member, the venue after `event` (for a state, last), serialized.
    static func reference(_ event: RegionEvent, venue: String?) -> String {
        var object = JSONObject()
        if event.kind == .state {
            object["state"] = .string(event.state?.rawValue ?? "unknown")
            object["region"] = .string(event.region)
            object["subject"] = .string(event.subject)
            object["t"] = .string(Timestamp.format(event.t))
            // The transitions so far, from the takeover of partitions on (absent while 0).
            if event.seq > 0 { object["seq"] = .number(Double(event.seq)) }
            if let reason = event.reason { object["reason"] = .string(reason) }
            // What an unknown state was last known to be, from the takeover of partitions on.
            if let lastKnown = event.lastKnown { object["lastKnown"] = .string(lastKnown.rawValue) }
            if let venue { object["venue"] = .string(venue) }
            return JSONValue.object(object).serialized()
        }
        object["id"] = .string(event.id)
        object["event"] = .string(event.kind.rawValue)
        if let venue { object["venue"] = .string(venue) }
        object["region"] = .string(event.region)
        object["subject"] = .string(event.subject)
        object["t"] = .string(Timestamp.format(event.t))
        object["seq"] = .number(Double(event.seq))
        object["source"] = .string(event.source)
        if event.interpolated { object["interpolated"] = true }
        if let refinement = event.refinement { object["refinement"] = .object(refinement.json) }
        if event.held { object["held"] = true }
        if let fix = event.fix {
            var position = JSONObject()
            position["t"] = .string(Timestamp.format(fix.t))
            position["lat"] = .number(fix.position.lat)
            position["lon"] = .number(fix.position.lon)
            if let accuracy = fix.accuracy { position["acc"] = .number(accuracy) }
            if let floor = fix.floor { position["floor"] = .number(Double(floor)) }
            object["fix"] = .object(position)
        }
        return JSONValue.object(object).serialized()
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
            RegionEvent(kind: .state, region: "hall", subject: "ann", t: t0, seq: 4, state: .inside),
            RegionEvent(kind: .state, region: "hall", subject: "ann", t: t0, state: .unknown, reason: "agentOffline"),
            RegionEvent(
                kind: .state, region: "hall", subject: "ann", t: t0, seq: 3, state: .unknown, reason: "stale",
                lastKnown: .inside),
            RegionEvent(kind: .state, region: "hall", subject: "ann", t: t0, state: nil),
        ])
    func sameText(_ event: RegionEvent) throws {
        let text = event.publishedText(venue: "museum")
        #expect(text == Self.reference(event, venue: "museum"))
        // The payload without the venue (replay, subjects show) is the same text read back.
        #expect(event.payload.serialized() == Self.reference(event, venue: nil))
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
