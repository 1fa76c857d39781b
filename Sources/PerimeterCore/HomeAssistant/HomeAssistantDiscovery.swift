import Foundation

/// The Home Assistant MQTT discovery messages of one venue, pure: topics and payloads from
/// settings, regions and subjects (no I/O, no state).
///
/// Home Assistant's single-component discovery: one retained JSON config per entity on
/// `<discovery_prefix>/<component>/<node_id>/<object_id>/config`; an empty retained payload on
/// the same topic removes the entity. The configs point at topics the evaluator already
/// publishes, retained — `occupancy/{region}` `{count, t}` and `place/{subject}` `{place,
/// source, t}` — through `value_template`, so discovery adds no state topic of its own.
/// Availability is the evaluator's status topic (`{"online":true,…}`; `{"online":false}` as its
/// last will), read through a template into Home Assistant's default `online` / `offline`.
public struct HomeAssistantDiscovery: Sendable, Hashable {
    public let settings: HomeAssistantSettings
    public let venue: String

    public init(settings: HomeAssistantSettings, venue: String) {
        self.settings = settings
        self.venue = venue
    }

    /// The components Perimeter announces.
    public enum Component: String, Sendable, CaseIterable {
        case sensor
        case binarySensor = "binary_sensor"
        case deviceTracker = "device_tracker"
    }

    /// `origin.name` of every config.
    public static let originName = "Perimeter"

    var topics: Topics { Topics(prefix: settings.topicPrefix, venue: venue) }

    /// The `<node_id>` of the venue's configs: `perimeter_` and the venue id as an object id.
    public var nodeID: String { "perimeter_\(Self.objectID(venue))" }

    /// An id in the character class Home Assistant allows for `<node_id>` and `<object_id>`
    /// (`[a-zA-Z0-9_-]`), one to one: letters, digits and `-` stay, `_` becomes `__`, every
    /// other UTF-8 byte `_` and two lowercase hex digits (`gallery.1` → `gallery_2e1`). Two ids
    /// never share an object id, so two regions never share a config topic.
    public static func objectID(_ id: String) -> String {
        var out = ""
        out.reserveCapacity(id.utf8.count)
        for byte in id.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "_"):
                out += "__"
            default:
                out += "_" + String(byte >> 4, radix: 16) + String(byte & 0x0F, radix: 16)
            }
        }
        return out
    }

    /// The config topic of one entity.
    public func configTopic(_ component: Component, id: String) -> String {
        "\(settings.discoveryPrefix)/\(component.rawValue)/\(nodeID)/\(Self.objectID(id))/config"
    }

    // MARK: - Payloads

    /// The venue's Home Assistant device: identified by the venue's topic root, which is unique
    /// per deployment and venue.
    var device: JSONValue {
        [
            "identifiers": [.string(topics.root)], "name": .string(settings.deviceName ?? venue),
            "manufacturer": "Perimeter", "model": "venue",
        ]
    }

    var origin: JSONValue { ["name": .string(Self.originName)] }

    var availability: JSONValue {
        [
            [
                "topic": .string(settings.availabilityTopic),
                "value_template": "{{ 'online' if value_json.online else 'offline' }}",
                "payload_available": "online", "payload_not_available": "offline",
            ]
        ]
    }

    /// Members every config carries.
    private func common(name: String, uniqueID: String, stateTopic: String, valueTemplate: String) -> JSONObject {
        [
            "name": .string(name), "unique_id": .string(uniqueID), "state_topic": .string(stateTopic),
            "value_template": .string(valueTemplate), "device": device, "availability": availability,
            "origin": origin,
        ]
    }

    /// A region's name for people: its `name` property, else its id.
    public static func displayName(_ region: Region) -> String {
        region.properties["name"]?.stringValue ?? region.id
    }

    /// The occupancy count of a region: a `sensor` with `state_class: measurement`.
    public func occupancySensor(_ region: Region) -> (topic: String, config: JSONValue) {
        let state = topics.occupancy(region: region.id)
        var config = common(
            name: "\(Self.displayName(region)) occupancy", uniqueID: "\(state)/count", stateTopic: state,
            valueTemplate: "{{ value_json.count }}")
        config["state_class"] = "measurement"
        config["icon"] = "mdi:account-group"
        return (configTopic(.sensor, id: region.id), .object(config))
    }

    /// Whether anyone is in a region: a `binary_sensor` with `device_class: occupancy`.
    public func occupiedSensor(_ region: Region) -> (topic: String, config: JSONValue) {
        let state = topics.occupancy(region: region.id)
        var config = common(
            name: Self.displayName(region), uniqueID: "\(state)/occupied", stateTopic: state,
            valueTemplate: "{{ 'ON' if value_json.count > 0 else 'OFF' }}")
        config["device_class"] = "occupancy"
        config["payload_on"] = "ON"
        config["payload_off"] = "OFF"
        return (configTopic(.binarySensor, id: region.id), .object(config))
    }

    /// A subject's place: a `device_tracker` whose state is the place's region (or room, or
    /// default place). A subject without a place (`"place": null`) resets the tracker to
    /// unknown (`payload_reset`) rather than `not_home`: unknown is not outside.
    public func tracker(_ subject: String) -> (topic: String, config: JSONValue) {
        let state = topics.place(subject: subject)
        let config = common(
            name: subject, uniqueID: state, stateTopic: state,
            valueTemplate: "{{ value_json.place if value_json.place is not none else 'None' }}")
        var object = config
        object["payload_reset"] = "None"
        object["icon"] = "mdi:map-marker-account"
        return (configTopic(.deviceTracker, id: subject), .object(object))
    }

    /// The two configs of a region.
    public func regionConfigs(_ region: Region) -> [(topic: String, config: JSONValue)] {
        [occupancySensor(region), occupiedSensor(region)]
    }

    /// The config topics a deleted region leaves, to clear.
    public func regionTopics(_ regionID: String) -> [String] {
        [configTopic(.sensor, id: regionID), configTopic(.binarySensor, id: regionID)]
    }

    /// Whether `topic` is one of this venue's config topics under any discovery prefix: a
    /// component Perimeter announces, then this venue's node id, an object id and `config`.
    public func isOwnConfigTopic(_ topic: String) -> Bool {
        let levels = topic.split(separator: "/", omittingEmptySubsequences: false)
        guard levels.count >= 5, levels[levels.count - 1] == "config", levels[levels.count - 3] == nodeID else {
            return false
        }
        return Component(rawValue: String(levels[levels.count - 4])) != nil
    }
}
