// libFuzzer target: InboundDecoder.decode for every InboundRoute, then VenueEvaluator.handle.
// Input: first byte chooses the route (and a few flags), the rest is the MQTT payload.
import Foundation

private let museum = #"""
{"type": "FeatureCollection", "features": [
  {"type": "Feature", "id": "museum", "properties": {"name": "Museum grounds", "exitBuffer": 10, "exitDelay": 20}, "geometry": {"type": "Polygon", "coordinates": [[[2.3345596, 48.8600805], [2.3378404, 48.8600805], [2.3378404, 48.8615195], [2.3345596, 48.8615195], [2.3345596, 48.8600805]]]}},
  {"type": "Feature", "id": "gallery-1", "properties": {"name": "Gallery 1", "dwellAfter": 60, "enterDelay": 3, "floor": 0}, "geometry": {"type": "Polygon", "coordinates": [[[2.334833, 48.8602604], [2.3359266, 48.8602604], [2.3359266, 48.8609799], [2.334833, 48.8609799], [2.334833, 48.8602604]]]}},
  {"type": "Feature", "id": "garden", "properties": {"name": "Sculpture garden", "schedule": [{"days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"], "start": "08:00", "end": "20:00"}]}, "geometry": {"type": "Polygon", "coordinates": [[[2.3353798, 48.8610698], [2.3370202, 48.8610698], [2.3370202, 48.8614745], [2.3353798, 48.8614745], [2.3353798, 48.8610698]], [[2.3360906, 48.8612047], [2.3363094, 48.8612047], [2.3363094, 48.8613396], [2.3360906, 48.8613396], [2.3360906, 48.8612047]]]}},
  {"type": "Feature", "id": "cafe", "properties": {"name": "Cafe", "radius": 12, "dwellAfter": 120}, "geometry": {"type": "Point", "coordinates": [2.3362, 48.8604403]}},
  {"type": "Feature", "id": "dateline", "properties": {"radius": 5000}, "geometry": {"type": "Point", "coordinates": [180, 0]}},
  {"type": "Feature", "id": "gallery-1-beacons", "properties": {"name": "Gallery 1 (beacons)", "beacon": {"uuid": "F7826DA6-4FA2-4E98-8024-BC5B71E0893E", "major": 1}}, "geometry": null}
]}
"""#

private let regions: [Region] = {
    let document = RegionParser.parse(text: museum)
    precondition(document.isValid, "fuzz harness regions invalid: \(document.problems)")
    return document.regions
}()

private let template = VenueEvaluator(settings: VenueSettings(id: "fuzz", privacy: .open), regions: regions)

private let routes: [InboundRoute] = [
    .gps(venue: "fuzz", agent: "phone-1"),
    .ble(venue: "fuzz", agent: "scanner-1"),
    .status(venue: "fuzz", agent: "scanner-1"),
    .region(venue: "fuzz", id: "museum"),
    .region(venue: "fuzz", id: "new-region"),
    .authorization(venue: "fuzz", subject: "phone-1"),
    .usage(venue: "fuzz", subject: "phone-1"),
    .preferences(venue: "fuzz", subject: "phone-1"),
    .session(venue: "fuzz", consumer: "signage", session: "s1"),
    .ownTracks(user: "alice", device: "phone"),
    .espresense(device: "iBeacon:f7826da6-4fa2-4e98-8024-bc5b71e0893e-1-2", room: "gallery-1"),
    .admin(venue: "fuzz", command: "erase", subject: "phone-1"),
    .admin(venue: "fuzz", command: "show", subject: "phone-1"),
    .echo(venue: "fuzz"),
]

private func agent(of route: InboundRoute) -> String? {
    switch route {
    case .gps(_, let agent), .ble(_, let agent), .status(_, let agent): agent
    case .ownTracks(let user, let device): InboundDecoder.ownTracksSubject(user: user, device: device)
    case .espresense(_, let room): room
    default: nil
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 1 else { return 0 }
    let selector = Int(data[0])
    let route = routes[selector % routes.count]
    let payload = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    // 2026-01-01T12:00:00Z, so that payload times near "now" are plausible.
    let receivedAt = Date(timeIntervalSince1970: 1_767_268_800)
    // Small limits for the high selector values, so `batch`/`tooLarge` paths run too.
    let limits = selector >= 128 ? InboundDecoder.Limits(maxPayloadBytes: 512, maxBatch: 4) : InboundDecoder.Limits()

    let inputs: [Inbound]
    do {
        let decoded = try InboundDecoder.decode(route, payload: payload, receivedAt: receivedAt, limits: limits)
        inputs = decoded.inputs
        // A part refused alone names its place in the payload: only adverts are refused alone.
        for refusal in decoded.refused where !refusal.field.hasPrefix("adverts[") {
            fatalError("a part refused alone without its place: \(refusal)")
        }
    } catch {
        _ = error.description
        return 0
    }

    var evaluator = template
    let agent = agent(of: route)
    for input in inputs {
        switch evaluator.handle(input, agent: agent, receivedAt: receivedAt) {
        case .success(let outputs): _ = outputs.count
        case .failure(let error): _ = error.description
        }
        // The same input again (duplicates and replays happen), then time passes.
        _ = evaluator.handle(input, agent: agent, receivedAt: receivedAt.addingTimeInterval(1))
    }
    _ = evaluator.tick(now: receivedAt.addingTimeInterval(3600))
    _ = evaluator.snapshot
    return 0
}
