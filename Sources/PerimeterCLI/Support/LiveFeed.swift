import Foundation
import PerimeterCore

/// `perimeter up`'s readable feed: one line per thing a person watching the venue cares about
/// (enter, exit, dwell, visits, ranging summaries, places, notifications, events held or
/// withheld by the privacy gate), from the messages on the venue's topics. Observations, states and other
/// raw topics are left to `mosquitto_sub`.
struct LiveFeed {
    let topics: Topics
    /// Region id → name, for people.
    let names: [String: String]
    let timeZone: TimeZone
    /// Seconds between two ranging summaries for the same subject and region, unless the
    /// nearest beacon changes.
    var rangingEvery: Double = 10
    private var lastRanging: [String: (at: Date, nearest: String)] = [:]
    private var lastDiagnostics: [String: String] = [:]
    private var lastPlace: [String: String] = [:]

    init(topics: Topics, regions: [Region], timeZone: TimeZone) {
        self.topics = topics
        self.timeZone = timeZone
        var names: [String: String] = [:]
        for region in regions { names[region.id] = region.name }
        self.names = names
    }

    /// The line for a message, or nil when it is not part of the feed.
    mutating func line(topic: String, payload: [UInt8]) -> String? {
        let prefix = topics.root + "/"
        guard topic.hasPrefix(prefix), let value = try? JSONValue(parsing: payload) else { return nil }
        let levels = topic.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false).map(
            String.init)
        guard let kind = levels.first else { return nil }
        let t = value["t"]?.stringValue.flatMap(Timestamp.parse) ?? Date()
        switch (kind, levels.count) {
        case ("enter", 3), ("exit", 3), ("dwell", 3):
            let subject = value["subject"]?.stringValue ?? levels[2]
            let region = value["region"]?.stringValue ?? levels[1]
            let verb = ["enter": "→ entered ", "exit": "← left    ", "dwell": "… dwelling"][kind]!
            var text = "\(clock(t))  \(pad(subject))  \(verb) \(describe(region))"
            if let source = value["source"]?.stringValue { text += "  [\(source)]" }
            if case .object(let refinement) = value["refinement"] ?? .null, let minor = refinement["minor"]?.intValue,
                let major = refinement["major"]?.intValue
            {
                text += "  beacon \(major)/\(minor)"
            }
            if value["held"] == .bool(true) { text += "  (held by the privacy gate, delivered late)" }
            return text
        case ("ranging", 3):
            let region = levels[1]
            let subject = levels[2]
            // Nearest first, but a beacon not heard in the last window (proximity unknown,
            // accuracy −1) says nothing about where the subject is.
            guard let beacons = value["beacons"]?.arrayValue,
                let first = beacons.first(where: { $0["proximity"]?.stringValue != "unknown" }) ?? beacons.first
            else { return nil }
            let nearest = [first["major"], first["minor"]].compactMap { $0?.intValue }.map(String.init)
                .joined(separator: "/")
            let key = "\(region)\u{0}\(subject)"
            if let last = lastRanging[key], last.nearest == nearest, t.timeIntervalSince(last.at) < rangingEvery {
                return nil
            }
            lastRanging[key] = (t, nearest)
            let proximity = first["proximity"]?.stringValue ?? "unknown"
            let metres = first["accuracy"]?.doubleValue.map { $0 >= 0 ? String(format: "%.1f m", $0) : "?" } ?? "?"
            return "\(clock(t))  \(pad(subject))  ≈ ranging   \(describe(region)): nearest \(nearest) \(proximity) "
                + "\(metres), \(beacons.count) beacon\(beacons.count == 1 ? "" : "s")"
        case ("place", 2):
            let subject = levels[1]
            guard let place = value["place"]?.stringValue else { return nil }
            let source = value["source"]?.stringValue ?? "?"
            guard lastPlace[subject] != "\(place)/\(source)" else { return nil }
            lastPlace[subject] = "\(place)/\(source)"
            return "\(clock(t))  \(pad(subject))  ⌂ place     \(describe(place)) (\(source))"
        case ("diagnostics", 2):
            let subject = levels[1]
            let flags = [
                "authorizationDenied", "authorizationRestricted", "insufficientlyInUse", "serviceSessionRequired",
                "accuracyLimited",
            ].filter { value[$0] == .bool(true) }
            let held = value["heldEvents"]?.intValue ?? 0
            var reasons = flags
            if held > 0 { reasons.append("\(held) event\(held == 1 ? "" : "s") held") }
            let summary = reasons.isEmpty ? "delivering" : reasons.joined(separator: ", ")
            let status = value["status"]?.stringValue ?? "?"
            guard lastDiagnostics[subject] != "\(status): \(summary)" else { return nil }
            lastDiagnostics[subject] = "\(status): \(summary)"
            return "\(clock(Date()))  \(pad(subject))  ⊘ privacy   \(status): \(summary)"
        case ("visit", 2):
            let subject = value["subject"]?.stringValue ?? levels[1]
            guard let arrival = value["arrival"]?.stringValue.flatMap(Timestamp.parse),
                let lat = value["lat"]?.doubleValue, let lon = value["lon"]?.doubleValue
            else { return nil }
            let place = String(format: "%.5f, %.5f ±%.0f m", lat, lon, value["acc"]?.doubleValue ?? 0)
            if let departure = value["departure"]?.stringValue.flatMap(Timestamp.parse) {
                return
                    "\(clock(t))  \(pad(subject))  ◎ visited   \(place) from \(clock(arrival)) to \(clock(departure))"
            }
            return "\(clock(t))  \(pad(subject))  ◎ staying   \(place) since \(clock(arrival))"
        case ("notifications", 3):
            let subject = levels[2]
            let text =
                value["title"]?.stringValue.map { title in
                    value["body"]?.stringValue.map { "\(title) — \($0)" } ?? title
                } ?? value["body"]?.stringValue ?? value["text"]?.stringValue ?? value.serialized()
            return "\(clock(t))  \(pad(subject))  ✉ \(levels[1])  \(text)"
        default:
            return nil
        }
    }

    private func describe(_ region: String) -> String {
        names[region].map { "\(region) (\($0))" } ?? region
    }

    private func pad(_ subject: String) -> String {
        subject.count >= 10 ? subject : subject + String(repeating: " ", count: 10 - subject.count)
    }

    private func clock(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let parts = calendar.dateComponents([.hour, .minute, .second], from: date)
        return String(format: "%02d:%02d:%02d", parts.hour ?? 0, parts.minute ?? 0, parts.second ?? 0)
    }
}
