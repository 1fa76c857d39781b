import Foundation

/// One NMEA 0183 sentence: `$GPRMC,…*hh`, its checksum verified.
///
/// Only what a position needs is read: RMC (time, date, validity, position, speed, course),
/// GGA (time, position, fix quality, satellites, HDOP, altitude) and GSA (fix mode, DOPs).
/// Other sentence types parse as ``other``. Any talker (`GP`, `GN`, `GL`, `GA` …) is accepted.
public enum NMEASentence: Sendable, Hashable {
    public struct RMC: Sendable, Hashable {
        /// Seconds since midnight UTC.
        public var timeOfDay: Double?
        /// Days since 1970 from `ddmmyy` (years 00–99 are 2000–2099).
        public var date: DateComponents?
        /// `A` (valid) or `V` (warning: no fix).
        public var valid: Bool
        public var position: GeoPoint?
        /// Knots over ground.
        public var knots: Double?
        public var course: Double?
    }

    public struct GGA: Sendable, Hashable {
        public var timeOfDay: Double?
        public var position: GeoPoint?
        /// 0 = no fix, 1 = GPS, 2 = DGPS, 4/5 = RTK, 6 = dead reckoning.
        public var quality: Int
        public var satellites: Int?
        public var hdop: Double?
        /// Metres above mean sea level.
        public var altitude: Double?
    }

    public struct GSA: Sendable, Hashable {
        /// 1 = no fix, 2 = 2D, 3 = 3D.
        public var mode: Int
        public var pdop: Double?
        public var hdop: Double?
        public var vdop: Double?
    }

    case rmc(RMC)
    case gga(GGA)
    case gsa(GSA)
    /// A well-formed sentence of a type not used here (GSV, VTG …), by its type.
    case other(String)

    public struct Error: Swift.Error, Sendable, Hashable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    /// Parses one line (trailing CR/LF allowed).
    /// - Throws: ``Error`` for a missing `$`, a missing or wrong checksum, or a field that is
    ///   not what its sentence type requires.
    public static func parse(_ line: some StringProtocol) throws(Error) -> NMEASentence {
        let text = line.trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.first == "$" || text.first == "!" else {
            throw Error(message: "not an NMEA sentence (must start with '$')")
        }
        guard let star = text.lastIndex(of: "*") else {
            throw Error(message: "no checksum ('*hh' at the end)")
        }
        let body = text[text.index(after: text.startIndex)..<star]
        let given = text[text.index(after: star)...]
        guard given.count == 2, let expected = UInt8(given, radix: 16) else {
            throw Error(message: "checksum '\(given)' is not two hex digits")
        }
        let actual = body.utf8.reduce(UInt8(0), ^)
        guard actual == expected else {
            throw Error(
                message: "checksum mismatch: sentence says \(given.uppercased()), content gives "
                    + String(format: "%02X", actual))
        }
        let fields = body.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        guard let address = fields.first, address.count >= 5 else {
            throw Error(message: "no sentence address")
        }
        let type = String(address.suffix(3))
        switch type {
        case "RMC":
            guard fields.count >= 10 else {
                throw Error(message: "RMC: \(fields.count - 1) fields, expected at least 9")
            }
            return .rmc(
                RMC(
                    timeOfDay: try time(fields[1], "RMC"), date: try date(fields[9]), valid: fields[2] == "A",
                    position: try position(fields[3], fields[4], fields[5], fields[6], "RMC"),
                    knots: try number(fields[7], "RMC speed"), course: try number(fields[8], "RMC course")))
        case "GGA":
            guard fields.count >= 10 else {
                throw Error(message: "GGA: \(fields.count - 1) fields, expected at least 9")
            }
            return .gga(
                GGA(
                    timeOfDay: try time(fields[1], "GGA"),
                    position: try position(fields[2], fields[3], fields[4], fields[5], "GGA"),
                    quality: Int(fields[6]) ?? 0, satellites: Int(fields[7]), hdop: try number(fields[8], "GGA hdop"),
                    altitude: try number(fields[9], "GGA altitude")))
        case "GSA":
            guard fields.count >= 18 else { throw Error(message: "GSA: \(fields.count - 1) fields, expected 17") }
            return .gsa(
                GSA(
                    mode: Int(fields[2]) ?? 1, pdop: try number(fields[15], "GSA pdop"),
                    hdop: try number(fields[16], "GSA hdop"), vdop: try number(fields[17], "GSA vdop")))
        default:
            return .other(type)
        }
    }

    private static func number(_ field: String, _ what: String) throws(Error) -> Double? {
        if field.isEmpty { return nil }
        guard let value = Double(field), value.isFinite else {
            throw Error(message: "\(what) '\(field)' is not a number")
        }
        return value
    }

    /// `hhmmss.sss` → seconds since midnight.
    private static func time(_ field: String, _ type: String) throws(Error) -> Double? {
        if field.isEmpty { return nil }
        let digits = Array(field.utf8)
        guard digits.count >= 6, let h = Int(field.prefix(2)), let m = Int(field.dropFirst(2).prefix(2)),
            let s = Double(field.dropFirst(4)), h < 24, m < 60, s < 61
        else { throw Error(message: "\(type) time '\(field)' is not hhmmss[.sss]") }
        return Double(h * 3600 + m * 60) + s
    }

    /// `ddmmyy`.
    private static func date(_ field: String) throws(Error) -> DateComponents? {
        if field.isEmpty { return nil }
        guard field.count == 6, let d = Int(field.prefix(2)), let m = Int(field.dropFirst(2).prefix(2)),
            let y = Int(field.dropFirst(4)), (1...31).contains(d), (1...12).contains(m)
        else { throw Error(message: "RMC date '\(field)' is not ddmmyy") }
        return DateComponents(year: 2000 + y, month: m, day: d)
    }

    /// `ddmm.mmmm,N,dddmm.mmmm,E`.
    private static func position(
        _ lat: String, _ ns: String, _ lon: String, _ ew: String, _ type: String
    ) throws(Error) -> GeoPoint? {
        if lat.isEmpty || lon.isEmpty { return nil }
        guard let latValue = Double(lat), let lonValue = Double(lon), ns == "N" || ns == "S", ew == "E" || ew == "W"
        else {
            throw Error(message: "\(type) position '\(lat),\(ns),\(lon),\(ew)' is not ddmm.mmmm,N|S,dddmm.mmmm,E|W")
        }
        func degrees(_ value: Double) -> Double {
            let whole = (value / 100).rounded(.towardZero)
            return whole + (value - whole * 100) / 60
        }
        let latitude = degrees(latValue) * (ns == "S" ? -1 : 1)
        let longitude = degrees(lonValue) * (ew == "W" ? -1 : 1)
        guard abs(latitude) <= 90, abs(longitude) <= 180 else {
            throw Error(message: "\(type) position \(latitude), \(longitude) is off the globe")
        }
        return GeoPoint(lon: longitude, lat: latitude)
    }
}

/// Combines the RMC, GGA and GSA sentences of each receiver cycle (same time of day) into one
/// reading, as gpsd does: position and date from RMC, altitude and HDOP from GGA, fix mode
/// from GSA. A cycle without a fix (RMC `V`, GGA quality 0 or no satellites used, GSA mode 1)
/// gives nothing.
///
/// Accuracy is HDOP × `rangeError` (a typical 5 m user range error), the same stand-in the GPX
/// reader uses; NMEA carries no error estimate of its own.
public struct NMEAFixAssembler: Sendable {
    public var rangeError: Double
    private var cycle: Cycle?
    private var lastDate: DateComponents?
    private var lastTimeOfDay: Double?
    private var dayOffset = 0

    struct Cycle: Sendable {
        var timeOfDay: Double
        var date: DateComponents?
        var position: GeoPoint?
        var valid = true
        var hdop: Double?
        var altitude: Double?
        var knots: Double?
        var course: Double?
        var mode: Int?
    }

    public init(rangeError: Double = 5) { self.rangeError = rangeError }

    /// Adds a sentence; returns the previous cycle's reading when this one starts a new cycle.
    public mutating func add(_ sentence: NMEASentence) -> GPSReading? {
        switch sentence {
        case .rmc(let rmc):
            guard let timeOfDay = rmc.timeOfDay else { return nil }
            let finished = startCycle(timeOfDay)
            if let date = rmc.date { cycle?.date = date }
            if !rmc.valid { cycle?.valid = false }
            if let position = rmc.position { cycle?.position = position }
            cycle?.knots = rmc.knots
            cycle?.course = rmc.course
            return finished
        case .gga(let gga):
            guard let timeOfDay = gga.timeOfDay else { return nil }
            let finished = startCycle(timeOfDay)
            // Quality 0, or a "fix" from no satellites in use (as a SiRF-II sends while it
            // acquires): gpsd reports no fix for either, and neither do we.
            if gga.quality == 0 || gga.satellites == 0 { cycle?.valid = false }
            if cycle?.position == nil { cycle?.position = gga.position }
            if let hdop = gga.hdop { cycle?.hdop = hdop }
            cycle?.altitude = gga.altitude
            return finished
        case .gsa(let gsa):
            // GSA has no time: it belongs to the cycle under way.
            cycle?.mode = gsa.mode
            if let hdop = gsa.hdop, cycle?.hdop == nil { cycle?.hdop = hdop }
            return nil
        case .other:
            return nil
        }
    }

    /// Ends the last cycle (end of input).
    public mutating func finish() -> GPSReading? {
        defer { cycle = nil }
        return cycle.flatMap { reading(of: $0) }
    }

    private mutating func startCycle(_ timeOfDay: Double) -> GPSReading? {
        if let current = cycle, current.timeOfDay == timeOfDay { return nil }
        let finished = cycle.flatMap { reading(of: $0) }
        cycle = Cycle(timeOfDay: timeOfDay)
        return finished
    }

    private mutating func reading(of cycle: Cycle) -> GPSReading? {
        // The date: this cycle's RMC, else the last one seen, moved on a day when the time wraps.
        if let date = cycle.date {
            if date != lastDate { dayOffset = 0 }
            lastDate = date
        } else if let last = lastTimeOfDay, cycle.timeOfDay < last - 43_200 {
            dayOffset += 1
        }
        lastTimeOfDay = cycle.timeOfDay
        guard cycle.valid, cycle.mode.map({ $0 >= 2 }) ?? true, let position = cycle.position,
            let date = cycle.date ?? lastDate
        else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        guard let midnight = calendar.date(from: date) else { return nil }
        let t = midnight.addingTimeInterval(Double(dayOffset) * 86_400 + cycle.timeOfDay)
        return GPSReading(
            t: t, position: position, accuracy: cycle.hdop.map { $0 * rangeError }, altitude: cycle.altitude,
            speed: cycle.knots.map { $0 * 1852 / 3600 }, course: cycle.course)
    }
}
