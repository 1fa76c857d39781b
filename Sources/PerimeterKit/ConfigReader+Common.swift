import Foundation
import PerimeterCore

extension ConfigReader {
    /// `host:port` (an HTTP listener such as `127.0.0.1:9464`); nil when unset.
    public func hostPort(_ key: String) -> (host: String, port: Int)? {
        guard let text = optionalString(key) else { return nil }
        let parts = text.split(separator: ":")
        if parts.count == 2, let port = Int(parts[1]), (0...65535).contains(port) { return (String(parts[0]), port) }
        reject(key, "expected host:port like 127.0.0.1:9464, got '\(text)'")
        return nil
    }

    /// A venue's time zone, default locale and currency (`venues.{id}.timeZone|locale|currency`):
    /// one reading for every service, so the evaluator and the notifier agree on them.
    public func venueConventions(_ key: String) -> VenueConventions {
        let zone = string("\(key).timeZone", default: "UTC")
        let timeZone = TimeZone(identifier: zone)
        if timeZone == nil { reject("\(key).timeZone", "'\(zone)' is not an IANA time zone (e.g. Europe/Paris)") }
        let locale = string("\(key).locale", default: "en_US")
        let currency = string("\(key).currency", default: "USD")
        if currency.count != 3 || !currency.allSatisfy({ $0.isUppercase && $0.isASCII }) {
            reject("\(key).currency", "expected an ISO 4217 code like EUR, got '\(currency)'")
        }
        return VenueConventions(timeZone: timeZone ?? TimeZone(identifier: "UTC")!, locale: locale, currency: currency)
    }

    /// The venue ids under `venues`, each checked to be one topic level.
    public func venueIDs() -> [String] {
        let names = children(of: "venues")
        if names.isEmpty { reject("venues", "name at least one venue: {\"venues\": {\"museum\": {…}}}") }
        for name in names where name.isEmpty || Topics.separator(in: name) != nil || name.hasPrefix("_") {
            reject("venues.\(name)", "a venue id must be one topic level without '/', '+', '#', not starting with '_'")
        }
        return names
    }
}
