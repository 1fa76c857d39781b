/// Which beacons a beacon region covers: Core Location's CLBeaconIdentityConstraint, extended to
/// Eddystone-UID and AltBeacon. A missing trailing part is a wildcard:
/// iBeacon uuid / uuid+major / uuid+major+minor; Eddystone namespace / namespace+instance;
/// AltBeacon id1 / id1+id2 / id1+id2+id3.
public struct BeaconConstraint: Sendable, Hashable, Codable {
    public var format: BeaconFormat
    public var prefix: BeaconPrefix
    public var part2: UInt64?
    public var part3: UInt64?

    public init(format: BeaconFormat, prefix: BeaconPrefix, part2: UInt64? = nil, part3: UInt64? = nil) {
        self.format = format
        self.prefix = prefix
        self.part2 = part2
        self.part3 = part2 == nil ? nil : part3
    }

    /// 1 for a prefix-only wildcard, up to the format's part count for one exact beacon.
    public var specificity: Int { 1 + (part2 == nil ? 0 : 1) + (part3 == nil ? 0 : 1) }

    public func matches(_ identity: BeaconIdentity) -> Bool {
        identity.format == format && identity.prefix == prefix && (part2 == nil || part2 == identity.part2)
            && (part3 == nil || part3 == identity.part3)
    }

    /// The constraint as a `properties.beacon` object.
    public var json: JSONObject {
        var object = JSONObject()
        switch format {
        case .iBeacon:
            object["uuid"] = .string(prefix.uuidString)
            if let part2 { object["major"] = .number(Double(part2)) }
            if let part3 { object["minor"] = .number(Double(part3)) }
        case .eddystone:
            object["namespace"] = .string(prefix.namespaceString)
            if let part2 {
                object["instance"] = .string(
                    BeaconIdentity.eddystone(namespace: prefix, instance: part2).instanceString)
            }
        case .altBeacon:
            object["id1"] = .string(prefix.uuidString)
            if let part2 { object["id2"] = .number(Double(part2)) }
            if let part3 { object["id3"] = .number(Double(part3)) }
        }
        return object
    }
}

/// A beacon region's `properties.beacon` object, read and checked: the constraint and the
/// optional RSSI floor (`minRssi`, dBm) below which a sighting does not count.
public struct BeaconRegionSpec: Sendable, Hashable {
    public var constraint: BeaconConstraint
    public var minRssi: Double?

    public init(constraint: BeaconConstraint, minRssi: Double? = nil) {
        self.constraint = constraint
        self.minRssi = minRssi
    }

    /// Reads `{"uuid": "…", "major": 3}`, `{"namespace": "…"}`, `{"id1": "…", "id2": 7}` (plus
    /// an optional `minRssi`). Every problem is reported, each naming the field.
    public static func parse(_ value: JSONValue) -> Result<BeaconRegionSpec, BeaconSpecProblems> {
        guard case .object(let object) = value else {
            return .failure(BeaconSpecProblems(["properties.beacon must be an object, got \(value.typeName)"]))
        }
        var problems: [String] = []
        let layouts: [(BeaconFormat, [String])] = [
            (.iBeacon, ["uuid", "major", "minor"]), (.eddystone, ["namespace", "instance"]),
            (.altBeacon, ["id1", "id2", "id3"]),
        ]
        let present = layouts.filter { object[$0.1[0]] != nil }
        guard present.count == 1, let (format, keys) = present.first else {
            let found = present.map { "'\($0.1[0])'" }.joined(separator: " and ")
            return .failure(
                BeaconSpecProblems([
                    present.isEmpty
                        ? "properties.beacon needs \"uuid\" (iBeacon), \"namespace\" (Eddystone-UID) or \"id1\" (AltBeacon)"
                        : "properties.beacon mixes \(found): one beacon format per region"
                ]))
        }
        for key in object.keys where !keys.contains(key) && key != "minRssi" {
            problems.append(
                "properties.beacon.\(key) is not a \(format.name) constraint field (expected \(keys + ["minRssi"]))")
        }
        var prefix: BeaconPrefix?
        if case .string(let text)? = object[keys[0]] {
            prefix = format == .eddystone ? BeaconPrefix(namespace: text) : BeaconPrefix(uuid: text)
            if prefix == nil {
                problems.append(
                    format == .eddystone
                        ? "properties.beacon.namespace must be 20 hex digits, got \"\(text)\""
                        : "properties.beacon.\(keys[0]) must be a UUID like 2f234454-cf6d-4a0f-adf2-f4911ba9ffa6, got \"\(text)\""
                )
            }
        } else {
            problems.append("properties.beacon.\(keys[0]) must be a string, got \(object[keys[0]]!.typeName)")
        }
        var parts: [UInt64?] = []
        for key in keys.dropFirst() {
            switch object[key] {
            case nil, .null?:
                parts.append(nil)
            case .string(let text)? where format == .eddystone:
                if text.utf8.count == 12, let value = UInt64(text, radix: 16) {
                    parts.append(value)
                } else {
                    problems.append("properties.beacon.instance must be 12 hex digits, got \"\(text)\"")
                    parts.append(nil)
                }
            case let value? where format != .eddystone:
                if let number = value.intValue, (0...65535).contains(number) {
                    parts.append(UInt64(number))
                } else {
                    problems.append("properties.beacon.\(key) must be an integer 0…65535, got \(value.serialized())")
                    parts.append(nil)
                }
            case let value?:
                problems.append("properties.beacon.\(key) must be a string, got \(value.typeName)")
                parts.append(nil)
            }
        }
        if parts.count == 2, parts[0] == nil, parts[1] != nil, object[keys[1]] == nil {
            problems.append("properties.beacon.\(keys[2]) needs \(keys[1]): a wildcard covers only trailing parts")
        }
        var minRssi: Double?
        switch object["minRssi"] {
        case nil, .null?: break
        case .number(let value)? where value.isFinite && value <= 0 && value >= -127: minRssi = value
        case let value?:
            problems.append("properties.beacon.minRssi must be a number of dBm in -127…0, got \(value.serialized())")
        }
        guard problems.isEmpty, let prefix else { return .failure(BeaconSpecProblems(problems)) }
        let constraint = BeaconConstraint(
            format: format, prefix: prefix, part2: parts.first ?? nil, part3: parts.count > 1 ? parts[1] : nil)
        return .success(BeaconRegionSpec(constraint: constraint, minRssi: minRssi))
    }
}

/// Why a `properties.beacon` object is not a beacon constraint.
public struct BeaconSpecProblems: Error, Sendable, Hashable {
    public var messages: [String]
    public init(_ messages: [String]) { self.messages = messages }
}
