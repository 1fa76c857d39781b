import Foundation

/// What one line of gpsd's JSON watch stream means for an agent.
///
/// gpsd (after `?WATCH={"enable":true,"json":true}`) sends one JSON object per line: VERSION,
/// DEVICES, WATCH, SKY, TPV … Only TPV ("time-position-velocity") reports carry a position.
public enum GPSDReport: Sendable, Hashable {
    /// A TPV with a 2D or 3D fix and a time: a reading to publish.
    case fix(GPSReading)
    /// A TPV with mode 0 (unknown) or 1 (no fix): not published.
    case noFix(mode: Int)
    /// A TPV with a fix but no time yet (gpsd reports positions before the receiver's time is
    /// trusted): not published, since an observation needs its event time.
    case noTime
    /// Another report class (VERSION, SKY, DEVICES …).
    case other(String)

    /// The command that starts the JSON stream.
    public static let watchCommand = "?WATCH={\"enable\":true,\"json\":true}\n"

    public struct Error: Swift.Error, Sendable, Hashable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    /// Interprets one line from gpsd.
    ///
    /// Accuracy is `eph` (gpsd's estimated horizontal error, 95 %) when present, else the larger
    /// of `epx` and `epy`; altitude is `altMSL`, else the older `alt`; `track` is the course.
    /// - Throws: ``Error`` naming the problem for a line that is not a JSON object with a
    ///   `class`, or a TPV whose `mode`, `time`, `lat` or `lon` have the wrong type or range.
    public static func interpret(_ line: String) throws(Error) -> GPSDReport {
        let value: JSONValue
        do {
            value = try JSONValue(parsing: line)
        } catch {
            throw Error(message: "not JSON: \(error)")
        }
        return try interpret(value)
    }

    public static func interpret(_ value: JSONValue) throws(Error) -> GPSDReport {
        guard case .object(let object) = value, let reportClass = object["class"]?.stringValue else {
            throw Error(message: "not a gpsd report (a JSON object with a \"class\")")
        }
        guard reportClass == "TPV" else { return .other(reportClass) }
        func number(_ key: String) throws(Error) -> Double? {
            guard let member = object[key], member != .null else { return nil }
            guard let number = member.doubleValue, number.isFinite else {
                throw Error(message: "TPV \(key): expected a finite number, got \(member.typeName)")
            }
            return number
        }
        // gpsd's modes are 0…3; anything else (1e300 would trap in Int()) is not a report.
        let modeValue = try number("mode") ?? 0
        guard (0...3).contains(modeValue), modeValue.rounded() == modeValue else {
            throw Error(message: "TPV mode \(modeValue): expected 0, 1, 2 or 3")
        }
        let mode = Int(modeValue)
        guard mode >= 2 else { return .noFix(mode: mode) }
        guard let lat = try number("lat"), let lon = try number("lon") else {
            throw Error(message: "TPV with mode \(mode) but no lat/lon")
        }
        guard abs(lat) <= 90, abs(lon) <= 180 else {
            throw Error(message: "TPV position \(lat), \(lon) is off the globe")
        }
        guard let timeValue = object["time"], timeValue != .null else { return .noTime }
        guard let text = timeValue.stringValue, let t = Timestamp.parse(text) else {
            throw Error(message: "TPV time: expected an ISO 8601 time, got \(timeValue.serialized())")
        }
        let eph = try number("eph")
        let epx = try number("epx")
        let epy = try number("epy")
        let accuracy: Double? =
            eph
            ?? {
                switch (epx, epy) {
                case (let x?, let y?): max(x, y)
                case (let x?, nil): x
                case (nil, let y?): y
                case (nil, nil): nil
                }
            }()
        let msl = try number("altMSL")
        let old = try number("alt")
        let altitude = msl ?? old
        return .fix(
            GPSReading(
                t: t, position: GeoPoint(lon: lon, lat: lat), accuracy: accuracy, altitude: altitude,
                speed: try number("speed"), course: try number("track")))
    }
}
