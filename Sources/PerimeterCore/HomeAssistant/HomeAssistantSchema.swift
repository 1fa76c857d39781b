import Foundation

/// Home Assistant's documented MQTT discovery schema, as far as Perimeter's components use it:
/// a pure check of one discovery message (topic and payload), written from Home Assistant's
/// MQTT integration documentation (integrations/mqtt: "Discovery topic", "Discovery payload",
/// "Using abbreviations", "Adding information about the origin of a discovery message"; and the
/// `sensor.mqtt`, `binary_sensor.mqtt`, `device_tracker.mqtt` pages' configuration variables).
///
/// - Topic: `<discovery_prefix>/<component>/[<node_id>/]<object_id>/config`, `node_id` and
///   `object_id` of `[a-zA-Z0-9_-]` only, `component` one of Home Assistant's MQTT platforms.
/// - An empty payload removes the entity: valid on any config topic.
/// - A payload is a JSON object; abbreviated keys (`stat_t`, `uniq_id`, `dev`, `o` …) are
///   expanded first; a key none of the component's variables name is a problem (stricter than
///   Home Assistant, which may drop it silently: a misspelt key is a setting lost), as is a key
///   given both abbreviated and in full.
/// - `origin` needs `name`; `device` needs `identifiers` or `connections` and a `unique_id`
///   beside it (Home Assistant documents that it "only works when unique_id is set"); `availability` is a list of `{topic, payload_available?,
///   payload_not_available?, value_template?}` and excludes `availability_topic`.
/// - `sensor`, `binary_sensor` need `state_topic`; `device_tracker` needs `state_topic` or
///   `json_attributes_topic`. `device_class`, `state_class`, `source_type`,
///   `availability_mode`, `entity_category` take only their documented values.
public enum HomeAssistantSchema {
    /// Home Assistant's MQTT platforms (components) that discovery accepts.
    public static let components: Set<String> = [
        "alarm_control_panel", "binary_sensor", "button", "camera", "climate", "cover", "device_automation",
        "device_tracker", "event", "fan", "humidifier", "image", "lawn_mower", "light", "lock", "notify", "number",
        "scene", "select", "sensor", "siren", "switch", "tag", "text", "update", "vacuum", "valve", "water_heater",
    ]

    /// `binary_sensor` device classes.
    public static let binarySensorDeviceClasses: Set<String> = [
        "battery", "battery_charging", "carbon_monoxide", "cold", "connectivity", "door", "garage_door", "gas", "heat",
        "light", "lock", "moisture", "motion", "moving", "occupancy", "opening", "plug", "power", "presence",
        "problem", "running", "safety", "smoke", "sound", "tamper", "update", "vibration", "window",
    ]

    /// `sensor` device classes.
    public static let sensorDeviceClasses: Set<String> = [
        "absolute_humidity", "apparent_power", "aqi", "area", "atmospheric_pressure", "battery",
        "blood_glucose_concentration", "carbon_dioxide", "carbon_monoxide", "conductivity", "current", "data_rate",
        "data_size", "date", "distance", "duration", "energy", "energy_distance", "energy_storage", "enum",
        "frequency", "gas", "humidity", "illuminance", "irradiance", "moisture", "monetary", "nitrogen_dioxide",
        "nitrogen_monoxide", "nitrous_oxide", "ozone", "ph", "pm1", "pm10", "pm25", "power", "power_factor",
        "precipitation", "precipitation_intensity", "pressure", "reactive_energy", "reactive_power",
        "signal_strength", "sound_pressure", "speed", "sulphur_dioxide", "temperature", "timestamp",
        "volatile_organic_compounds", "volatile_organic_compounds_parts", "voltage", "volume", "volume_flow_rate",
        "volume_storage", "water", "weight", "wind_direction", "wind_speed",
    ]

    /// `sensor` state classes.
    public static let stateClasses: Set<String> = ["measurement", "measurement_angle", "total", "total_increasing"]

    /// `device_tracker` source types.
    public static let sourceTypes: Set<String> = ["gps", "router", "bluetooth", "bluetooth_le"]

    /// The abbreviations Perimeter's components may meet (Home Assistant's list, the part that
    /// applies to them), abbreviated → full.
    public static let abbreviations: [String: String] = [
        "avty": "availability", "avty_mode": "availability_mode", "avty_t": "availability_topic",
        "avty_tpl": "availability_template", "dev": "device", "dev_cla": "device_class", "en": "enabled_by_default",
        "ent_cat": "entity_category", "ent_pic": "entity_picture", "exp_aft": "expire_after",
        "frc_upd": "force_update", "ic": "icon", "json_attr_t": "json_attributes_topic",
        "json_attr_tpl": "json_attributes_template", "lrst_t": "last_reset_topic",
        "lrst_val_tpl": "last_reset_value_template", "o": "origin", "off_dly": "off_delay",
        "pl_avail": "payload_available",
        "pl_not_avail": "payload_not_available", "pl_home": "payload_home", "pl_not_home": "payload_not_home",
        "pl_off": "payload_off", "pl_on": "payload_on", "pl_rst": "payload_reset", "ret": "retain",
        "stat_cla": "state_class", "stat_t": "state_topic", "src_type": "source_type",
        "sug_dsp_prc": "suggested_display_precision", "t": "topic", "uniq_id": "unique_id",
        "unit_of_meas": "unit_of_measurement", "val_tpl": "value_template", "def_ent_id": "default_entity_id",
        "obj_id": "object_id",
        // device
        "cns": "connections", "ids": "identifiers", "mf": "manufacturer", "mdl": "model", "mdl_id": "model_id",
        "hw": "hw_version", "sw": "sw_version", "sa": "suggested_area", "sn": "serial_number",
        "cu": "configuration_url", "via_device": "via_device",
        // origin
        "url": "support_url",
    ]

    /// Variables every entity component takes.
    static let entityKeys: Set<String> = [
        "availability", "availability_mode", "availability_template", "availability_topic", "device",
        "default_entity_id", "enabled_by_default", "encoding", "entity_category", "entity_picture", "icon",
        "json_attributes_template", "json_attributes_topic", "name", "object_id", "origin", "payload_available",
        "payload_not_available", "platform", "qos", "unique_id",
    ]

    /// Each component's own variables, besides ``entityKeys``.
    static let componentKeys: [String: Set<String>] = [
        "sensor": [
            "device_class", "expire_after", "force_update", "last_reset_value_template", "options",
            "state_class", "state_topic", "suggested_display_precision", "unit_of_measurement", "value_template",
        ],
        "binary_sensor": [
            "device_class", "expire_after", "force_update", "off_delay", "payload_off", "payload_on", "state_topic",
            "value_template",
        ],
        "device_tracker": [
            "payload_home", "payload_not_home", "payload_reset", "source_type", "state_topic", "value_template",
        ],
    ]

    static let deviceKeys: Set<String> = [
        "configuration_url", "connections", "hw_version", "identifiers", "manufacturer", "model", "model_id", "name",
        "serial_number", "suggested_area", "sw_version", "via_device",
    ]
    static let originKeys: Set<String> = ["name", "sw_version", "support_url"]
    static let availabilityKeys: Set<String> = [
        "topic", "payload_available", "payload_not_available", "value_template",
    ]

    /// What is wrong with one discovery message, empty when Home Assistant would take it.
    /// - Parameters:
    ///   - discoveryPrefix: Home Assistant's `discovery_prefix` the topic must start with.
    public static func problems(
        topic: String, payload: [UInt8], discoveryPrefix: String = "homeassistant"
    )
        -> [String]
    {
        var problems: [String] = []
        guard topic.hasPrefix(discoveryPrefix + "/") else {
            return ["topic '\(topic)': does not start with the discovery prefix '\(discoveryPrefix)/'"]
        }
        let rest = topic.dropFirst(discoveryPrefix.count + 1).split(separator: "/", omittingEmptySubsequences: false)
        guard (3...4).contains(rest.count), rest.last == "config" else {
            return ["topic '\(topic)': expected <prefix>/<component>/[<node_id>/]<object_id>/config"]
        }
        let component = String(rest[0])
        if !components.contains(component) { problems.append("topic '\(topic)': '\(component)' is not a component") }
        for id in rest.dropFirst().dropLast() where !isObjectID(id) {
            problems.append("topic '\(topic)': '\(id)' is not of [a-zA-Z0-9_-]+")
        }
        if payload.isEmpty { return problems }
        let value: JSONValue
        do { value = try JSONParser.parse(payload) } catch {
            return problems + ["payload: not JSON (\(error))"]
        }
        guard let object = value.objectValue else { return problems + ["payload: not a JSON object"] }
        var config: [String: JSONValue] = [:]
        for (key, member) in object {
            let full = abbreviations[key] ?? key
            if config[full] != nil { problems.append("'\(full)' is given twice (abbreviated and in full)") }
            config[full] = member
        }
        problems += check(component: component, config)
        return problems
    }

    static func isObjectID(_ id: Substring) -> Bool {
        !id.isEmpty
            && id.utf8.allSatisfy { byte in
                (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                    || byte == 0x5F || byte == 0x2D
            }
    }

    static func isTopic(_ value: JSONValue?) -> Bool {
        guard let topic = value?.stringValue else { return false }
        return !topic.isEmpty && !topic.contains("+") && !topic.contains("#")
    }

    static func isTemplate(_ value: JSONValue?) -> Bool {
        guard let text = value?.stringValue else { return false }
        return text.contains("{{") && text.contains("}}")
    }

    static func check(component: String, _ config: [String: JSONValue]) -> [String] {
        var problems: [String] = []
        guard let own = componentKeys[component] else {
            return ["component '\(component)': not one Perimeter announces; not checked"]
        }
        for key in config.keys.sorted() where !entityKeys.contains(key) && !own.contains(key) {
            problems.append("'\(key)' is not a \(component) variable")
        }
        func string(_ key: String) {
            if let value = config[key], value.stringValue == nil { problems.append("'\(key)' must be a string") }
        }
        for key in [
            "name", "unique_id", "icon", "payload_available", "payload_not_available", "payload_on", "payload_off",
            "payload_home", "payload_not_home", "payload_reset", "unit_of_measurement",
        ] {
            string(key)
        }
        for key in ["state_topic", "availability_topic", "json_attributes_topic"] where config[key] != nil {
            if !isTopic(config[key]) { problems.append("'\(key)' must be a topic without wildcards") }
        }
        for key in ["value_template", "json_attributes_template", "availability_template"] where config[key] != nil {
            if !isTemplate(config[key]) { problems.append("'\(key)' must be a template ({{ … }})") }
        }
        if let qos = config["qos"], ![0, 1, 2].contains(qos.intValue ?? -1) {
            problems.append("'qos' must be 0, 1 or 2")
        }
        switch component {
        case "sensor", "binary_sensor":
            if config["state_topic"] == nil { problems.append("'state_topic' is required for \(component)") }
        case "device_tracker":
            if config["state_topic"] == nil && config["json_attributes_topic"] == nil {
                problems.append("'state_topic' or 'json_attributes_topic' is required for device_tracker")
            }
        default: break
        }
        if let deviceClass = config["device_class"] {
            let allowed = component == "sensor" ? sensorDeviceClasses : binarySensorDeviceClasses
            if !(deviceClass.stringValue.map(allowed.contains) ?? false) {
                problems.append("'device_class' \(deviceClass.serialized()) is not a \(component) device class")
            }
        }
        if let stateClass = config["state_class"], !(stateClass.stringValue.map(stateClasses.contains) ?? false) {
            problems.append("'state_class' \(stateClass.serialized()) is not one of \(stateClasses.sorted())")
        }
        if let source = config["source_type"], !(source.stringValue.map(sourceTypes.contains) ?? false) {
            problems.append("'source_type' \(source.serialized()) is not one of \(sourceTypes.sorted())")
        }
        if let mode = config["availability_mode"], !["all", "any", "latest"].contains(mode.stringValue ?? "") {
            problems.append("'availability_mode' must be all, any or latest")
        }
        if let category = config["entity_category"], !["config", "diagnostic"].contains(category.stringValue ?? "") {
            problems.append("'entity_category' must be config or diagnostic")
        }
        if let unique = config["unique_id"], unique.stringValue?.isEmpty ?? true {
            problems.append("'unique_id' must be a non-empty string")
        }
        problems += checkOrigin(config["origin"])
        problems += checkDevice(config["device"], uniqueID: config["unique_id"])
        problems += checkAvailability(config)
        return problems
    }

    static func expanded(_ object: JSONObject) -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        for (key, value) in object { out[abbreviations[key] ?? key] = value }
        return out
    }

    static func checkOrigin(_ value: JSONValue?) -> [String] {
        guard let value else { return [] }
        guard let object = value.objectValue else { return ["'origin' must be an object"] }
        let origin = expanded(object)
        var problems: [String] = []
        if origin["name"]?.stringValue?.isEmpty ?? true { problems.append("'origin.name' is required") }
        for key in origin.keys.sorted() where !originKeys.contains(key) {
            problems.append("'origin.\(key)' is not an origin variable")
        }
        return problems
    }

    static func checkDevice(_ value: JSONValue?, uniqueID: JSONValue?) -> [String] {
        guard let value else { return [] }
        guard let object = value.objectValue else { return ["'device' must be an object"] }
        let device = expanded(object)
        var problems: [String] = []
        if uniqueID == nil { problems.append("'device' needs a 'unique_id' (it only works with one)") }
        let identifiers = device["identifiers"]
        let hasIdentifiers: Bool
        switch identifiers {
        case .string(let id)?: hasIdentifiers = !id.isEmpty
        case .array(let ids)?: hasIdentifiers = !ids.isEmpty && ids.allSatisfy { !($0.stringValue?.isEmpty ?? true) }
        case nil: hasIdentifiers = false
        default:
            hasIdentifiers = false
            problems.append("'device.identifiers' must be a string or a list of strings")
        }
        if !hasIdentifiers && device["connections"] == nil {
            problems.append("'device' needs 'identifiers' or 'connections'")
        }
        for key in device.keys.sorted() where !deviceKeys.contains(key) {
            problems.append("'device.\(key)' is not a device variable")
        }
        return problems
    }

    static func checkAvailability(_ config: [String: JSONValue]) -> [String] {
        guard let value = config["availability"] else { return [] }
        var problems: [String] = []
        if config["availability_topic"] != nil {
            problems.append("'availability' and 'availability_topic' must not be used together")
        }
        guard let list = value.arrayValue, !list.isEmpty else { return problems + ["'availability' must be a list"] }
        for (index, item) in list.enumerated() {
            guard let object = item.objectValue else {
                problems.append("'availability[\(index)]' must be an object")
                continue
            }
            let entry = expanded(object)
            if !isTopic(entry["topic"]) { problems.append("'availability[\(index)].topic' is required") }
            if let template = entry["value_template"], !isTemplate(template) {
                problems.append("'availability[\(index)].value_template' must be a template")
            }
            for key in entry.keys.sorted() where !availabilityKeys.contains(key) {
                problems.append("'availability[\(index)].\(key)' is not an availability variable")
            }
        }
        return problems
    }
}
