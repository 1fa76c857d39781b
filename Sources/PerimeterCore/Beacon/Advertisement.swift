/// A beacon identity heard in an advert, with the power it advertises.
public struct BeaconAdvert: Sendable, Hashable {
    public var identity: BeaconIdentity
    /// As advertised: iBeacon measured power and AltBeacon reference RSSI at 1 m; Eddystone ranging power at 0 m.
    public var advertisedPower: Int

    public init(identity: BeaconIdentity, advertisedPower: Int) {
        self.identity = identity
        self.advertisedPower = advertisedPower
    }

    /// Expected RSSI at 1 m: the advertised power, or for Eddystone the 0 m power minus 41 dB.
    ///
    /// 41 dB is the free-space loss over the first metre that Google's Eddystone specification
    /// tells receivers to subtract.
    public var tx1m: Double {
        identity.format == .eddystone ? Double(advertisedPower) - 41 : Double(advertisedPower)
    }
}

/// An unencrypted Eddystone-TLM frame (version 0): the beacon's health, no identity.
public struct EddystoneTelemetry: Sendable, Hashable {
    public var version: UInt8
    /// Battery voltage in millivolts; nil when the beacon reports 0 (not battery powered).
    public var batteryMillivolts: Int?
    /// Degrees Celsius (8.8 fixed point on the air); nil when the beacon reports 0x8000 (no sensor).
    public var temperature: Double?
    /// Advertising PDUs sent since power-up or reboot.
    public var advertisingCount: UInt32
    /// Time since power-up or reboot, in tenths of a second.
    public var uptimeDeciseconds: UInt32

    public init(
        version: UInt8, batteryMillivolts: Int?, temperature: Double?, advertisingCount: UInt32,
        uptimeDeciseconds: UInt32
    ) {
        self.version = version
        self.batteryMillivolts = batteryMillivolts
        self.temperature = temperature
        self.advertisingCount = advertisingCount
        self.uptimeDeciseconds = uptimeDeciseconds
    }
}

/// What one packet of BLE advertising data says about beacons.
public enum Advertisement: Sendable, Hashable {
    case beacon(BeaconAdvert)
    /// An Eddystone-URL frame, URL expanded. Not an identity for constraints.
    case eddystoneURL(url: String, tx0m: Int)
    /// An Eddystone-TLM frame: telemetry, no identity.
    case eddystoneTelemetry(EddystoneTelemetry)
    /// Well-formed advertising data that carries no beacon frame.
    case noIdentity

    /// The identity for constraint matching (only `.beacon`).
    public var beacon: BeaconAdvert? {
        if case .beacon(let advert) = self { return advert }
        return nil
    }

    /// When a packet carries several frames: a beacon identity wins over a URL, a URL over telemetry.
    var precedence: Int {
        switch self {
        case .beacon: 3
        case .eddystoneURL: 2
        case .eddystoneTelemetry: 1
        case .noIdentity: 0
        }
    }
}

/// Malformed advertising data (or hex text), and where.
public struct AdvertisementError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The byte offset in the advertising data; for hex text, the character offset in the text.
    public var offset: Int
    public var message: String

    public init(offset: Int, message: String) {
        self.offset = offset
        self.message = message
    }

    public var description: String { "at byte \(offset): \(message)" }
}
