// libFuzzer target: notification rules and event payloads as the notifier reads them —
// RuleParser.parse(rule:) on a `rules/{rule}` payload, and for an accepted rule its matching,
// verdicts and rendering in several locales; NotifiedEvent.decode on the same bytes.
import Foundation

private let channels: Set<String> = ["app", "ops", "desk", "signage"]
private let venues = [
    VenueConventions(timeZone: TimeZone(identifier: "America/Chicago")!, locale: "en_US", currency: "USD"),
    VenueConventions(timeZone: TimeZone(identifier: "Asia/Tokyo")!, locale: "ja_JP", currency: "JPY"),
]
private let renderer = NotificationRenderer()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    if let event = try? NotifiedEvent.decode(bytes, selfOnly: false) { _ = event.t }
    guard let value = try? JSONParser.parse(bytes) else { return 0 }
    _ = RuleParser.parse(document: value, channels: channels)
    guard case .success(let rule) = RuleParser.parse(rule: value, channels: channels, place: "fuzz") else { return 0 }
    let start = Date(timeIntervalSince1970: 1_764_603_660)
    var state: RuleState?
    for (index, kind) in [RegionEvent.Kind.enter, .dwell, .exit].enumerated() {
        let event = NotifiedEvent(
            id: "e\(index)", kind: kind, venue: "v", region: "cafe-1", subject: "ibeacon:f7826da6-4fa2-4e98-8024-bc5b71e0893e:1:2",
            t: start.addingTimeInterval(Double(index) * 4000), selfOnly: index == 1)
        _ = rule.matches(event)
        for venue in venues {
            if case .fire = rule.verdict(for: event, state: state, timeZone: venue.timeZone) {
                state = (state ?? RuleState()).firing(at: event.t)
            }
            for locale in [nil, "de_DE", "ja_JP", "ar_EG", "x"] as [String?] {
                let note = renderer.render(
                    rule, event: event, channel: rule.channels[0], recipientLocale: locale, venue: venue,
                    regionName: index == 0 ? nil : "Café")
                _ = note.record.serialized()
            }
        }
    }
    return 0
}
