import Foundation

/// Every MQTT topic Perimeter uses, in one place (topics.md is the contract).
///
/// `perimeter/v1/{venue}/…` by default; the prefix is configurable. Ids placed in a topic
/// level (regions, subjects, agents) are percent-encoded where they hold `/`, `+`, `#` or
/// `%`, so that a region named `Europe/Paris` stays one level: `…/enter/Europe%2FParis/…`.
public struct Topics: Sendable, Hashable {
    public var prefix: String
    public var venue: String

    public init(prefix: String = "perimeter/v1", venue: String) {
        self.prefix = prefix
        self.venue = venue
    }

    public var root: String { "\(prefix)/\(venue)" }
    /// Everything of the venue: `perimeter/v1/museum/#`.
    public var all: String { "\(root)/#" }

    /// The first topic separator or wildcard (`/`, `+`, `#`) in `text`, by bytes (a separator
    /// followed by a combining mark is still a separator to the broker); nil when there is none.
    public static func separator(in text: String) -> Character? {
        text.utf8.first { $0 == 0x2F || $0 == 0x2B || $0 == 0x23 }.map { Character(UnicodeScalar($0)) }
    }

    /// The longest id, in UTF-8 bytes, that Perimeter takes (a subject, agent, region, session).
    public static let maxIDBytes = 256

    /// Why `id` cannot be an id anywhere (topic levels, payloads, files), nil when it can: it
    /// must not be empty, longer than ``maxIDBytes`` bytes, or hold a control character (C0,
    /// DEL, C1). A NUL would be cut at the SQLite and topic boundary and name another subject;
    /// the others break logs and topic filters. Separators are a topic level's own concern
    /// (``level(_:)`` encodes them).
    public static func idProblem(_ id: String) -> String? {
        if id.isEmpty { return "the id is empty" }
        if id.utf8.count > maxIDBytes {
            return "the id is \(id.utf8.count) bytes long; at most \(maxIDBytes) are allowed"
        }
        if let bad = id.unicodeScalars.first(where: isControl) {
            let code = String(bad.value, radix: 16, uppercase: true)
            let shown = String(String.UnicodeScalarView(id.unicodeScalars.map { isControl($0) ? "\u{FFFD}" : $0 }))
            return
                "the id '\(shown)' holds the control character U+\(String(repeating: "0", count: max(0, 4 - code.count)))\(code), which ids cannot carry"
        }
        return nil
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// An id as one topic level: `/`, `+`, `#` and `%` percent-encoded.
    ///
    /// Works on bytes, not characters: a `/` followed by a combining mark is one Swift
    /// `Character` but still a topic separator to the broker (found by fuzzing).
    public static func level(_ id: String) -> String {
        let special: (UInt8) -> Bool = { $0 == 0x2F || $0 == 0x2B || $0 == 0x23 || $0 == 0x25 }
        guard id.utf8.contains(where: special) else { return id }
        var encoded: [UInt8] = []
        encoded.reserveCapacity(id.utf8.count + 8)
        for byte in id.utf8 {
            switch byte {
            case 0x2F: encoded += Array("%2F".utf8)
            case 0x2B: encoded += Array("%2B".utf8)
            case 0x23: encoded += Array("%23".utf8)
            case 0x25: encoded += Array("%25".utf8)
            default: encoded.append(byte)
            }
        }
        return String(decoding: encoded, as: UTF8.self)
    }

    // Inbound
    public func gps(agent: String) -> String { "\(root)/obs/\(Self.level(agent))/gps" }
    public func ble(agent: String) -> String { "\(root)/obs/\(Self.level(agent))/ble" }
    public var allObservations: String { "\(root)/obs/+/+" }
    public func agentStatus(_ agent: String) -> String { "\(root)/agents/\(Self.level(agent))/status" }
    public func region(_ region: String) -> String { "\(root)/regions/\(Self.level(region))" }
    public var allRegions: String { "\(root)/regions/+" }
    public func authorization(subject: String) -> String { "\(root)/subjects/\(Self.level(subject))/authorization" }

    // Outbound
    public func event(_ kind: RegionEvent.Kind, region: String, subject: String) -> String {
        "\(root)/\(kind.rawValue)/\(Self.level(region))/\(Self.level(subject))"
    }
    /// A transition only the subject's own notifications may use (privacy rule 10; the
    /// notifier's account alone may read `self/#`).
    public func selfEvent(_ kind: RegionEvent.Kind, region: String, subject: String) -> String {
        "\(root)/self/\(kind.rawValue)/\(Self.level(region))/\(Self.level(subject))"
    }
    public func state(region: String, subject: String) -> String {
        "\(root)/state/\(Self.level(region))/\(Self.level(subject))"
    }
    public func occupancy(region: String) -> String { "\(root)/occupancy/\(Self.level(region))" }
    /// A region an OwnTracks user's waypoint became (retained; cleared when it is deleted).
    public func waypoint(_ region: String) -> String { "\(root)/waypoints/\(Self.level(region))" }
    public func deadletter(component: String) -> String { "\(root)/deadletter/\(component)" }
    public func ranging(region: String, subject: String) -> String {
        "\(root)/ranging/\(Self.level(region))/\(Self.level(subject))"
    }
    public func place(subject: String) -> String { "\(root)/place/\(Self.level(subject))" }
    /// A subject's visits: arrivals and departures of stays found with no region (`CLVisit`).
    public func visit(subject: String) -> String { "\(root)/visit/\(Self.level(subject))" }
    /// A subject's positions for one consumer with a live session (`CLLocationUpdate.liveUpdates`).
    public func live(consumer: String, subject: String) -> String {
        "\(root)/live/\(Self.level(consumer))/\(Self.level(subject))"
    }
    public func diagnostics(subject: String) -> String { "\(root)/diagnostics/\(Self.level(subject))" }
    public func preferences(subject: String) -> String { "\(root)/subjects/\(Self.level(subject))/preferences" }
    public func usage(subject: String) -> String { "\(root)/subjects/\(Self.level(subject))/usage" }
    /// Operator requests and answers: `admin/erase|show/{subject}`, `admin/erased|shown/{subject}`.
    public func admin(_ command: String, subject: String) -> String {
        "\(root)/admin/\(command)/\(Self.level(subject))"
    }
    public func prompt(subject: String) -> String { "\(root)/subjects/\(Self.level(subject))/prompt" }

    /// A service's statistics: `perimeter/v1/_sys/{component}/{instance}/stats` (outside any venue).
    public static func stats(prefix: String, component: String, instance: String) -> String {
        "\(prefix)/_sys/\(component)/\(level(instance))/stats"
    }

    /// The topic a region event is published on.
    public func topic(for event: RegionEvent) -> String {
        event.kind == .state
            ? state(region: event.region, subject: event.subject)
            : self.event(event.kind, region: event.region, subject: event.subject)
    }
}
