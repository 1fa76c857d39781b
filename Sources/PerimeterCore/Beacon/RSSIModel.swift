import Foundation

/// Core Location's CLProximity: how close a ranged beacon is.
public enum Proximity: String, Sendable, Hashable, Codable, CaseIterable {
    /// Closer than 0.5 m.
    case immediate
    /// Closer than 3 m.
    case near
    case far
    /// No sample in the report window: the beacon was heard recently, but not now.
    case unknown

    /// The proximity of an estimated distance in metres (negative = unknown).
    public init(accuracy: Double) {
        if accuracy < 0 || !accuracy.isFinite {
            self = .unknown
        } else if accuracy < 0.5 {
            self = .immediate
        } else if accuracy < 3 {
            self = .near
        } else {
            self = .far
        }
    }

    /// Near or immediate: close enough to decide a place (the Caffè Macs rule).
    public var isClose: Bool { self == .immediate || self == .near }
}

/// How a beacon's RSSI samples become the one figure a report shows.
public enum RSSISmoothing: Sendable, Hashable {
    /// The mean of the samples since the last ranging report (CLBeacon.rssi).
    case sinceLastReport
    /// The mean of the samples of the last `window` seconds.
    case runningMean(window: TimeInterval)
    /// The median of the samples of the last `window` seconds (robust to reflections).
    case median(window: TimeInterval)

    /// Parses `sinceLastReport`, `mean:5`, `median:5` (window in seconds).
    public init?(text: String) {
        let parts = text.split(separator: ":", maxSplits: 1).map(String.init)
        let window = parts.count == 2 ? Double(parts[1]) : nil
        switch (parts.first, window) {
        case ("sinceLastReport", nil) where parts.count == 1: self = .sinceLastReport
        case ("mean", let window?) where window > 0 && window.isFinite: self = .runningMean(window: window)
        case ("median", let window?) where window > 0 && window.isFinite: self = .median(window: window)
        default: return nil
        }
    }

    /// How long samples are kept; nil when only the running sum since the last report is needed.
    public var window: TimeInterval? {
        switch self {
        case .sinceLastReport: nil
        case .runningMean(let window), .median(let window): window
        }
    }
}

/// How an RSSI becomes a distance estimate.
public enum DistanceModel: Sendable, Hashable {
    /// Log-distance path loss: `d = 10^((tx1m − rssi) / (10·n))`, n = 2 in free space, 2.5–4 indoors.
    case logDistance(exponent: Double)
    /// The AltBeacon library's curve fit (Nexus 4): `ratio = rssi / tx1m`;
    /// `d = ratio^10` when `ratio < 1`, else `A·ratio^B + C`.
    case altBeaconCurve(a: Double = 0.42093, b: Double = 6.9476, c: Double = 0.54992)

    /// Metres from an RSSI and the expected RSSI at 1 m; −1 when it cannot be estimated.
    public func distance(rssi: Double, tx1m: Double) -> Double {
        guard rssi.isFinite, tx1m.isFinite, rssi < 0, tx1m < 0 else { return -1 }
        switch self {
        case .logDistance(let exponent):
            guard exponent > 0 else { return -1 }
            return pow(10, (tx1m - rssi) / (10 * exponent))
        case .altBeaconCurve(let a, let b, let c):
            let ratio = rssi / tx1m
            return ratio < 1 ? pow(ratio, 10) : a * pow(ratio, b) + c
        }
    }
}

/// Per-deployment corrections: receivers differ in sensitivity, beacons in calibration.
public struct BeaconCalibration: Sendable, Hashable {
    /// dB added to every RSSI an agent reports (a phone that hears 4 dB low gets +4).
    public var receiverAdjustment: [String: Double]
    /// Measured RSSI at 1 m per beacon, used when its advert carries none.
    public var tx1m: [BeaconIdentity: Double]
    /// The RSSI at 1 m assumed when neither the advert nor the calibration gives one.
    public var defaultTx1m: Double

    public init(
        receiverAdjustment: [String: Double] = [:], tx1m: [BeaconIdentity: Double] = [:], defaultTx1m: Double = -59
    ) {
        self.receiverAdjustment = receiverAdjustment
        self.tx1m = tx1m
        self.defaultTx1m = defaultTx1m
    }

    /// The RSSI at 1 m for a beacon: from its advert, else the calibration, else the default.
    @inline(__always)
    public func tx1m(for identity: BeaconIdentity, advertised: Double?) -> Double {
        if let advertised { return advertised }
        if tx1m.isEmpty { return defaultTx1m }
        return tx1m[identity] ?? defaultTx1m
    }

    /// The RSSI corrected for the receiving agent.
    @inline(__always)
    public func adjusted(rssi: Double, agent: String) -> Double {
        if receiverAdjustment.isEmpty { return rssi }
        return rssi + (receiverAdjustment[agent] ?? 0)
    }
}

/// The samples of one beacon as one receiver-subject pair hears it, smoothed as configured.
struct RSSISamples: Sendable, Codable {
    /// Sum and count since the last report.
    var sum = 0.0
    var count = 0
    /// Recent samples (time, rssi), oldest first, for windowed smoothing.
    var recent: [Sample] = []

    struct Sample: Sendable, Codable {
        var t: Double
        var rssi: Double
    }

    mutating func add(_ rssi: Double, at t: Double, smoothing: RSSISmoothing) {
        sum += rssi
        count += 1
        if let window = smoothing.window {
            recent.append(Sample(t: t, rssi: rssi))
            prune(before: t - window)
        }
    }

    mutating func prune(before cutoff: Double) {
        var drop = 0
        while drop < recent.count && recent[drop].t < cutoff { drop += 1 }
        if drop > 0 { recent.removeFirst(drop) }
    }

    /// The smoothed RSSI at `now`, or nil when there is no sample in the window.
    func value(at now: Double, smoothing: RSSISmoothing) -> Double? {
        switch smoothing {
        case .sinceLastReport:
            return count > 0 ? sum / Double(count) : nil
        case .runningMean(let window):
            var total = 0.0
            var n = 0
            for sample in recent where sample.t >= now - window {
                total += sample.rssi
                n += 1
            }
            return n > 0 ? total / Double(n) : nil
        case .median(let window):
            let values = recent.filter { $0.t >= now - window }.map(\.rssi).sorted()
            guard !values.isEmpty else { return nil }
            let middle = values.count / 2
            return values.count % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2
        }
    }

    mutating func reportTaken() {
        sum = 0
        count = 0
    }
}
