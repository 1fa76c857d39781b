/// The three beacon formats venues run, and what identifies a beacon in each.
public enum BeaconFormat: UInt8, Sendable, Hashable, Codable, CaseIterable {
    /// Apple iBeacon: a 128-bit proximity UUID, a 16-bit major and a 16-bit minor.
    case iBeacon
    /// Google Eddystone-UID: a 10-byte namespace and a 6-byte instance.
    case eddystone
    /// Radius Networks AltBeacon: id1 (16 bytes, shown as a UUID), id2 and id3 (16 bits each).
    case altBeacon

    /// The name used in JSON (`"type"`) and in canonical identity strings.
    public var name: String {
        switch self {
        case .iBeacon: "ibeacon"
        case .eddystone: "eddystone-uid"
        case .altBeacon: "altbeacon"
        }
    }

    /// How many identity parts the format has (uuid, major, minor / namespace, instance / id1, id2, id3).
    public var partCount: Int { self == .eddystone ? 2 : 3 }
}

/// 128 bits of identity prefix: an iBeacon proximity UUID, an AltBeacon id1, or an Eddystone
/// namespace (10 bytes, left-aligned, the last 6 bytes zero). Stored as two big-endian words
/// so that hashing and comparing cost two integer operations.
public struct BeaconPrefix: Sendable, Hashable, Codable, Comparable {
    public var high: UInt64
    public var low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// From 16 bytes (or fewer: the rest is zero), most significant first.
    public init<Bytes: Collection<UInt8>>(bytes: Bytes) {
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (index, byte) in bytes.prefix(16).enumerated() {
            if index < 8 {
                high |= UInt64(byte) << (56 - 8 * UInt64(index))
            } else {
                low |= UInt64(byte) << (56 - 8 * UInt64(index - 8))
            }
        }
        self.init(high: high, low: low)
    }

    /// Parses a UUID in any case, with or without hyphens (`41414141-4141-…`, 32 hex digits).
    public init?(uuid text: String) {
        let digits = text.utf8.filter { $0 != UInt8(ascii: "-") }
        guard digits.count == 32, text.utf8.count == 32 || text.utf8.count == 36 else { return nil }
        if text.utf8.count == 36 {
            let hyphens = text.utf8.enumerated().filter { $0.element == UInt8(ascii: "-") }.map(\.offset)
            guard hyphens == [8, 13, 18, 23] else { return nil }
        }
        guard let bytes = Hex.decode(digits) else { return nil }
        self.init(bytes: bytes)
    }

    /// Parses an Eddystone namespace: exactly 20 hex digits.
    public init?(namespace text: String) {
        guard text.utf8.count == 20, let bytes = Hex.decode(Array(text.utf8)) else { return nil }
        self.init(bytes: bytes)
    }

    public var bytes: [UInt8] {
        (0..<16).map { index in
            index < 8
                ? UInt8(truncatingIfNeeded: high >> (56 - 8 * UInt64(index)))
                : UInt8(truncatingIfNeeded: low >> (56 - 8 * UInt64(index - 8)))
        }
    }

    /// Canonical UUID form: lowercase hex, hyphens at 8-4-4-4-12.
    public var uuidString: String {
        let hex = Hex.encode(bytes)
        let characters = Array(hex)
        var result = ""
        result.reserveCapacity(36)
        for (index, character) in characters.enumerated() {
            if index == 8 || index == 12 || index == 16 || index == 20 { result.append("-") }
            result.append(character)
        }
        return result
    }

    /// Eddystone namespace form: the first 10 bytes as 20 lowercase hex digits.
    public var namespaceString: String { Hex.encode(bytes.prefix(10)) }

    public static func < (left: BeaconPrefix, right: BeaconPrefix) -> Bool {
        (left.high, left.low) < (right.high, right.low)
    }
}

/// One concrete beacon: its format and every identity part.
///
/// iBeacon: `prefix` = proximity UUID, `part2` = major, `part3` = minor.
/// Eddystone-UID: `prefix` = namespace, `part2` = instance (48 bits), `part3` = 0.
/// AltBeacon: `prefix` = id1, `part2` = id2, `part3` = id3.
public struct BeaconIdentity: Sendable, Hashable, Codable, Comparable {
    public var format: BeaconFormat
    public var prefix: BeaconPrefix
    public var part2: UInt64
    public var part3: UInt64

    public init(format: BeaconFormat, prefix: BeaconPrefix, part2: UInt64, part3: UInt64 = 0) {
        self.format = format
        self.prefix = prefix
        self.part2 = part2
        self.part3 = part3
    }

    public static func iBeacon(uuid: BeaconPrefix, major: UInt16, minor: UInt16) -> BeaconIdentity {
        BeaconIdentity(format: .iBeacon, prefix: uuid, part2: UInt64(major), part3: UInt64(minor))
    }

    public static func eddystone(namespace: BeaconPrefix, instance: UInt64) -> BeaconIdentity {
        BeaconIdentity(format: .eddystone, prefix: namespace, part2: instance & 0xFFFF_FFFF_FFFF, part3: 0)
    }

    public static func altBeacon(id1: BeaconPrefix, id2: UInt16, id3: UInt16) -> BeaconIdentity {
        BeaconIdentity(format: .altBeacon, prefix: id1, part2: UInt64(id2), part3: UInt64(id3))
    }

    /// The Eddystone instance as 12 lowercase hex digits.
    public var instanceString: String {
        Hex.encode((0..<6).map { UInt8(truncatingIfNeeded: part2 >> (40 - 8 * UInt64($0))) })
    }

    /// The identity as a subject id and for logs: `ibeacon:UUID:major:minor`,
    /// `eddystone-uid:namespace:instance`, `altbeacon:ID1:id2:id3`. Topic-safe (no `/`, `+`, `#`).
    public var canonical: String {
        switch format {
        case .iBeacon, .altBeacon: "\(format.name):\(prefix.uuidString):\(part2):\(part3)"
        case .eddystone: "\(format.name):\(prefix.namespaceString):\(instanceString)"
        }
    }

    /// Reads a canonical identity string back.
    public init?(canonical text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard let format = BeaconFormat.allCases.first(where: { $0.name == parts.first }),
            parts.count == format.partCount + 1
        else { return nil }
        switch format {
        case .iBeacon, .altBeacon:
            guard let prefix = BeaconPrefix(uuid: parts[1]), let two = UInt16(parts[2]), let three = UInt16(parts[3])
            else { return nil }
            self.init(format: format, prefix: prefix, part2: UInt64(two), part3: UInt64(three))
        case .eddystone:
            guard let prefix = BeaconPrefix(namespace: parts[1]), parts[2].utf8.count == 12,
                let instance = UInt64(parts[2], radix: 16)
            else { return nil }
            self.init(format: .eddystone, prefix: prefix, part2: instance)
        }
    }

    /// The identity's JSON fields, as `perimeter adv decode`, ranging and refinements show them:
    /// `{"type":"ibeacon","uuid":…,"major":…,"minor":…}`, `{"type":"eddystone-uid","namespace":…,"instance":…}`,
    /// `{"type":"altbeacon","id1":…,"id2":…,"id3":…}`.
    public var json: JSONObject {
        var object = JSONObject()
        object["type"] = .string(format.name)
        switch format {
        case .iBeacon:
            object["uuid"] = .string(prefix.uuidString)
            object["major"] = .number(Double(part2))
            object["minor"] = .number(Double(part3))
        case .eddystone:
            object["namespace"] = .string(prefix.namespaceString)
            object["instance"] = .string(instanceString)
        case .altBeacon:
            object["id1"] = .string(prefix.uuidString)
            object["id2"] = .number(Double(part2))
            object["id3"] = .number(Double(part3))
        }
        return object
    }

    public static func < (left: BeaconIdentity, right: BeaconIdentity) -> Bool {
        (left.format.rawValue, left.prefix, left.part2, left.part3)
            < (right.format.rawValue, right.prefix, right.part2, right.part3)
    }
}
